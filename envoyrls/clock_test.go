package envoyrls

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// TestServiceFollowsTheLimitersClock: a Service given no Clock stamps its
// decisions, and measures duration_until_reset, with its limiter's clock
// (disciplined to Redis by clocksync in serve), not with time.Now: the
// limiter's clock is frozen 10 s into a minute, so a one-minute window
// resets in exactly 50 s, all-or-nothing and with CountEachDescriptor.
// Before, the Service defaulted to time.Now, so a library user who
// disciplined the limiter's clock got gRPC decisions stamped with the raw
// local clock (and a duration measured from this machine's time).
func TestServiceFollowsTheLimitersClock(t *testing.T) {
	for _, each := range []bool{false, true} {
		st, err := memstore.New(memstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		lim, err := floodgate.New(st, floodgate.Options{Prefix: uniquePrefix(t), Clock: func() time.Time { return t0 }})
		if err != nil {
			t.Fatal(err)
		}
		cfg := mustConfig(t, apiConfig)
		svc, err := NewService(lim, func() *Config { return cfg }, Options{CountEachDescriptor: each}) // no Clock
		if err != nil {
			t.Fatal(err)
		}
		resp, err := svc.ShouldRateLimit(context.Background(), request("api", desc("user=alice"), desc("tenant=t")))
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range resp.GetStatuses() {
			if got := s.GetDurationUntilReset().AsDuration(); got != 50*time.Second {
				t.Errorf("count each %v: descriptor %d: duration_until_reset %v, want 50s (the limiter's clock, 10 s into its minute)", each, i, got)
			}
		}
	}
}
