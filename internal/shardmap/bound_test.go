package shardmap

import (
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"testing"
)

// TestMaxKeysIsTheWholeMaps: a Map of 64 shards admits exactly MaxKeys
// distinct keys one after another, and refuses the next, whichever shards
// they fall in. Each shard used to hold only its share (MaxKeys/64,
// rounded), so a key whose shard was full was refused while others had
// room: with MaxKeys 1000 the first refusal came after about 500 keys,
// with MaxKeys 2 at the second key.
func TestMaxKeysIsTheWholeMaps(t *testing.T) {
	for _, maxKeys := range []int{2, 7, 1000} {
		m := newMap(t, Options{Shards: 64, MaxKeys: maxKeys})
		for i := range maxKeys + 1 {
			k := fmt.Sprint("k", i)
			sh := m.Lock(k)
			room := sh.Room(0, 1)
			if room {
				sh.Put(k, &entry{until: 1 << 40}, 0)
			}
			sh.Unlock()
			if want := i < maxKeys; room != want {
				t.Fatalf("MaxKeys %d: key #%d: Room = %v, want %v (%d held)", maxKeys, i+1, room, want, m.Len())
			}
		}
		if held, _ := m.Keys(); held != maxKeys || m.Len() != maxKeys {
			t.Fatalf("MaxKeys %d: Keys %d, Len %d, want %d", maxKeys, held, m.Len(), maxKeys)
		}
	}
}

// TestMaxKeysExactUnderContention: goroutines add distinct keys on every
// shard at once; exactly MaxKeys are admitted, and Delete and the sweeps
// give places back for others.
func TestMaxKeysExactUnderContention(t *testing.T) {
	const maxKeys, per, workers = 1000, 400, 8
	m := newMap(t, Options{Shards: 64, MaxKeys: maxKeys})
	var admitted atomic.Int64
	var first atomic.Value // a key admitted
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			for i := range per {
				k := fmt.Sprintf("g%d:%d", g, i)
				sh := m.Lock(k)
				if sh.Room(0, 1) {
					sh.Put(k, &entry{until: 10}, 0)
					admitted.Add(1)
					first.CompareAndSwap(nil, k)
				}
				sh.Unlock()
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != maxKeys || m.Len() != maxKeys {
		t.Fatalf("%d admitted, %d held of %d keys tried, want %d", got, m.Len(), workers*per, maxKeys)
	}
	// A deleted key's place goes to a key of any shard.
	sh := m.Lock(first.Load().(string))
	sh.Delete(first.Load().(string))
	sh.Delete(first.Load().(string)) // twice gives back one place
	sh.Unlock()
	if held, _ := m.Keys(); held != maxKeys-1 {
		t.Fatalf("Keys %d after a delete, want %d", held, maxKeys-1)
	}
	taken := 0
	for i := range 100 {
		k := fmt.Sprint("new", i)
		sh := m.Lock(k)
		if sh.Room(5, 1) {
			sh.Put(k, &entry{until: 10}, 0)
			taken++
		}
		sh.Unlock()
	}
	if taken != 1 {
		t.Fatalf("%d new keys took the one deleted place, want 1", taken)
	}
	// Once every entry is dead, a pass over every shard frees them all
	// for keys of any shard.
	sh = m.Lock("late")
	if !sh.Room(fullRetry+20, maxKeys) {
		t.Fatal("no room for MaxKeys new keys once every entry died")
	}
	sh.Unlock()
	if held, _ := m.Keys(); held != 0 || m.Len() != 0 {
		t.Fatalf("Keys %d, Len %d after the pass and an unused reservation, want 0", held, m.Len())
	}
}

// TestRoomReservesUntilUnlock: places Room found are the caller's until it
// unlocks the shard, whatever other shards add meanwhile; an overwrite of
// a key held uses none, and the unused ones go back at Unlock.
func TestRoomReservesUntilUnlock(t *testing.T) {
	m := newMap(t, Options{Shards: 4, MaxKeys: 3})
	shardOf := func(k string) *Shard[*entry] { return &m.shards[Index(maphash.String(m.seed, k), len(m.shards))] }
	other := "b"
	for i := 0; shardOf(other) == shardOf("a"); i++ {
		other = fmt.Sprint("b", i)
	}
	sh := m.Lock("a")
	if !sh.Room(0, 2) {
		t.Fatal("no room for 2 in an empty Map of 3")
	}
	if !sh.Room(0, 1) {
		t.Fatal("no room for 1 of the 2 reserved")
	}
	if held, _ := m.Keys(); held != 2 {
		t.Fatalf("Keys %d after asking twice for places within 2, want 2", held)
	}
	o := m.Lock(other)
	if !o.Room(0, 1) || o.Room(0, 2) {
		t.Fatal("another shard: want room for the 1 place left, not for 2")
	}
	o.Unlock() // unused: given back
	sh.Put("a", &entry{until: 100}, 0)
	sh.Put("a", &entry{until: 100}, 0) // an overwrite uses no place
	if held, _ := m.Keys(); held != 2 {
		t.Fatalf("Keys %d with one entry and one place reserved, want 2", held)
	}
	sh.Unlock()
	if held, _ := m.Keys(); held != 1 || m.Len() != 1 {
		t.Fatalf("Keys %d, Len %d after Unlock, want 1", held, m.Len())
	}
}

// TestSweepGivesPlacesBackAsItGoes: the background sweep releases a
// shard's lock every SweepHold entries; by then the places of the entries
// it dropped are the Map's again, so that an entry added meanwhile to
// another shard of a full Map finds room. The sweep used to give them back
// only once it had visited the whole shard: with 300 dead entries in one
// shard and 100 live in the other (MaxKeys 400), a Room on the other
// shard after the first 256 were dropped was refused.
func TestSweepGivesPlacesBackAsItGoes(t *testing.T) {
	const dead, live = 300, 100
	var m *Map[*entry]
	deadVisits, roomBetween := 0, false
	var other string // a key of shard 1
	m, err := New(Options{Shards: 2, MaxKeys: dead + live, SweepInterval: -1}, func(e *entry, now int64) bool {
		if e.until != 1 {
			return false
		}
		// The first dead entry visited after the sweep took the lock
		// back: try to add an entry to the other shard.
		if deadVisits++; deadVisits == SweepHold+1 {
			sh := m.Lock(other)
			roomBetween = sh.Room(0, 1)
			sh.Unlock()
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	var n [2]int
	for i := 0; n[0] < dead || n[1] < live; i++ {
		k := fmt.Sprint(i)
		sh := m.Lock(k)
		idx := 0
		if sh == &m.shards[1] {
			idx = 1
		}
		switch {
		case idx == 0 && n[0] < dead:
			// Sweep judges each entry at its own clock: its Put's now
			// (10 s) advanced by real time, less a second.
			sh.Put(k, &entry{until: 1}, 10_000_000)
		case idx == 1 && n[1] < live:
			sh.Put(k, &entry{until: 1 << 62}, 0)
			other = k
		default:
			sh.Unlock()
			continue
		}
		n[idx]++
		sh.Unlock()
	}
	if held, most := m.Keys(); held != most {
		t.Fatalf("Keys %d of %d, want the Map full", held, most)
	}
	if got := m.Sweep(); got != dead {
		t.Fatalf("Sweep dropped %d, want %d", got, dead)
	}
	if !roomBetween {
		t.Fatalf("a Room on another shard while the sweep had dropped %d entries and released the lock: refused", SweepHold)
	}
	if held, _ := m.Keys(); held != live {
		t.Fatalf("Keys %d after the sweep, want %d", held, live)
	}
}
