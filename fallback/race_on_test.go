//go:build race

package fallback_test

// raceEnabled: the race detector changes allocation counts.
const raceEnabled = true
