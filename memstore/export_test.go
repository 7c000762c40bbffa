package memstore

// ShardCaps returns each shard's share of MaxKeys and the smallest.
func (s *Store) ShardCaps() (caps []int, least int) {
	least = int(^uint(0) >> 1)
	for i := range s.shards {
		caps = append(caps, s.shards[i].perCap)
		least = min(least, s.shards[i].perCap)
	}
	return caps, least
}

// Peaks returns the most entries each shard's map has held since it was
// made.
func (s *Store) Peaks() []int {
	var p []int
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		p = append(p, sh.peak)
		sh.mu.Unlock()
	}
	return p
}

// Sweeping reports whether the background sweep's timer is armed or
// running.
func (s *Store) Sweeping() bool { return s.sweeper.Armed() }
