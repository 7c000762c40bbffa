package denycache

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// TestDifferential drives identical random traffic through a plain store
// and through the cache over an identical store, and requires the same
// decision every time. If the cache ever denied something its store would
// have admitted, the plain store would consume and the two would disagree
// from then on; admitting what the store denies is impossible by
// construction, and checked too. Cached denials may report a shorter
// RetryAfter (recomputed for the cost that was denied), never a longer one,
// and so may bind another denying layer, one whose wait is no longer than
// the store's binding one (seed 33: a review found a cached answer binding
// the other layer once the binding layer became the longest wait).
func TestDifferential(t *testing.T) {
	for _, seed := range []uint64{0, 1, 2, 3, 33} {
		t.Run("memstore", func(t *testing.T) {
			differential(t, newMem(t), newMem(t), seed, 20_000)
		})
	}
	t.Run("redis", func(t *testing.T) {
		c := redistest.Start(t).Client(t)
		a, err := redisstore.New(c, redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := redisstore.New(c, redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		differential(t, a, b, 99, 3_000)
	})
}

func diffPolicies(t *testing.T) []floodgate.Policy {
	s := time.Second
	return []floodgate.Policy{
		mustPolicy(t, floodgate.Policy{Name: "fw", Algorithm: floodgate.FixedWindow, Limit: 10, Window: s}),
		mustPolicy(t, floodgate.Policy{Name: "sl", Algorithm: floodgate.SlidingLog, Limit: 8, Window: s}),
		mustPolicy(t, floodgate.Policy{Name: "sw", Algorithm: floodgate.SlidingWindow, Limit: 10, Window: s}),
		mustPolicy(t, floodgate.Policy{Name: "sw7", Algorithm: floodgate.SlidingWindow, Limit: 7, Window: 700 * time.Millisecond}),
		mustPolicy(t, floodgate.Policy{Name: "tb", Algorithm: floodgate.TokenBucket, Limit: 5, Window: s, Burst: 8}),
		mustPolicy(t, floodgate.Policy{Name: "gc", Algorithm: floodgate.GCRA, Limit: 10, Window: s, Burst: 3}),
		mustPolicy(t, floodgate.Policy{Name: "gcd", Algorithm: floodgate.GCRA, Limit: 10, Window: s, Burst: 2, MaxDelay: 300 * time.Millisecond}),
	}
}

func differential(t *testing.T, plainStore, cachedStore floodgate.Store, seed uint64, steps int) {
	ctx := context.Background()
	plain, err := floodgate.New(plainStore, floodgate.Options{Prefix: "plain"})
	if err != nil {
		t.Fatal(err)
	}
	cache, err := New(cachedStore, Options{MaxTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	withCache, err := floodgate.New(cache, floodgate.Options{Prefix: "cached"})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 41))
	policies := diffPolicies(t)
	global := mustPolicy(t, floodgate.Policy{Name: "global", Algorithm: floodgate.SlidingWindow, Limit: 40, Window: 2 * time.Second})
	ids := []string{"alice", "bob", "carol"}
	now := time.Date(2026, 12, 1, 10, 0, 0, 123456000, time.UTC)
	denied := 0
	for i := range steps {
		// Mostly forward in bursts, sometimes a jump, sometimes backwards.
		switch x := rng.IntN(100); {
		case x < 60:
			now = now.Add(time.Duration(rng.IntN(20_000)) * time.Microsecond)
		case x < 95:
			now = now.Add(time.Duration(rng.IntN(300_000)) * time.Microsecond)
		default:
			now = now.Add(-time.Duration(rng.IntN(50_000)) * time.Microsecond)
		}
		cost := []int64{0, 1, 1, 1, 2, 3, 4, 9}[rng.IntN(8)]
		specs := []floodgate.LayerSpec{{Policy: policies[rng.IntN(len(policies))], Identity: ids[rng.IntN(len(ids))]}}
		if rng.IntN(3) == 0 {
			specs = append(specs, floodgate.LayerSpec{Policy: global, Identity: "all"})
		}
		want, err := plain.AllowLayersAt(ctx, now, cost, specs...)
		if err != nil {
			t.Fatal(err)
		}
		savedBefore := cache.Saved()
		got, err := withCache.AllowLayersAt(ctx, now, cost, specs...)
		if err != nil {
			t.Fatal(err)
		}
		fromCache := cache.Saved() > savedBefore
		if got.Allowed != want.Allowed || (got.Binding != want.Binding && !shorterBinding(fromCache, got, want)) {
			t.Fatalf("step %d (%v cost %d at %v, from cache %v): allowed %v binding %d, store alone %v binding %d",
				i, specs, cost, now, fromCache, got.Allowed, got.Binding, want.Allowed, want.Binding)
		}
		if !want.Allowed {
			denied++
		}
		for j := range want.Layers {
			g, w := got.Layers[j], want.Layers[j]
			if g.Allowed != w.Allowed || g.Reason != w.Reason {
				t.Fatalf("step %d layer %d: %+v, store alone %+v", i, j, g, w)
			}
			if !fromCache && g != w {
				t.Fatalf("step %d layer %d answered by the store: %+v, twin %+v", i, j, g, w)
			}
			if fromCache && g.Reason == floodgate.ReasonLimited && (g.RetryAfter <= 0 || g.RetryAfter > w.RetryAfter) {
				t.Fatalf("step %d layer %d: cached retry after %v, store says %v", i, j, g.RetryAfter, w.RetryAfter)
			}
		}
	}
	t.Logf("%d steps, %d denied, %d answered from the cache", steps, denied, cache.Saved())
	if cache.Saved() == 0 {
		t.Fatal("the cache never answered: the test exercised nothing")
	}
}

// shorterBinding reports whether got, a denial the cache answered, binds
// another layer than want, the store's, only because a cached RetryAfter is
// shorter than the store's: both layers deny for the same reason (limited,
// as a cost above a capacity outlasts any wait and is cached exactly), and
// the wait got reports is no longer than want's.
func shorterBinding(fromCache bool, got, want floodgate.Decision) bool {
	if !fromCache || got.Allowed {
		return false
	}
	g, w := got.Result(), want.Result()
	return g.Reason == floodgate.ReasonLimited && w.Reason == floodgate.ReasonLimited &&
		want.Layers[got.Binding].Reason == floodgate.ReasonLimited && g.RetryAfter <= w.RetryAfter
}
