package doctor

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestLatencyWhenTheRunsTimeIsOver: with doctor's time used up (--timeout
// 1ms) every probe call fails; the check said "script round trip p99 0s
// is above 50ms, the default decision budget, or the probe failed" and
// sent the reader to Redis's latency. It now says the probe failed, how
// many calls of how many, and that --timeout was too short.
func TestLatencyWhenTheRunsTimeIsOver(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	r := &run{opts: Options{Prefix: "lt", LatencySamples: 10}, client: c, counter: &counter{}}
	r.counter.attach(c)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var ch Check
	r.checkLatency(ctx, &ch, []node{{addr: srv.Addr, client: c}})
	if ch.Status != Fail {
		t.Fatalf("status %v, want fail: %+v", ch.Status, ch)
	}
	for _, want := range []string{"the latency probe failed: 1 of 1 call failed, on 1 of 1 primary", "context canceled", "no call succeeded, so the latency is unknown"} {
		if !strings.Contains(ch.Summary, want) {
			t.Errorf("summary %q does not say %q", ch.Summary, want)
		}
	}
	if strings.Contains(ch.Summary, "p99 0s") || strings.Contains(ch.Summary, "is above") {
		t.Errorf("summary %q blames latency", ch.Summary)
	}
	if !strings.Contains(ch.Fix, "--timeout") || strings.Contains(ch.Fix, "SLOWLOG") {
		t.Errorf("fix %q is not about doctor's --timeout", ch.Fix)
	}
}

// TestLatencyProbeRefusedAndUnreachable: a refused probe (NOPERM) alone
// warns (TestLatencyProbeRefusedWarns); with a primary that does not
// answer as well, the check still fails, with the fix of the failure and
// then the grant.
func TestLatencyProbeRefusedAndUnreachable(t *testing.T) {
	srv := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	if err := admin.Do(context.Background(), "ACL", "SETUSER", "weak", "on", ">pw", "~*", "+ping", "+info", "+@connection").Err(); err != nil {
		t.Fatal(err)
	}
	weak := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "weak", Password: "pw", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = weak.Close() })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := l.Addr().String()
	l.Close()
	down := redis.NewClient(&redis.Options{Addr: gone, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = down.Close() })
	r := &run{opts: Options{Prefix: "lr", LatencySamples: 5}, client: weak, counter: &counter{}}

	var ch Check
	r.checkLatency(context.Background(), &ch, []node{{addr: srv.Addr, client: weak}})
	if ch.Status != Warn || !strings.Contains(ch.Summary, "NOPERM") || !strings.Contains(ch.Fix, "+evalsha +eval +script|load") {
		t.Fatalf("refused alone: %+v", ch)
	}

	ch = Check{}
	r.checkLatency(context.Background(), &ch, []node{{addr: srv.Addr, client: weak}, {addr: gone, client: down}})
	if ch.Status != Fail {
		t.Fatalf("status %v, want fail: %+v", ch.Status, ch)
	}
	if !strings.Contains(ch.Fix, "a primary does not answer") || !strings.Contains(ch.Fix, "for the refused calls: grant doctor's ACL user") {
		t.Errorf("fix %q", ch.Fix)
	}
}
