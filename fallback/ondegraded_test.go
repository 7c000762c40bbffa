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

// TestOnDegradedGetsEachDecisionAllocationFree: OnDegraded is called once per decision
// taken by a failure mode, with the decision's layers, the mode applied,
// the reason and the primary's error, and not for one the primary took;
// a hook that returns at once adds no allocation to a decision taken
// while the breaker is open (serve's, below debug level).
func TestOnDegradedGetsEachDecisionAllocationFree(t *testing.T) {
	primary := newScripted(t)
	local, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []fallback.Degraded
	var policies []string
	record := true
	opts := fallback.Options{
		Modes:   map[string]fallback.Mode{"login": fallback.ModeClosed},
		Breaker: fallback.BreakerOptions{FailureThreshold: 2, ProbeInterval: time.Minute},
		Probe:   func(context.Context, string) error { return errors.New("down") },
		OnDegraded: func(_ context.Context, d fallback.Degraded) {
			if !record {
				return
			}
			got = append(got, fallback.Degraded{Mode: d.Mode, Reason: d.Reason, Err: d.Err})
			for _, l := range d.Layers {
				policies = append(policies, l.Policy.Name+"="+l.Key)
			}
		},
	}
	st, err := fallback.New(primary, local, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	login, _ := floodgate.NewSlidingWindow("login", 5, time.Minute)
	api, _ := floodgate.NewSlidingWindow("api", 1<<30, time.Hour)
	layers := []floodgate.Layer{{Policy: login, Key: "k:login", Cost: 1}, {Policy: api, Key: "k:api", Cost: 1}}
	out := make([]floodgate.Result, len(layers))
	ctx := context.Background()
	now := time.Now().UnixMicro()

	if err := st.Decide(ctx, now, layers, out); err != nil || len(got) != 0 {
		t.Fatalf("decided by the primary: err %v, %d calls of OnDegraded, want none", err, len(got))
	}
	down := errors.New("down")
	primary.set(down, false, false)
	for range 3 { // two failures open the breaker; the third is kept from the primary
		if err := st.Decide(ctx, now, layers, out); err != nil {
			t.Fatal(err)
		}
	}
	want := []fallback.Degraded{
		{Mode: fallback.ModeClosed, Reason: fallback.ReasonError, Err: down},
		{Mode: fallback.ModeClosed, Reason: fallback.ReasonError, Err: down},
		{Mode: fallback.ModeClosed, Reason: fallback.ReasonBreakerOpen, Err: fallback.ErrBreakerOpen},
	}
	if len(got) != len(want) {
		t.Fatalf("%d calls of OnDegraded for 3 degraded decisions, want 3: %v", len(got), got)
	}
	for i := range want {
		if got[i].Mode != want[i].Mode || got[i].Reason != want[i].Reason || got[i].Err != want[i].Err {
			t.Errorf("call %d: %+v, want %+v", i+1, got[i], want[i])
		}
	}
	if len(policies) != 6 || policies[0] != "login=k:login" || policies[1] != "api=k:api" {
		t.Errorf("layers seen %q, want login=k:login, api=k:api three times", policies)
	}

	if raceEnabled {
		return // allocation counts are not meaningful under the race detector
	}
	record = false
	with := testing.AllocsPerRun(200, func() { _ = st.Decide(ctx, now, layers, out) })
	opts.OnDegraded = nil
	bare, err := fallback.New(primary, local, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	for range 2 {
		_ = bare.Decide(ctx, now, layers, out) // opens its breaker
	}
	without := testing.AllocsPerRun(200, func() { _ = bare.Decide(ctx, now, layers, out) })
	t.Logf("allocations per decision with the breaker open: %v with the hook, %v without", with, without)
	if with != without {
		t.Errorf("a decision with the breaker open allocates %v times with a hook that returns at once, %v without, want the same", with, without)
	}
}
