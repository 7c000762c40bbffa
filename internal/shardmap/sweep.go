package shardmap

import (
	"runtime"
	"sync"
	"time"
)

// The background sweep. Writes drop dead entries a few at a time (Wrote)
// and a full Map drops them to make room (Room), but neither happens in
// an idle Map, or one not full: its dead entries stayed, counted by Len
// and Keys (a store of 951 expired leases held them until shutdown), and
// their memory was kept. The sweep visits every entry every
// Options.SweepInterval while the Map holds any. Its batches (Visit), its
// shrinking of a shard's map (Shrink) and its timer (Sweeper) serve
// memstore's sweep too.

// DefaultSweepInterval is the default of Options.SweepInterval here and
// in memstore.
const DefaultSweepInterval = 30 * time.Second

// SweepHold is how many entries a sweep visits per hold of a shard's
// lock (see Visit), so that operations on the shard wait at most for
// that many.
const SweepHold = 256

// ShrinkMin is the fewest entries a shard's map must have held before a
// sweep rebuilds it (see Shrink): a Go map never gives back its slots, so
// a shard whose entries fell to a quarter of its map's peak gets a map
// sized for those left.
const ShrinkMin = 1024

// Visit calls visit for each entry of entries with mu held, releasing mu
// every SweepHold entries so that an operation waiting for it has it in
// between: it calls pause (if not nil) before each release and resume (if
// not nil) once it holds mu again. The caller holds mu, and holds it when
// Visit returns. entries may change while mu is released, which a range
// over it allows: entries deleted before being reached are not produced,
// new ones may be, and each is produced with mu held. Map.Sweep and
// memstore's sweep use it.
func Visit[K comparable, V any](mu sync.Locker, entries map[K]V, visit func(K, V), pause, resume func()) {
	seen := 0
	for k, v := range entries {
		visit(k, v)
		if seen++; seen%SweepHold == 0 {
			if pause != nil {
				pause()
			}
			mu.Unlock()
			runtime.Gosched() // let an operation waiting for the lock have it
			mu.Lock()
			if resume != nil {
				resume()
			}
		}
	}
}

// Shrink returns m rebuilt at the size of its entries, and that size as
// the new peak, when m holds at most a quarter of peak, the most entries
// it has held, and peak is at least ShrinkMin; otherwise it returns m and
// peak unchanged. The caller holds the lock that guards m while Shrink
// copies the entries. Map.Sweep and memstore's sweep use it.
func Shrink[K comparable, V any](m map[K]V, peak int) (map[K]V, int) {
	n := len(m)
	if peak < ShrinkMin || n > peak/4 {
		return m, peak
	}
	c := make(map[K]V, n)
	for k, v := range m {
		c[k] = v
	}
	return c, n
}

// sweepSlack (µs) is how far behind its reading of an entry's callers'
// clock the sweep looks for dead entries, so that a caller whose clock
// is a little behind the one the entry's last write passed (another
// caller's on the same entry, a clock stepped back a little) still finds
// alive what it considers alive.
const sweepSlack = 1_000_000

// Sweep drops every entry dead at its own callers' clock as the Map reads
// it (see Options.SweepInterval), tidies the others at that clock (in a
// counted Map, see Units.Tidy), and returns how many it dropped. It visits
// each shard SweepHold entries at a time, releasing the shard's lock in
// between (Visit), and rebuilds a shard's map once it holds at most a
// quarter of its peak (at least ShrinkMin entries), the rebuild holding
// the shard's lock while it copies the entries left (Shrink). It is safe for
// concurrent use; concurrent sweeps run one after the other.
func (m *Map[V]) Sweep() int {
	m.sweepMu.Lock()
	defer m.sweepMu.Unlock()
	n := 0
	for i := range m.shards {
		n += m.shards[i].sweepAll()
	}
	return n
}

// sweepAll drops the shard's entries dead at their callers' clocks, tidies
// the others and shrinks its map (see Sweep).
func (s *Shard[V]) sweepAll() (dropped int) {
	s.mu.Lock()
	// freed is what the sweep dropped since it last gave places back to
	// the Map's count, which it does before each release of the lock, so
	// that a Room meanwhile finds them (it found the count unchanged until
	// the shard's sweep ended, and could refuse an entry for want of
	// places already free).
	freed := 0
	giveBack := func() {
		if freed > 0 {
			s.m.keys.Add(-int64(freed))
			dropped += freed
			freed = 0
		}
	}
	defer func() {
		giveBack()
		s.mu.Unlock()
	}()
	// mono is the process's clock less the slack, read again whenever the
	// lock is taken back: an entry's callers' clock is mono plus its offset.
	mono := s.m.elapsed() - sweepSlack
	Visit(&s.mu, s.entries, func(k string, v V) {
		if s.drop(k, v, mono+v.clock().off, true) {
			freed++
		}
	}, giveBack, func() { mono = s.m.elapsed() - sweepSlack })
	s.entries, s.peak = Shrink(s.entries, s.peak)
	return dropped
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
