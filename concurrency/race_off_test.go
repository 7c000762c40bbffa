//go:build !race

package concurrency

const raceEnabled = false
