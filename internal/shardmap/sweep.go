package shardmap

import (
	"runtime"
	"time"
)

// The background sweep. Writes drop dead entries a few at a time (Wrote)
// and a full Map drops them to make room (Room), but neither happens in
// an idle Map, or one not full: its dead entries stayed, counted by Len
// and Keys (a store of 951 expired leases held them until shutdown), and
// their memory was kept. The sweep visits every entry every
// Options.SweepInterval while the Map holds any.

// defaultSweepInterval is Options.SweepInterval's default.
const defaultSweepInterval = 30 * time.Second

// sweepHold is how many entries the sweep visits per hold of a shard's
// lock, so that operations on the shard wait at most for that many.
const sweepHold = 256

// shrinkMin is the fewest entries a shard's map must have held before the
// sweep rebuilds it: a Go map never gives back its slots, so a shard
// whose entries fell to a quarter of its map's peak gets a map sized for
// those left.
const shrinkMin = 1024

// sweepSlack (µs) is how far behind its reading of the callers' clock the
// sweep looks for dead entries, so that callers' clocks a little behind
// the one it read (another caller's, a read earlier) still find alive
// what they consider alive.
const sweepSlack = 1_000_000

// observe records the callers' clock: now (µs of the clock the callers
// pass) read at this moment of the process's monotonic clock.
func (m *Map[V]) observe(now int64) {
	m.offset.Store(now - m.elapsed())
	if !m.clocked.Load() {
		m.clocked.Store(true)
	}
}

// Sweep drops every entry dead at the callers' clock as the Map reads it
// (see Options.SweepInterval), tidies the others (in a counted Map, see
// Units.Tidy), and returns how many it dropped. It visits each shard
// sweepHold entries at a time, releasing the shard's lock in between, and
// rebuilds a shard's map once it holds less than a quarter of its peak
// (at least shrinkMin entries), the rebuild holding the shard's lock
// while it copies the entries left. It drops nothing before an operation
// has passed the callers' clock (Room, or a 64th Wrote to a shard). It is
// safe for concurrent use; concurrent sweeps run one after the other.
func (m *Map[V]) Sweep() int {
	if !m.clocked.Load() {
		return 0
	}
	return m.sweepAt(m.elapsed() + m.offset.Load() - sweepSlack)
}

// sweepAt drops every entry dead at now and tidies the others.
func (m *Map[V]) sweepAt(now int64) int {
	m.sweepMu.Lock()
	defer m.sweepMu.Unlock()
	n := 0
	for i := range m.shards {
		n += m.shards[i].sweepAll(now)
	}
	return n
}

// sweepAll drops the shard's entries dead at now, tidies the others and
// shrinks its map (see Sweep).
func (s *Shard[V]) sweepAll(now int64) (freed int) {
	s.mu.Lock()
	defer func() {
		if freed > 0 {
			s.m.keys.Add(-int64(freed))
		}
		s.mu.Unlock()
	}()
	seen := 0
	// The lock is released every sweepHold entries. The map may change
	// meanwhile, which a range over it allows: entries deleted before
	// being reached are not produced, new ones may be, and each is
	// produced with the lock held.
	for k, v := range s.entries {
		if s.drop(k, v, now, true) {
			freed++
		}
		if seen++; seen%sweepHold == 0 {
			s.mu.Unlock()
			runtime.Gosched() // let an operation waiting for the lock have it
			s.mu.Lock()
		}
	}
	if n := len(s.entries); s.peak >= shrinkMin && n <= s.peak/4 {
		m := make(map[string]V, n)
		for k, v := range s.entries {
			m[k] = v
		}
		s.entries, s.peak = m, n
	}
	return freed
}

// drop deletes the entry k (holding v) if it is dead at now, or else, when
// tidy is set and the Map is counted, tidies it; either way it gives back
// the units freed. It does not count a deleted entry off the Map's keys:
// the caller does. It reports whether it deleted the entry.
func (s *Shard[V]) drop(k string, v V, now int64, tidy bool) bool {
	u := s.m.unitsOf(v)
	if s.dead(v, now) {
		delete(s.entries, k)
		s.m.held.Add(-int64(u))
		return true
	}
	if tidy && s.m.units.Tidy != nil {
		s.m.units.Tidy(v, now)
	}
	if d := s.m.unitsOf(v) - u; d != 0 {
		s.m.held.Add(int64(d))
	}
	return false
}

// Close ends the background sweeps, waiting for one under way to finish.
// A Map needs no Close (the sweeps stop by themselves once it is empty),
// but one dropped while it holds entries is otherwise swept, and kept
// from the garbage collector, until they have all died.
func (m *Map[V]) Close() { m.sweeper.Stop() }
