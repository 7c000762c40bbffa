package shardmap

import (
	"fmt"
	"sync"
	"testing"
)

// entry is a test value that dies at a fixed instant.
type entry struct {
	Clock
	until int64
}

func deadAt(e *entry, now int64) bool { return now >= e.until }

func newMap(t *testing.T, opts Options) *Map[*entry] {
	t.Helper()
	m, err := New(opts, deadAt)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestNewValidates(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		dead func(*entry, int64) bool
	}{
		{"negative shards", Options{Shards: -1}, deadAt},
		{"too many shards", Options{Shards: 1<<16 + 1}, deadAt},
		{"negative max keys", Options{MaxKeys: -1}, deadAt},
		{"no dead func", Options{}, nil},
	} {
		if m, err := New(tc.opts, tc.dead); err == nil || m != nil {
			t.Errorf("%s: New = %v, %v; want an error", tc.name, m, err)
		}
	}
	for _, tc := range []struct {
		opts            Options
		shards, maxKeys int
	}{
		{Options{}, 64, 1_000_000},
		{Options{Shards: 5, MaxKeys: 80}, 8, 80},
		{Options{Shards: 1 << 16, MaxKeys: 10}, 10, 10},
		{Options{Shards: 1, MaxKeys: 3}, 1, 3},
	} {
		m := newMap(t, tc.opts)
		if _, most := m.Keys(); len(m.shards) != tc.shards || most != tc.maxKeys {
			t.Errorf("%+v: %d shards holding %d, want %d holding %d", tc.opts, len(m.shards), most, tc.shards, tc.maxKeys)
		}
	}
}

// TestMaxKeysExact: no more shards than MaxKeys (it used to be rounded per
// shard: MaxKeys 1, 10 and 100 all held 64 entries, {MaxKeys 10, Shards
// 3} held 8), and a Map filled with many more keys than that holds exactly
// MaxKeys.
func TestMaxKeysExact(t *testing.T) {
	for _, tc := range []struct {
		opts   Options
		shards int
	}{
		{Options{MaxKeys: 1}, 1},
		{Options{MaxKeys: 10}, 10},
		{Options{MaxKeys: 100}, 64},
		{Options{MaxKeys: 10, Shards: 3}, 4},
		{Options{MaxKeys: 1000, Shards: 1}, 1},
		{Options{MaxKeys: 1001, Shards: 16}, 16},
	} {
		m := newMap(t, tc.opts)
		if got := len(m.shards); got != tc.shards {
			t.Errorf("%+v: %d shards, want %d", tc.opts, got, tc.shards)
		}
		for i := range 20 * tc.opts.MaxKeys {
			k := fmt.Sprint("k", i)
			sh := m.Lock(k)
			if sh.Room(0, 1) {
				sh.Put(k, &entry{until: 1}, 0)
			}
			sh.Unlock()
		}
		if got := m.Len(); got != tc.opts.MaxKeys {
			t.Errorf("%+v: holds %d after %d distinct keys, want %d", tc.opts, got, 20*tc.opts.MaxKeys, tc.opts.MaxKeys)
		}
	}
}

// TestIndexSpreads: Index maps hashes into 0..n-1, for powers of two and
// others alike, and spreads evenly hashes spread evenly.
func TestIndexSpreads(t *testing.T) {
	for _, n := range []int{1, 3, 10, 64, 1000} {
		counts := make([]int, n)
		const per = 100
		step := ^uint64(0) / uint64(n*per)
		for i := range uint64(n * per) {
			// Evenly spaced hashes over the whole 64-bit range, each in
			// the middle of its step.
			counts[Index(i*step+step/2, n)]++
		}
		for i, c := range counts {
			if c != per {
				t.Fatalf("n=%d: shard %d got %d of %d evenly spaced hashes, want %d", n, i, c, n*per, per)
			}
		}
	}
	if got := Index(^uint64(0), 7); got != 6 {
		t.Errorf("Index(max, 7) = %d, want 6", got)
	}
}

// TestLockByHashKey: one hash key always reaches the same shard, whose
// entries the next holder of the lock sees.
func TestLockByHashKey(t *testing.T) {
	m := newMap(t, Options{Shards: 16})
	for i := range 100 {
		sh := m.Lock(fmt.Sprintf("tag%d", i))
		sh.Put(fmt.Sprintf("tag%d:a", i), &entry{until: 10}, 0)
		sh.Unlock()
	}
	for i := range 100 {
		sh := m.Lock(fmt.Sprintf("tag%d", i))
		if sh.Get(fmt.Sprintf("tag%d:a", i)) == nil {
			t.Fatalf("tag%d: entry not in the shard of its hash key", i)
		}
		if sh.Get("absent") != nil {
			t.Fatal("Get of an absent key returned an entry")
		}
		sh.Unlock()
	}
	if got := m.Len(); got != 100 {
		t.Fatalf("Len = %d, want 100", got)
	}
}

// TestRoom: a full shard makes room by dropping its dead entries, and
// refuses when they are all alive.
func TestRoom(t *testing.T) {
	m := newMap(t, Options{Shards: 1, MaxKeys: 4})
	sh := m.Lock("")
	defer sh.Unlock()
	if !sh.Room(0, 4) || sh.Room(0, 5) {
		t.Fatal("an empty shard of 4: want room for 4 entries, not for 5")
	}
	for i, until := range []int64{10, 20, 30, 40} {
		sh.Put(fmt.Sprint(i), &entry{until: until}, 0)
	}
	for _, st := range []struct {
		name  string
		now   int64
		n     int
		room  bool
		after int
	}{
		{"full, all alive", 5, 1, false, 4},
		{"full, one dead", 10, 1, true, 3},
		{"two more, one dead left", 25, 2, true, 2},
		{"fits without sweeping", 100, 2, true, 2},
		{"three more, sweep", 100, 3, true, 0},
	} {
		if got := sh.Room(st.now, st.n); got != st.room || sh.Len() != st.after {
			t.Fatalf("%s: Room = %v with %d entries, want %v with %d", st.name, got, sh.Len(), st.room, st.after)
		}
	}
}

// TestFullShardIsNotRescannedPerRefusal: a shard full of live entries
// refuses new ones; after one pass over every entry, the refusals of the
// next second look at a bounded sample each, not at every entry again
// (before: a flood of new identities into a full store cost each refused
// request a pass over the whole shard under its lock). Entries dying in
// that second are still found by the samples, and after it a whole pass
// runs again.
func TestFullShardIsNotRescannedPerRefusal(t *testing.T) {
	const n = 2000
	visits := 0
	m, err := New(Options{Shards: 1, MaxKeys: n}, func(e *entry, now int64) bool {
		visits++
		return now >= e.until
	})
	if err != nil {
		t.Fatal(err)
	}
	sh := m.Lock("")
	defer sh.Unlock()
	for i := range n {
		sh.Put(fmt.Sprint(i), &entry{until: 10_000_000}, 0)
	}
	const refusals = 200
	for i := range refusals {
		if sh.Room(int64(1000+i), 1) {
			t.Fatal("room in a shard full of live entries")
		}
	}
	if limit := n + refusals*sweepVisits*sweepBatch; visits > limit {
		t.Fatalf("%d refusals visited %d entries, want at most %d (one whole pass, then samples)", refusals, visits, limit)
	}
	// One entry dies: a sample finds it within a few calls, as new
	// identities keep coming.
	sh.Put("0", &entry{until: 5000}, 0)
	found := false
	for i := range 1000 {
		if sh.Room(int64(6000+i), 1) {
			found = true
			break
		}
	}
	if !found {
		t.Fatal("samples never found the dead entry")
	}
	// A second later, refusals pass over the whole shard again.
	sh.Put("0", &entry{until: 10_000_000}, 0)
	visits = 0
	if sh.Room(int64(1000+1_000_000), 1) {
		t.Fatal("room in a shard full of live entries")
	}
	if visits != n {
		t.Fatalf("the pass a second later visited %d entries, want all %d", visits, n)
	}
}

// TestWroteSweeps: every 64th write drops dead entries, 32 at most, and
// never a live one.
func TestWroteSweeps(t *testing.T) {
	m := newMap(t, Options{Shards: 1})
	sh := m.Lock("")
	defer sh.Unlock()
	for i := range 40 {
		sh.Put(fmt.Sprint("dead", i), &entry{until: 1}, 0)
		sh.Put(fmt.Sprint("live", i), &entry{until: 100}, 0)
	}
	for range 63 {
		sh.Wrote(50)
	}
	if sh.Len() != 80 {
		t.Fatalf("%d entries after 63 writes, want 80 (no sweep yet)", sh.Len())
	}
	sh.Wrote(50)
	if n := sh.Len(); n >= 80 || n < 80-32 {
		t.Fatalf("%d entries after the 64th write, want between 48 and 79", n)
	}
	for i := range 40 {
		if sh.Get(fmt.Sprint("live", i)) == nil {
			t.Fatalf("live%d dropped", i)
		}
	}
}

// TestConcurrentUse hammers a few hash keys from many goroutines; -race
// checks the locking and the final count checks nothing was lost.
func TestConcurrentUse(t *testing.T) {
	m := newMap(t, Options{Shards: 4, MaxKeys: 1 << 20})
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 200 {
				tag := fmt.Sprint(i % 7)
				sh := m.Lock(tag)
				key := fmt.Sprintf("%s:%d:%d", tag, g, i)
				if sh.Room(int64(i), 1) {
					sh.Put(key, &entry{until: 1 << 40}, 0)
				}
				sh.Wrote(int64(i))
				sh.Unlock()
			}
		})
	}
	wg.Wait()
	if got := m.Len(); got != 16*200 {
		t.Fatalf("Len = %d, want %d", got, 16*200)
	}
}
