package doctor_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/sentinelfollow"
)

// TestSentinelCheckTellsForgottenFromSilent: with the primary up, the
// sentinel check tells sentinels that answer but no longer monitor the
// master (SENTINEL REMOVE) from those that do not answer. A review ran
// SENTINEL REMOVE on two of three sentinels: doctor said "only 1 of 3
// sentinels answer, or the quorum cannot be reached" with the fix "start
// the missing sentinels", while all three answered. One of three
// forgetting warns (a majority still monitors it), two fail (no majority
// can authorize a failover), each naming those sentinels and the fix
// (--redis-master against SENTINEL MASTERS, or SENTINEL MONITOR again);
// one forgetting and one stopped fails, naming each with its own fix.
// An instance whose /readyz warns that its sentinels do not monitor the
// master no longer passes Instances/ready (it said "1 instance ready").
func TestSentinelCheckTellsForgottenFromSilent(t *testing.T) {
	s := redistest.StartSentinel(t)
	a := s.SentinelAddrs
	opts := doctor.Options{Redis: config.Redis{SentinelAddrs: a, SentinelMaster: s.MasterName}, Prefix: "sf", RateWindow: -1}
	remove := func(addr string) {
		t.Helper()
		sc := redis.NewClient(&redis.Options{Addr: addr})
		defer sc.Close()
		if err := sc.Do(context.Background(), "SENTINEL", "REMOVE", s.MasterName).Err(); err != nil {
			t.Fatalf("SENTINEL REMOVE on %s: %v", addr, err)
		}
	}
	notSaid := func(c doctor.Check, rep *doctor.Report, texts ...string) {
		t.Helper()
		for _, x := range texts {
			if strings.Contains(c.Summary+"\n"+c.Fix, x) {
				t.Errorf("Redis/sentinel says %q:\n%s", x, text(rep))
			}
		}
	}
	wantFix := func(c doctor.Check, rep *doctor.Report, texts ...string) {
		t.Helper()
		for _, x := range texts {
			if !strings.Contains(c.Fix, x) {
				t.Errorf("Redis/sentinel's fix does not say %q:\n%s", x, text(rep))
			}
		}
	}

	// An instance of the deployment, its client following the sentinels
	// as serve's does, and its /readyz reporting them.
	client, f := sentinelfollow.NewClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: a})
	defer client.Close()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	defer func() { stop(); <-done }()
	if !f.WaitAsked(context.Background()) {
		t.Fatal("the Follower's first question to the sentinels did not end")
	}
	publish(t, client, "sf", testConfig)
	in := startInstance(t, client, "sf", instanceOptions{doc: testConfig, sentinels: f.Status, sentinelMaster: s.MasterName})

	remove(a[0])
	rep := runDoctor(t, opts)
	c := want(t, rep, doctor.GroupRedis, "sentinel", doctor.Warn,
		"1 sentinel ("+a[0]+") answers, but monitors no primary named "+s.MasterName, "forgotten", "2 of 3 still monitor")
	wantFix(c, rep, "SENTINEL MASTERS", "SENTINEL MONITOR "+s.MasterName, a[0])
	notSaid(c, rep, "unreachable", "does not answer")

	remove(a[1])
	if !waitFor(30*time.Second, nil, func() bool { return f.Status().UnknownMaster }) {
		t.Fatalf("the Follower does not say that the sentinels do not monitor the master: %+v", f.Status())
	}
	opts.Instances = []string{in.url}
	rep = runDoctor(t, opts)
	c = want(t, rep, doctor.GroupRedis, "sentinel", doctor.Fail,
		"2 of 3 sentinels ("+a[0]+", "+a[1]+") answer, but monitor no primary named "+s.MasterName, "forgotten by them",
		"only 1 of 3 monitor it, no majority", "a failover needs a majority")
	wantFix(c, rep, "--redis-master", "SENTINEL MASTERS", "SENTINEL MONITOR "+s.MasterName, a[0]+", "+a[1])
	notSaid(c, rep, "only 1 of 3 sentinels answer", "start the missing sentinels", "do not answer")
	r := want(t, rep, doctor.GroupInstances, "ready", doctor.Warn, "not monitoring the master", in.url+": its sentinels (3 of 3 answering): a majority of the sentinels answer that they do not monitor")
	if !strings.Contains(r.Fix, "SENTINEL MONITOR") {
		t.Errorf("Instances/ready's fix %q does not say SENTINEL MONITOR", r.Fix)
	}
	opts.Instances = nil

	// One forgetting, one stopped: no majority monitors the master.
	sc := redis.NewClient(&redis.Options{Addr: a[1]})
	err := sc.Do(context.Background(), "SENTINEL", "MONITOR", s.MasterName, "127.0.0.1", s.Primary.Port, 2).Err()
	sc.Close()
	if err != nil {
		t.Fatalf("SENTINEL MONITOR on %s: %v", a[1], err)
	}
	s.Sentinels[1].Kill()
	rep = runDoctor(t, opts)
	c = want(t, rep, doctor.GroupRedis, "sentinel", doctor.Fail,
		"1 of 3 sentinels ("+a[0]+") answers, but monitors no primary named "+s.MasterName, "forgotten by it",
		"and 1 ("+a[1]+") does not answer", "only 1 of 3 monitor it")
	wantFix(c, rep, "SENTINEL MONITOR "+s.MasterName+" <primary ip> <port> <quorum> again on "+a[0]+" ", "start the sentinels that do not answer")
}
