package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/vectors"
)

// model is the reference: algo.Step with state kept in a Go map, and
// the all-or-nothing rule of Store.Decide.
type model struct {
	states map[string]algo.State
	// commits remember, per key, the last commit's time, TTL and wall
	// clock, to keep the comparison clear of real-time expiry in Redis.
	commits map[string]commit
}

type commit struct {
	now, ttl int64 // µs of the simulated clock
	wall     time.Time
}

func newModel() *model {
	return &model{states: map[string]algo.State{}, commits: map[string]commit{}}
}

func (m *model) decide(now int64, layers []floodgate.Layer) []floodgate.Result {
	outs := make([]algo.Transition, len(layers))
	all := true
	for i, l := range layers {
		outs[i] = algo.Step(l.Policy, m.states[l.Key], now, l.Cost)
		all = all && outs[i].Result.Allowed
	}
	res := make([]floodgate.Result, len(layers))
	for i, o := range outs {
		res[i] = o.Result
		if !all && o.Result.Allowed && layers[i].Cost > 0 {
			res[i] = algo.Standing(layers[i].Policy, m.states[layers[i].Key], now)
		}
		if all && o.Commit {
			m.states[layers[i].Key] = o.State
			m.commits[layers[i].Key] = commit{now: now, ttl: shortestTTL(layers[i].Policy, o), wall: time.Now()}
		}
	}
	return res
}

// shortestTTL returns the shortest TTL (µs) a Store of either state format
// may give the key of a state o committed: the state's life plus the slack.
// A binary bucket state's TTL is that twice, at most the window more
// (o.TTL, unless o.Keep), or an earlier, longer one kept; a text state's
// is the life plus the slack.
func shortestTTL(p floodgate.Policy, o algo.Transition) int64 {
	if o.Keep || (p.Algorithm != floodgate.TokenBucket && p.Algorithm != floodgate.GCRA) {
		return o.TTL
	}
	// o.TTL is x + min(x, w), x being the life plus the slack.
	return max(o.TTL/2, o.TTL-p.Window.Microseconds())
}

// earliest returns the earliest simulated time a request on key may use.
// Redis expires a key on its own (wall) clock; Step keeps state forever but
// treats it as fresh once its TTL has passed on the simulated clock. The
// two agree as long as a key Redis may already have expired is only asked
// about after its simulated TTL, so once the wall clock comes within a
// second of a commit's TTL, later requests on that key are kept past it.
func (m *model) earliest(key string) int64 {
	c, ok := m.commits[key]
	if !ok {
		return 0
	}
	if time.Since(c.wall)+time.Second < time.Duration(c.ttl)*time.Microsecond {
		return 0
	}
	return c.now + c.ttl
}

// randPolicy returns a random valid policy of algorithm a, with windows of
// seconds to a minute that are not round numbers of microseconds.
func randPolicy(t *testing.T, r *rand.Rand, a floodgate.Algorithm, i int) floodgate.Policy {
	limit := 1 + r.Int64N(12)
	if r.IntN(4) == 0 {
		limit = 1 + r.Int64N(2000)
	}
	w := time.Duration(3_000_000+r.Int64N(60_000_000)) * time.Microsecond
	p := floodgate.Policy{Name: fmt.Sprintf("d%d-%s", i, a), Algorithm: a, Limit: limit, Window: w}
	if a == floodgate.TokenBucket || a == floodgate.GCRA {
		if r.IntN(2) == 0 {
			p.Burst = 1 + r.Int64N(2*limit)
		}
		if a == floodgate.GCRA && r.IntN(2) == 0 {
			p.MaxDelay = time.Duration(r.Int64N(3*w.Microseconds()/limit)) * time.Microsecond
		}
	}
	return mustPolicy(t, p)
}

// nextTime moves the simulated clock: mostly by a fraction of an emission
// interval, sometimes not at all, backwards a little, to just around a
// window edge, or far ahead.
func nextTime(r *rand.Rand, p floodgate.Policy, now int64) int64 {
	w := p.Window.Microseconds()
	unit := max(w/p.Limit, 1)
	switch r.IntN(12) {
	case 0, 1:
		return now - r.Int64N(unit+1)
	case 2:
		return now
	case 3:
		return now - now%w + w + r.Int64N(3) - 1
	case 4:
		return now + r.Int64N(3*w)
	default:
		return now + r.Int64N(2*unit+1)
	}
}

// randCost returns a cost from 0 to capacity+1, small ones more often.
func randCost(r *rand.Rand, p floodgate.Policy) int64 {
	if r.IntN(2) == 0 {
		return r.Int64N(min(p.Capacity(), 3) + 1)
	}
	return r.Int64N(p.Capacity() + 2)
}

// TestDifferential runs random requests through algo.Step and the
// Redis store side by side, with a Store of each state format: every
// result must be identical.
func TestDifferential(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	forEachFormat(t, func(t *testing.T, e *env) { testDifferential(t, e, seed) })
}

func testDifferential(t *testing.T, e *env, seed uint64) {
	t.Logf("seed %d", seed)
	ctx := context.Background()
	for a := floodgate.FixedWindow; a <= floodgate.GCRA; a++ {
		t.Run(a.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, uint64(a)))
			m := newModel()
			for i := range 4 {
				p := randPolicy(t, r, a, i)
				key := e.key(p, fmt.Sprintf("id%d", i))
				now := vectors.T0.UnixMicro() + r.Int64N(p.Window.Microseconds())
				for n := range 150 {
					now = max(nextTime(r, p, now), m.earliest(key))
					layers := []floodgate.Layer{{Policy: p, Key: key, Cost: randCost(r, p)}}
					want := m.decide(now, layers)
					got, err := e.decide(ctx, now, layers)
					if err != nil {
						t.Fatalf("seed %d, %v, request %d: %v", seed, p, n, err)
					}
					if !sameResults(got, want) {
						t.Fatalf("seed %d, %v, request %d at %d cost %d:\n got %+v\nwant %+v", seed, p, n, now, layers[0].Cost, got[0], want[0])
					}
				}
			}
		})
	}
	t.Run("layers", func(t *testing.T) {
		r := rand.New(rand.NewPCG(seed, 99))
		m := newModel()
		var ps []floodgate.Policy
		for i := range 6 {
			ps = append(ps, randPolicy(t, r, floodgate.Algorithm(1+i%5), 10+i))
		}
		now := vectors.T0.UnixMicro()
		for n := range 300 {
			k := 1 + r.IntN(4)
			idx := r.Perm(len(ps))[:k]
			layers := make([]floodgate.Layer, k)
			for j, pi := range idx {
				p := ps[pi]
				layers[j] = floodgate.Layer{Policy: p, Key: e.key(p, "shared"), Cost: randCost(r, p)}
			}
			now = nextTime(r, layers[0].Policy, now)
			for _, l := range layers {
				now = max(now, m.earliest(l.Key))
			}
			want := m.decide(now, layers)
			got, err := e.decide(ctx, now, layers)
			if err != nil {
				t.Fatalf("seed %d, decision %d: %v", seed, n, err)
			}
			if !sameResults(got, want) {
				t.Fatalf("seed %d, decision %d at %d, layers %+v:\n got %+v\nwant %+v", seed, n, now, layers, got, want)
			}
		}
	})
}

func sameResults(got, want []floodgate.Result) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Allowed != w.Allowed || g.Limit != w.Limit || g.Remaining != w.Remaining || !g.ResetAt.Equal(w.ResetAt) ||
			g.RetryAfter != w.RetryAfter || g.Delay != w.Delay || g.Reason != w.Reason {
			return false
		}
	}
	return true
}

// decideGeneral decides layers with the general script, in its decide
// mode or, with reserve, as one slot's part of a split decision (which
// gives bucket states their long form), for comparison with the layered
// script.
func (e *env) decideGeneral(ctx context.Context, now int64, layers []floodgate.Layer, reserve bool) ([]floodgate.Result, error) {
	out, err := e.checked(now, layers)
	if err != nil {
		return nil, err
	}
	f := new(frame)
	f.build(now, layers, false)
	if reserve {
		f.args = append(f.args, argReserve)
	}
	val, err := e.store.scripts.general.RunCommand(ctx, e.store.client, f.args)
	if err != nil {
		return nil, err
	}
	if reserve {
		return out, decodeResults(val, layers, out, make([][undoWidth]int64, len(layers)))
	}
	return out, decodeReply(val, layers, out)
}

// checked checks a decision of layers at now as Store.Decide does,
// records its keys' TTL bounds and returns its results' slice.
func (e *env) checked(now int64, layers []floodgate.Layer) ([]floodgate.Result, error) {
	out := make([]floodgate.Result, len(layers))
	if err := e.store.check(now, layers, out); err != nil {
		return nil, err
	}
	e.mu.Lock()
	for _, l := range layers {
		e.bound[l.Key] = ttlBound(l.Policy)
	}
	e.mu.Unlock()
	return out, nil
}

// decideLayersDecimal decides layers (a lone decision) with the layered
// script in its decimal layout (n, now, 6n arguments), as batches of
// decisions under different policies send them, for comparison with the
// packed lone call Store.Decide sends.
func (e *env) decideLayersDecimal(ctx context.Context, now int64, layers []floodgate.Layer) ([]floodgate.Result, error) {
	out, err := e.checked(now, layers)
	if err != nil {
		return nil, err
	}
	f := new(frame)
	f.build(now, layers, true)
	vals, err := e.store.scripts.layers.RunInts(ctx, e.store.client, f.args)
	if err != nil {
		return nil, err
	}
	return out, decodeCompact(vals, layers, out)
}

// TestLayersScriptDifferential runs random layered decisions (two to four
// layers of fixed window, sliding window, token bucket, GCRA and quota
// policies, on shared keys) against the model, each three times: through
// the layered script (Store.Decide, which must pick it, a lone decision
// sent packed) on one identity's keys, through the general script on
// another's, and through the layered script's decimal layout on a third's.
// All must give the model's results and leave byte-for-byte the same
// states. Now and then both run
// a reservation instead, which gives bucket states the long form
// (bookkeeping for releases) that the layered script must then keep up to
// date exactly as the general script does. It runs with a Store of each
// state format.
func TestLayersScriptDifferential(t *testing.T) {
	forEachFormat(t, testLayersScriptDifferential)
}

func testLayersScriptDifferential(t *testing.T, e *env) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(seed, 7))
	ma, mb, mc := newModel(), newModel(), newModel()
	var ps []floodgate.Policy
	for i := range 8 {
		ps = append(ps, randPolicy(t, r, []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA}[i%4], 20+i))
	}
	for i, unit := range []floodgate.PeriodUnit{floodgate.PeriodDay, floodgate.PeriodMonth} {
		q, err := floodgate.NewQuota(fmt.Sprintf("dq%d", i), 1+r.Int64N(40), floodgate.Calendar{Unit: unit, Location: time.UTC})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, q)
	}
	now := vectors.T0.UnixMicro()
	reserves, long := 0, 0
	for n := range 400 {
		k := 2 + r.IntN(3)
		idx := pickLayers(r, ps, k)
		now = nextTime(r, ps[idx[0]], now)
		build := func(id string) []floodgate.Layer {
			layers := make([]floodgate.Layer, k)
			for j, pi := range idx {
				layers[j] = floodgate.Layer{Policy: ps[pi], Key: algo.KeyAt(e.prefix, ps[pi], id, now)}
			}
			return layers
		}
		for _, l := range append(append(build("a"), build("b")...), build("c")...) {
			now = max(now, ma.earliest(l.Key), mb.earliest(l.Key), mc.earliest(l.Key))
		}
		la, lb, lc := build("a"), build("b"), build("c")
		for j := range la {
			la[j].Cost = randCost(r, la[j].Policy)
			lb[j].Cost = la[j].Cost
			lc[j].Cost = la[j].Cost
		}
		reserve := r.IntN(8) == 0
		var ga, gb, gc []floodgate.Result
		var err error
		if reserve {
			reserves++
			ga, err = e.decideGeneral(ctx, now, la, true)
			if err == nil {
				gb, err = e.decideGeneral(ctx, now, lb, true)
			}
			if err == nil {
				gc, err = e.decideGeneral(ctx, now, lc, true)
			}
		} else {
			if sc := e.store.scripts.scriptFor(la); sc != e.store.scripts.layers {
				t.Fatal("Store.Decide would not use the layered script")
			}
			ga, err = e.decide(ctx, now, la) // a lone decision: packed
			if err == nil {
				gb, err = e.decideGeneral(ctx, now, lb, false)
			}
			if err == nil {
				gc, err = e.decideLayersDecimal(ctx, now, lc)
			}
		}
		if err != nil {
			t.Fatalf("seed %d, decision %d (reserve %v): %v", seed, n, reserve, err)
		}
		wa, wb := ma.decide(now, la), mb.decide(now, lb)
		if wc := mc.decide(now, lc); !sameResults(gc, wc) {
			t.Fatalf("seed %d, decision %d (reserve %v) at %d, layers %+v: the decimal layout got %+v, want %+v", seed, n, reserve, now, lc, gc, wc)
		}
		if !sameResults(ga, wa) || !sameResults(gb, wb) {
			t.Fatalf("seed %d, decision %d (reserve %v) at %d, layers %+v:\n got %+v\n and %+v\nwant %+v", seed, n, reserve, now, la, ga, gb, wa)
		}
		for j := range la {
			va, _ := e.rd.Get(ctx, la[j].Key).Result()
			vb, _ := e.rd.Get(ctx, lb[j].Key).Result()
			if va != vb {
				t.Fatalf("seed %d, decision %d, layer %d (%v): the layered script left %q, the general one %q", seed, n, j, la[j].Policy, va, vb)
			}
			if vc, _ := e.rd.Get(ctx, lc[j].Key).Result(); vc != va {
				t.Fatalf("seed %d, decision %d, layer %d (%v): the packed lone call left %q, the decimal layout %q", seed, n, j, la[j].Policy, va, vc)
			}
			if longForm(va) && la[j].Policy.Algorithm != floodgate.Quota {
				long++
			}
		}
	}
	if reserves == 0 || long == 0 {
		t.Fatalf("seed %d: %d reservations, %d long-form states seen: the long form went untested", seed, reserves, long)
	}
	t.Logf("%d reservations; long-form states seen %d times", reserves, long)
}

// TestLayersScriptBatchDifferential sends calls of many layered decisions
// at once (the coalesced path, both argument layouts) over a small pool of
// identities, so that decisions of one call share keys, and checks each
// decision against the model applied in the call's order; the same
// decisions, sent one by one through the general script on mirror keys,
// must leave byte-for-byte the same states. It runs with a Store of each
// state format.
func TestLayersScriptBatchDifferential(t *testing.T) {
	forEachFormat(t, testLayersScriptBatchDifferential)
}

func testLayersScriptBatchDifferential(t *testing.T, e *env) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(seed, 11))
	ma, mb := newModel(), newModel()
	var ps []floodgate.Policy
	for i := range 6 {
		ps = append(ps, randPolicy(t, r, []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA}[i%4], 40+i))
	}
	q, err := floodgate.NewQuota("bq", 1+r.Int64N(40), floodgate.Calendar{Unit: floodgate.PeriodMonth, Location: time.UTC})
	if err != nil {
		t.Fatal(err)
	}
	ps = append(ps, q)
	now := vectors.T0.UnixMicro()
	shared, mixed := 0, 0
	for round := range 60 {
		// One set of policies for the whole call (the shared layout) or a
		// different set per decision.
		same := round%2 == 0
		var set []int
		pick := func() []int {
			idx := r.Perm(len(ps))[:2+r.IntN(3)]
			return idx
		}
		set = pick()
		var calls []*call
		var as, bs [][]floodgate.Layer
		for range 2 + r.IntN(20) {
			idx := set
			if !same {
				idx = pick()
			}
			now += r.Int64N(400_000) - 50_000 // decisions of a call need not be in time order
			id := fmt.Sprint("p", r.IntN(3))
			la := make([]floodgate.Layer, len(idx))
			lb := make([]floodgate.Layer, len(idx))
			for j, pi := range idx {
				p := ps[pi]
				cost := randCost(r, p)
				la[j] = floodgate.Layer{Policy: p, Key: algo.KeyAt(e.prefix, p, "a"+id, now), Cost: cost}
				lb[j] = floodgate.Layer{Policy: p, Key: algo.KeyAt(e.prefix, p, "b"+id, now), Cost: cost}
				e.bound[la[j].Key], e.bound[lb[j].Key] = ttlBound(p), ttlBound(p)
			}
			calls = append(calls, getCall(ctx, now, e.store.scripts.layers, la))
			as, bs = append(as, la), append(bs, lb)
		}
		if same {
			shared++
		} else {
			mixed++
		}
		e.store.batch.run(calls)
		for i, c := range calls {
			<-c.done
			want := ma.decide(c.now, as[i])
			if c.err != nil {
				t.Fatalf("seed %d, round %d, decision %d: %v", seed, round, i, c.err)
			}
			if !sameResults(c.res, want) {
				t.Fatalf("seed %d, round %d, decision %d at %d, layers %+v:\n got %+v\nwant %+v", seed, round, i, c.now, as[i], c.res, want)
			}
			got, err := e.decideGeneral(ctx, c.now, bs[i], false)
			if err != nil || !sameResults(got, mb.decide(c.now, bs[i])) {
				t.Fatalf("seed %d, round %d, decision %d through the general script: %v %+v", seed, round, i, err, got)
			}
		}
		for i := range as {
			for j := range as[i] {
				va, _ := e.rd.Get(ctx, as[i][j].Key).Result()
				vb, _ := e.rd.Get(ctx, bs[i][j].Key).Result()
				if va != vb {
					t.Fatalf("seed %d, round %d, decision %d, layer %d: the batch left %q, the general script %q", seed, round, i, j, va, vb)
				}
			}
		}
	}
	t.Logf("%d calls under one set of policies, %d mixed", shared, mixed)
}

// longForm reports whether v is a bucket's state in its long form (with a
// release's bookkeeping), in either format: "T N H A R" or "T H A R", or
// the binary layouts tbr and gcr.
func longForm(v string) bool {
	if len(v) > 0 && (v[0] < '0' || v[0] > '9') {
		for _, l := range stateLayouts {
			if (l.name == "tbr" || l.name == "gcr") && len(v) == l.size() && v[0] == l.tag {
				return true
			}
		}
		return false
	}
	return strings.Count(v, " ") >= 3
}

// pickLayers returns the places in ps of k distinct policies for a random
// layered decision, a window or a bucket first when there is one (its
// layer moves the decision's clock).
func pickLayers(r *rand.Rand, ps []floodgate.Policy, k int) []int {
	idx := r.Perm(len(ps))
	for j, pi := range idx {
		if ps[pi].Algorithm != floodgate.Quota {
			idx[0], idx[j] = idx[j], idx[0]
			break
		}
	}
	return idx[:k]
}
