package floodgate_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/vectors"
)

// pureStates runs the vectors against Step directly, keeping state in a map.
func TestStepVectors(t *testing.T) {
	states := map[string]floodgate.State{}
	vectors.Run(t, "pure", func(_ context.Context, now time.Time, p floodgate.Policy, id string, cost int64) (floodgate.Result, error) {
		o := floodgate.Step(p, states[id], now.UnixMicro(), cost)
		if o.Commit {
			states[id] = o.State
		}
		return o.Result, nil
	})
}
