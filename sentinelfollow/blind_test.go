package sentinelfollow

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// syncBuffer is a bytes.Buffer safe for a logger and a test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestNewClientDialsThePrimaryWhileSentinelsFrozen: with every sentinel
// frozen (SIGSTOP) and the client's connections to the healthy primary
// dropped (CLIENT KILL, as a network blip or Redis's timeout does), the
// client dials the primary the majority named last, at once. A go-redis
// failover client asked its sentinel at each dial, and every command
// failed after its whole deadline (an outside walk: 100% of the
// decisions, 1 s each) until the sentinels came back. The Follower logs
// that the sentinels do not answer, once, and that they do again.
func TestNewClientDialsThePrimaryWhileSentinelsFrozen(t *testing.T) {
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
	deadline := time.Now().Add(10 * time.Second)
	for f.Primary() != s.Primary.Addr {
		if time.Now().After(deadline) {
			t.Fatalf("Primary() = %q after 10 s, want %s", f.Primary(), s.Primary.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	key := "blind:" + strings.ReplaceAll(t.Name(), "/", ":")
	incr := func() (time.Duration, error) {
		cctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := time.Now()
		err := c.Incr(cctx, key).Err()
		return time.Since(start), err
	}
	if _, err := incr(); err != nil {
		t.Fatalf("INCR before the freeze: %v", err)
	}
	defer s.Primary.Client(t).Del(context.Background(), key)

	thaw := s.FreezeSentinels(t)
	admin := s.Primary.Client(t)
	if err := admin.ClientKillByFilter(context.Background(), "TYPE", "normal").Err(); err != nil {
		t.Fatalf("CLIENT KILL TYPE normal: %v", err)
	}
	var slowest time.Duration
	for i := range 20 {
		took, err := incr()
		if err != nil {
			t.Fatalf("INCR %d with the sentinels frozen: %v (after %v)", i, err, took)
		}
		slowest = max(slowest, took)
		if i == 10 {
			// Again, now that the Follower has found the sentinels
			// frozen.
			time.Sleep(2 * askTimeout)
			if err := admin.ClientKillByFilter(context.Background(), "TYPE", "normal").Err(); err != nil {
				t.Fatalf("CLIENT KILL TYPE normal: %v", err)
			}
		}
	}
	t.Logf("slowest INCR with the sentinels frozen and the connections killed: %v", slowest)
	if slowest > timeout/4 {
		t.Errorf("an INCR took %v with the sentinels frozen: the dial waited for them", slowest)
	}
	waitLog := func(what string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !strings.Contains(logs.String(), what) {
			if time.Now().After(deadline) {
				t.Fatalf("the log does not say %q:\n%s", what, logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitLog("no majority of the sentinels answered: new connections go on to the Redis primary they last named")
	if n := strings.Count(logs.String(), "no majority of the sentinels answered"); n != 1 {
		t.Errorf("the warning was logged %d times, want once:\n%s", n, logs.String())
	}
	for _, a := range s.SentinelAddrs {
		if !strings.Contains(logs.String(), "sentinel "+a+": no answer within") {
			t.Errorf("the warning does not name sentinel %s as not answering:\n%s", a, logs.String())
		}
	}
	if errs := f.NodeErrors(time.Now().Add(-3 * time.Second)); len(errs) == 0 || !strings.Contains(errs[0].Error(), "no answer within") {
		t.Errorf("NodeErrors = %v, want the sentinels that did not answer", errs)
	}
	thaw()
	// At warn, as the warning it ends (envoy-compat logs at warn).
	waitLog(`level=WARN msg="a majority of the sentinels answers again"`)
	if _, err := incr(); err != nil {
		t.Fatalf("INCR after the sentinels resumed: %v", err)
	}
}

// TestFirstMajorityAfterSilentStartIsNotAgain: with every sentinel
// frozen when Run starts, the line that ends the no-majority warning
// says that a majority answers for the first time, not "again" (a walk
// found "answers again" from sentinels that had never answered).
func TestFirstMajorityAfterSilentStartIsNotAgain(t *testing.T) {
	s := redistest.StartSentinel(t)
	thaw := s.FreezeSentinels(t)
	f := New(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs})
	var logs syncBuffer
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx, slog.New(slog.NewTextHandler(&logs, nil))) }()
	defer func() { stop(); <-done }()
	waitLog(t, &logs, "no majority of the sentinels answered")
	thaw()
	waitLog(t, &logs, `level=WARN msg="a majority of the sentinels answers, for the first time since the start"`)
	if strings.Contains(logs.String(), "answers again") {
		t.Errorf("the log says they answer again, though they had not answered before:\n%s", logs.String())
	}
}
