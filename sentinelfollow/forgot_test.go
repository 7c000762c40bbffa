package sentinelfollow

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestStatusSaysTheSentinelsDoNotKnowTheMaster: when a majority of the
// sentinels answer that they do not monitor the master (SENTINEL REMOVE
// on two of three), Status says so (UnknownMaster, all three answering,
// no primary), the Follower logs it once, and what the warning says of
// new connections holds: they go to the primary the sentinel that still
// monitors the master names, and fail once none does. A review found
// readiness and the gauges saying "no majority of the sentinels answers:
// new connections go on to the primary they last named" while three of
// three answered and the primary was forgotten, and no log line at all.
func TestStatusSaysTheSentinelsDoNotKnowTheMaster(t *testing.T) {
	s := redistest.StartSentinel(t)
	const timeout = time.Second
	c, f := NewClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs,
		ContextTimeoutEnabled: true, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
		DialerRetries: 1, MaxRetries: 1, MinRetryBackoff: -1, MaxRetryBackoff: -1})
	defer c.Close()
	var logs syncBuffer
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx, slog.New(slog.NewTextHandler(&logs, nil))) }()
	defer func() { stop(); <-done }()
	waitStatus(t, f, "three answering, a majority", func(st Status) bool {
		return st == Status{Asked: true, Sentinels: 3, Answering: 3, Majority: true, Primary: s.Primary.Addr}
	})
	key := "forgot:" + t.Name()
	defer s.Primary.Client(t).Del(context.Background(), key)
	admin := s.Primary.Client(t)
	// incr sends an INCR on a new connection.
	incr := func() error {
		t.Helper()
		if err := admin.ClientKillByFilter(context.Background(), "TYPE", "normal").Err(); err != nil {
			t.Fatalf("CLIENT KILL TYPE normal: %v", err)
		}
		cctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return c.Incr(cctx, key).Err()
	}
	sentinel := func(i int, args ...any) {
		t.Helper()
		sc := redis.NewClient(&redis.Options{Addr: s.SentinelAddrs[i]})
		defer sc.Close()
		if err := sc.Do(context.Background(), append([]any{"SENTINEL"}, args...)...).Err(); err != nil {
			t.Fatalf("SENTINEL %v on %s: %v", args, s.SentinelAddrs[i], err)
		}
	}

	for i := range 2 {
		sentinel(i, "REMOVE", s.MasterName)
	}
	waitStatus(t, f, "three answering, two that they do not know the master", func(st Status) bool {
		return st == Status{Asked: true, Sentinels: 3, Answering: 3, UnknownMaster: true}
	})
	const warning = "a majority of the sentinels answer that they do not monitor the Redis master"
	// Logged once the third answer is in: it counts them all.
	waitLog(t, &logs, warning)
	if want := "unknown_to=2 monitoring=1 sentinels=3"; !strings.Contains(logs.String(), want) {
		t.Errorf("the warning does not say %q:\n%s", want, logs.String())
	}
	if err := incr(); err != nil {
		t.Errorf("INCR on a new connection with one sentinel still monitoring the master: %v", err)
	}

	sentinel(2, "REMOVE", s.MasterName)
	// go-redis asks the sentinels at the dial: none names a primary.
	if err := incr(); err == nil || !strings.Contains(err.Error(), "redis: nil") {
		t.Errorf("INCR on a new connection with no sentinel monitoring the master: %v, want go-redis's redis: nil", err)
	}

	for i := range 3 {
		sentinel(i, "MONITOR", s.MasterName, "127.0.0.1", strconv.Itoa(s.Primary.Port), 2)
	}
	waitStatus(t, f, "a majority naming the primary again", func(st Status) bool {
		return st == Status{Asked: true, Sentinels: 3, Answering: 3, Majority: true, Primary: s.Primary.Addr}
	})
	if n := strings.Count(logs.String(), warning); n != 1 {
		t.Errorf("the warning was logged %d times, want once:\n%s", n, logs.String())
	}
	const again = "a majority of the sentinels monitors the Redis master again"
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), again) {
		if time.Now().After(deadline) {
			t.Fatalf("the log does not say %q:\n%s", again, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := incr(); err != nil {
		t.Errorf("INCR once the sentinels monitor the master again: %v", err)
	}
}

// waitLog waits until logs holds want, for 5 s at most.
func waitLog(t *testing.T, logs *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the log does not say %q:\n%s", want, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestForgetWarningCountsEverySentinel: with a master name no sentinel
// monitors (a wrong --redis-master), the warning says that all three
// answered so, and none monitors it. A new-user walk found it saying
// unknown_to=2 of 3, the count when the majority was reached, which with
// the warning's "the primary a sentinel that still monitors it names"
// read as one sentinel still monitoring the master: a wrong name and two
// sentinels told SENTINEL REMOVE need different fixes.
func TestForgetWarningCountsEverySentinel(t *testing.T) {
	s := redistest.StartSentinel(t)
	f := New(&redis.FailoverOptions{MasterName: "nosuch", SentinelAddrs: s.SentinelAddrs})
	var logs syncBuffer
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx, slog.New(slog.NewTextHandler(&logs, nil))) }()
	defer func() { stop(); <-done }()
	waitLog(t, &logs, "do not monitor the Redis master")
	if want := "master=nosuch unknown_to=3 monitoring=0 sentinels=3"; !strings.Contains(logs.String(), want) {
		t.Errorf("the warning does not say %q:\n%s", want, logs.String())
	}
	if st := f.Status(); st != (Status{Asked: true, Sentinels: 3, Answering: 3, UnknownMaster: true}) {
		t.Errorf("Status() = %+v, want three answering that they do not know the master", st)
	}
}
