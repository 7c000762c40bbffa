package redisstore

import (
	"testing"

	"github.com/floodgate-rl/floodgate/internal/vectors"
)

// TestVectors runs the shared step vectors against a private Redis, with
// a Store of each state format: every result must equal the pure step
// function's exactly.
func TestVectors(t *testing.T) {
	forEachFormat(t, func(t *testing.T, e *env) {
		vectors.RunCases(t, append(vectors.All(), vectors.Calendar()...), "redis-"+e.prefix, e.decider())
	})
}
