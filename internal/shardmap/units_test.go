package shardmap

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

// bag is a test value holding units that expire: one per expiry in until.
type bag struct {
	Clock
	until []int64
}

func (b *bag) units() int { return len(b.until) }

func (b *bag) tidy(now int64) {
	b.until = slices.DeleteFunc(b.until, func(at int64) bool { return at <= now })
}

func (b *bag) dead(now int64) bool { b.tidy(now); return len(b.until) == 0 }

func newCounted(t *testing.T, opts Options) *Map[*bag] {
	t.Helper()
	m, err := NewCounted(opts, (*bag).dead, Units[*bag]{Of: (*bag).units, Tidy: (*bag).tidy})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// put adds a bag of units expiring at until under key, taking them first.
func put(m *Map[*bag], key string, now int64, until ...int64) bool {
	sh := m.Lock(key)
	defer sh.Unlock()
	if !sh.TakeUnits(now, len(until)) {
		return false
	}
	b := sh.Get(key)
	if b == nil {
		b = &bag{}
		sh.Put(key, b, 0)
	}
	b.until = append(b.until, until...)
	return true
}

func TestNewCountedValidates(t *testing.T) {
	units := Units[*bag]{Of: (*bag).units, Tidy: (*bag).tidy}
	for _, tc := range []struct {
		name  string
		opts  Options
		units Units[*bag]
	}{
		{"negative max units", Options{MaxUnits: -1}, units},
		{"no Of", Options{}, Units[*bag]{Tidy: units.Tidy}},
		{"no Tidy", Options{}, Units[*bag]{Of: units.Of}},
		{"negative shards", Options{Shards: -1}, units},
	} {
		if m, err := NewCounted(tc.opts, (*bag).dead, tc.units); err == nil || m != nil {
			t.Errorf("%s: NewCounted = %v, %v; want an error", tc.name, m, err)
		}
	}
	if m, err := New(Options{MaxUnits: 5}, (*bag).dead); err == nil || m != nil {
		t.Errorf("New with MaxUnits = %v, %v; want an error", m, err)
	}
	m := newCounted(t, Options{})
	if held, max := m.Units(); held != 0 || max != 1_000_000 {
		t.Errorf("Units() = %d, %d; want 0 of the default 1,000,000", held, max)
	}
}

// TestTakeUnitsFreesExpired: a Map whose units are all taken refuses more
// until some expire, wherever they are: in the caller's shard, or in
// another one (the units are one budget, not a share per shard). Units
// never exceed the cap.
func TestTakeUnitsFreesExpired(t *testing.T) {
	m := newCounted(t, Options{Shards: 8, MaxKeys: 100, MaxUnits: 10})
	for i := range 10 {
		until := int64(1 << 40)
		if i < 3 {
			until = 100 + int64(i)
		}
		if !put(m, fmt.Sprint("k", i), 0, until) {
			t.Fatalf("unit %d of 10 refused", i)
		}
	}
	if put(m, "new", 50, 1000) || put(m, "k0", 50, 1000) {
		t.Fatal("an 11th unit taken")
	}
	if held, _ := m.Units(); held != 10 {
		t.Fatalf("held %d, want 10", held)
	}
	// More than a second later (a fresh pass over every shard), the first
	// three units have expired: three fit, wherever they were, and no
	// fourth.
	now := int64(2_000_000)
	for i := range 3 {
		if !put(m, fmt.Sprint("n", i), now, now+100) {
			t.Fatalf("unit %d refused after three expired", i)
		}
	}
	if put(m, "n3", now, now+100) {
		t.Fatal("a unit taken beyond the cap")
	}
	if held, _ := m.Units(); held != 10 {
		t.Fatalf("held %d, want 10", held)
	}
	// Entries that hold nothing any more stay (TakeUnits drops none), and
	// a sweep drops them.
	if got := m.Len(); got != 13 {
		t.Fatalf("%d entries, want the 13 put", got)
	}
}

// TestTakeUnitsAfterFailedPass: within a second of a pass over every
// entry, refusals tidy a bounded sample of their own shard, not every
// entry of every shard again; a second later, a whole pass runs again.
func TestTakeUnitsAfterFailedPass(t *testing.T) {
	const n = 2000
	visits := 0
	m, err := NewCounted(Options{Shards: 1, MaxKeys: n, MaxUnits: n}, (*bag).dead, Units[*bag]{
		Of:   (*bag).units,
		Tidy: func(b *bag, now int64) { visits++; b.tidy(now) },
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if !put(m, fmt.Sprint(i), 0, 10_000_000) {
			t.Fatal("refused below the cap")
		}
	}
	const refusals = 200
	for i := range refusals {
		if put(m, "x", int64(1000+i), 10_000_000) {
			t.Fatal("a unit taken beyond the cap")
		}
	}
	if limit := n + refusals*sweepVisits*sweepBatch; visits > limit {
		t.Fatalf("%d refusals tidied %d entries, want at most %d (one whole pass, then samples)", refusals, visits, limit)
	}
	visits = 0
	if put(m, "x", 1000+1_000_000, 10_000_000) {
		t.Fatal("a unit taken beyond the cap")
	}
	if visits != n {
		t.Fatalf("the pass a second later tidied %d entries, want all %d", visits, n)
	}
}

// TestSweepGivesUnitsBack: entries dropped by Room's and Wrote's sweeps
// give their units back, and so do those their dead function tidied.
func TestSweepGivesUnitsBack(t *testing.T) {
	m := newCounted(t, Options{Shards: 1, MaxKeys: 4, MaxUnits: 100})
	for i := range 4 {
		put(m, fmt.Sprint(i), 0, 10, 20, int64(30+i))
	}
	sh := m.Lock("")
	defer sh.Unlock()
	if sh.Room(15, 1) { // no entry dead, but dead tidies each at 15
		t.Fatal("room in a full shard")
	}
	if held, _ := m.Units(); held != 8 {
		t.Fatalf("held %d after a sweep at 15 found nothing dead, want 8 (the 10s tidied away)", held)
	}
	for range sweepEvery {
		sh.Wrote(100)
	}
	if held, _ := m.Units(); held != 0 || sh.Len() != 0 {
		t.Fatalf("held %d in %d entries after a sweep at 100, want none", held, sh.Len())
	}
}

// TestTakeUnitsExactUnderContention: goroutines on every shard take units
// at once; exactly the cap is taken.
func TestTakeUnitsExactUnderContention(t *testing.T) {
	const maxUnits = 500
	m := newCounted(t, Options{Shards: 16, MaxUnits: maxUnits})
	var wg sync.WaitGroup
	var mu sync.Mutex
	taken := 0
	for g := range 32 {
		wg.Go(func() {
			for i := range 100 {
				if put(m, fmt.Sprint(g, ":", i), 1, 1<<40) {
					mu.Lock()
					taken++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if held, _ := m.Units(); taken != maxUnits || held != maxUnits {
		t.Fatalf("%d taken, %d held; want %d", taken, held, maxUnits)
	}
}

// TestUncountedTakesAll: a Map made by New counts no units.
func TestUncountedTakesAll(t *testing.T) {
	m := newMap(t, Options{Shards: 1})
	sh := m.Lock("")
	defer sh.Unlock()
	if !sh.TakeUnits(0, 1<<30) {
		t.Fatal("an uncounted map refused units")
	}
	if held, max := m.Units(); held != 0 || max != 0 {
		t.Fatalf("Units() = %d, %d", held, max)
	}
}
