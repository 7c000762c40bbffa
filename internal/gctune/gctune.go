// Package gctune keeps the garbage collector's heap goal at or above a
// floor for processes whose live heap is small but which allocate fast,
// as a rate limit service does: a few megabytes live, tens of megabytes
// of short-lived request objects a second. With GOGC's default of 100 the
// goal is twice the live heap, so such a process collects many times a
// second; a floor of a few tens of megabytes spaces the cycles out and
// costs at most the floor in memory. The goal never exceeds 11 times the
// live heap (MaxPercent): with the 5 MB or so a busy serve keeps live,
// that is about 60 MB, so floors above that change nothing until the
// live heap grows. Once the live heap is half the floor
// or more, the standard 100 % applies again, so the heap never exceeds
// the larger of the floor and twice the live heap (GOMEMLIMIT still
// bounds it as usual).
//
// After every collection, a finalizer re-arms itself and sets the GC
// percentage from the live heap the collection measured.
package gctune

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// MaxPercent is the highest GC percentage a Tuner sets (a goal of 11
// times the live heap), however small that heap.
const MaxPercent = 1000

// Percent returns the GC percentage that puts the heap goal of a live
// heap of live bytes at floor or above: never below 100, never above
// MaxPercent.
func Percent(live, floor uint64) int {
	if live == 0 {
		return MaxPercent
	}
	if floor <= 2*live {
		return 100
	}
	p := math.Ceil((float64(floor)/float64(live) - 1) * 100)
	if p >= MaxPercent {
		return MaxPercent
	}
	return max(int(p), 100)
}

// Tuner adjusts the GC percentage after every collection. Stop it with
// Stop.
type Tuner struct {
	floor   uint64
	stopped atomic.Bool
	mu      sync.Mutex
	last    int // the percentage last set, 0 before the first
	prev    int // the percentage before Start, restored by Stop
	sample  []metrics.Sample
}

// sentinel is the object whose finalizer runs after each collection
// (large enough, and holding a pointer, to stay out of the tiny
// allocator, whose blocks are freed together).
type sentinel struct {
	t *Tuner
	_ [3]uint64
}

// Start keeps the heap goal at floor bytes or above. It returns nil, and
// changes nothing, when floor is 0 or the GOGC environment variable is
// set (an operator's explicit setting wins).
func Start(floor uint64) *Tuner {
	if floor == 0 || os.Getenv("GOGC") != "" {
		return nil
	}
	t := &Tuner{floor: floor, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	t.prev = debug.SetGCPercent(100)
	debug.SetGCPercent(t.prev)
	t.adjust()
	t.arm()
	return t
}

// arm allocates a sentinel whose finalizer adjusts and re-arms.
func (t *Tuner) arm() {
	s := &sentinel{t: t}
	runtime.SetFinalizer(s, func(s *sentinel) {
		if s.t.stopped.Load() {
			return
		}
		s.t.adjust()
		s.t.arm()
	})
}

// adjust sets the percentage for the live heap the last collection left.
func (t *Tuner) adjust() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped.Load() {
		return
	}
	metrics.Read(t.sample)
	var live uint64
	if t.sample[0].Value.Kind() == metrics.KindUint64 {
		live = t.sample[0].Value.Uint64()
	}
	if p := Percent(live, t.floor); p != t.last {
		debug.SetGCPercent(p)
		t.last = p
	}
}

// Stop stops adjusting and restores the percentage from before Start. A
// nil Tuner's Stop does nothing.
func (t *Tuner) Stop() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stopped.Swap(true) {
		debug.SetGCPercent(t.prev)
	}
}

// Current returns the percentage last set (0 before the first, or for a
// nil Tuner).
func (t *Tuner) Current() int {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}
