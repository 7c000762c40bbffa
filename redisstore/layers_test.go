package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/vectors"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/redis/go-redis/v9"
)

// snapshot is a key's raw stored state: its DUMP and its TTL.
type snapshot struct {
	dump string
	pttl time.Duration
}

func snap(t *testing.T, c redis.Cmdable, key string) snapshot {
	t.Helper()
	ctx := context.Background()
	d, err := c.Dump(ctx, key).Result()
	if err != nil {
		t.Fatalf("DUMP %q: %v", key, err)
	}
	ttl, err := c.PTTL(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return snapshot{d, ttl}
}

// untouched fails unless key holds the same value as in before, with a TTL
// that has not been extended.
func untouched(t *testing.T, c redis.Cmdable, key string, before snapshot) {
	t.Helper()
	after := snap(t, c, key)
	if after.dump != before.dump || after.pttl > before.pttl || after.pttl < 0 {
		t.Fatalf("key %q changed by a denied decision: before %q (TTL %v), after %q (TTL %v)", key, before.dump, before.pttl, after.dump, after.pttl)
	}
}

// TestLayersAllOrNothing checks, for every pair of algorithms, that a
// layer denying a request leaves every other layer's state untouched.
func TestLayersAllOrNothing(t *testing.T) {
	e, _ := newEnv(t)
	testLayersAllOrNothing(t, e, false)
}

// testLayersAllOrNothing is TestLayersAllOrNothing on e, with the layers'
// keys in one slot when oneSlot is set (one script decides them, so a
// denial leaves the other key byte for byte as it was; split decisions are
// checked by testSplitAllOrNothing).
func testLayersAllOrNothing(t *testing.T, e *env, oneSlot bool) {
	c := e.rd
	ctx := context.Background()
	ids := func(u, g string) (string, string) {
		if oneSlot {
			return u + "+" + g, u + "+" + g
		}
		return u, g
	}
	now := vectors.T0.UnixMicro()
	for ua := floodgate.FixedWindow; ua <= floodgate.GCRA; ua++ {
		for ga := floodgate.FixedWindow; ga <= floodgate.GCRA; ga++ {
			t.Run(ua.String()+"+"+ga.String(), func(t *testing.T) {
				user := mustPolicy(t, floodgate.Policy{Name: "user-" + ua.String(), Algorithm: ua, Limit: 5, Window: time.Hour})
				global := mustPolicy(t, floodgate.Policy{Name: "global-" + ga.String(), Algorithm: ga, Limit: 100, Window: time.Hour})
				// The per-user layer denies: the global layer is untouched.
				ui, gi := ids("u1-"+ga.String(), "all-"+ua.String())
				uk, gk := e.key(user, ui), e.key(global, gi)
				layers := []floodgate.Layer{{Policy: user, Key: uk, Cost: 1}, {Policy: global, Key: gk, Cost: 1}}
				for i := range 5 {
					out, err := e.decide(ctx, now, layers)
					if err != nil || !out[0].Allowed || !out[1].Allowed {
						t.Fatalf("request %d: %+v, %v", i, out, err)
					}
				}
				before := snap(t, c, gk)
				out, err := e.decide(ctx, now, layers)
				if err != nil || out[0].Allowed || out[0].Reason != floodgate.ReasonLimited || !out[1].Allowed {
					t.Fatalf("6th request: got %+v, %v; want the user layer limited and the global one admitting", out, err)
				}
				untouched(t, c, gk, before)
				if r, err := e.one(ctx, now, global, gk, 0); err != nil || r.Remaining != 95 {
					t.Fatalf("global layer after a denial: %+v, %v; want 95 remaining", r, err)
				}

				// The global layer denies: the user layer is untouched.
				small := global
				small.Name += "-small"
				small.Limit = 3
				ui, gi = ids("u2-"+ga.String(), "all-"+ua.String())
				uk, gk = e.key(user, ui), e.key(small, gi)
				layers = []floodgate.Layer{{Policy: user, Key: uk, Cost: 1}, {Policy: small, Key: gk, Cost: 1}}
				for i := range 3 {
					if out, err := e.decide(ctx, now, layers); err != nil || !out[0].Allowed || !out[1].Allowed {
						t.Fatalf("request %d: %+v, %v", i, out, err)
					}
				}
				before = snap(t, c, uk)
				out, err = e.decide(ctx, now, layers)
				if err != nil || !out[0].Allowed || out[1].Allowed {
					t.Fatalf("4th request: got %+v, %v; want the global layer denying", out, err)
				}
				untouched(t, c, uk, before)
				if r, err := e.one(ctx, now, user, uk, 0); err != nil || r.Remaining != 2 {
					t.Fatalf("user layer after a denial: %+v, %v; want 2 remaining", r, err)
				}
			})
		}
	}
}

// TestLayersPeekAndMany checks that a peeking layer writes nothing and that
// a decision may have MaxLayers layers.
func TestLayersPeekAndMany(t *testing.T) {
	e, _ := newEnv(t)
	testLayersPeekAndMany(t, e)
}

func testLayersPeekAndMany(t *testing.T, e *env) {
	c := e.rd
	ctx := context.Background()
	now := vectors.T0.UnixMicro()
	ps := allAlgorithms(t, 10, time.Minute)
	var layers []floodgate.Layer
	for i := range floodgate.MaxLayers {
		p := ps[i%len(ps)]
		layers = append(layers, floodgate.Layer{Policy: p, Key: e.key(p, fmt.Sprint("many-", i)), Cost: int64(i % 3)})
	}
	out, err := e.decide(ctx, now, layers)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range out {
		l := layers[i]
		want := algo.Step(l.Policy, algo.State{}, now, l.Cost).Result
		if !sameResults([]floodgate.Result{r}, []floodgate.Result{want}) {
			t.Fatalf("layer %d: got %+v, want %+v", i, r, want)
		}
		n, err := c.Exists(ctx, l.Key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if written := n == 1; written != (l.Cost > 0) {
			t.Fatalf("layer %d with cost %d: key written = %v", i, l.Cost, written)
		}
	}
}

// TestSlotCheck checks which stores split a call whose keys span slots:
// with SlotCheckOn one script runs per slot, with SlotCheckOff and with
// SlotCheckAuto on a plain client one script decides the whole call; keys
// sharing a hash tag are never split.
func TestSlotCheck(t *testing.T) {
	e, _ := newEnv(t)
	c := e.nodes[0]
	ctx := context.Background()
	now := vectors.T0.UnixMicro()
	user := mustPolicy(t, floodgate.Policy{Name: "user", Algorithm: floodgate.FixedWindow, Limit: 5, Window: time.Minute})
	global := mustPolicy(t, floodgate.Policy{Name: "global", Algorithm: floodgate.SlidingWindow, Limit: 100, Window: time.Minute})
	cross := []floodgate.Layer{{Policy: user, Key: e.key(user, "u1"), Cost: 1}, {Policy: global, Key: e.key(global, "all"), Cost: 1}}
	same := []floodgate.Layer{{Policy: user, Key: e.key(user, "u2"), Cost: 1}, {Policy: global, Key: e.key(global, "u2"), Cost: 1}}
	if Slot(cross[0].Key) == Slot(cross[1].Key) {
		t.Fatal("test keys happen to share a slot")
	}
	if _, err := e.decide(ctx, now, same); err != nil { // loads the script
		t.Fatal(err)
	}
	for _, tc := range []struct {
		check   SlotCheck
		layers  []floodgate.Layer
		scripts int
	}{
		{SlotCheckOn, cross, 2},
		{SlotCheckOn, same, 1},
		{SlotCheckOff, cross, 1},
		{SlotCheckAuto, cross, 1},
	} {
		s, err := New(c, Options{SlotCheck: tc.check})
		if err != nil {
			t.Fatal(err)
		}
		e.store = s
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if out, err := e.decide(ctx, now, tc.layers); err != nil || !out[0].Allowed || !out[1].Allowed {
			t.Fatalf("SlotCheck %d: %+v, %v", tc.check, out, err)
		}
		if got := commandCalls(t, c, "evalsha"); got != tc.scripts {
			t.Errorf("SlotCheck %d, keys in %d slots: %d scripts ran, want %d", tc.check, map[bool]int{true: 1, false: 2}[Slot(tc.layers[0].Key) == Slot(tc.layers[1].Key)], got, tc.scripts)
		}
	}
	if _, err := New(c, Options{SlotCheck: 9}); err == nil {
		t.Fatal("New accepted SlotCheck 9")
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Fatal("New accepted a nil client")
	}
	// A nil pointer inside the interface used to be accepted, then panic on
	// the first decision.
	for _, c := range []Client{(*redis.Client)(nil), (*redis.ClusterClient)(nil)} {
		if s, err := New(c, Options{}); s != nil || err == nil {
			t.Fatalf("New(%T(nil)) = %v, %v; want an error", c, s, err)
		}
	}
}

// TestDeniedDecisionReportsStanding: a layer that would have admitted a
// request another layer denied reports what it has left without the
// request, exactly as memstore does (algo.Standing).
func TestDeniedDecisionReportsStanding(t *testing.T) {
	e, _ := newEnv(t)
	testDeniedStanding(t, e)
}

func testDeniedStanding(t *testing.T, e *env) {
	mem, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).UnixMicro()
	tight, _ := floodgate.NewFixedWindow("tight", 1, time.Minute)
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingLog, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA} {
		loose := floodgate.Policy{Name: "loose", Algorithm: alg, Limit: 10, Window: time.Hour}
		id := "standing-" + alg.String()
		mk := func(cost int64) []floodgate.Layer {
			return []floodgate.Layer{
				{Policy: loose, Key: floodgate.Key(e.prefix, loose, id), Cost: cost},
				{Policy: tight, Key: floodgate.Key(e.prefix, tight, id), Cost: cost},
			}
		}
		for _, cost := range []int64{1, 2} { // the second is denied by tight
			var want [2]floodgate.Result
			res, err := e.decide(context.Background(), now, mk(cost))
			if err != nil {
				t.Fatal(err)
			}
			got := [2]floodgate.Result(res)
			if err := mem.Decide(context.Background(), now, mk(cost), want[:]); err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("%v cost %d:\n redis %+v\nmemory %+v", alg, cost, got, want)
			}
		}
	}
}
