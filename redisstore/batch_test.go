package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/vectors"
	"github.com/redis/go-redis/v9"
)

// scriptCalls returns how many EVALSHA and EVAL calls the server has run.
func scriptCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				var n int64
				if _, err := fmt.Sscanf(rest, "calls=%d", &n); err != nil {
					t.Fatalf("commandstats line %q: %v", line, err)
				}
				total += n
			}
		}
	}
	return total
}

// TestBatchedDecisionsMatchTheModel runs many goroutines, each deciding its
// own keys in sequence with random times and costs, against one store
// whose decisions are coalesced, and checks every result against
// algo.Step; and that decisions were in fact coalesced (fewer script
// calls than decisions). Among the single-layer goroutines, half share one
// policy per algorithm (batches in the shared-argument layout), the others
// each have their own (the per-request layout); a third of all goroutines
// make layered decisions (the general script's batch mode).
func TestBatchedDecisionsMatchTheModel(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	e := newEnvOn(t, c, []*redis.Client{c}, Options{MaxBatch: 16, MaxInFlight: 2})
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	before := scriptCalls(t, c)
	const workers, keysPer, decisions = 48, 3, 60
	var wg sync.WaitGroup
	var total int64
	var mu sync.Mutex
	algos := []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA}
	shared := make([]floodgate.Policy, len(algos))
	r0 := rand.New(rand.NewPCG(seed, 0))
	for i, a := range algos {
		shared[i] = randPolicy(t, r0, a, i)
	}
	for w := range workers {
		wg.Add(1)
		if w%3 == 2 {
			// A layered worker: two or three layers of different
			// algorithms on its own identity, decided by the general
			// script's batch mode.
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, uint64(w+1)))
				m := newModel()
				// Two policy sets, each shared by half the layered
				// workers, so that consecutive decisions in a batch often
				// have the same policies (the script then reuses their
				// parsed arguments) and sometimes not.
				set := w % 2
				rs := rand.New(rand.NewPCG(seed, uint64(1000+set)))
				var ps []floodgate.Policy
				for j := range 2 + set {
					ps = append(ps, randPolicy(t, rs, algos[(set+j)%len(algos)], 200+set*4+j))
				}
				now := vectors.T0.UnixMicro()
				for n := range decisions {
					layers := make([]floodgate.Layer, len(ps))
					for j, p := range ps {
						layers[j] = floodgate.Layer{Policy: p, Key: e.key(p, fmt.Sprintf("w%d", w)), Cost: randCost(r, p)}
					}
					now = nextTime(r, ps[0], now)
					for _, l := range layers {
						now = max(now, m.earliest(l.Key))
					}
					want := m.decide(now, layers)
					got, err := e.decide(context.Background(), now, layers)
					if err != nil {
						t.Errorf("layered worker %d, decision %d: %v", w, n, err)
						return
					}
					if !sameResults(got, want) {
						t.Errorf("layered worker %d, decision %d at %d, layers %+v:\n got %+v\nwant %+v", w, n, now, layers, got, want)
						return
					}
				}
				mu.Lock()
				total += decisions
				mu.Unlock()
			}()
			continue
		}
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w+1)))
			ai := w % len(algos)
			p := shared[ai]
			if w%2 == 1 {
				p = randPolicy(t, r, algos[ai], 100+w)
			}
			m := newModel()
			keys := make([]string, keysPer)
			for k := range keys {
				keys[k] = e.key(p, fmt.Sprintf("w%d-k%d", w, k))
			}
			now := vectors.T0.UnixMicro() + r.Int64N(p.Window.Microseconds())
			for n := range decisions {
				key := keys[r.IntN(keysPer)]
				now = max(nextTime(r, p, now), m.earliest(key))
				layers := []floodgate.Layer{{Policy: p, Key: key, Cost: randCost(r, p)}}
				want := m.decide(now, layers)
				got, err := e.decide(context.Background(), now, layers)
				if err != nil {
					t.Errorf("worker %d, %v, decision %d: %v", w, p, n, err)
					return
				}
				if !sameResults(got, want) {
					t.Errorf("worker %d, %v, decision %d at %d cost %d:\n got %+v\nwant %+v", w, p, n, now, layers[0].Cost, got[0], want[0])
					return
				}
			}
			mu.Lock()
			total += decisions
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	calls := scriptCalls(t, c) - before
	t.Logf("%d decisions in %d script calls", total, calls)
	if calls >= total {
		t.Fatalf("%d script calls for %d concurrent decisions: nothing was coalesced", calls, total)
	}
}

// TestBatchConcurrentLimit: 300 goroutines on one key whose limit is 40
// admit exactly 40, for every algorithm with a single-layer script, with
// coalescing on.
func TestBatchConcurrentLimit(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	e := newEnvOn(t, c, []*redis.Client{c}, Options{MaxInFlight: 2})
	now := time.Now().UnixMicro()
	for _, p := range allAlgorithms(t, 40, time.Minute) {
		if !hasFastScript(p.Algorithm) {
			continue
		}
		if got := race(t, e, p, e.key(p, "hot"), now, 300); got != 40 {
			t.Errorf("%v: %d admitted, want 40", p.Algorithm, got)
		}
	}
}

// batchOf returns calls deciding cost 1 under p for each key, at now.
func batchOf(p floodgate.Policy, now int64, keys ...string) []*call {
	calls := make([]*call, len(keys))
	for i, k := range keys {
		calls[i] = getCall(context.Background(), now, fastScripts[p.Algorithm], []floodgate.Layer{{Policy: p, Key: k, Cost: 1}})
	}
	return calls
}

// TestBatchFailuresStayPerRequest sends batches directly: a request whose
// key holds a value floodgate did not write (a string, or another type),
// or whose arguments the script refuses, fails alone and writes nothing;
// the others are decided.
func TestBatchFailuresStayPerRequest(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	e := newEnvOn(t, c, []*redis.Client{c}, Options{})
	ctx := context.Background()
	now := time.Now().UnixMicro()
	for _, p := range allAlgorithms(t, 5, time.Minute) {
		if !hasFastScript(p.Algorithm) {
			continue
		}
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			k := func(id string) string { return algo.KeyAt(e.prefix, p, id, now) }
			foreign, hash := k("foreign"), k("hash")
			if err := c.Set(ctx, foreign, "not ours", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.HSet(ctx, hash, "f", "v").Err(); err != nil {
				t.Fatal(err)
			}
			c.Expire(ctx, hash, time.Minute)
			calls := batchOf(p, now, k("a"), foreign, k("b"), hash, k("c"))
			bad := p
			bad.Limit = 0 // refused by the script's own checks
			calls = append(calls, batchOf(bad, now, k("bad"))...)
			for _, c := range calls {
				e.bound[c.layers[0].Key] = ttlBound(p)
			}
			e.store.batch.run(calls)
			for i, cl := range calls {
				<-cl.done
				switch i {
				case 1, 3, 5:
					if !errors.Is(cl.err, floodgate.ErrStoreUnavailable) {
						t.Errorf("request %d: err %v, want ErrStoreUnavailable", i, cl.err)
					}
					if i == 1 && (cl.err == nil || !strings.Contains(cl.err.Error(), "did not write")) {
						t.Errorf("foreign value: err %v", cl.err)
					}
				default:
					if cl.err != nil || !cl.res[0].Allowed || cl.res[0].Remaining != 4 {
						t.Errorf("request %d: %+v %v, want allowed with 4 left", i, cl.res[0], cl.err)
					}
				}
			}
			if v := c.Get(ctx, foreign).Val(); v != "not ours" {
				t.Errorf("foreign value changed to %q", v)
			}
			if v := c.HGet(ctx, hash, "f").Val(); v != "v" {
				t.Errorf("hash changed: %q", v)
			}
			if n := c.Exists(ctx, k("bad")).Val(); n != 0 {
				t.Error("a refused request wrote its key")
			}
			// The same batch, every request under the refused policy, in
			// the shared layout: every request fails, nothing is written.
			calls = batchOf(bad, now, k("bad1"), k("bad2"))
			e.store.batch.run(calls)
			for i, cl := range calls {
				<-cl.done
				if !errors.Is(cl.err, floodgate.ErrStoreUnavailable) {
					t.Errorf("shared refused request %d: err %v", i, cl.err)
				}
			}
			if n := c.Exists(ctx, k("bad1"), k("bad2")).Val(); n != 0 {
				t.Error("refused requests wrote their keys")
			}
		})
	}
}

// TestBatchAbandon: a caller whose context ends while its decision waits
// in the queue gets ErrStoreUnavailable, and its decision is never sent.
func TestBatchAbandon(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	e := newEnvOn(t, c, []*redis.Client{c}, Options{MaxInFlight: 1})
	b := e.store.batch
	p := mustPolicy(t, floodgate.Policy{Name: "abandon", Algorithm: floodgate.FixedWindow, Limit: 5, Window: time.Minute})
	key := e.key(p, "x")
	// Every call is busy, the only slot held as by a decision sent alone:
	// the decision must queue. (mk is not called when a slot is free.)
	if _, queued := b.q.Join(nil, 1, nil); queued {
		t.Fatal("Join queued with a free slot")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := e.one(ctx, time.Now().UnixMicro(), p, key, 1)
	if !errors.Is(err, floodgate.ErrStoreUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want ErrStoreUnavailable wrapping the deadline", err)
	}
	queued := b.q.Len()
	b.q.Release()
	if queued != 0 {
		t.Fatalf("%d decisions left in the queue", queued)
	}
	if n := c.Exists(context.Background(), key).Val(); n != 0 {
		t.Fatal("an abandoned decision was written")
	}
	// The store still works.
	if r, err := e.one(context.Background(), time.Now().UnixMicro(), p, key, 1); err != nil || !r.Allowed {
		t.Fatalf("after abandon: %+v %v", r, err)
	}
}

// TestBatchOptions checks the coalescing options.
func TestBatchOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	for _, o := range []Options{{MaxBatch: -1}, {MaxBatch: maxBatch + 1}, {MaxInFlight: -1}, {MaxInFlight: maxInFlight + 1}} {
		if _, err := New(c, o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
	s, err := New(c, Options{})
	if err != nil || s.batch == nil || s.batch.q.MaxBatch() != DefaultMaxBatch || s.batch.q.MaxInFlight() != DefaultMaxInFlight {
		t.Fatalf("defaults: %+v %v", s.batch, err)
	}
	if s, _ := New(c, Options{MaxBatch: 1}); s.batch != nil {
		t.Error("MaxBatch 1 coalesces")
	}
	if s, _ := New(c, Options{SlotCheck: SlotCheckOn}); s.batch != nil {
		t.Error("coalescing with the slot check on")
	}
	if s, _ := New(c, Options{Coalesce: CoalesceOff}); s.batch != nil {
		t.Error("coalescing with CoalesceOff")
	}
	if _, err := New(c, Options{Coalesce: CoalesceOn, SlotCheck: SlotCheckOn}); err == nil {
		t.Error("CoalesceOn with the slot check on accepted")
	}
	if _, err := New(c, Options{Coalesce: 9}); err == nil {
		t.Error("unknown Coalesce accepted")
	}
	// Clients that may hold keys on several servers do not coalesce unless
	// asked to.
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cc.Close()
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1", "b": "127.0.0.1:2"}})
	defer ring.Close()
	ap, err := c.AutoPipeline()
	if err != nil {
		t.Fatal(err)
	}
	defer ap.Close()
	for name, o := range map[string]struct {
		client Client
		opts   Options
	}{
		"cluster client":                 {cc, Options{}},
		"cluster client, slot check off": {cc, Options{SlotCheck: SlotCheckOff}},
		"ring":                           {ring, Options{}},
		"AutoPipeliner":                  {ap, Options{}},
	} {
		if s, err := New(o.client, o.opts); err != nil || s.batch != nil {
			t.Errorf("%s: coalescing on by default (%v)", name, err)
		}
	}
	if s, err := New(ap, Options{Coalesce: CoalesceOn}); err != nil || s.batch == nil {
		t.Errorf("AutoPipeliner with CoalesceOn: not coalescing (%v)", err)
	}
}

// TestBatchLayered: layered decisions in one batch are each all-or-nothing;
// one whose second layer's key holds another type fails alone and writes
// nothing, not even its first layer; and 300 concurrent layered requests
// (per user 30, global 1,000) admit exactly 30.
func TestBatchLayered(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	e := newEnvOn(t, c, []*redis.Client{c}, Options{MaxInFlight: 2})
	ctx := context.Background()
	now := time.Now().UnixMicro()
	user := mustPolicy(t, floodgate.Policy{Name: "user", Algorithm: floodgate.SlidingWindow, Limit: 30, Window: time.Minute})
	global := mustPolicy(t, floodgate.Policy{Name: "global", Algorithm: floodgate.GCRA, Limit: 1000, Window: time.Minute})
	layers := func(id string) []floodgate.Layer {
		return []floodgate.Layer{{Policy: user, Key: e.key(user, id), Cost: 1}, {Policy: global, Key: e.key(global, id), Cost: 1}}
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		for _, l := range layers(id) {
			e.bound[l.Key] = ttlBound(l.Policy)
		}
	}
	bad := layers("b")
	if err := c.HSet(ctx, bad[1].Key, "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	c.Expire(ctx, bad[1].Key, time.Minute)
	calls := []*call{getCall(ctx, now, layersScript, layers("a")), getCall(ctx, now, layersScript, bad), getCall(ctx, now, layersScript, layers("c"))}
	e.store.batch.run(calls)
	for i, cl := range calls {
		<-cl.done
		if i == 1 {
			if !errors.Is(cl.err, floodgate.ErrStoreUnavailable) || !strings.Contains(cl.err.Error(), "did not write") {
				t.Errorf("decision on a foreign key: %v", cl.err)
			}
			continue
		}
		if cl.err != nil || !cl.res[0].Allowed || cl.res[0].Remaining != 29 || cl.res[1].Remaining != 999 {
			t.Errorf("decision %d: %+v %v", i, cl.res, cl.err)
		}
	}
	if n := c.Exists(ctx, bad[0].Key).Val(); n != 0 {
		t.Error("a failed layered decision wrote its first layer")
	}
	// A batch the general script must refuse as a whole: a sliding log
	// layer (never sent by the store) is refused before anything runs.
	sl := mustPolicy(t, floodgate.Policy{Name: "log", Algorithm: floodgate.SlidingLog, Limit: 5, Window: time.Minute})
	withLog := []floodgate.Layer{{Policy: sl, Key: e.key(sl, "d"), Cost: 1}, layers("d")[0]}
	if scriptSets[BinaryState].coalescable(withLog) != nil {
		t.Fatal("a decision with a sliding log layer is coalesced")
	}
	calls = []*call{getCall(ctx, now, layersScript, layers("d")), getCall(ctx, now, layersScript, withLog)}
	e.store.batch.run(calls)
	for i, cl := range calls {
		<-cl.done
		if !errors.Is(cl.err, floodgate.ErrStoreUnavailable) || !strings.Contains(cl.err.Error(), "sliding log") {
			t.Errorf("decision %d of a refused batch: %v", i, cl.err)
		}
	}
	if n := c.Exists(ctx, layers("d")[0].Key).Val(); n != 0 {
		t.Error("a refused batch wrote")
	}

	var admitted sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	start := make(chan struct{})
	for range 300 {
		admitted.Add(1)
		go func() {
			defer admitted.Done()
			<-start
			out, err := e.decide(ctx, now, layers("hot"))
			if err != nil {
				t.Error(err)
				return
			}
			if out[0].Allowed {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	close(start)
	admitted.Wait()
	if ok != 30 {
		t.Fatalf("%d of 300 layered requests admitted, want exactly 30", ok)
	}
	if v := asText(c.Get(ctx, e.key(user, "hot")).Val()); !strings.Contains(v, " 30 ") {
		t.Fatalf("per-user state %q, want 30 counted", v)
	}
}

// TestBatchSharedKeyReadAndWrittenOnce checks the layered batch's key
// cache: decisions that share a layer's key (a global edge limit) in one
// call read it once and write it once, with the state of the last
// decision and the TTL of the first admitted one (the later ones keep it:
// a binary window state of the same start and length already expires at
// the window's end), and every decision sees the ones before it exactly
// as if each had been sent alone.
func TestBatchSharedKeyReadAndWrittenOnce(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	e := newEnvOn(t, c, []*redis.Client{c}, Options{})
	ctx := context.Background()
	w := time.Minute
	base := time.Now().UnixMicro()
	base -= base % w.Microseconds() // the start of a window: the decisions below share it
	edge := mustPolicy(t, floodgate.Policy{Name: "edge", Algorithm: floodgate.FixedWindow, Limit: 5, Window: w})
	user := mustPolicy(t, floodgate.Policy{Name: "user", Algorithm: floodgate.SlidingWindow, Limit: 10, Window: w})
	edgeKey := e.key(edge, "all")
	e.bound[edgeKey] = ttlBound(edge)
	var calls []*call
	var want [][]floodgate.Result
	edgeState, userState := algo.State{}, map[string]algo.State{}
	first := int64(0)
	for i := range 8 {
		now := base + int64(i+1)*1_000_000 // one second apart
		id := fmt.Sprint("u", i%3)
		layers := []floodgate.Layer{{Policy: edge, Key: edgeKey, Cost: 1}, {Policy: user, Key: e.key(user, id), Cost: 1}}
		e.bound[layers[1].Key] = ttlBound(user)
		calls = append(calls, getCall(ctx, now, layersScript, layers))
		// The model: all or nothing over the two layers, one after another.
		oe := algo.Step(edge, edgeState, now, 1)
		ou := algo.Step(user, userState[id], now, 1)
		res := []floodgate.Result{oe.Result, ou.Result}
		if oe.Result.Allowed && ou.Result.Allowed {
			edgeState, userState[id] = oe.State, ou.State
			if first == 0 {
				first = now
			}
		} else {
			if oe.Result.Allowed {
				res[0] = algo.Standing(edge, edgeState, now)
			}
			if ou.Result.Allowed {
				res[1] = algo.Standing(user, userState[id], now)
			}
		}
		want = append(want, res)
	}
	gets, sets := commandCalls(t, c, "get"), commandCalls(t, c, "set")
	e.store.batch.run(calls)
	for i, cl := range calls {
		<-cl.done
		if cl.err != nil {
			t.Fatalf("decision %d: %v", i, cl.err)
		}
		for j := range cl.res {
			g, x := cl.res[j], want[i][j]
			if g.Allowed != x.Allowed || g.Remaining != x.Remaining || !g.ResetAt.Equal(x.ResetAt) || g.Reason != x.Reason {
				t.Errorf("decision %d layer %d: got %+v, want %+v", i, j, g, x)
			}
		}
	}
	// One GET and one SET per distinct key: the edge key and three users.
	if n := commandCalls(t, c, "get") - gets; n != 4 {
		t.Errorf("%d GETs for 4 distinct keys in one batch, want 4", n)
	}
	if n := commandCalls(t, c, "set") - sets; n != 4 {
		t.Errorf("%d SETs for 4 distinct keys in one batch, want 4", n)
	}
	if v := asText(c.Get(ctx, edgeKey).Val()); v != fmt.Sprintf("%d 5", base) {
		t.Errorf("edge state %q, want %q (5 admitted in the window)", v, fmt.Sprintf("%d 5", base))
	}
	// The TTL is the first admitted decision's: the rest of the window
	// after it, plus the slack, in whole milliseconds.
	wantTTL := time.Duration(base+w.Microseconds()-first)*time.Microsecond + algo.TTLSlack
	got := c.PTTL(ctx, edgeKey).Val()
	if got > wantTTL+time.Millisecond || got < wantTTL-time.Second {
		t.Errorf("edge key's TTL %v, want about %v (the first admitted decision's)", got, wantTTL)
	}
}

// TestBatchHotKey sends single-layer batches in which requests share a
// key (a hot identity), for every algorithm with a single-layer script and
// in both argument layouts: each request must be decided as if alone, one
// after another (the model), the shared key read and written once per
// call, with the last request's state; a batch without a repeated key
// reads and writes each key directly.
func TestBatchHotKey(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	e := newEnvOn(t, c, []*redis.Client{c}, Options{})
	ctx := context.Background()
	base := vectors.T0.UnixMicro()
	for a, sc := range fastScripts {
		if sc == nil {
			continue
		}
		alg := floodgate.Algorithm(a)
		t.Run(alg.String(), func(t *testing.T) {
			var p, other floodgate.Policy
			if alg == floodgate.Quota {
				p, other = quotaPolicy(t, 5, floodgate.PeriodDay), quotaPolicy(t, 7, floodgate.PeriodMonth)
				other.Name = "q2"
			} else {
				p = mustPolicy(t, floodgate.Policy{Name: "hot", Algorithm: alg, Limit: 5, Window: time.Minute})
				other = mustPolicy(t, floodgate.Policy{Name: "hot2", Algorithm: alg, Limit: 7, Window: time.Minute})
			}
			m := newModel()
			for _, mixed := range []bool{false, true} {
				var calls []*call
				var layers [][]floodgate.Layer
				hotKey := algo.KeyAt(e.prefix, p, fmt.Sprint("hot", mixed), base)
				for i := range 9 {
					now := base + int64(i)*100_000
					l := floodgate.Layer{Policy: p, Key: hotKey, Cost: 1}
					if mixed && i%3 == 1 { // another policy (the per-request layout) and keys of its own
						l = floodgate.Layer{Policy: other, Key: algo.KeyAt(e.prefix, other, fmt.Sprint("cold", i), now), Cost: 1}
					}
					e.bound[l.Key] = ttlBound(l.Policy)
					calls = append(calls, getCall(ctx, now, sc, []floodgate.Layer{l}))
					layers = append(layers, []floodgate.Layer{l})
				}
				gets, sets := commandCalls(t, c, "get"), commandCalls(t, c, "set")
				e.store.batch.run(calls)
				for i, cl := range calls {
					<-cl.done
					want := m.decide(cl.now, layers[i])
					if cl.err != nil || !sameResults(cl.res, want) {
						t.Fatalf("mixed %v, request %d: got %+v %v, want %+v", mixed, i, cl.res, cl.err, want)
					}
				}
				distinct := 1
				if mixed {
					distinct += 3
				}
				if g, s := commandCalls(t, c, "get")-gets, commandCalls(t, c, "set")-sets; g != distinct || s != distinct {
					t.Errorf("mixed %v: %d GETs and %d SETs for %d distinct keys, want one each", mixed, g, s, distinct)
				}
			}
			// No key repeats: every request reads and writes its own key.
			var calls []*call
			for i := range 4 {
				l := floodgate.Layer{Policy: p, Key: algo.KeyAt(e.prefix, p, fmt.Sprint("single", i), base), Cost: 1}
				e.bound[l.Key] = ttlBound(p)
				calls = append(calls, getCall(ctx, base, sc, []floodgate.Layer{l}))
			}
			f := new(batchFrame)
			if f.repeats(calls) {
				t.Fatal("distinct keys taken for repeated ones")
			}
			calls = append(calls, getCall(ctx, base, sc, calls[0].layers))
			first := f.repeats(calls)
			second := f.repeats(calls) // the frame forgets the keys between batches
			if !first || !second {
				t.Fatalf("a repeated key not seen (first %v, second %v)", first, second)
			}
		})
	}
}
