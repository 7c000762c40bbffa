package doctor

import (
	"context"
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
