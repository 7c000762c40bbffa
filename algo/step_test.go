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
