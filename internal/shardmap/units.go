package shardmap

import (
	"cmp"
	"fmt"
)

// Units tells a counted Map (NewCounted) what its entries hold inside them
// (a quota period's reservations and settlement outcomes, an identity's
// leases): the units the Map caps in all, on top of its entries.
type Units[V Entry] struct {
	// Of returns the units v holds. It runs with v's shard locked.
	Of func(v V) int
	// Tidy drops what expired at now inside v, freeing its units. It runs
	// with v's shard locked, when the Map is short of units and in the
	// background sweep (Map.Sweep), and leaves v in the Map however
	// little it holds afterwards (unless dead says it can go).
	Tidy func(v V, now int64)
}

// NewCounted returns an empty Map like New that also caps the units its
// entries hold together at opts.MaxUnits. The caller takes units before
// adding to an entry (TakeUnits) and reports every other change to what
// an entry holds (AddUnits); entries that sweeps drop give theirs back.
func NewCounted[V Entry](opts Options, dead func(v V, now int64) bool, units Units[V]) (*Map[V], error) {
	if opts.MaxUnits < 0 {
		return nil, fmt.Errorf("max units %d is negative", opts.MaxUnits)
	}
	if units.Of == nil || units.Tidy == nil {
		return nil, fmt.Errorf("no function to count or tidy entries")
	}
	if opts.MaxUnits == 0 {
		opts.MaxUnits = 1_000_000
	}
	return build(opts, dead, units)
}

// unitsOf returns the units v holds, 0 in a Map that counts none.
func (m *Map[V]) unitsOf(v V) int {
	if m.units.Of == nil {
		return 0
	}
	return m.units.Of(v)
}

// Units returns the units the Map's entries hold, a moment's value under
// concurrent use, and the most they may hold (0 when uncounted).
func (m *Map[V]) Units() (held, max int) { return int(m.held.Load()), int(m.maxUnits) }

// take takes n units if they are free.
func (m *Map[V]) take(n int) bool {
	for {
		h := m.held.Load()
		if h+int64(n) > m.maxUnits {
			return false
		}
		if m.held.CompareAndSwap(h, h+int64(n)) {
			return true
		}
	}
}

// AddUnits records that the shard's entries hold n more units (n < 0:
// fewer) than they did, for changes not taken with TakeUnits: what
// expired, was removed, or what TakeUnits took but the caller did not use.
func (s *Shard[V]) AddUnits(n int) { s.m.held.Add(int64(n)) }

// TakeUnits takes n units for the shard's entries if the Map has them free,
// exactly, whatever other shards take at the same time, and reports
// whether it did. When they are not free it first tidies entries
// (Units.Tidy) at now: at most once per fullRetry (µs of now's clock) for
// the whole Map, every entry of this shard, then every entry of each other
// shard whose lock it gets without waiting; otherwise a bounded sample of
// this shard. So a Map short of units does not cost every refused
// operation a pass over all its entries, and units that expire elsewhere
// are found within about a second. No entry is dropped (Room and Wrote
// drop dead ones), so the entries the caller holds stay in the Map. In a
// Map that counts no units it always succeeds.
func (s *Shard[V]) TakeUnits(now int64, n int) bool {
	m := s.m
	if m.units.Of == nil {
		return true
	}
	if m.take(n) {
		return true
	}
	at := m.unitsFullAt.Load()
	if since := now - at; at != 0 && since >= 0 && since < fullRetry || !m.unitsFullAt.CompareAndSwap(at, cmp.Or(now, -1)) {
		// A pass ran within fullRetry, or another caller claimed one.
		s.tidy(now, sweepVisits*sweepBatch)
		return m.take(n)
	}
	// Free all that expired, not just n: the pass is once a second.
	s.tidy(now, len(s.entries))
	for i := range m.shards {
		if o := &m.shards[i]; o != s && o.mu.TryLock() {
			o.tidy(now, len(o.entries))
			o.mu.Unlock()
		}
	}
	return m.take(n)
}

// tidy runs Units.Tidy on up to limit entries of the shard, from a random
// one, and gives back the units freed.
func (s *Shard[V]) tidy(now int64, limit int) {
	seen := 0
	for _, v := range s.entries {
		if seen >= limit {
			return
		}
		seen++
		u := s.m.units.Of(v)
		s.m.units.Tidy(v, now)
		if d := s.m.units.Of(v) - u; d != 0 {
			s.m.held.Add(int64(d))
		}
	}
}
