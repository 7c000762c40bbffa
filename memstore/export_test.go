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
