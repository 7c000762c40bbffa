package memstore

import "github.com/floodgate-rl/floodgate/internal/shardmap"

// Reclaiming expired entries. Three things delete an expired entry: a
// write to its shard (every sweepEvery writes, a few found from a random
// place), a new identity in a full shard (makeRoom), and the sweep, which
// visits every entry. Only the sweep needs no traffic: without it, the
// expired entries of a flood stayed until writes to each shard happened
// to find them (about eight million writes to drain a million), so a
// process kept a flood's memory for good. The sweep's batches, its
// shrinking of a shard's map, its constants and its timer are
// internal/shardmap's, shared with shardmap.Map.

// Sweep deletes every expired entry now and returns how many it deleted.
// It visits each shard shardmap.SweepHold entries at a time, releasing
// the shard's lock in between (shardmap.Visit), and rebuilds a shard's map
// once it holds at most a quarter of its peak (at least shardmap.ShrinkMin
// entries), so that the heap a flood of identities took is given back: the
// rebuild holds the shard's lock while it copies the live entries
// (shardmap.Shrink). A Store sweeps itself every Options.SweepInterval
// while it holds entries; Sweep is for callers that want the memory back
// at once. It is safe for concurrent use; concurrent sweeps run one after
// the other.
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
	freed := 0
	// The lock is released every shardmap.SweepHold entries, and the map
	// may change meanwhile (see shardmap.Visit): an entry produced is
	// checked to be still stored (on a list) before it is dropped.
	shardmap.Visit(&sh.mu, sh.entries, func(_ string, e *entry) {
		if e.prev != nil && e.expires <= mono {
			sh.drop(e)
			freed++
		}
	}, nil, func() { mono = s.clock.Now() })
	sh.entries, sh.peak = shardmap.Shrink(sh.entries, sh.peak)
	return freed
}
