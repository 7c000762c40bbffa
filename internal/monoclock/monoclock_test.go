package monoclock

import (
	"sync"
	"testing"
	"time"
)

// TestNeverAheadNeverBack checks, from several goroutines at once, that a
// reading is never ahead of the true clock and that one goroutine's
// readings never decrease, across ticks and across the timer stopping and
// starting again.
func TestNeverAheadNeverBack(t *testing.T) {
	c := New()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := int64(-1)
			for i := range 2000 {
				n := c.Now()
				if truth := time.Since(c.base).Microseconds(); n > truth {
					t.Errorf("goroutine %d: reading %d µs ahead of the clock's %d", g, n, truth)
					return
				}
				if n < last {
					t.Errorf("goroutine %d: reading went back from %d to %d", g, last, n)
					return
				}
				last = n
				if i%500 == 0 {
					time.Sleep(3 * Tick)
				}
			}
		}()
	}
	wg.Wait()
}

// TestAdvancesWhileInUse checks that the reading moves on with time while
// it is read (the timer runs), without asserting how fast.
func TestAdvancesWhileInUse(t *testing.T) {
	c := New()
	first := c.Now()
	deadline := time.Now().Add(10 * time.Second)
	for c.Now() == first {
		if time.Now().After(deadline) {
			t.Fatalf("reading still %d after 10s of use", first)
		}
		time.Sleep(Tick / 2)
	}
}

// TestStopsWhenIdleAndRestarts checks that an unread clock stops its
// timer (no callback left armed) and that the next reading starts it
// again, from the true clock.
func TestStopsWhenIdleAndRestarts(t *testing.T) {
	c := New()
	c.Now()
	deadline := time.Now().Add(30 * time.Second)
	for c.now.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("timer still running 30s after the last reading")
		}
		time.Sleep(IdleTicks * Tick / 4)
	}
	before := time.Since(c.base).Microseconds()
	n := c.Now()
	if n < before {
		t.Fatalf("reading after restart %d, want ≥ %d (taken from the clock)", n, before)
	}
	if c.now.Load() == 0 {
		t.Fatal("a reading did not start the timer again")
	}
}

func BenchmarkNow(b *testing.B) {
	c := New()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Now()
		}
	})
}
