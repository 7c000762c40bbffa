package memstore_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/memstore"
)

// allow decides one request of id against p at now and fails the test on
// a store error.
func allow(t testing.TB, l *floodgate.Limiter, now time.Time, p floodgate.Policy, id string) floodgate.Result {
	t.Helper()
	r, err := l.AllowAt(context.Background(), now, p, id, 1)
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	return r
}

// TestFullStoreEvictsInsteadOfRefusing: at its bound the store admits a new
// identity (it used to fail with ErrStoreFull), stays within the bound and
// counts the eviction.
func TestFullStoreEvictsInsteadOfRefusing(t *testing.T) {
	l, st := newLimiter(t, memstore.Options{Shards: 1, MaxKeys: 10})
	p, _ := floodgate.NewFixedWindow("cap", 5, time.Hour)
	now := time.Now()
	for i := range 10 {
		allow(t, l, now, p, fmt.Sprint(i))
	}
	if r := allow(t, l, now, p, "one-too-many"); !r.Allowed || r.Remaining != 4 {
		t.Fatalf("new identity at the bound: %+v", r)
	}
	if st.Len() != 10 {
		t.Fatalf("len %d, want 10", st.Len())
	}
	if got := st.Evictions(); got != 1 {
		t.Fatalf("evictions %d, want 1", got)
	}
	// The least recently used one-off identity ("0") went: it starts afresh.
	if r := allow(t, l, now, p, "0"); r.Remaining != 4 {
		t.Fatalf("evicted identity 0: %+v, want a fresh budget", r)
	}
	// "5" was kept: its second request is counted on its first.
	if r := allow(t, l, now, p, "5"); r.Remaining != 3 {
		t.Fatalf("identity 5: %+v, want remaining 3", r)
	}
}

// TestKnownIdentitiesSurviveAJunkFlood is the memory store half of the
// "store full" attack: a flood of distinct one-off identities fifty times
// the bound neither fails any decision nor changes those of identities
// decided before it (each of them decided at least twice).
func TestKnownIdentitiesSurviveAJunkFlood(t *testing.T) {
	for _, shards := range []int{1, 8} {
		t.Run(fmt.Sprint(shards, " shards"), func(t *testing.T) {
			l, st := newLimiter(t, memstore.Options{Shards: shards, MaxKeys: 800})
			p, _ := floodgate.NewSlidingWindow("login", 5, time.Hour)
			now := time.Now()
			users := []string{"alice", "bob", "carol"}
			for _, u := range users {
				for range 3 {
					allow(t, l, now, p, u)
				}
			}
			for i := range 40_000 {
				if r := allow(t, l, now, p, fmt.Sprint("junk-", i)); !r.Allowed {
					t.Fatalf("junk %d denied: %+v", i, r)
				}
			}
			if st.Len() > 800 {
				t.Fatalf("len %d over the bound 800", st.Len())
			}
			if st.Evictions() < 39_000 {
				t.Fatalf("evictions %d, want about 39,200", st.Evictions())
			}
			for _, u := range users {
				if r := allow(t, l, now, p, u); !r.Allowed || r.Remaining != 1 {
					t.Fatalf("%s after the flood: %+v, want allowed with 1 left", u, r)
				}
				if r := allow(t, l, now, p, u); !r.Allowed || r.Remaining != 0 {
					t.Fatalf("%s after the flood: %+v, want allowed with 0 left", u, r)
				}
				if r := allow(t, l, now, p, u); r.Allowed {
					t.Fatalf("%s over its limit after the flood: %+v", u, r)
				}
			}
		})
	}
}

// TestSmallStoreShares: below 1,024 identities a store has fewer shards,
// a power of two, each holding at least 16 (one shard below 32).
func TestSmallStoreShares(t *testing.T) {
	for _, tc := range []struct{ maxKeys, shards, least int }{
		{1, 1, 1}, {31, 1, 31}, {32, 2, 16}, {100, 4, 25}, {1023, 32, 31}, {1024, 64, 16}, {1_000_000, 64, 15625},
	} {
		_, st := newLimiter(t, memstore.Options{MaxKeys: tc.maxKeys})
		if got, least := st.ShardCaps(); len(got) != tc.shards || least != tc.least {
			t.Errorf("MaxKeys %d: %d shards, the smallest holding %d; want %d and %d", tc.maxKeys, len(got), least, tc.shards, tc.least)
		}
	}
}

// TestSmallStoreKeepsKnownIdentities: with a small MaxKeys the shards are
// fewer, not smaller, so a denied user survives a flood of one-off
// identities. MaxKeys 100 used to give 64 shards of one or two, none with
// a protected part: 300 one-offs evicted the user, who came back fresh.
func TestSmallStoreKeepsKnownIdentities(t *testing.T) {
	for _, maxKeys := range []int{20, 100, 500} {
		t.Run(fmt.Sprint(maxKeys), func(t *testing.T) {
			l, _ := newLimiter(t, memstore.Options{MaxKeys: maxKeys})
			p, _ := floodgate.NewFixedWindow("login", 3, time.Hour)
			now := time.Now()
			for range 3 {
				allow(t, l, now, p, "mallory")
			}
			if r := allow(t, l, now, p, "mallory"); r.Allowed {
				t.Fatalf("mallory's 4th request admitted: %+v", r)
			}
			for i := range 3 * maxKeys {
				allow(t, l, now, p, fmt.Sprint("one-off-", i))
			}
			if r := allow(t, l, now, p, "mallory"); r.Allowed {
				t.Fatalf("mallory admitted again after %d one-off identities: %+v", 3*maxKeys, r)
			}
		})
	}
}

// TestRepeatedJunkCannotEvictTheProtected: identities made "known" by a
// second request fill at most the protected part of a shard; a user active
// between two of their bursts stays at its front and is kept.
func TestRepeatedJunkCannotEvictTheProtected(t *testing.T) {
	l, _ := newLimiter(t, memstore.Options{Shards: 1, MaxKeys: 100})
	p, _ := floodgate.NewFixedWindow("fw", 1000, time.Hour)
	now := time.Now()
	allow(t, l, now, p, "alice")
	allow(t, l, now, p, "alice")
	for round := range 20 {
		for i := range 50 {
			id := fmt.Sprint("junk-", round, "-", i)
			allow(t, l, now, p, id)
			allow(t, l, now, p, id)
		}
		allow(t, l, now, p, "alice")
	}
	if r := allow(t, l, now, p, "alice"); r.Remaining != 1000-23 {
		t.Fatalf("alice: %+v, want remaining %d", r, 1000-23)
	}
}

// TestExpiredGoBeforeLive: at the bound, expired entries are reclaimed
// before any live identity is evicted.
func TestExpiredGoBeforeLive(t *testing.T) {
	l, st := newLimiter(t, memstore.Options{Shards: 1, MaxKeys: 20})
	short, _ := floodgate.NewFixedWindow("short", 5, time.Millisecond)
	long, _ := floodgate.NewFixedWindow("long", 5, time.Hour)
	now := time.Now()
	for i := range 10 {
		allow(t, l, now, long, fmt.Sprint("live-", i))
	}
	for i := range 10 {
		allow(t, l, now, short, fmt.Sprint("brief-", i))
	}
	time.Sleep(algo.TTLSlack + 100*time.Millisecond) // every short TTL has passed
	for i := range 10 {
		allow(t, l, now, long, fmt.Sprint("new-", i))
	}
	if got := st.Evictions(); got != 0 {
		t.Fatalf("evictions %d, want 0: expired entries should have made room", got)
	}
	for i := range 10 {
		if r := allow(t, l, now, long, fmt.Sprint("live-", i)); r.Remaining != 3 {
			t.Fatalf("live-%d: %+v, want remaining 3", i, r)
		}
	}
}

// TestEvictionKeepsTheDecisionsOwnLayers: with one entry per shard, a
// layered decision whose layers share the shard never evicts one of its
// own layers to store another; the shard briefly holds one more.
func TestEvictionKeepsTheDecisionsOwnLayers(t *testing.T) {
	l, st := newLimiter(t, memstore.Options{Shards: 1, MaxKeys: 1})
	ctx := context.Background()
	now := time.Now()
	user, _ := floodgate.NewFixedWindow("user", 3, time.Hour)
	global, _ := floodgate.NewFixedWindow("global", 100, time.Hour)
	for i := range 3 {
		d, err := l.AllowLayersAt(ctx, now, 1, floodgate.LayerSpec{Policy: global}, floodgate.LayerSpec{Policy: user, Identity: fmt.Sprint("u", i)})
		if err != nil || !d.Allowed {
			t.Fatalf("decision %d: %+v %v", i, d, err)
		}
		if d.Layers[0].Remaining != int64(99-i) {
			t.Fatalf("decision %d: global remaining %d, want %d", i, d.Layers[0].Remaining, 99-i)
		}
	}
	if st.Len() > 2 {
		t.Fatalf("len %d, want at most 2", st.Len())
	}
}

// TestEvictionUnderConcurrency races decisions on known and new identities
// in a tiny store: nothing fails, the bound holds, known identities are
// counted exactly.
func TestEvictionUnderConcurrency(t *testing.T) {
	l, st := newLimiter(t, memstore.Options{Shards: 4, MaxKeys: 64})
	ctx := context.Background()
	now := time.Now()
	p, _ := floodgate.NewFixedWindow("race", 1_000_000, time.Hour)
	global, _ := floodgate.NewFixedWindow("global", 1_000_000, time.Hour)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				id := fmt.Sprint("g", g, "-", i)
				if _, err := l.AllowLayersAt(ctx, now, 1, floodgate.LayerSpec{Policy: global}, floodgate.LayerSpec{Policy: p, Identity: id}); err != nil {
					t.Error(err)
					return
				}
				if i%50 == 0 {
					st.Reset(l.Key(p, id))
				}
			}
		})
	}
	wg.Wait()
	if n := st.Len(); n > 64+4 {
		t.Fatalf("len %d over the bound", n)
	}
	r, err := l.PeekAt(ctx, now, global, "")
	if err != nil || r.Remaining != 1_000_000-16_000 {
		t.Fatalf("global: %+v %v, want remaining %d", r, err, 1_000_000-16_000)
	}
}

// TestMemoryPerKey measures the heap one tracked identity costs (entry,
// state, map slot and key) and checks it against the figure the MaxKeys
// documentation states.
func TestMemoryPerKey(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation sizes")
	}
	const n = 200_000
	p, _ := floodgate.NewSlidingWindow("mem", 1000, time.Hour)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = algo.KeyAt("m", p, fmt.Sprintf("user-%010d", i), time.Now().UnixMicro())
	}
	keyBytes := len(keys[0])
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	st, err := memstore.New(memstore.Options{MaxKeys: 2 * n})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMicro()
	var out [1]floodgate.Result
	for _, k := range keys {
		if err := st.Decide(context.Background(), now, []floodgate.Layer{{Policy: p, Key: k, Cost: 1}}, out[:]); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%d identities with %d-byte keys: %.0f bytes each (%.0f without the key)", n, keyBytes, per, per-float64(keyBytes))
	if st.Len() != n {
		t.Fatalf("len %d, want %d", st.Len(), n)
	}
	if over := per - float64(keyBytes); over > 220 {
		t.Fatalf("%.0f bytes per identity beyond its key, documented as about 175", over)
	}
	runtime.KeepAlive(st)
	runtime.KeepAlive(keys)
}

// TestMaxKeysExact: a store holds exactly MaxKeys identities after many
// more distinct ones, whatever MaxKeys and the shard count (it used to
// round per shard: MaxKeys 1, 10 and 100 all held 64, one per default
// shard, and {MaxKeys 10, Shards 3} held 8).
func TestMaxKeysExact(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	p, _ := floodgate.NewFixedWindow("cap", 1, time.Hour)
	for _, o := range []memstore.Options{{MaxKeys: 1}, {MaxKeys: 10}, {MaxKeys: 100}, {MaxKeys: 10, Shards: 3}, {MaxKeys: 1000, Shards: 1}, {MaxKeys: 1001, Shards: 16}} {
		l, st := newLimiter(t, o)
		const ids = 5000
		for i := range ids {
			if _, err := l.AllowAt(ctx, now, p, fmt.Sprint(i), 1); err != nil {
				t.Fatal(err)
			}
		}
		if got := st.Len(); got != o.MaxKeys {
			t.Errorf("%+v: holds %d identities after %d, want %d", o, got, ids, o.MaxKeys)
		}
		if got, want := st.Evictions(), uint64(ids-o.MaxKeys); got != want {
			t.Errorf("%+v: %d evictions, want %d", o, got, want)
		}
	}
}
