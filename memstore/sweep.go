package memstore

import (
	"runtime"
	"time"
)

// Reclaiming expired entries. Three things delete an expired entry: a
// write to its shard (every sweepEvery writes, a few found from a random
// place), a new identity in a full shard (makeRoom), and the sweep, which
// visits every entry. Only the sweep needs no traffic: without it, the
// expired entries of a flood stayed until writes to each shard happened
// to find them (about eight million writes to drain a million), so a
// process kept a flood's memory for good.

// defaultSweepInterval is Options.SweepInterval's default.
const defaultSweepInterval = 30 * time.Second

// sweepBatch is how many entries a sweep visits per hold of a shard's
// lock, so that decisions on the shard wait at most for that many.
const sweepBatch = 256

// shrinkMin is the fewest entries a shard's map must have held before a
// sweep rebuilds it: a Go map never gives back its slots, so a shard
// whose entries fell to a quarter of its map's peak gets a map sized for
// those left.
const shrinkMin = 1024

// Sweep deletes every expired entry now and returns how many it deleted.
// It visits each shard sweepBatch entries at a time, releasing the
// shard's lock in between, and rebuilds a shard's map once it holds less
// than a quarter of its peak (at least shrinkMin entries), so that the
// heap a flood of identities took is given back: the rebuild holds the
// shard's lock while it copies the live entries. A Store sweeps itself
// every Options.SweepInterval while it holds entries; Sweep is for
// callers that want the memory back at once. It is safe for concurrent
// use; concurrent sweeps run one after the other.
func (s *Store) Sweep() int {
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	n := 0
	for i := range s.shards {
		n += s.shards[i].sweepAll(s)
	}
	return n
}

// sweepAll deletes the shard's expired entries and shrinks its map (see
// Sweep). The caller holds s.sweepMu.
func (sh *shard) sweepAll(s *Store) int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	mono := s.clock.Now()
	freed, seen := 0, 0
	// The lock is released every sweepBatch entries. The map may change
	// meanwhile, which a range over it allows: entries deleted before
	// being reached are not produced, new ones may be. An entry produced
	// is checked to be still stored (on a list) before it is dropped.
	for _, e := range sh.entries {
		if e.prev != nil && e.expires <= mono {
			sh.drop(e)
			freed++
		}
		if seen++; seen%sweepBatch == 0 {
			sh.mu.Unlock()
			runtime.Gosched() // let a decision waiting for the lock have it
			sh.mu.Lock()
			mono = s.clock.Now()
		}
	}
	if n := len(sh.entries); sh.peak >= shrinkMin && n <= sh.peak/4 {
		m := make(map[string]*entry, n)
		for k, e := range sh.entries {
			m[k] = e
		}
		sh.entries, sh.peak = m, n
	}
	return freed
}
