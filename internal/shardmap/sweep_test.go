package shardmap

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

// TestSweepDefaults: memstore and Map share these; a change to one is a
// change to both stores' sweeps and to what docs/operations.md says.
func TestSweepDefaults(t *testing.T) {
	if DefaultSweepInterval != 30*time.Second || SweepHold != 256 || ShrinkMin != 1024 {
		t.Fatalf("DefaultSweepInterval %v, SweepHold %d, ShrinkMin %d; want 30s, 256, 1024",
			DefaultSweepInterval, SweepHold, ShrinkMin)
	}
}

// TestShrink: a map is rebuilt, with the same entries and its size as
// the new peak, once it holds at most a quarter of a peak of at least
// ShrinkMin entries, and otherwise kept as it is.
func TestShrink(t *testing.T) {
	for _, tc := range []struct {
		name       string
		len, peak  int
		rebuilt    bool
		peakWanted int
	}{
		{"1000 of 4096", 1000, 4096, true, 1000},
		{"exactly a quarter of 4096", 1024, 4096, true, 1024},
		{"one over a quarter of 4096", 1025, 4096, false, 4096},
		{"empty at peak ShrinkMin", 0, 1024, true, 0},
		{"a quarter of ShrinkMin", 256, 1024, true, 256},
		{"peak below ShrinkMin, empty", 0, 1023, false, 1023},
		{"peak below ShrinkMin, a few left", 10, 1000, false, 1000},
		{"nothing has shrunk", 4096, 4096, false, 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := make(map[string]int, tc.peak)
			for i := range tc.len {
				m[fmt.Sprint(i)] = i
			}
			got, peak := Shrink(m, tc.peak)
			if rebuilt := reflect.ValueOf(got).Pointer() != reflect.ValueOf(m).Pointer(); rebuilt != tc.rebuilt {
				t.Fatalf("Shrink(%d entries, peak %d) rebuilt %v, want %v", tc.len, tc.peak, rebuilt, tc.rebuilt)
			}
			if peak != tc.peakWanted {
				t.Fatalf("Shrink(%d entries, peak %d) peak %d, want %d", tc.len, tc.peak, peak, tc.peakWanted)
			}
			if !reflect.DeepEqual(got, m) {
				t.Fatalf("Shrink(%d entries, peak %d) changed the entries: %d left", tc.len, tc.peak, len(got))
			}
		})
	}
}

// lockLog is a sync.Locker that records whether it is held and how often
// it was released.
type lockLog struct {
	held     bool
	releases int
}

func (l *lockLog) Lock() {
	if l.held {
		panic("lockLog: locked twice")
	}
	l.held = true
}

func (l *lockLog) Unlock() {
	if !l.held {
		panic("lockLog: unlocked while not held")
	}
	l.held = false
	l.releases++
}

// TestVisit: every entry is visited once with the lock held, the lock is
// released after every SweepHold entries (pause before, resume after),
// and is held on return.
func TestVisit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		n        int
		releases int
	}{
		{"empty", 0, 0},
		{"one under a batch", 255, 0},
		{"one batch", 256, 1},
		{"a thousand", 1000, 3},
		{"four batches and one", 1025, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := make(map[int]bool, tc.n)
			for i := range tc.n {
				m[i] = false
			}
			mu := &lockLog{held: true}
			pauses, resumes := 0, 0
			Visit(mu, m, func(k int, seen bool) {
				if !mu.held {
					t.Fatalf("entry %d visited with the lock released", k)
				}
				if seen {
					t.Fatalf("entry %d visited twice", k)
				}
				m[k] = true
			}, func() {
				if !mu.held {
					t.Fatal("pause called with the lock released")
				}
				pauses++
			}, func() {
				if !mu.held {
					t.Fatal("resume called with the lock released")
				}
				resumes++
			})
			if !mu.held {
				t.Fatal("lock released on return")
			}
			for k, seen := range m {
				if !seen {
					t.Fatalf("entry %d not visited", k)
				}
			}
			if mu.releases != tc.releases || pauses != tc.releases || resumes != tc.releases {
				t.Fatalf("%d entries: %d releases, %d pauses, %d resumes; want %d each",
					tc.n, mu.releases, pauses, resumes, tc.releases)
			}
		})
	}
}

// TestVisitSeesChangesWhileReleased: entries deleted while the lock is
// released are not visited, as a sweep ranging over the shard's map
// itself (not a copy) must not drop what another operation deleted.
// pause and resume may be nil.
func TestVisitSeesChangesWhileReleased(t *testing.T) {
	const n = 1000
	m := make(map[int]int, n)
	for i := range n {
		m[i] = i
	}
	visited := map[int]bool{}
	mu := &deleter{m: m, visited: visited}
	mu.held = true
	Visit(mu, m, func(k, _ int) { visited[k] = true }, nil, nil)
	if len(visited) != SweepHold {
		t.Fatalf("visited %d entries, want the %d before the first release", len(visited), SweepHold)
	}
}

// deleter is a lockLog that, on its first release, deletes every entry of
// m not yet visited.
type deleter struct {
	lockLog
	m       map[int]int
	visited map[int]bool
}

func (d *deleter) Unlock() {
	d.lockLog.Unlock()
	if d.releases == 1 {
		for k := range d.m {
			if !d.visited[k] {
				delete(d.m, k)
			}
		}
	}
}
