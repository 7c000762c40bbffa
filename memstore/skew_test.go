package memstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/monoclock"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// expiresIn returns how long key's entry has left on the Store's clock,
// and false when there is none or it has expired.
func (s *Store) expiresIn(key string) (time.Duration, bool) {
	sh := &s.shards[s.shardOf(key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.entries[key]
	if e == nil {
		return 0, false
	}
	left := e.expires - s.clock.Now()
	return time.Duration(left) * time.Microsecond, left > 0
}

// skewStep is one request of a skewed sequence: from the caller whose
// clock is ahead or the one behind, of a cost.
type skewStep struct {
	ahead bool
	cost  int64
}

// TestSkewedClocksExpireAsRedis runs, for every algorithm, one sequence of
// requests from two callers whose clocks are further apart than
// algo.TTLSlack (the one ahead drains or starts a state, the one behind is
// decided at the state's time) against a Store and against a
// redisstore.Store (binary states, the default) on a private redis-server.
// Every result must be the same, and after every request each store must
// hold the key until the same moment: past the slack, a state from the
// clock ahead is still meaningful to the caller behind when its TTL ends,
// so when it ends decides what that caller gets next (refused until
// then, decided afresh after). Before, a memstore entry lived for its
// state's life plus the slack from its latest write, where the Redis
// script gives a bucket's key twice that life (at most a window more) and
// keeps the TTL a window's or a bucket's key already has when it ends late
// enough: an outside walk saw a token bucket of 2 per 2 s drained from a
// clock an hour ahead admit the caller behind 3 s later in memory and 5 s
// later on Redis. The moments are compared, not decisions sampled over
// seconds: the two stores decide alike at every later time exactly when
// they drop the state together. The tolerance is the time the two stores'
// calls took plus the memstore clock's tick and rounding, far below the
// differences (seconds to hours) the old rule gave.
func TestSkewedClocksExpireAsRedis(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := redisstore.New(srv.Client(t), redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("fgt-skew-%x", time.Now().UnixNano())
	// The callers' clocks run from base, a round instant tomorrow; the
	// one ahead is skew ahead of the one behind.
	base := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	quota, err := floodgate.NewQuota("sq", 10, floodgate.Calendar{Unit: floodgate.PeriodDay, Location: time.UTC})
	if err != nil {
		t.Fatal(err)
	}
	drain := []skewStep{{true, 3}, {false, 1}, {false, 1}, {true, 0}, {false, 2}}
	count := []skewStep{{true, 1}, {false, 1}, {false, 1}, {true, 1}, {false, 1}, {false, 0}}
	for _, tc := range []struct {
		name   string
		p      floodgate.Policy
		behind time.Duration // the clock behind, after base
		skew   time.Duration
		steps  []skewStep
	}{
		// 4 per 4 s: 3 drained from ahead leave 1 token and a life of 3 s,
		// which Redis keeps for 3 + 3 + 1 s; the caller behind takes the
		// last token at the state's time, whose life of 4 s + the slack
		// ends within that TTL, which Redis so keeps.
		{"token bucket", floodgate.Policy{Name: "stb", Algorithm: floodgate.TokenBucket, Limit: 4, Window: 4 * time.Second}, 0, time.Hour, drain},
		{"gcra", floodgate.Policy{Name: "sgc", Algorithm: floodgate.GCRA, Limit: 4, Window: 4 * time.Second}, 0, time.Hour, drain},
		// The clock ahead 3.5 s into a window of 4 s: the key's TTL ends
		// with the window (plus the slack), and the caller behind, decided
		// at the window's start, writes the same window: Redis keeps it.
		{"fixed window", floodgate.Policy{Name: "sfw", Algorithm: floodgate.FixedWindow, Limit: 5, Window: 4 * time.Second}, 0, time.Hour + 3500*time.Millisecond, count},
		{"sliding window", floodgate.Policy{Name: "ssw", Algorithm: floodgate.SlidingWindow, Limit: 5, Window: 4 * time.Second}, 0, time.Hour + 3500*time.Millisecond, count},
		{"sliding log", floodgate.Policy{Name: "ssl", Algorithm: floodgate.SlidingLog, Limit: 5, Window: 4 * time.Second}, 0, time.Hour, count},
		// Two hours apart within one day: the caller behind writes the
		// day's key again, whose TTL Redis keeps (the day's end plus the
		// grace, at the clock ahead).
		{"quota", quota, 10 * time.Hour, 2 * time.Hour, count},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			ms, err := New(Options{})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			start := time.Now()
			var key string
			var slop time.Duration // the longest pair of calls so far
			for i, s := range tc.steps {
				at := base.Add(tc.behind).Add(time.Since(start))
				if s.ahead {
					at = at.Add(tc.skew)
				}
				now := at.UnixMicro()
				if key == "" { // the first request's key (a quota's period): both callers share it
					key = algo.KeyAt(prefix, p, "skew", now)
				}
				layers := []floodgate.Layer{{Policy: p, Key: key, Cost: s.cost}}
				var got, want [1]floodgate.Result
				before := time.Now()
				if err := ms.Decide(ctx, now, layers, got[:]); err != nil {
					t.Fatal(err)
				}
				if err := rs.Decide(ctx, now, layers, want[:]); err != nil {
					t.Fatal(err)
				}
				slop = max(slop, time.Since(before))
				if got != want {
					t.Fatalf("request %d (ahead %v, cost %d): memstore %+v, redisstore %+v", i, s.ahead, s.cost, got[0], want[0])
				}
				left, held := ms.expiresIn(key)
				memEnd := time.Now().Add(left)
				redisEnd, err := srv.Client(t).PExpireTime(ctx, key).Result()
				if err != nil {
					t.Fatal(err)
				}
				if redisEnd < 0 {
					if held {
						t.Fatalf("request %d (ahead %v, cost %d): memstore holds the state for %v, Redis holds no key (%v)", i, s.ahead, s.cost, left, redisEnd)
					}
					continue
				}
				d := memEnd.Sub(time.UnixMilli(redisEnd.Milliseconds()))
				if tol := slop + 2*time.Millisecond + 10*monoclock.Tick; !held || d > tol || d < -tol {
					t.Fatalf("request %d (ahead %v, cost %d, %+v): memstore holds the state for %v (held %v), Redis %v: they drop it %v apart (tolerance %v)",
						i, s.ahead, s.cost, got[0], left, held, time.Until(time.UnixMilli(redisEnd.Milliseconds())), d, tol)
				}
			}
		})
	}
}
