package denycache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/redisstore"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// counting counts the decisions that reach the wrapped store.
type counting struct {
	next  floodgate.Store
	calls atomic.Int64
}

func (c *counting) Decide(ctx context.Context, now int64, layers []floodgate.Layer, out []floodgate.Result) error {
	c.calls.Add(1)
	return c.next.Decide(ctx, now, layers, out)
}

func newMem(t testing.TB) *memstore.Store {
	t.Helper()
	m, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// cached returns a limiter over a cache over a counting wrapper of st.
func cached(t testing.TB, st floodgate.Store, opts Options) (*floodgate.Limiter, *Store, *counting) {
	t.Helper()
	cnt := &counting{next: st}
	c, err := New(cnt, opts)
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(c, floodgate.Options{Prefix: "dc"})
	if err != nil {
		t.Fatal(err)
	}
	return l, c, cnt
}

func mustPolicy(t testing.TB, p floodgate.Policy) floodgate.Policy {
	t.Helper()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

// twinStep returns a step that decides cost at *now for identity u
// through l and through a limiter without the cache on a store of its
// own, and fails t unless both answer alike, l's admitting as wantAllowed
// says, with wantCalls calls reaching cnt.
func twinStep(t *testing.T, l *floodgate.Limiter, cnt *counting, p floodgate.Policy, now *time.Time) func(cost int64, wantAllowed bool, wantCalls int64) {
	twin, err := floodgate.New(newMem(t), floodgate.Options{Prefix: "dc"})
	if err != nil {
		t.Fatal(err)
	}
	return func(cost int64, wantAllowed bool, wantCalls int64) {
		t.Helper()
		ctx := context.Background()
		before := cnt.calls.Load()
		got, err := l.AllowAt(ctx, *now, p, "u", cost)
		if err != nil {
			t.Fatal(err)
		}
		want, err := twin.AllowAt(ctx, *now, p, "u", cost)
		if err != nil {
			t.Fatal(err)
		}
		calls := cnt.calls.Load() - before
		if got.Allowed != wantAllowed || calls != wantCalls || got != want {
			t.Fatalf("cost %d at +%v: %+v with %d store calls; want allowed=%v with %d calls, as the store alone: %+v",
				cost, now.Sub(t0), got, calls, wantAllowed, wantCalls, want)
		}
	}
}

// TestFloodOnDeniedKey: once a key is denied until the end of its window,
// a flood of 10,000 more requests makes no store call at all, each denied
// with RetryAfter counting down to the same instant; at that instant the
// store is asked again.
func TestFloodOnDeniedKey(t *testing.T) {
	for name, st := range map[string]func(t *testing.T) floodgate.Store{
		"memstore": func(t *testing.T) floodgate.Store { return newMem(t) },
		"redis": func(t *testing.T) floodgate.Store {
			s, err := redisstore.New(redistest.Start(t).Client(t), redisstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			l, c, cnt := cached(t, st(t), Options{MaxTTL: time.Hour})
			p := mustPolicy(t, floodgate.Policy{Name: "api", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Minute})
			for i := range 10 {
				if r, err := l.AllowAt(ctx, t0, p, "bot", 1); err != nil || !r.Allowed {
					t.Fatalf("request %d: %+v, %v", i, r, err)
				}
			}
			if r, err := l.AllowAt(ctx, t0, p, "bot", 1); err != nil || r.Allowed || r.RetryAfter != time.Minute {
				t.Fatalf("11th: %+v, %v", r, err)
			}
			before := cnt.calls.Load()
			for i := range 10_000 {
				at := t0.Add(time.Duration(i) * 5 * time.Millisecond) // up to +50s
				r, err := l.AllowAt(ctx, at, p, "bot", 1)
				if err != nil || r.Allowed || r.Reason != floodgate.ReasonLimited || r.RetryAfter != time.Minute-at.Sub(t0) {
					t.Fatalf("flood %d: %+v, %v", i, r, err)
				}
			}
			if got := cnt.calls.Load() - before; got != 0 {
				t.Fatalf("the flood made %d store calls, want 0", got)
			}
			if c.Saved() != 10_000 {
				t.Fatalf("Saved() = %d, want 10000", c.Saved())
			}
			// A peek always asks the store.
			if _, err := l.PeekAt(ctx, t0.Add(time.Second), p, "bot"); err != nil || cnt.calls.Load() != before+1 {
				t.Fatalf("peek: %v; store calls %d", err, cnt.calls.Load()-before)
			}
			// At the end of the window the store is asked and admits.
			if r, err := l.AllowAt(ctx, t0.Add(time.Minute), p, "bot", 1); err != nil || !r.Allowed || cnt.calls.Load() != before+2 {
				t.Fatalf("after the window: %+v, %v", r, err)
			}
		})
	}
}

// TestSmallerCostGoesToStore: a denial of cost 5 covers costs ≥ 5 only.
func TestSmallerCostGoesToStore(t *testing.T) {
	ctx := context.Background()
	l, _, cnt := cached(t, newMem(t), Options{})
	p := mustPolicy(t, floodgate.Policy{Name: "api", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Minute})
	step := func(cost int64, wantAllowed bool, wantCalls int64) {
		t.Helper()
		before := cnt.calls.Load()
		r, err := l.AllowAt(ctx, t0, p, "u", cost)
		if err != nil || r.Allowed != wantAllowed || cnt.calls.Load()-before != wantCalls {
			t.Fatalf("cost %d: %+v, %v, %d store calls; want allowed=%v with %d calls", cost, r, err, cnt.calls.Load()-before, wantAllowed, wantCalls)
		}
	}
	step(7, true, 1)
	step(5, false, 1) // learns: a cost of 5 denied until the window ends
	step(5, false, 0)
	step(9, false, 1) // another cost: its wait may differ, the store answers (and is learnt)
	step(9, false, 0)
	step(3, true, 1)  // below the cached cost: the store admits it
	step(1, false, 1) // and now even 1 is denied: learnt
	step(1, false, 0)
}

// TestLayered: a layered decision is answered locally only when all its
// layers are cached denials; one limited layer among admitting ones still
// asks the store, which alone knows the other layers' state.
func TestLayered(t *testing.T) {
	ctx := context.Background()
	l, _, cnt := cached(t, newMem(t), Options{})
	user := mustPolicy(t, floodgate.Policy{Name: "user", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Minute})
	global := mustPolicy(t, floodgate.Policy{Name: "global", Algorithm: floodgate.FixedWindow, Limit: 3, Window: time.Hour})
	decide := func(at time.Duration, id string, wantAllowed bool, wantCalls int64) floodgate.Decision {
		t.Helper()
		before := cnt.calls.Load()
		d, err := l.AllowLayersAt(ctx, t0.Add(at), 1, floodgate.LayerSpec{Policy: global, Identity: "all"}, floodgate.LayerSpec{Policy: user, Identity: id})
		if err != nil || d.Allowed != wantAllowed || cnt.calls.Load()-before != wantCalls {
			t.Fatalf("%s at +%v: %+v, %v, %d calls; want allowed=%v with %d calls", id, at, d, err, cnt.calls.Load()-before, wantAllowed, wantCalls)
		}
		return d
	}
	decide(0, "alice", true, 1)
	decide(0, "alice", false, 1) // user layer denies, global would admit
	decide(0, "alice", false, 1) // so it keeps asking the store
	decide(0, "bob", true, 1)
	decide(0, "carol", true, 1) // global now full (3 of 3)
	// Alice is denied by both layers now: cached on both keys.
	first := decide(time.Second, "alice", false, 1)
	again := decide(2*time.Second, "alice", false, 0)
	if again.Binding != 0 || again.Layers[0].Reason != floodgate.ReasonLimited || again.Layers[1].Reason != floodgate.ReasonLimited {
		t.Fatalf("cached decision %+v, want both layers limited, the global one binding", again)
	}
	if again.Layers[0].RetryAfter != first.Layers[0].RetryAfter-time.Second {
		t.Fatalf("retry after %v, want %v", again.Layers[0].RetryAfter, first.Layers[0].RetryAfter-time.Second)
	}
	// Once alice's minute is over her layer lapses: the store is asked.
	decide(time.Minute, "alice", false, 1)
}

// TestForgetAndMaxTTL: a reset behind the cache is seen after Forget, or
// at the latest after MaxTTL.
func TestForgetAndMaxTTL(t *testing.T) {
	ctx := context.Background()
	mem := newMem(t)
	l, c, cnt := cached(t, mem, Options{MaxTTL: 10 * time.Second})
	p := mustPolicy(t, floodgate.Policy{Name: "login", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Hour})
	key := l.Key(p, "acct")
	l.AllowAt(ctx, t0, p, "acct", 1)
	if r, _ := l.AllowAt(ctx, t0, p, "acct", 1); r.Allowed || r.RetryAfter != time.Hour {
		t.Fatalf("second: %+v", r)
	}
	mem.Reset(key) // e.g. a successful login clears the failures
	if r, _ := l.AllowAt(ctx, t0.Add(time.Second), p, "acct", 1); r.Allowed {
		t.Fatalf("the cache cannot see the reset yet: %+v", r)
	}
	c.Forget(key)
	if r, _ := l.AllowAt(ctx, t0.Add(2*time.Second), p, "acct", 1); !r.Allowed {
		t.Fatalf("after Forget: %+v", r)
	}
	// Denied again (1 per hour); after a reset without Forget, MaxTTL
	// bounds the cached answer.
	l.AllowAt(ctx, t0.Add(3*time.Second), p, "acct", 1)
	mem.Reset(key)
	before := cnt.calls.Load()
	if r, _ := l.AllowAt(ctx, t0.Add(12*time.Second), p, "acct", 1); r.Allowed || cnt.calls.Load() != before || r.RetryAfter != time.Hour-12*time.Second {
		t.Fatalf("inside MaxTTL: %+v (want retry after 59m48s, the window's end, not MaxTTL's)", r)
	}
	if r, _ := l.AllowAt(ctx, t0.Add(13*time.Second), p, "acct", 1); !r.Allowed || cnt.calls.Load() != before+1 {
		t.Fatalf("after MaxTTL: %+v", r)
	}
}

// TestCostExceedsLimitCached: a cost above capacity is denied locally too.
func TestCostExceedsLimitCached(t *testing.T) {
	ctx := context.Background()
	l, _, cnt := cached(t, newMem(t), Options{})
	p := mustPolicy(t, floodgate.Policy{Name: "api", Algorithm: floodgate.TokenBucket, Limit: 5, Window: time.Second})
	for i := range 3 {
		r, err := l.AllowAt(ctx, t0, p, "u", 6)
		if err != nil || r.Allowed || r.Reason != floodgate.ReasonCostExceedsLimit || r.RetryAfter != 0 {
			t.Fatalf("%d: %+v, %v", i, r, err)
		}
	}
	if cnt.calls.Load() != 1 {
		t.Fatalf("%d store calls, want 1", cnt.calls.Load())
	}
}

// TestBounded: the cache holds at most MaxEntries denials (LRU).
func TestBounded(t *testing.T) {
	ctx := context.Background()
	l, c, cnt := cached(t, newMem(t), Options{MaxEntries: 2, Shards: 1})
	p := mustPolicy(t, floodgate.Policy{Name: "api", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Minute})
	for _, id := range []string{"a", "b", "c"} {
		l.AllowAt(ctx, t0, p, id, 1)
		l.AllowAt(ctx, t0, p, id, 1) // denied, cached
	}
	if c.Len() != 2 {
		t.Fatalf("Len() = %d, want 2", c.Len())
	}
	before := cnt.calls.Load()
	l.AllowAt(ctx, t0, p, "c", 1)
	l.AllowAt(ctx, t0, p, "b", 1)
	if cnt.calls.Load() != before {
		t.Fatalf("recent entries missed")
	}
	l.AllowAt(ctx, t0, p, "a", 1) // evicted: asks the store
	if cnt.calls.Load() != before+1 {
		t.Fatalf("evicted entry answered")
	}
}

// TestMaxEntriesExact: a cache holds exactly MaxEntries denials after many
// more, whatever MaxEntries and the shard count (it used to round per
// shard: MaxEntries 10 held 16 with the default 16 shards, {MaxEntries 10,
// Shards 3} held 8).
func TestMaxEntriesExact(t *testing.T) {
	ctx := context.Background()
	p := mustPolicy(t, floodgate.Policy{Name: "api", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Minute})
	for _, o := range []Options{{MaxEntries: 1}, {MaxEntries: 10}, {MaxEntries: 100}, {MaxEntries: 10, Shards: 3}, {MaxEntries: 1001, Shards: 16}} {
		l, c, _ := cached(t, newMem(t), o)
		for i := range 5000 {
			id := fmt.Sprint(i)
			l.AllowAt(ctx, t0, p, id, 1)
			l.AllowAt(ctx, t0, p, id, 1) // denied, cached
		}
		if got := c.Len(); got != o.MaxEntries {
			t.Errorf("%+v: holds %d denials after 5000, want %d", o, got, o.MaxEntries)
		}
	}
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	cnt := &counting{next: newMem(t)}
	c, err := New(cnt, Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := mustPolicy(t, floodgate.Policy{Name: "api", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Minute})
	layer := floodgate.Layer{Policy: p, Key: "k", Cost: 1}
	if err := c.Decide(ctx, t0.UnixMicro(), []floodgate.Layer{layer}, nil); !errors.Is(err, floodgate.ErrInvalidLayers) {
		t.Errorf("missing out: %v", err)
	}
	if err := c.Decide(ctx, t0.UnixMicro(), nil, nil); !errors.Is(err, floodgate.ErrInvalidLayers) {
		t.Errorf("no layers: %v", err)
	}
	layer.Cost = -1
	if err := c.Decide(ctx, t0.UnixMicro(), []floodgate.Layer{layer}, make([]floodgate.Result, 1)); !errors.Is(err, floodgate.ErrInvalidCost) {
		t.Errorf("negative cost: %v", err)
	}
	if cnt.calls.Load() != 0 {
		t.Errorf("bad input reached the store")
	}
	if s, err := New((*memstore.Store)(nil), Options{}); s != nil || !errors.Is(err, floodgate.ErrInvalidPolicy) {
		t.Errorf("New of a nil *memstore.Store = %v, %v; want ErrInvalidPolicy", s, err)
	}
	for _, o := range []Options{{MaxEntries: -1}, {MaxTTL: time.Microsecond}, {Shards: 2000}} {
		if _, err := New(cnt, o); !errors.Is(err, floodgate.ErrInvalidPolicy) {
			t.Errorf("New(%+v) = %v", o, err)
		}
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Error("New accepted a nil store")
	}
}

// TestConcurrentFlood floods one denied key from 64 goroutines under -race.
func TestConcurrentFlood(t *testing.T) {
	ctx := context.Background()
	l, c, cnt := cached(t, newMem(t), Options{})
	p := mustPolicy(t, floodgate.Policy{Name: "api", Algorithm: floodgate.GCRA, Limit: 10, Window: time.Minute})
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 200 {
				r, err := l.AllowAt(ctx, t0, p, "bot", 1)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 10 {
		t.Fatalf("%d admitted, want 10", admitted.Load())
	}
	t.Logf("12,800 requests: %d store calls, %d saved", cnt.calls.Load(), c.Saved())
	if cnt.calls.Load()+int64(c.Saved()) != 12_800 || cnt.calls.Load() > 10+64 {
		t.Fatalf("%d store calls and %d saved for 12,800 requests", cnt.calls.Load(), c.Saved())
	}
}

// TestSkewUnderAdmits pins the bound the package documentation states for
// clocks that disagree: an instance whose clock is 3s ahead frees, for the
// whole store, room this instance's cached denial expects only later. The
// cache then denies what the store would admit (under-admission, never
// over-admission), and only until the instant T it learnt, less than the
// skew later.
func TestSkewUnderAdmits(t *testing.T) {
	ctx := context.Background()
	mem := newMem(t)
	c, err := New(mem, Options{MaxTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	p := mustPolicy(t, floodgate.Policy{Name: "skew", Algorithm: floodgate.TokenBucket, Limit: 5, Window: 5 * time.Second})
	layer := []floodgate.Layer{{Policy: p, Key: "dc:skew:tenant-1", Cost: 1}}
	decide := func(st floodgate.Store, now time.Time) floodgate.Result {
		t.Helper()
		out := make([]floodgate.Result, 1)
		if err := st.Decide(ctx, now.UnixMicro(), layer, out); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	// This instance drains the bucket and learns the denial: cost 1 fits
	// again at T = t0 + 1s.
	for i := range 5 {
		if r := decide(c, t0); !r.Allowed {
			t.Fatalf("request %d at t0: %+v, want allowed", i+1, r)
		}
	}
	if r := decide(c, t0); r.Allowed || r.RetryAfter != time.Second {
		t.Fatalf("6th request at t0: %+v, want denied with RetryAfter 1s", r)
	}
	// Another instance, its clock 3s ahead, decides the same key: on its
	// clock 3 tokens have come back, and it takes one.
	const skew = 3 * time.Second
	if r := decide(mem, t0.Add(skew)); !r.Allowed {
		t.Fatalf("the instance ahead: %+v, want allowed", r)
	}
	at := t0.Add(500 * time.Millisecond)
	cached := decide(c, at)
	if cached.Allowed {
		t.Fatalf("cache at t0+500ms: %+v, want the cached denial", cached)
	}
	if c.Saved() != 1 {
		t.Fatalf("Saved = %d, want 1: the denial at t0+500ms should come from the cache", c.Saved())
	}
	// The store alone would admit it now: that is the under-admission,
	// lasting less than the skew.
	if r := decide(mem, at); !r.Allowed {
		t.Fatalf("store at t0+500ms: %+v, want allowed (the instance ahead freed room)", r)
	}
	if cached.RetryAfter <= 0 || cached.RetryAfter >= skew {
		t.Fatalf("cached RetryAfter %v: want in (0, %v): the under-admission is bounded by the skew", cached.RetryAfter, skew)
	}
	// At T the cache hands the key back to the store.
	if r := decide(c, t0.Add(time.Second)); !r.Allowed {
		t.Fatalf("cache at T = t0+1s: %+v, want the store's admission", r)
	}
}

// TestAdmissionDropsEntry: a smaller cost admitted after a denial drops
// the key's cached denial, so that the next denial of the larger cost
// comes from the store with its Remaining and RetryAfter, as a twin
// limiter without the cache answers it. An outside walk (dcwalk) saw a
// cached Remaining of 5 where the store said 0 (fixed window), and a
// token bucket's retry hint about 400 ms shorter than the store's, which
// a client waiting it was denied again at.
func TestAdmissionDropsEntry(t *testing.T) {
	for _, p := range []floodgate.Policy{
		{Name: "fw", Algorithm: floodgate.FixedWindow, Limit: 50, Window: time.Hour},
		{Name: "tb", Algorithm: floodgate.TokenBucket, Limit: 5, Window: 2 * time.Second, Burst: 15},
	} {
		t.Run(p.Name, func(t *testing.T) {
			p := mustPolicy(t, p)
			l, c, cnt := cached(t, newMem(t), Options{MaxTTL: time.Hour})
			now := t0
			step := twinStep(t, l, cnt, p, &now)
			big := p.Capacity() - 5 // leaves 5
			step(big, true, 1)
			step(10, false, 1) // learnt
			step(10, false, 0) // cached: as the store would answer
			now = now.Add(450 * time.Millisecond)
			step(1, true, 1)   // below the cached cost: the store admits it, and the entry goes
			step(10, false, 1) // from the store again, with what the admission left
			step(10, false, 0)
			if c.Len() != 1 {
				t.Errorf("%d entries, want 1", c.Len())
			}
		})
	}
}

// gated holds the first decision that reaches the wrapped store once
// armed, until open is closed, telling arrived; the others pass.
type gated struct {
	next    floodgate.Store
	armed   atomic.Bool
	arrived chan struct{}
	open    chan struct{}
}

func (g *gated) Decide(ctx context.Context, now int64, layers []floodgate.Layer, out []floodgate.Result) error {
	if g.armed.CompareAndSwap(true, false) {
		close(g.arrived)
		<-g.open
	}
	return g.next.Decide(ctx, now, layers, out)
}

// TestLapseAsksStoreOnce: once an entry's MaxTTL has passed while its
// denial still holds, the first decision asks the store and the others,
// while it is on its way, are answered from the entry: one store call per
// lapse, where every decision in flight used to go (an outside walk
// counted 50–60 per lapse at 64 callers flooding one identity). The
// store's denial renews the entry; after a reset made outside the cache,
// the store's admission of the next asker drops it.
func TestLapseAsksStoreOnce(t *testing.T) {
	ctx := context.Background()
	mem := newMem(t)
	g := &gated{next: mem, arrived: make(chan struct{}), open: make(chan struct{})}
	l, c, cnt := cached(t, g, Options{MaxTTL: time.Second})
	p := mustPolicy(t, floodgate.Policy{Name: "api", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Hour})
	overLimit(t, l, p)
	g.armed.Store(true)
	lapsed := t0.Add(1500 * time.Millisecond)
	asker := make(chan floodgate.Result)
	go func() {
		r, _ := l.AllowAt(ctx, lapsed, p, "u", 1)
		asker <- r
	}()
	<-g.arrived // the asker is at the store, held there
	before, saved := cnt.calls.Load(), c.Saved()
	for range 50 {
		if r, err := l.AllowAt(ctx, lapsed, p, "u", 1); err != nil || r.Allowed || r.RetryAfter != time.Hour-1500*time.Millisecond {
			t.Fatalf("while the asker is at the store: %+v, %v; want the cached denial", r, err)
		}
	}
	if calls := cnt.calls.Load() - before; calls != 0 || c.Saved()-saved != 50 {
		t.Fatalf("50 decisions while the asker is at the store: %d store calls, %d answered from the cache; want 0 and 50", calls, c.Saved()-saved)
	}
	close(g.open)
	if r := <-asker; r.Allowed {
		t.Fatalf("the asker: %+v; want denied", r)
	}

	// A reset outside the cache: seen by the next asker after MaxTTL.
	mem.Reset(l.Key(p, "u"))
	later := lapsed.Add(500 * time.Millisecond)
	if r, _ := l.AllowAt(ctx, later, p, "u", 1); r.Allowed {
		t.Fatalf("within MaxTTL of the renewal: %+v; want the cached denial", r)
	}
	later = lapsed.Add(1100 * time.Millisecond)
	before = cnt.calls.Load()
	if r, _ := l.AllowAt(ctx, later, p, "u", 1); !r.Allowed || cnt.calls.Load()-before != 1 {
		t.Fatalf("after MaxTTL and the reset: %+v with %d store calls; want admitted by the store", r, cnt.calls.Load()-before)
	}
	if c.Len() != 0 {
		t.Errorf("%d entries after the store admitted the key, want 0", c.Len())
	}
}

// TestOtherCostAsksStore: a limited denial answers only the cost it was
// given for: a larger cost, which would be denied too, can need a longer
// wait, so the store answers it. A review saw a token bucket's cost of 8
// told the wait of a cost of 1 (10 s, where the store said 80 s), after a
// denied cost of 1 or a denied peek replaced the entry. A peek's denial
// is learnt as a cost of 1.
func TestOtherCostAsksStore(t *testing.T) {
	p := mustPolicy(t, floodgate.Policy{Name: "tb", Algorithm: floodgate.TokenBucket, Limit: 10, Window: 100 * time.Second})
	l, _, cnt := cached(t, newMem(t), Options{MaxTTL: time.Hour})
	now := t0
	step := twinStep(t, l, cnt, p, &now)
	step(10, true, 1) // the bucket is empty
	now = now.Add(time.Second)
	step(1, false, 1) // denied: learnt
	step(1, false, 0)
	step(8, false, 1) // a longer wait than a cost of 1's: the store's
	step(8, false, 0)
	step(0, false, 1) // a peek: denied, learnt as a cost of 1
	step(1, false, 0)
	step(8, false, 1)
}

// heldAfter holds the answer of the first decision after armed, once the
// wrapped store has decided it, until open is closed.
type heldAfter struct {
	next    floodgate.Store
	armed   atomic.Bool
	decided chan struct{}
	open    chan struct{}
}

func (h *heldAfter) Decide(ctx context.Context, now int64, layers []floodgate.Layer, out []floodgate.Result) error {
	held := h.armed.CompareAndSwap(true, false)
	err := h.next.Decide(ctx, now, layers, out)
	if held {
		close(h.decided)
		<-h.open
	}
	return err
}

// TestDenialBeforeAdmissionNotLearnt: a denial the store gave before an
// admission of the same key, answered after that admission was learnt
// (concurrent requests), is not cached: its Remaining and RetryAfter are
// the state before the admission. A review saw 3 of 40 such pairs leave a
// cached Remaining of 3 where the store said 2.
func TestDenialBeforeAdmissionNotLearnt(t *testing.T) {
	ctx := context.Background()
	h := &heldAfter{next: newMem(t), decided: make(chan struct{}), open: make(chan struct{})}
	l, c, cnt := cached(t, h, Options{MaxTTL: time.Hour})
	p := mustPolicy(t, floodgate.Policy{Name: "fw", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Hour})
	if r, err := l.AllowAt(ctx, t0, p, "u", 7); err != nil || !r.Allowed {
		t.Fatalf("cost 7: %+v, %v", r, err)
	}
	h.armed.Store(true)
	first := make(chan floodgate.Result)
	go func() {
		r, _ := l.AllowAt(ctx, t0, p, "u", 5)
		first <- r
	}()
	<-h.decided // the store denied the cost of 5 (3 left); its answer is held
	if r, err := l.AllowAt(ctx, t0, p, "u", 1); err != nil || !r.Allowed || r.Remaining != 2 {
		t.Fatalf("cost 1 meanwhile: %+v, %v; want admitted, 2 left", r, err)
	}
	close(h.open)
	if r := <-first; r.Allowed || r.Remaining != 3 {
		t.Fatalf("the held cost of 5: %+v; want denied, 3 left then", r)
	}
	if c.Len() != 0 {
		t.Errorf("%d entries: the denial from before the admission was cached", c.Len())
	}
	before := cnt.calls.Load()
	if r, _ := l.AllowAt(ctx, t0, p, "u", 5); r.Allowed || r.Remaining != 2 || cnt.calls.Load()-before != 1 {
		t.Fatalf("cost 5 again: %+v with %d store calls; want the store's denial, 2 left", r, cnt.calls.Load()-before)
	}
}

// failing fails its decisions with err while err is set; with apply, it
// decides them first (a reply lost after the store applied it).
type failing struct {
	next  floodgate.Store
	err   atomic.Pointer[error]
	apply atomic.Bool
}

func (f *failing) Decide(ctx context.Context, now int64, layers []floodgate.Layer, out []floodgate.Result) error {
	if e := f.err.Load(); e != nil {
		if f.apply.Load() {
			if err := f.next.Decide(ctx, now, layers, out); err != nil {
				return err
			}
		}
		return *e
	}
	return f.next.Decide(ctx, now, layers, out)
}

// overLimit sends u's three requests of cost 1 at t0 under p, a limit
// of 2: two admitted, the third denied (and cached).
func overLimit(t *testing.T, l *floodgate.Limiter, p floodgate.Policy) {
	t.Helper()
	for i := range 3 {
		if r, err := l.AllowAt(context.Background(), t0, p, "u", 1); err != nil || r.Allowed != (i < 2) {
			t.Fatalf("request %d: %+v, %v", i+1, r, err)
		}
	}
}

// overFailing returns a limiter over a cache (MaxTTL 1s) over st, for
// behind "error", or over a fallback store in ModeOpen whose primary is
// st (which the cache must see, to tell its failure modes' decisions),
// for behind "fallback"; the count is of the decisions that reach st.
func overFailing(t *testing.T, behind string, st floodgate.Store) (*floodgate.Limiter, *Store, *counting) {
	t.Helper()
	if behind != "fallback" {
		return cached(t, st, Options{MaxTTL: time.Second})
	}
	cnt := &counting{next: st}
	fb, err := fallback.New(cnt, newMem(t), fallback.Options{Budget: 5 * time.Second, DefaultMode: fallback.ModeOpen,
		Breaker: fallback.BreakerOptions{FailureThreshold: 1_000_000, FailureRate: -1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fb.Close)
	c, err := New(fb, Options{MaxTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(c, floodgate.Options{Prefix: "dc"})
	if err != nil {
		t.Fatal(err)
	}
	return l, c, cnt
}

// TestFailedAskerLapsesEntry: the decision that renews an entry due at
// its MaxTTL (the asker) and gets no answer from the store (an error, or
// a failure mode's decision behind a fallback) leaves the entry lapsed,
// so that the next decision asks the store: a reset made meanwhile is
// seen at once when the store is back. A review saw the entry answer a
// whole MaxTTL more after one failed asker, and for the whole of an
// outage behind a fallback (90 of 100 decisions denied from the cache
// where ModeOpen admits).
func TestFailedAskerLapsesEntry(t *testing.T) {
	ctx := context.Background()
	p := mustPolicy(t, floodgate.Policy{Name: "fw", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Hour})
	for _, behind := range []string{"error", "fallback"} {
		t.Run(behind, func(t *testing.T) {
			mem := newMem(t)
			f := &failing{next: mem}
			l, c, cnt := overFailing(t, behind, f)
			overLimit(t, l, p)
			mem.Reset(l.Key(p, "u"))
			down := floodgate.ErrStoreUnavailable
			f.err.Store(&down)
			r, err := l.AllowAt(ctx, t0.Add(1500*time.Millisecond), p, "u", 1) // the asker
			if behind == "error" && err == nil || behind == "fallback" && (err != nil || !r.Allowed) {
				t.Fatalf("the asker with the store down: %+v, %v", r, err)
			}
			f.err.Store(nil)
			before := cnt.calls.Load()
			if r, err := l.AllowAt(ctx, t0.Add(1600*time.Millisecond), p, "u", 1); err != nil || !r.Allowed || cnt.calls.Load()-before != 1 {
				t.Fatalf("the store back, after the reset: %+v, %v with %d store calls; want its admission", r, err, cnt.calls.Load()-before)
			}
			if c.Len() != 0 {
				t.Errorf("%d entries after the store admitted the key", c.Len())
			}
		})
	}
}

// TestIndeterminateAdmissionDropsEntry: a decision the store applied but
// whose answer was lost (ErrIndeterminate) may have admitted its cost: it
// drops its keys' entries as an admission does, whose Remaining would
// otherwise stay untrue (a review: a cached Remaining of 3 where the store
// said 1).
func TestIndeterminateAdmissionDropsEntry(t *testing.T) {
	ctx := context.Background()
	p := mustPolicy(t, floodgate.Policy{Name: "fw", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Hour})
	f := &failing{next: newMem(t)}
	l, c, cnt := cached(t, f, Options{MaxTTL: time.Hour})
	l.AllowAt(ctx, t0, p, "u", 7)
	if r, _ := l.AllowAt(ctx, t0, p, "u", 5); r.Allowed || c.Len() != 1 {
		t.Fatalf("cost 5: %+v, %d entries; want denied and cached", r, c.Len())
	}
	lost := fmt.Errorf("%w: reply lost", floodgate.ErrIndeterminate)
	f.err.Store(&lost)
	f.apply.Store(true)
	if _, err := l.AllowAt(ctx, t0, p, "u", 2); !errors.Is(err, floodgate.ErrIndeterminate) {
		t.Fatalf("cost 2 with its reply lost: %v", err)
	}
	f.err.Store(nil)
	before := cnt.calls.Load()
	if r, _ := l.AllowAt(ctx, t0, p, "u", 5); r.Allowed || r.Remaining != 1 || cnt.calls.Load()-before != 1 {
		t.Fatalf("cost 5 again: %+v with %d store calls; want the store's denial, 1 left", r, cnt.calls.Load()-before)
	}
}

// holding holds the next decision it is told to (hold), signalling
// entered and waiting for release, before passing it on.
type holding struct {
	next    floodgate.Store
	hold    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (h *holding) Decide(ctx context.Context, now int64, layers []floodgate.Layer, out []floodgate.Result) error {
	if h.hold.CompareAndSwap(true, false) {
		h.entered <- struct{}{}
		<-h.release
	}
	return h.next.Decide(ctx, now, layers, out)
}

// besideHeld has h hold the store call of u's decision at t0+1.6s (the
// asker, whose answer asker checks) and returns the answer of u's
// decision at t0+1.7s taken meanwhile, with the store calls it made.
func besideHeld(t *testing.T, l *floodgate.Limiter, p floodgate.Policy, h *holding, cnt *counting, asker func(floodgate.Result, error)) (floodgate.Result, int64, error) {
	t.Helper()
	ctx := context.Background()
	h.hold.Store(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		asker(l.AllowAt(ctx, t0.Add(1600*time.Millisecond), p, "u", 1))
	}()
	<-h.entered
	before := cnt.calls.Load()
	r, err := l.AllowAt(ctx, t0.Add(1700*time.Millisecond), p, "u", 1)
	calls := cnt.calls.Load() - before
	close(h.release)
	<-done
	return r, calls, err
}

// TestFailingEntryNotRenewed: once an asker of a lapsed entry got no
// answer from the store, the next asker does not renew the entry for the
// decisions beside it: while the store stays down each of them asks it
// (and gets its error, or the fallback's degraded decision), none is
// answered from the cache, until the store answers one. An outside walk
// saw each failed asker's successor renew the entry through a Cluster
// primary's 8 s outage, 1-2 % of the flooded identity's checks answered
// from the cache, not degraded, at a 200 ms MaxTTL.
func TestFailingEntryNotRenewed(t *testing.T) {
	ctx := context.Background()
	p := mustPolicy(t, floodgate.Policy{Name: "fw", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Hour})
	for _, behind := range []string{"error", "fallback"} {
		t.Run(behind, func(t *testing.T) {
			f := &failing{next: newMem(t)}
			h := &holding{next: f, entered: make(chan struct{}), release: make(chan struct{})}
			l, c, cnt := overFailing(t, behind, h)
			// fromStore says whether a decision reached the store: an
			// error, or the fallback's degraded admission, and not the
			// cache's denial.
			fromStore := func(r floodgate.Result, err error) bool {
				if behind == "error" {
					return err != nil
				}
				return err == nil && r.Allowed
			}
			overLimit(t, l, p)
			down := floodgate.ErrStoreUnavailable
			f.err.Store(&down)
			if r, err := l.AllowAt(ctx, t0.Add(1500*time.Millisecond), p, "u", 1); !fromStore(r, err) {
				t.Fatalf("the first asker with the store down: %+v, %v; want the store's failure", r, err)
			}
			r, calls, err := besideHeld(t, l, p, h, cnt, func(r floodgate.Result, err error) {
				if !fromStore(r, err) {
					t.Errorf("the second asker, held: %+v, %v; want the store's failure", r, err)
				}
			})
			if !fromStore(r, err) || calls != 1 {
				t.Fatalf("a decision beside the held asker: %+v, %v with %d store calls; want it to ask the store, not the cache", r, err, calls)
			}
			f.err.Store(nil)
			if r, err := l.AllowAt(ctx, t0.Add(1800*time.Millisecond), p, "u", 1); err != nil || r.Allowed {
				t.Fatalf("the store back: %+v, %v; want its denial", r, err)
			}
			before := cnt.calls.Load()
			if r, err := l.AllowAt(ctx, t0.Add(1900*time.Millisecond), p, "u", 1); err != nil || r.Allowed || cnt.calls.Load() != before || c.Len() != 1 {
				t.Fatalf("after the store's denial: %+v, %v with %d store calls, %d entries; want the cache's answer again", r, err, cnt.calls.Load()-before, c.Len())
			}
		})
	}
}

// TestEvicted: Evicted counts the entries evicted while they still
// answered, not those evicted after their MaxTTL.
func TestEvicted(t *testing.T) {
	ctx := context.Background()
	l, c, _ := cached(t, newMem(t), Options{MaxEntries: 1, Shards: 1, MaxTTL: time.Second})
	p := mustPolicy(t, floodgate.Policy{Name: "api", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Hour})
	deny := func(at time.Time, id string) {
		t.Helper()
		l.AllowAt(ctx, at, p, id, 1)
		if r, err := l.AllowAt(ctx, at, p, id, 1); err != nil || r.Allowed {
			t.Fatalf("%s's second request: %+v, %v; want denied", id, r, err)
		}
	}
	deny(t0, "a")
	if c.Evicted() != 0 {
		t.Fatalf("Evicted() = %d with one entry, want 0", c.Evicted())
	}
	deny(t0.Add(500*time.Millisecond), "b") // a still answers: evicted
	if c.Evicted() != 1 || c.Len() != 1 {
		t.Fatalf("Evicted() = %d, Len() = %d after b, want 1 and 1", c.Evicted(), c.Len())
	}
	deny(t0.Add(2*time.Second), "c") // b past its MaxTTL: not counted
	if c.Evicted() != 1 {
		t.Fatalf("Evicted() = %d after c, want still 1", c.Evicted())
	}
}

// TestCancelledAskerLetsNextRenew: an asker whose own caller cancelled it
// (an error wrapping context.Canceled: the store was not at fault) lapses
// the entry without marking it failing: the next asker renews it, and the
// decisions beside that one are answered from the cache. A review saw a
// cancelled asker send the 11 decisions in flight after it to the store,
// where 1 went before.
func TestCancelledAskerLetsNextRenew(t *testing.T) {
	ctx := context.Background()
	p := mustPolicy(t, floodgate.Policy{Name: "fw", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Hour})
	f := &failing{next: newMem(t)}
	h := &holding{next: f, entered: make(chan struct{}), release: make(chan struct{})}
	l, _, cnt := cached(t, h, Options{MaxTTL: time.Second})
	overLimit(t, l, p)
	gone := fmt.Errorf("%w: %w", floodgate.ErrStoreUnavailable, context.Canceled)
	f.err.Store(&gone)
	if _, err := l.AllowAt(ctx, t0.Add(1500*time.Millisecond), p, "u", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled asker: %v", err)
	}
	f.err.Store(nil)
	r, calls, err := besideHeld(t, l, p, h, cnt, func(r floodgate.Result, err error) {
		if err != nil || r.Allowed {
			t.Errorf("the next asker: %+v, %v; want the store's denial", r, err)
		}
	})
	if err != nil || r.Allowed || calls != 0 {
		t.Fatalf("a decision beside the next asker: %+v, %v with %d store calls; want the cache's denial", r, err, calls)
	}
}
