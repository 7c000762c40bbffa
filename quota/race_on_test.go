//go:build race

package quota

// raceEnabled: the race detector changes allocation sizes.
const raceEnabled = true
