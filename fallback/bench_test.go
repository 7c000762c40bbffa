package fallback_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/memstore"
)

// BenchmarkDecideBreakerOpen is a decision taken by ModeLocal while the
// breaker is open (background probes on, failing): what every request
// costs during an outage. Compare with BenchmarkMemstoreDecide, the same
// decision on the local store alone.
func BenchmarkDecideBreakerOpen(b *testing.B) {
	primary := newScripted(&testing.T{})
	primary.set(errors.New("down"), false, false)
	local, _ := memstore.New(memstore.Options{})
	st, err := fallback.New(primary, local, fallback.Options{
		Breaker: fallback.BreakerOptions{FailureThreshold: 1, ProbeInterval: time.Minute},
		Probe:   func(context.Context, string) error { return errors.New("down") },
	})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	lim, _ := floodgate.New(st, floodgate.Options{Prefix: "bench"})
	p, _ := floodgate.NewSlidingWindow("api", 1_000_000_000, time.Hour)
	ctx := context.Background()
	_, _ = lim.Allow(ctx, p, "u") // opens the breaker
	if st.BreakerState() != fallback.BreakerOpen {
		b.Fatal("breaker not open")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := lim.Allow(ctx, p, "u"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemstoreDecide is the same decision on a memstore alone.
func BenchmarkMemstoreDecide(b *testing.B) {
	local, _ := memstore.New(memstore.Options{})
	lim, _ := floodgate.New(local, floodgate.Options{Prefix: "bench"})
	p, _ := floodgate.NewSlidingWindow("api", 1_000_000_000, time.Hour)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := lim.Allow(ctx, p, "u"); err != nil {
			b.Fatal(err)
		}
	}
}
