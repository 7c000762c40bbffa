package algo_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/vectors"
)

// TestStepVectors runs the vectors against Step directly, keeping state in a map.
func TestStepVectors(t *testing.T) {
	states := map[string]algo.State{}
	vectors.RunCases(t, append(vectors.All(), vectors.Calendar()...), "pure", func(_ context.Context, now time.Time, p floodgate.Policy, id string, cost int64) (floodgate.Result, error) {
		key := algo.KeyAt("pure", p, id, now.UnixMicro()) // one state per quota period, as the stores keep
		o := algo.Step(p, states[key], now.UnixMicro(), cost)
		if o.Commit {
			states[key] = o.State
		}
		return o.Result, nil
	})
}

// TestFreshRemainingEqualsLimit: for every algorithm a fresh identity's
// Remaining equals the Result's Limit, which is the policy's capacity (its
// Burst for the buckets), and one request of cost 1 leaves one less.
func TestFreshRemainingEqualsLimit(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).UnixMicro()
	for _, p := range []floodgate.Policy{
		floodgate.Must(floodgate.NewFixedWindow("fw", 60, time.Minute)),
		floodgate.Must(floodgate.NewSlidingLog("sl", 60, time.Minute)),
		floodgate.Must(floodgate.NewSlidingWindow("sw", 60, time.Minute)),
		floodgate.Must(floodgate.NewTokenBucket("tb", 60, time.Minute, 20)),
		floodgate.Must(floodgate.NewGCRA("gc", 60, time.Minute, 20)),
		floodgate.Must(floodgate.NewQuota("qt", 60, floodgate.Calendar{Unit: floodgate.PeriodDay})),
	} {
		peek := algo.Step(p, algo.State{}, now, 0).Result
		if peek.Remaining != peek.Limit || peek.Limit != p.Capacity() {
			t.Errorf("%v: fresh peek Limit %d, Remaining %d; want both %d", p, peek.Limit, peek.Remaining, p.Capacity())
		}
		one := algo.Step(p, algo.State{}, now, 1).Result
		if one.Remaining != one.Limit-1 {
			t.Errorf("%v: after one request Limit %d, Remaining %d", p, one.Limit, one.Remaining)
		}
	}
}

// TestPolicyChangeKeepsState pins what docs/configuration.md says a
// change of limit, burst or window does to an identity's state, per
// algorithm: counts keep what was used, a token bucket keeps its tokens
// left (capped at the new burst), and GCRA keeps its time, read in the
// new interval. Each row spends under one policy, then counts what a
// peek reports and how many units of cost 1 pass at once under another.
func TestPolicyChangeKeepsState(t *testing.T) {
	const h = time.Hour
	pol := func(a floodgate.Algorithm, limit int64, window time.Duration, burst int64) floodgate.Policy {
		return floodgate.Must(floodgate.Policy{Name: "change", Algorithm: a, Limit: limit, Window: window, Burst: burst}, nil)
	}
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).UnixMicro()
	for _, c := range []struct {
		name     string
		old, new floodgate.Policy
		spent    int64
		want     int64
	}{
		{"sliding_window limit 400 to 150", pol(floodgate.SlidingWindow, 400, 100*h, 0), pol(floodgate.SlidingWindow, 150, 100*h, 0), 200, 0},
		{"sliding_window limit 400 to 800", pol(floodgate.SlidingWindow, 400, 100*h, 0), pol(floodgate.SlidingWindow, 800, 100*h, 0), 200, 600},
		{"token_bucket limit 400 to 150", pol(floodgate.TokenBucket, 400, 100*h, 0), pol(floodgate.TokenBucket, 150, 100*h, 0), 200, 150},
		{"token_bucket limit 400 to 800", pol(floodgate.TokenBucket, 400, 100*h, 0), pol(floodgate.TokenBucket, 800, 100*h, 0), 200, 200},
		{"token_bucket burst 10 to 3", pol(floodgate.TokenBucket, 100, 100*h, 10), pol(floodgate.TokenBucket, 100, 100*h, 3), 1, 3},
		{"token_bucket burst 10 to 50", pol(floodgate.TokenBucket, 100, 100*h, 10), pol(floodgate.TokenBucket, 100, 100*h, 50), 10, 0},
		{"token_bucket window 100h to 200h", pol(floodgate.TokenBucket, 400, 100*h, 0), pol(floodgate.TokenBucket, 400, 200*h, 0), 200, 200},
		{"gcra limit 400 to 150", pol(floodgate.GCRA, 400, 100*h, 0), pol(floodgate.GCRA, 150, 100*h, 0), 200, 75},
		{"gcra limit 400 to 800", pol(floodgate.GCRA, 400, 100*h, 0), pol(floodgate.GCRA, 800, 100*h, 0), 200, 400},
		{"gcra burst 10 to 3", pol(floodgate.GCRA, 100, 100*h, 10), pol(floodgate.GCRA, 100, 100*h, 3), 1, 2},
		{"gcra burst 10 to 50", pol(floodgate.GCRA, 100, 100*h, 10), pol(floodgate.GCRA, 100, 100*h, 50), 10, 40},
		{"gcra window 100h to 200h", pol(floodgate.GCRA, 400, 100*h, 0), pol(floodgate.GCRA, 400, 200*h, 0), 200, 300},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := algo.Step(c.old, algo.State{}, now, c.spent)
			if !o.Result.Allowed {
				t.Fatalf("spending %d: %+v", c.spent, o.Result)
			}
			s := o.State
			if got := algo.Step(c.new, s, now, 0).Result.Remaining; got != c.want {
				t.Errorf("peek after the change: remaining %d, want %d", got, c.want)
			}
			var passed int64
			for ; passed <= c.want; passed++ {
				o := algo.Step(c.new, s, now, 1)
				if !o.Result.Allowed {
					break
				}
				s = o.State
			}
			if passed != c.want {
				t.Errorf("after the change %d more passed, want %d", passed, c.want)
			}
		})
	}
}

// TestTTLKeep pins the time to live Step gives a committed state, which
// is the Redis script's (a store that follows TTL and Keep drops a state
// when the Redis store does): a window's or quota period's TTL is kept
// over a state of the same window (or period) and window length, a
// bucket's is its life twice (at most a window more) and kept while the
// recorded end is late enough.
func TestTTLKeep(t *testing.T) {
	const s = int64(time.Second / time.Microsecond)
	slack := algo.TTLSlack.Microseconds()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).UnixMicro() // a multiple of every window below
	fw := floodgate.Must(floodgate.NewFixedWindow("fw", 5, 4*time.Second))
	fw8 := floodgate.Must(floodgate.NewFixedWindow("fw", 5, 8*time.Second))
	tb := floodgate.Must(floodgate.NewTokenBucket("tb", 4, 4*time.Second, 4))
	gc := floodgate.Must(floodgate.NewGCRA("gc", 4, 4*time.Second, 4))
	qt := floodgate.Must(floodgate.NewQuota("qt", 10, floodgate.Calendar{Unit: floodgate.PeriodDay}))
	for _, tc := range []struct {
		name     string
		p        floodgate.Policy
		s        algo.State
		at, cost int64
		ttl      int64
		keep     bool
	}{
		{"fixed window, fresh", fw, algo.State{}, now + 3*s, 1, s + slack, false},
		{"fixed window, same window", fw, algo.State{T: now, N: 1, E: 4 * s}, now + s, 1, 3*s + slack, true},
		{"fixed window, behind its state", fw, algo.State{T: now, N: 1, E: 4 * s}, now - time.Hour.Microseconds(), 1, 4*s + slack, true},
		{"fixed window, window grown", fw8, algo.State{T: now, N: 1, E: 4 * s}, now + s, 1, 7*s + slack, false},
		{"token bucket, fresh", tb, algo.State{}, now, 3, 3*s + (3*s + slack) + slack, false},
		{"token bucket, end late enough", tb, algo.State{T: now, N: 1, E: now + 8*s}, now, 1, 4*s + slack, true},
		{"token bucket, end too early", tb, algo.State{T: now, N: 1, E: now + 4*s}, now, 1, 4*s + 4*s + slack, false},
		{"gcra, fresh", gc, algo.State{}, now, 3, 3*s + (3*s + slack) + slack, false},
		{"gcra, end late enough", gc, algo.State{T: now + 3*s, N: now, E: now + 8*s}, now - time.Hour.Microseconds(), 1, 4*s + slack, true},
		{"quota, same period", qt, algo.State{T: now - 10*time.Hour.Microseconds(), N: 1, Prev: now + 14*time.Hour.Microseconds()}, now, 1, 14*time.Hour.Microseconds() + algo.QuotaGrace.Microseconds() + slack, true},
	} {
		o := algo.Step(tc.p, tc.s, tc.at, tc.cost)
		if !o.Commit || o.TTL != tc.ttl || o.Keep != tc.keep {
			t.Errorf("%s: commit %v, TTL %d keep %v; want TTL %d keep %v", tc.name, o.Commit, o.TTL, o.Keep, tc.ttl, tc.keep)
		}
	}
}
