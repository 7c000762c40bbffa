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
