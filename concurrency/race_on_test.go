//go:build race

package concurrency

// raceEnabled: the race detector changes allocation sizes.
const raceEnabled = true
