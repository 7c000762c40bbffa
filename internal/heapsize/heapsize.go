// Package heapsize measures the live heap a piece of code leaves behind,
// for the tests that hold an in-memory store's cost per entry to a bound.
package heapsize

import "runtime"

// Growth returns the live heap f leaves behind, after a collection,
// keeping what f returns alive.
func Growth(f func() any) int64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	kept := f()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(kept)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc)
}
