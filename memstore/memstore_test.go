package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/vectors"
	"github.com/floodgate-rl/floodgate/memstore"
)

func newLimiter(t testing.TB, opts memstore.Options) (*floodgate.Limiter, *memstore.Store) {
	t.Helper()
	st, err := memstore.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(st, floodgate.Options{Prefix: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return l, st
}

func TestVectors(t *testing.T) {
	l, _ := newLimiter(t, memstore.Options{})
	vectors.RunCases(t, append(vectors.All(), vectors.Calendar()...), "mem", func(ctx context.Context, now time.Time, p floodgate.Policy, id string, cost int64) (floodgate.Result, error) {
		return l.AllowAt(ctx, now, p, id, cost)
	})
}

// policies returns one policy per algorithm with the given limit per hour,
// long enough that nothing refills during a test.
func policies(t testing.TB, limit int64) []floodgate.Policy {
	t.Helper()
	var ps []floodgate.Policy
	for _, p := range []floodgate.Policy{
		{Name: "c-fw", Algorithm: floodgate.FixedWindow},
		{Name: "c-sl", Algorithm: floodgate.SlidingLog},
		{Name: "c-sw", Algorithm: floodgate.SlidingWindow},
		{Name: "c-tb", Algorithm: floodgate.TokenBucket},
		{Name: "c-gcra", Algorithm: floodgate.GCRA},
	} {
		p.Limit, p.Window = limit, time.Hour
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	q, err := floodgate.NewQuota("c-quota", limit, floodgate.Calendar{Unit: floodgate.PeriodMonth})
	if err != nil {
		t.Fatal(err)
	}
	return append(ps, q)
}

// TestLessonConcurrency is the lesson's test: limit 1000, identity at 990,
// 200 concurrent requests → exactly 10 admitted, every run.
func TestLessonConcurrency(t *testing.T) {
	l, _ := newLimiter(t, memstore.Options{})
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, p := range policies(t, 1000) {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			for run := range 20 {
				id := fmt.Sprintf("user-%d", run)
				if r, err := l.AllowAt(context.Background(), now, p, id, 990); err != nil || !r.Allowed {
					t.Fatalf("preset: %+v %v", r, err)
				}
				var allowed atomic.Int64
				var wg sync.WaitGroup
				for range 200 {
					wg.Go(func() {
						r, err := l.AllowAt(context.Background(), now, p, id, 1)
						if err != nil {
							t.Error(err)
							return
						}
						if r.Allowed {
							allowed.Add(1)
						}
					})
				}
				wg.Wait()
				if got := allowed.Load(); got != 10 {
					t.Fatalf("run %d: %d allowed, want 10", run, got)
				}
			}
		})
	}
}

func TestThousandGoroutinesLimitHundred(t *testing.T) {
	l, _ := newLimiter(t, memstore.Options{Shards: 4})
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, p := range policies(t, 100) {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			var allowed atomic.Int64
			var wg sync.WaitGroup
			for range 1000 {
				wg.Go(func() {
					if r, err := l.AllowAt(context.Background(), now, p, "hot", 1); err == nil && r.Allowed {
						allowed.Add(1)
					}
				})
			}
			wg.Wait()
			if got := allowed.Load(); got != 100 {
				t.Fatalf("%d allowed, want 100", got)
			}
		})
	}
}

func TestLayeredAllOrNothing(t *testing.T) {
	l, _ := newLimiter(t, memstore.Options{})
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	user, _ := floodgate.NewSlidingWindow("user", 5, time.Minute)
	global, _ := floodgate.NewFixedWindow("global", 7, time.Minute)
	// Users a and b share the global layer: a takes 5, b gets 2 then the
	// global layer binds; b's denied requests consume nothing from b's layer.
	for i := range 6 {
		d, err := l.AllowLayersAt(ctx, now, 1, floodgate.LayerSpec{Policy: global}, floodgate.LayerSpec{Policy: user, Identity: "a"})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := d.Allowed, i < 5; got != want {
			t.Fatalf("a request %d: allowed %v, want %v", i, got, want)
		}
		if i == 5 && (d.Binding != 1 || d.Layers[0].Reason != floodgate.ReasonOtherLayer) {
			t.Fatalf("a request 6: binding %d layers %+v", d.Binding, d.Layers)
		}
	}
	for i := range 5 {
		d, err := l.AllowLayersAt(ctx, now, 1, floodgate.LayerSpec{Policy: global}, floodgate.LayerSpec{Policy: user, Identity: "b"})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := d.Allowed, i < 2; got != want {
			t.Fatalf("b request %d: allowed %v, want %v", i, got, want)
		}
	}
	// a's denied 6th request did not touch the global layer (7 - 5 - 2 = 0),
	// and b's three denied requests did not touch b's layer (5 - 2 = 3).
	r, _ := l.PeekAt(ctx, now, user, "b")
	if r.Remaining != 3 {
		t.Fatalf("b remaining %d, want 3", r.Remaining)
	}
	r, _ = l.PeekAt(ctx, now, global, "")
	if r.Remaining != 0 {
		t.Fatalf("global remaining %d, want 0", r.Remaining)
	}
}

func TestExpiredStateIsReclaimed(t *testing.T) {
	l, st := newLimiter(t, memstore.Options{Shards: 1, MaxKeys: 10})
	ctx := context.Background()
	p, _ := floodgate.NewFixedWindow("exp", 5, 2*time.Millisecond)
	for i := range 10 {
		if _, err := l.Allow(ctx, p, fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(algo.TTLSlack + 50*time.Millisecond) // every TTL (≤ 2ms + TTLSlack) has passed
	for i := range 10 {
		if _, err := l.Allow(ctx, p, fmt.Sprint("new", i)); err != nil {
			t.Fatalf("new identity %d after expiry: %v", i, err)
		}
	}
	if st.Len() > 10 {
		t.Fatalf("len %d, want ≤ 10", st.Len())
	}
}

// TestStateFromAheadExpiresOnMonotonicTime steps the callers' clock back
// an hour: the state written at the later timestamps still holds (a
// decision never runs before its state's time), but it expires after its
// TTL of real time, as Redis's PX would, not an hour later: the store's
// expiry runs on the monotonic clock, not on the decisions' timestamps.
func TestStateFromAheadExpiresOnMonotonicTime(t *testing.T) {
	l, _ := newLimiter(t, memstore.Options{})
	ctx := context.Background()
	p, _ := floodgate.NewFixedWindow("back", 2, 10*time.Millisecond)
	ahead := time.Now().Add(time.Hour)
	for i := range 2 {
		if r, err := l.AllowAt(ctx, ahead, p, "u", 1); err != nil || !r.Allowed {
			t.Fatalf("request %d an hour ahead: %+v %v", i, r, err)
		}
	}
	if r, err := l.AllowAt(ctx, time.Now(), p, "u", 1); err != nil || r.Allowed {
		t.Fatalf("right after the step back: %+v %v, want denied by the state from ahead", r, err)
	}
	deadline := time.Now().Add(10 * time.Second) // the TTL is 10ms + TTLSlack
	for {
		time.Sleep(100 * time.Millisecond)
		r, err := l.AllowAt(ctx, time.Now(), p, "u", 1)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still denied 10s after the step back: the state from ahead did not expire (%+v)", r)
		}
	}
}

func TestCancelledContext(t *testing.T) {
	l, _ := newLimiter(t, memstore.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p, _ := floodgate.NewFixedWindow("ctx", 5, time.Second)
	if _, err := l.Allow(ctx, p, "x"); !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Fatalf("err = %v", err)
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []memstore.Options{{Shards: -1}, {MaxKeys: -5}, {Shards: 1 << 20}} {
		if _, err := memstore.New(o); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		}
	}
}

// TestDeniedDecisionReportsStanding checks that a layer which would have
// admitted a request denied by another layer reports what it really has
// left: nothing was consumed.
func TestDeniedDecisionReportsStanding(t *testing.T) {
	l, _ := newLimiter(t, memstore.Options{})
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	tight, _ := floodgate.NewFixedWindow("tight", 1, time.Minute)
	for _, loose := range policies(t, 10) {
		t.Run(loose.Algorithm.String(), func(t *testing.T) {
			id := "standing-" + loose.Algorithm.String()
			specs := []floodgate.LayerSpec{{Policy: loose, Identity: id}, {Policy: tight, Identity: id}}
			if d, err := l.AllowLayersAt(ctx, now, 1, specs...); err != nil || !d.Allowed {
				t.Fatalf("first: %+v %v", d, err)
			}
			d, err := l.AllowLayersAt(ctx, now, 3, specs...)
			if err != nil || d.Allowed {
				t.Fatalf("second: %+v %v", d, err)
			}
			peek, _ := l.PeekAt(ctx, now, loose, id)
			got := d.Layers[0]
			if got.Reason != floodgate.ReasonOtherLayer || got.Remaining != peek.Remaining || !got.ResetAt.Equal(peek.ResetAt) || got.Remaining != 9 {
				t.Fatalf("loose layer %+v, peek %+v", got, peek)
			}
		})
	}
}

// TestDecideRefusesUncheckedLayers: Decide called directly, without the
// Limiter's checks, refuses what redisstore refuses, and decides nothing.
// A zero policy used to return nil with a zero result, and a negative cost
// a denial with a retry of 17 minutes.
func TestDecideRefusesUncheckedLayers(t *testing.T) {
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now().UnixMicro()
	p, _ := floodgate.NewFixedWindow("p", 3, time.Minute)
	for _, tc := range []struct {
		name   string
		layers []floodgate.Layer
		want   error
	}{
		{"zero policy", []floodgate.Layer{{Key: "k{a}", Cost: 1}}, floodgate.ErrInvalidPolicy},
		{"negative cost", []floodgate.Layer{{Policy: p, Key: "k{a}", Cost: -1}}, floodgate.ErrInvalidCost},
		{"empty key", []floodgate.Layer{{Policy: p, Cost: 1}}, floodgate.ErrInvalidKey},
		{"one key twice", []floodgate.Layer{{Policy: p, Key: "k{a}", Cost: 1}, {Policy: p, Key: "k{a}", Cost: 1}}, floodgate.ErrInvalidLayers},
	} {
		out := make([]floodgate.Result, len(tc.layers))
		if err := st.Decide(ctx, now, tc.layers, out); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	out := make([]floodgate.Result, 1)
	if err := st.Decide(ctx, now, []floodgate.Layer{{Policy: p, Key: "k{a}"}}, out); err != nil || out[0].Remaining != 3 || st.Len() != 0 {
		t.Fatalf("after the refusals: %+v, %v, %d keys; want 3 remaining and nothing stored", out[0], err, st.Len())
	}
}
