//go:build race

package coalesce

// raceEnabled: the race detector randomizes the scheduler, which the
// batching tests' expectations rest on.
const raceEnabled = true
