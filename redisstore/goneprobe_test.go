package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memstore"
)

// TestGoneCallerDeniedSplitDoesNotTripBreaker: a split decision (keys on
// two slots, SlotCheckOn on one Redis) whose reservation of the user part
// is denied, and whose caller goes while that reservation is in flight
// (Redis paused for writes): the probe of the last part, under the
// context deadline.Bind ends when the caller goes, is not sent. Its error
// was built with %v, which dropped context.Canceled: fallback counted the
// gone caller's decision against a healthy Redis and the breaker opened
// at FailureThreshold 1 (review16, 4 of 4 runs). The error now wraps
// context.Canceled, which fallback does not count.
func TestGoneCallerDeniedSplitDoesNotTripBreaker(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	rs, err := New(srv.Client(t), Options{SlotCheck: SlotCheckOn})
	if err != nil {
		t.Fatal(err)
	}
	local, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fs, err := fallback.New(rs, local, fallback.Options{Budget: 10 * time.Second, Breaker: fallback.BreakerOptions{FailureThreshold: 1}})
	if err != nil {
		t.Fatal(err)
	}
	user, err := floodgate.NewFixedWindow("user", 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	global, err := floodgate.NewFixedWindow("global", 1000, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	prefix := uniquePrefix(t)
	layers := []floodgate.Layer{
		{Policy: user, Key: floodgate.Key(prefix, user, "u1"), Cost: 1},
		{Policy: global, Key: floodgate.Key(prefix, global, "all"), Cost: 1},
	}
	if Slot(layers[0].Key) == Slot(layers[1].Key) {
		t.Fatal("the layers' keys share a slot: the decision is not split")
	}
	ctx := context.Background()
	out := make([]floodgate.Result, len(layers))
	if err := fs.Decide(ctx, time.Now().UnixMicro(), layers, out); err != nil || !out[0].Allowed || !out[1].Allowed {
		t.Fatalf("first decision: %v, %+v; want both layers admitting", err, out)
	}

	unpause := redistest.PauseWrites(t, admin)
	req, hangUp := context.WithCancel(ctx)
	defer hangUp()
	done := make(chan error, 1)
	go func() {
		out := make([]floodgate.Result, len(layers))
		done <- fs.Decide(req, time.Now().UnixMicro(), layers, out)
	}()
	// Phase 1 sends the user part alone (the global part, admitting more
	// per second, goes last): one call blocked by the pause.
	if !waitBlocked(t, admin, 1) {
		t.Fatal("the user part's reservation never reached the paused Redis")
	}
	hangUp()
	unpause()
	err = <-done
	if !errors.Is(err, context.Canceled) {
		t.Errorf("gone caller's denied split decision: err %v, want it to wrap context.Canceled", err)
	}
	if st := fs.BreakerState(); st != fallback.BreakerClosed {
		t.Errorf("breaker %v after a denied split decision whose caller went, Redis healthy: want closed", st)
	}
	// A caller that stays gets the denial, with the global layer's standing.
	if err := fs.Decide(ctx, time.Now().UnixMicro(), layers, out); err != nil || out[0].Allowed || !out[1].Allowed {
		t.Errorf("a staying caller's decision: %v, %+v; want the user layer denying", err, out)
	}
}
