package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/vectors"
)

// model is the reference: floodgate.Step with state kept in a Go map, and
// the all-or-nothing rule of Store.Decide.
type model struct {
	states map[string]floodgate.State
	// commits remember, per key, the last commit's time, TTL and wall
	// clock, to keep the comparison clear of real-time expiry in Redis.
	commits map[string]commit
}

type commit struct {
	now, ttl int64 // µs of the simulated clock
	wall     time.Time
}

func newModel() *model {
	return &model{states: map[string]floodgate.State{}, commits: map[string]commit{}}
}

func (m *model) decide(now int64, layers []floodgate.Layer) []floodgate.Result {
	outs := make([]floodgate.Outcome, len(layers))
	all := true
	for i, l := range layers {
		outs[i] = floodgate.Step(l.Policy, m.states[l.Key], now, l.Cost)
		all = all && outs[i].Result.Allowed
	}
	res := make([]floodgate.Result, len(layers))
	for i, o := range outs {
		res[i] = o.Result
		if !all && o.Result.Allowed && layers[i].Cost > 0 {
			res[i] = floodgate.Standing(layers[i].Policy, m.states[layers[i].Key], now)
		}
		if all && o.Commit {
			m.states[layers[i].Key] = o.State
			m.commits[layers[i].Key] = commit{now: now, ttl: o.TTL, wall: time.Now()}
		}
	}
	return res
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

// TestDifferential runs random requests through floodgate.Step and the
// Redis store side by side: every result must be identical.
func TestDifferential(t *testing.T) {
	e, _ := newEnv(t)
	testDifferential(t, e, uint64(time.Now().UnixNano()))
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
