package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/vectors"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/redis/go-redis/v9"
)

// newSplitEnv returns an env on a private standalone Redis whose Store
// splits calls by slot (SlotCheckOn), exactly as it does on a cluster.
func newSplitEnv(t *testing.T) (*env, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	c := srv.Client(t)
	return newEnvOn(t, c, []*redis.Client{c}, Options{SlotCheck: SlotCheckOn}), srv
}

// allLayered lists every algorithm, Quota included.
var allLayered = []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingLog, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA, floodgate.Quota}

// layered returns a policy of algorithm a with the given limit per hour
// (per calendar day for Quota).
func layered(t testing.TB, name string, a floodgate.Algorithm, limit int64) floodgate.Policy {
	t.Helper()
	p := floodgate.Policy{Name: name + "-" + a.String(), Algorithm: a, Limit: limit, Window: time.Hour}
	if a == floodgate.Quota {
		p.Window, p.Calendar = 0, floodgate.Calendar{Unit: floodgate.PeriodDay}
	}
	return mustPolicy(t, p)
}

// layerAt returns the layer of identity under p for a decision at now.
func (e *env) layerAt(p floodgate.Policy, identity string, now, cost int64) floodgate.Layer {
	return floodgate.Layer{Policy: p, Key: algo.KeyAt(e.prefix, p, identity, now), Cost: cost}
}

// withCost returns l with another cost.
func withCost(l floodgate.Layer, cost int64) floodgate.Layer {
	l.Cost = cost
	return l
}

// peek returns a layer's standing at now (a decision of cost 0).
func (e *env) peek(t testing.TB, now int64, l floodgate.Layer) floodgate.Result {
	t.Helper()
	l.Cost = 0
	r, err := e.one(context.Background(), now, l.Policy, l.Key, 0)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// apart returns identities a and b (derived from the given names) whose
// keys under pa and pb are in different Redis Cluster slots.
func (e *env) apart(t testing.TB, pa, pb floodgate.Policy, a, b string, now int64) (string, string) {
	t.Helper()
	for i := range 100 {
		ia, ib := a, fmt.Sprintf("%s%d", b, i)
		if Slot(e.layerAt(pa, ia, now, 0).Key) != Slot(e.layerAt(pb, ib, now, 0).Key) {
			return ia, ib
		}
	}
	t.Fatal("no identities in different slots")
	return "", ""
}

// mirror decides the same layers on e and on a memstore, and fails unless
// both give identical results; it returns e's.
type mirror struct {
	e   *env
	mem *memstore.Store
}

func newMirror(t testing.TB, e *env) *mirror {
	t.Helper()
	m, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &mirror{e: e, mem: m}
}

func (m *mirror) decide(t testing.TB, now int64, layers ...floodgate.Layer) []floodgate.Result {
	t.Helper()
	got, err := m.e.decide(context.Background(), now, layers)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]floodgate.Result, len(layers))
	if err := m.mem.Decide(context.Background(), now, layers, want); err != nil {
		t.Fatal(err)
	}
	if !sameResults(got, want) {
		t.Fatalf("layers %v at %d:\n redis %+v\nmemory %+v", keysOf(layers), now, got, want)
	}
	return got
}

// both decides the same layers on e and on the memstore without comparing
// (while e holds a reservation the memstore does not know of).
func (m *mirror) both(t testing.TB, now int64, layers ...floodgate.Layer) {
	t.Helper()
	if _, err := m.e.decide(context.Background(), now, layers); err != nil {
		t.Fatal(err)
	}
	if err := m.mem.Decide(context.Background(), now, layers, make([]floodgate.Result, len(layers))); err != nil {
		t.Fatal(err)
	}
}

// get returns the value of key ("" when there is none).
func (e *env) get(t testing.TB, key string) string {
	t.Helper()
	v, err := e.rd.Get(context.Background(), key).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("GET %q: %v", key, err)
	}
	return v
}

func keysOf(layers []floodgate.Layer) []string {
	var ks []string
	for _, l := range layers {
		ks = append(ks, fmt.Sprintf("%s×%d", l.Key, l.Cost))
	}
	return ks
}

// testSplitAllOrNothing checks, for every pair of algorithms with the two
// layers in different slots, that a layer denying a request leaves the
// other layer exactly where it was (its standing, reported in the denied
// decision and seen by a later peek, is unchanged), and that every result
// is the in-memory store's.
func testSplitAllOrNothing(t *testing.T, e *env) {
	now := vectors.T0.Add(10 * time.Hour).UnixMicro()
	for _, ua := range allLayered {
		for _, ga := range allLayered {
			t.Run(ua.String()+"+"+ga.String(), func(t *testing.T) {
				m := newMirror(t, e)
				user := layered(t, "user", ua, 5)
				global := layered(t, "global", ga, 100)
				u, g := e.apart(t, user, global, "u1-"+ga.String(), "all-"+ua.String(), now)
				ul, gl := e.layerAt(user, u, now, 1), e.layerAt(global, g, now, 1)
				for i := range 5 {
					if out := m.decide(t, now, ul, gl); !out[0].Allowed || !out[1].Allowed {
						t.Fatalf("request %d: %+v", i, out)
					}
				}
				// The user layer denies: the global one reports, and keeps,
				// 95 remaining.
				out := m.decide(t, now, ul, gl)
				if out[0].Allowed || out[0].Reason != floodgate.ReasonLimited || !out[1].Allowed || out[1].Remaining != 95 {
					t.Fatalf("6th request: %+v; want the user layer limited and the global one standing at 95", out)
				}
				if r := e.peek(t, now, gl); r.Remaining != 95 {
					t.Fatalf("global layer after the denial: %+v, want 95 remaining", r)
				}
				m.decide(t, now, withCost(ul, 0), withCost(gl, 0))

				// The global layer denies a cost of 3 (2 left after the user
				// took 98 elsewhere): the user layer keeps its 5.
				u2 := u + "-b"
				ul2 := e.layerAt(user, u2, now, 3)
				big := e.layerAt(global, g, now, 93)
				m.decide(t, now, big)
				out = m.decide(t, now, ul2, withCost(gl, 3))
				if !out[0].Allowed || out[0].Remaining != 5 || out[1].Allowed {
					t.Fatalf("global denial: %+v; want the user layer standing at 5 and the global one denying", out)
				}
				if r := e.peek(t, now, ul2); r.Remaining != 5 {
					t.Fatalf("user layer after the denial: %+v, want 5 remaining", r)
				}
				m.decide(t, now, withCost(ul2, 0), withCost(gl, 0))
			})
		}
	}
}

// testSplitDifferential runs random layered decisions over identities in
// several slots, with time moving forward, through the store and through
// the model (algo.Step, all-or-nothing, standings): every result must
// be identical. Sequential decisions mean every release finds its layers as
// the reservation left them, and gives back exactly what it took.
func testSplitDifferential(t *testing.T, e *env, seed uint64) {
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 77))
	m := newModel()
	var ps []floodgate.Policy
	for i := range 8 {
		a := floodgate.Algorithm(1 + i%6)
		if a == floodgate.Quota {
			ps = append(ps, mustPolicy(t, floodgate.Policy{Name: fmt.Sprintf("dq%d", i), Algorithm: a, Limit: 1 + r.Int64N(40), Calendar: floodgate.Calendar{Unit: floodgate.PeriodDay}}))
			continue
		}
		ps = append(ps, randPolicy(t, r, a, 20+i))
	}
	ids := []string{"global", "alice", "bob", "carol"}
	now := vectors.T0.UnixMicro()
	split := 0
	for n := range 400 {
		now = max(now, nextTime(r, ps[r.IntN(5)], now)) // ps[5] is the quota
		type pick struct {
			p  floodgate.Policy
			id string
		}
		k := 1 + r.IntN(4)
		var picks []pick
		seen := map[pick]bool{}
		for len(picks) < k {
			pk := pick{ps[r.IntN(len(ps))], ids[r.IntN(len(ids))]}
			if !seen[pk] {
				seen[pk] = true
				picks = append(picks, pk)
				now = max(now, m.earliest(e.layerAt(pk.p, pk.id, now, 0).Key))
			}
		}
		layers := make([]floodgate.Layer, k)
		for i, pk := range picks { // a quota's key names the period of now
			layers[i] = e.layerAt(pk.p, pk.id, now, randCost(r, pk.p))
		}
		var g slotGroups
		if g.split(layers) {
			split++
		}
		want := m.decide(now, layers)
		got, err := e.decide(context.Background(), now, layers)
		if err != nil {
			t.Fatalf("seed %d, decision %d: %v", seed, n, err)
		}
		if !sameResults(got, want) {
			t.Fatalf("seed %d, decision %d at %d, layers %v:\n got %+v\nwant %+v", seed, n, now, keysOf(layers), got, want)
		}
	}
	if split < 100 {
		t.Fatalf("only %d of 400 decisions spanned several slots", split)
	}
	t.Logf("%d of 400 decisions spanned several slots", split)
}

// TestSplit runs the layered tests on a standalone Redis with the slot
// check on, so that every decision whose keys span slots is split exactly
// as on a cluster.
func TestSplit(t *testing.T) {
	e, srv := newSplitEnv(t)
	t.Run("all-or-nothing", func(t *testing.T) { testSplitAllOrNothing(t, e) })
	t.Run("differential", func(t *testing.T) { testSplitDifferential(t, e, uint64(time.Now().UnixNano())) })
	t.Run("release", func(t *testing.T) { testRelease(t, e) })
	t.Run("text states", func(t *testing.T) {
		c := srv.Client(t)
		et := newEnvOn(t, c, []*redis.Client{c}, Options{SlotCheck: SlotCheckOn, StateFormat: TextState})
		t.Run("differential", func(t *testing.T) { testSplitDifferential(t, et, uint64(time.Now().UnixNano())) })
		t.Run("release", func(t *testing.T) { testRelease(t, et) })
	})
	// TestCluster runs the fan-in for every algorithm; here one window and
	// one bucket.
	t.Run("fan-in", func(t *testing.T) { testFanIn(t, e, floodgate.FixedWindow, floodgate.GCRA) })
}

// TestSplitRoundTrips counts scripts: a split decision reserves its parts
// but the last (the global layer, here: it admits more per second), then
// the last. One that admits runs one script per slot and nothing more;
// one that a part other than the last denies runs, besides its reserves,
// a probe of the last part (its results) and a release of every part that
// had committed; one that the last part denies adds a release of every
// other part that had committed.
func TestSplitRoundTrips(t *testing.T) {
	e, _ := newSplitEnv(t)
	c := e.nodes[0]
	ctx := context.Background()
	now := vectors.T0.UnixMicro()
	user := layered(t, "user", floodgate.FixedWindow, 1)
	global := layered(t, "global", floodgate.GCRA, 10)
	u, g := e.apart(t, user, global, "u", "g", now)
	layers := []floodgate.Layer{e.layerAt(user, u, now, 1), e.layerAt(global, g, now, 1)}
	if _, err := e.decide(ctx, now, layers); err != nil { // loads the script
		t.Fatal(err)
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	other := func(name string) floodgate.Layer {
		t.Helper()
		l := layers[0]
		l.Key = e.layerAt(user, name, now, 1).Key
		if Slot(l.Key) == Slot(layers[1].Key) {
			t.Skip("identities happen to share a slot")
		}
		return l
	}
	out, err := e.decide(ctx, now, []floodgate.Layer{other(u + "x"), layers[1]})
	if err != nil || !out[0].Allowed || !out[1].Allowed {
		t.Fatalf("admitted decision: %+v, %v", out, err)
	}
	if got := commandCalls(t, c, "evalsha"); got != 2 {
		t.Fatalf("an admitted split decision ran %d scripts, want 2 (one per slot)", got)
	}
	out, err = e.decide(ctx, now, layers) // the user layer denies
	if err != nil || out[0].Allowed || !out[1].Allowed || out[1].Remaining != 8 {
		t.Fatalf("denied decision: %+v, %v", out, err)
	}
	if got := commandCalls(t, c, "evalsha"); got != 4 {
		t.Fatalf("after a split decision denied by its first part %d scripts ran, want 4 (a reserve and a probe)", got)
	}
	l := layers[1]
	l.Cost = 9                                                          // the global layer (8 left) denies
	out, err = e.decide(ctx, now, []floodgate.Layer{other(u + "y"), l}) // a fresh user
	if err != nil || !out[0].Allowed || out[0].Remaining != 1 || out[1].Allowed || out[1].Remaining != 8 {
		t.Fatalf("decision denied by the last part: %+v, %v", out, err)
	}
	if got := commandCalls(t, c, "evalsha"); got != 7 {
		t.Fatalf("after a split decision denied by its last part %d scripts ran, want 7 (two reserves, one release)", got)
	}
	if got := e.peek(t, now, other(u+"y")); got.Remaining != 1 {
		t.Fatalf("the user layer after the release: %+v, want all of it back", got)
	}
}

// TestSplitConcurrent: with Options.Split = SplitConcurrent every part is
// reserved at once: an admitted split decision runs one script per slot,
// one a part denies adds a release of the part that committed (no probe),
// and that part is given back in full. An unknown Split is refused.
func TestSplitConcurrent(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	e := newEnvOn(t, c, []*redis.Client{c}, Options{SlotCheck: SlotCheckOn, Split: SplitConcurrent})
	if _, err := New(c, Options{Split: SplitConcurrent + 1}); err == nil {
		t.Fatal("New accepted an unknown Split")
	}
	ctx := context.Background()
	now := vectors.T0.UnixMicro()
	user := layered(t, "user", floodgate.FixedWindow, 1)
	global := layered(t, "global", floodgate.GCRA, 10)
	u, g := e.apart(t, user, global, "u", "g", now)
	layers := []floodgate.Layer{e.layerAt(user, u, now, 1), e.layerAt(global, g, now, 1)}
	if _, err := e.decide(ctx, now, layers); err != nil { // loads the script; the user layer is full now
		t.Fatal(err)
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	out, err := e.decide(ctx, now, layers) // the user layer denies
	if err != nil || out[0].Allowed || !out[1].Allowed || out[1].Remaining != 9 {
		t.Fatalf("denied decision: %+v, %v", out, err)
	}
	if got := commandCalls(t, c, "evalsha"); got != 3 {
		t.Fatalf("a denied split decision ran %d scripts, want 3 (two reserves at once, one release)", got)
	}
	if got := e.peek(t, now, layers[1]); got.Remaining != 9 {
		t.Fatalf("the global layer after the release: %+v, want 9 left", got)
	}
}

// TestProbeWritesNothing: the probe of a part not reserved reports what a
// decision would (a denial where the layer denies, the standing where it
// would admit) and writes nothing, for every algorithm.
func TestProbeWritesNothing(t *testing.T) {
	e, _ := newSplitEnv(t)
	now := vectors.T0.Add(2 * time.Hour).UnixMicro()
	for _, a := range allLayered {
		t.Run(a.String(), func(t *testing.T) {
			p := layered(t, "probe", a, 10)
			fresh, used := e.layerAt(p, "fresh", now, 4), e.layerAt(p, "used", now, 4)
			if r, err := e.one(context.Background(), now, p, used.Key, 8); err != nil || !r.Allowed {
				t.Fatalf("preset: %+v, %v", r, err)
			}
			before := e.rd.Dump(context.Background(), used.Key).Val()
			pt := &part{slot: Slot(fresh.Key), layers: []floodgate.Layer{fresh, withCost(fresh, 11), used}}
			e.store.probe(context.Background(), now, pt)
			if pt.err != nil {
				t.Fatal(pt.err)
			}
			if r := pt.out[0]; !r.Allowed || r.Remaining != 10 {
				t.Errorf("fresh layer: %+v, want its standing (admitted, 10 left)", r)
			}
			if r := pt.out[1]; r.Allowed || r.Reason != floodgate.ReasonCostExceedsLimit {
				t.Errorf("cost above the limit: %+v, want a denial", r)
			}
			if r := pt.out[2]; r.Allowed || r.Reason != floodgate.ReasonLimited || r.Remaining != 2 {
				t.Errorf("used layer: %+v, want a denial with 2 left", r)
			}
			if n := e.rd.Exists(context.Background(), fresh.Key).Val(); n != 0 {
				t.Errorf("the probe created %s", fresh.Key)
			}
			if after := e.rd.Dump(context.Background(), used.Key).Val(); after != before || before == "" {
				t.Errorf("the probe changed %s (or it was never written): %q, was %q", used.Key, after, before)
			}
		})
	}
}

// TestSplitErrors checks what a split decision returns when one slot's
// part fails: ErrStoreUnavailable when nothing is kept (the other part was
// released), ErrIndeterminate when a part may be kept.
func TestSplitErrors(t *testing.T) {
	e, srv := newSplitEnv(t)
	c := e.nodes[0]
	ctx := context.Background()
	now := vectors.T0.UnixMicro()
	user := layered(t, "user", floodgate.FixedWindow, 10)
	global := layered(t, "global", floodgate.TokenBucket, 10)

	t.Run("unavailable", func(t *testing.T) {
		u, g := e.apart(t, user, global, "foreign", "g", now)
		ul, gl := e.layerAt(user, u, now, 2), e.layerAt(global, g, now, 2)
		if err := c.Set(ctx, ul.Key, "not a state", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Del(context.Background(), ul.Key) })
		_, err := e.decide(ctx, now, []floodgate.Layer{ul, gl})
		if !errors.Is(err, floodgate.ErrStoreUnavailable) || errors.Is(err, floodgate.ErrIndeterminate) {
			t.Fatalf("got %v, want ErrStoreUnavailable only", err)
		}
		if r := e.peek(t, now, gl); r.Remaining != 10 {
			t.Fatalf("the global part was not given back: %+v", r)
		}
	})

	t.Run("indeterminate", func(t *testing.T) {
		px := startCuttingProxy(t, srv.Addr)
		pc := redis.NewClient(&redis.Options{Addr: px.ln.Addr().String(), ContextTimeoutEnabled: true})
		defer pc.Close()
		s, err := New(pc, Options{SlotCheck: SlotCheckOn})
		if err != nil {
			t.Fatal(err)
		}
		u, g := e.apart(t, user, global, "cut", "g-cut", now)
		ul, gl := e.layerAt(user, u, now, 2), e.layerAt(global, g, now, 2)
		e.decide(ctx, now, []floodgate.Layer{withCost(ul, 0)}) // loads the script, records the keys
		e.decide(ctx, now, []floodgate.Layer{withCost(gl, 0)})
		px.armed.Store(true)
		err = s.Decide(ctx, now, []floodgate.Layer{ul, gl}, make([]floodgate.Result, 2))
		if px.cuts.Load() != 1 {
			t.Fatalf("the proxy cut %d connections, want 1", px.cuts.Load())
		}
		if !errors.Is(err, floodgate.ErrIndeterminate) {
			t.Fatalf("got %v, want ErrIndeterminate", err)
		}
		// The part whose reply was cut ran and keeps its reservation; the
		// other was given back.
		ru, rg := e.peek(t, now, ul), e.peek(t, now, gl)
		if (ru.Remaining == 8) == (rg.Remaining == 8) || ru.Remaining+rg.Remaining != 18 {
			t.Fatalf("user %+v, global %+v: want exactly one layer holding 2", ru, rg)
		}
	})

	t.Run("no slot for a marker", func(t *testing.T) {
		a := floodgate.Layer{Policy: user, Key: e.prefix + ":tagless}a", Cost: 1}
		b := floodgate.Layer{Policy: user, Key: e.prefix + ":tagless}b", Cost: 1}
		for i := 0; Slot(a.Key) == Slot(b.Key); i++ {
			b.Key = fmt.Sprintf("%s:tagless}b%d", e.prefix, i)
		}
		_, err := e.decide(ctx, now, []floodgate.Layer{a, b})
		if !errors.Is(err, floodgate.ErrInvalidKey) {
			t.Fatalf("got %v, want ErrInvalidKey", err)
		}
		if n := c.Exists(ctx, a.Key, b.Key).Val(); n != 0 {
			t.Fatalf("%d keys written by a refused decision", n)
		}
	})
}

func TestMarkerKey(t *testing.T) {
	for _, key := range []string{"fg:api:sw:{ruser}", "plain", "a{b", "x{y}{z}"} {
		m, err := markerKey(key, 0xbeef)
		if err != nil || Slot(m) != Slot(key) {
			t.Errorf("markerKey(%q) = %q, %v (slot %d, key slot %d)", key, m, err, Slot(m), Slot(key))
		}
	}
	if m, _ := markerKey("fg:api:sw:{ruser}", 0xbeef); m != "fg:api:sw:{ruser}:rel:beef" {
		t.Errorf("marker %q keeps neither the key's prefix nor its tag", m)
	}
	for _, key := range []string{"a}b", "{}x", "x{}y{z}"} { // no hash tag, and a '}'
		if _, err := markerKey(key, 1); !errors.Is(err, floodgate.ErrInvalidKey) {
			t.Errorf("markerKey(%q): %v, want ErrInvalidKey", key, err)
		}
	}
}

// TestSplitReleaseFailureCounted: a split decision that another part
// denies releases the part it reserved; when that release fails (here:
// its connection cut before the reply, so whether it gave back is not
// known), the request is denied all the same, with no error, and the
// part may keep its reservation: nothing but the Store's count
// (ReleaseFailures) and its report (Options.OnReleaseFailure), once per
// failed part, says so. A release that works counts nothing.
func TestSplitReleaseFailureCounted(t *testing.T) {
	e, srv := newSplitEnv(t)
	px := startCuttingProxy(t, srv.Addr)
	// Every release is cut: go-redis sends a cut command again (a
	// release may be: its marker makes a second one give nothing), so a
	// single cut is not a failure.
	px.match, px.sticky = []byte("$7\r\nrelease\r\n"), true // the release script's first argument
	pc := redis.NewClient(&redis.Options{Addr: px.ln.Addr().String(), ContextTimeoutEnabled: true})
	defer pc.Close()
	var failures []error
	s, err := New(pc, Options{SlotCheck: SlotCheckOn, OnReleaseFailure: func(err error) { failures = append(failures, err) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := vectors.T0.Add(12 * time.Hour).UnixMicro()
	// The global layer admits more per hour than the user's, so it is
	// reserved last: the user's part is reserved, then the global one
	// denies, and the user's part is released.
	user := layered(t, "user", floodgate.FixedWindow, 10)
	global := layered(t, "global", floodgate.FixedWindow, 100)
	u, g := e.apart(t, user, global, "rf", "g-rf", now)
	ul, gl := e.layerAt(user, u, now, 1), e.layerAt(global, g, now, 1)
	if _, err := e.decide(ctx, now, []floodgate.Layer{withCost(gl, 100)}); err != nil {
		t.Fatal(err)
	}
	e.decide(ctx, now, []floodgate.Layer{withCost(ul, 0)}) // records the key's TTL bound
	out := make([]floodgate.Result, 2)
	if err := s.Decide(ctx, now, []floodgate.Layer{ul, gl}, out); err != nil || out[0].Remaining != 10 || out[1].Allowed {
		t.Fatalf("a denial released: %+v, %v", out, err)
	}
	if n := s.ReleaseFailures(); n != 0 || len(failures) != 0 {
		t.Fatalf("%d release failures counted (%v), want none", n, failures)
	}
	px.armed.Store(true)
	for i := 1; i <= 2; i++ {
		cuts := px.cuts.Load()
		err := s.Decide(ctx, now, []floodgate.Layer{ul, gl}, out)
		if px.cuts.Load() == cuts {
			t.Fatalf("decision %d: the proxy cut no release", i)
		}
		// The request is denied all the same, and the user's layer
		// reports what it holds: the reservation, which may be kept.
		if err != nil || out[1].Allowed || out[0].Remaining != 9 {
			t.Fatalf("decision %d: %+v, %v; want the denial, the user's layer at 9", i, out, err)
		}
		if n := s.ReleaseFailures(); n != int64(i) || len(failures) != i {
			t.Fatalf("after %d failed releases: ReleaseFailures %d, %d reported", i, n, len(failures))
		}
		if msg := failures[i-1].Error(); !strings.Contains(msg, fmt.Sprintf("slot %d", Slot(ul.Key))) {
			t.Fatalf("reported %q, want the user's slot, %d", msg, Slot(ul.Key))
		}
	}
}
