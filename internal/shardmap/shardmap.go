// Package shardmap is the bookkeeping Floodgate's in-memory stores share: a
// string-keyed map split into shards, each under its own mutex, holding at
// most a fixed number of entries in all, whose dead entries are dropped a
// few at a time as writes come in and by a background sweep (see
// Options.SweepInterval). A counted Map (NewCounted) also caps, across its shards, what its entries
// hold inside them: a quota period's reservations, an identity's leases.
package shardmap

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Options configures a Map. The zero value is ready to use.
type Options struct {
	// Shards is the number of independently locked shards, rounded up to a
	// power of two, and lowered to MaxKeys when MaxKeys is smaller.
	// Default 64; at most 65,536.
	Shards int
	// MaxKeys caps the entries held at once by all shards together,
	// exactly: a shard has room for a new entry while the Map holds fewer
	// than MaxKeys, however the entries fall across shards (see Room).
	// Default 1,000,000.
	MaxKeys int
	// MaxUnits caps, in a Map made by NewCounted, the units all its
	// entries hold together (see Units), exactly, across shards. Default
	// 1,000,000. New refuses it.
	MaxUnits int
	// SweepInterval is how often a Map holding entries visits all of them
	// to drop the dead ones (see Map.Sweep), so that Len, Keys and Units
	// count live entries, and memory follows them, without traffic. The
	// sweep judges each entry at its own callers' clock: the now of the
	// entry's last write (Put, Stamp) advanced by the process's monotonic
	// clock since, less a second. So the sweep leaves callers on different
	// clocks (one identity's a year behind another's) what their own clock
	// considers alive (Wrote's and Room's passes judge every entry they
	// reach at the caller's now, as before), and an entry is dropped between a second and
	// a second plus SweepInterval after it died, as long as the clock of
	// the callers writing it advances with real time (a clock set back by
	// more than a second since the entry's last write would have the sweep
	// drop it early by as much). Callers replaying times that do not
	// advance with real time (a simulation) turn the sweep off; dead
	// entries then go only as before: a few at each 64th write (Wrote),
	// and all a full Map reaches (Room, TakeUnits). Default 30 s;
	// negative turns the background sweep off.
	SweepInterval time.Duration
}

// Sweeping: every sweepEvery writes to a shard drop up to sweepBatch dead
// entries, visiting at most sweepVisits×sweepBatch of them, so dead entries
// are reclaimed about as fast as writes create new ones.
const (
	sweepEvery  = 64
	sweepBatch  = 32
	sweepVisits = 4
	// fullRetry is how long (µs) after a pass over a whole full shard
	// failed to make room Room samples instead of passing again.
	fullRetry = 1_000_000
)

// Map is a string-keyed map of V split into shards. A caller locks the
// shard of the entries it works on (Lock), reads and writes them through
// the Shard, and unlocks it. The Map is safe for concurrent use; a Shard's
// methods other than Unlock need its lock held.
type Map[V Entry] struct {
	seed   maphash.Seed
	shards []Shard[V]
	// keys counts the entries of every shard plus the places Room
	// reserved and no Put has used yet; it never exceeds maxKeys when
	// callers add entries only after Room.
	keys    atomic.Int64
	maxKeys int64
	// keysFullAt is when (µs of the callers' clock) the last pass over
	// every shard to free places for entries began; 0: never.
	keysFullAt atomic.Int64
	// The units of a counted Map (NewCounted); zero Units when uncounted.
	units    Units[V]
	maxUnits int64
	held     atomic.Int64 // units held, by every shard
	// unitsFullAt is when (µs of the callers' clock) the last pass over
	// every shard to free units began; 0: never.
	unitsFullAt atomic.Int64

	sweeper *Sweeper   // the background sweep (nil: off)
	sweepMu sync.Mutex // one Sweep at a time
	// elapsed reads the process's monotonic clock (µs since the Map was
	// made): an entry's callers' clock less it is the entry's offset.
	elapsed func() int64
}

// Entry is what a Map holds: a pointer to a struct embedding Clock, where
// the Map keeps the clock of the entry's callers (see
// Options.SweepInterval).
type Entry interface{ clock() *Clock }

// Clock, embedded in the struct a Map's entries point to, is the clock
// of the entry's callers, as the now of its last write (Shard.Put,
// Shard.Stamp) less the Map's monotonic clock then: one int64.
type Clock struct{ off int64 }

func (c *Clock) clock() *Clock { return c }

// Shard is one part of a Map: its entries, under one mutex.
type Shard[V Entry] struct {
	m       *Map[V]
	mu      sync.Mutex
	entries map[string]V
	writes  uint32
	peak    int // the most entries since entries was made (see Map.Sweep)
	// reserved is the places for new entries Room took from the Map's
	// count and no Put has used yet; Unlock gives them back.
	reserved int
	dead     func(v V, now int64) bool
}

// New returns an empty Map. dead reports whether an entry can be dropped at
// now (for example because everything in it has expired), in whatever
// clock the caller passes to Room and Wrote; it runs with the entry's shard
// locked and may tidy the entry as it goes. The error describes the first
// invalid option, for the caller to wrap in its own sentinel.
func New[V Entry](opts Options, dead func(v V, now int64) bool) (*Map[V], error) {
	if opts.MaxUnits != 0 {
		return nil, fmt.Errorf("max units %d on a map that counts none", opts.MaxUnits)
	}
	return build(opts, dead, Units[V]{})
}

func build[V Entry](opts Options, dead func(v V, now int64) bool, units Units[V]) (*Map[V], error) {
	if opts.Shards < 0 || opts.Shards > 1<<16 {
		return nil, fmt.Errorf("shards %d out of range 0..65536", opts.Shards)
	}
	if opts.MaxKeys < 0 {
		return nil, fmt.Errorf("max keys %d is negative", opts.MaxKeys)
	}
	if dead == nil {
		return nil, fmt.Errorf("no function to tell dead entries")
	}
	if opts.Shards == 0 {
		opts.Shards = 64
	}
	if opts.MaxKeys == 0 {
		opts.MaxKeys = 1_000_000
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = DefaultSweepInterval
	}
	m := &Map[V]{seed: maphash.MakeSeed(), shards: make([]Shard[V], len(Split(opts.Shards, opts.MaxKeys))),
		maxKeys: int64(opts.MaxKeys), units: units, maxUnits: int64(opts.MaxUnits)}
	for i := range m.shards {
		m.shards[i] = Shard[V]{m: m, entries: make(map[string]V), dead: dead}
	}
	base := time.Now()
	m.elapsed = func() int64 { return time.Since(base).Microseconds() }
	m.sweeper = NewSweeper(opts.SweepInterval, func() { m.Sweep() }, func() int { held, _ := m.Keys(); return held })
	return m, nil
}

// Split returns the caps of the shards an in-memory store that bounds
// each shard on its own (memstore, denycache) splits maxKeys entries over,
// one per shard: shards (at least 1) rounded up to a power
// of two, but no more shards than maxKeys (at least 1), each cap
// maxKeys/len, the first maxKeys%len one more, so the caps add up to
// exactly maxKeys. Reach a shard with Index.
func Split(shards, maxKeys int) []int {
	maxKeys = max(maxKeys, 1)
	n := 1
	for n < shards {
		n <<= 1
	}
	n = min(n, maxKeys)
	caps := make([]int, n)
	for i := range caps {
		caps[i] = maxKeys / n
		if i < maxKeys%n {
			caps[i]++
		}
	}
	return caps
}

// Index returns which of n shards a 64-bit hash falls in, spreading
// uniform hashes evenly whether or not n is a power of two (the high word
// of hash×n, which costs one multiplication where a modulo costs a
// division).
func Index(hash uint64, n int) int {
	hi, _ := bits.Mul64(hash, uint64(n))
	return int(hi)
}

// Lock locks and returns the shard for hashKey. Entries that must change
// together under one lock (one identity's keys, say) are reached through
// one hashKey, such as their common hash tag. The caller unlocks the shard
// when it is done.
func (m *Map[V]) Lock(hashKey string) *Shard[V] {
	sh := &m.shards[Index(maphash.String(m.seed, hashKey), len(m.shards))]
	sh.mu.Lock()
	return sh
}

// Len returns the number of entries in the Map, dead ones not yet dropped
// (by the background sweep, see Options.SweepInterval) included. It locks one shard at a time, so under concurrent writes the
// count is a moment's approximation.
func (m *Map[V]) Len() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += len(sh.entries)
		sh.mu.Unlock()
	}
	return n
}

// Keys returns the entries the Map holds, dead ones not yet dropped
// included, plus the places Room has reserved for entries not yet put (a
// moment's value under concurrent use, read without locking), and the
// most it holds (MaxKeys).
func (m *Map[V]) Keys() (held, max int) { return int(m.keys.Load()), int(m.maxKeys) }

// Unlock gives back the places Room reserved that no Put used, and unlocks
// the shard.
func (s *Shard[V]) Unlock() {
	if s.reserved != 0 {
		s.m.keys.Add(-int64(s.reserved))
		s.reserved = 0
	}
	s.mu.Unlock()
}

// Get returns the entry of key, or the zero V if there is none.
func (s *Shard[V]) Get(key string) V { return s.entries[key] }

// Put sets the entry of key, written by a caller whose clock reads now
// (see Stamp). A caller adding keys checks Room first: a new key uses a
// place Room reserved (or, without one, counts past MaxKeys), and arms
// the background sweep.
func (s *Shard[V]) Put(key string, v V, now int64) {
	s.Stamp(v, now)
	n := len(s.entries)
	if s.entries[key] = v; len(s.entries) == n {
		return
	}
	s.peak = max(s.peak, n+1)
	s.m.sweeper.Arm()
	if s.reserved > 0 {
		s.reserved--
	} else {
		s.m.keys.Add(1)
	}
}

// Stamp records now as the clock of the callers writing v, an entry of
// the shard: the background sweep judges v at that clock, advanced by
// real time since (see Options.SweepInterval). A caller changing an entry
// in place stamps it, so that the entry's clock is its last writer's.
func (s *Shard[V]) Stamp(v V, now int64) { v.clock().off = now - s.m.elapsed() }

// Delete removes the entry of key, if any. It gives back none of the
// entry's units: the caller deletes only entries that hold none, or gives
// theirs back with AddUnits.
func (s *Shard[V]) Delete(key string) {
	n := len(s.entries)
	if delete(s.entries, key); len(s.entries) != n {
		s.m.keys.Add(-1)
	}
}

// Len returns the number of entries in the shard, dead ones included.
func (s *Shard[V]) Len() int { return len(s.entries) }

// Room reports whether n more entries fit in the Map, and if so reserves
// places for them until the shard is unlocked, so that they fit whatever
// other shards add meanwhile: the Map holds MaxKeys entries in all
// however they fall across shards, and a shard refuses a new one only
// when the Map as a whole holds MaxKeys. When they do not fit, it first
// drops dead entries (at now) and looks again: every entry of this
// shard, then every entry of each other shard whose lock it gets without
// waiting, unless such a pass found no dead entry less than fullRetry (µs
// of now's clock) before; then a bounded sample of this shard. So a Map full of live entries
// (a flood of new identities) does not cost every refused operation a
// pass over all of them, and entries that die elsewhere are found within
// about a second (sooner by the sweeps of writes: see Wrote). A caller
// that would add entries asks before changing anything, so that a full
// Map refuses an operation without applying part of it.
func (s *Shard[V]) Room(now int64, n int) bool {
	if s.reserve(n) {
		return true
	}
	m := s.m
	at := m.keysFullAt.Load()
	if since := now - at; at != 0 && since >= 0 && since < fullRetry || !m.keysFullAt.CompareAndSwap(at, cmp.Or(now, -1)) {
		// A pass ran within fullRetry, or another caller claimed one.
		s.sweep(now, max(n, sweepBatch))
		return s.reserve(n)
	}
	// Drop all that died, not just n: the pass is once a second.
	freed := s.sweep(now, len(s.entries))
	for i := range m.shards {
		if o := &m.shards[i]; o != s && o.mu.TryLock() {
			freed += o.sweep(now, len(o.entries))
			o.mu.Unlock()
		}
	}
	if freed > 0 {
		// A pass that found dead entries does not hold off the next:
		// shards busy during it (TryLock) may hold more. Only a pass
		// that found none waits fullRetry (a store full of live
		// entries). Otherwise the operations of the next second were
		// refused while dead entries held their places (a concurrent
		// test: 61 of 1,040 refused, 979 held of 1,000, all expired).
		m.keysFullAt.CompareAndSwap(cmp.Or(now, -1), 0)
	}
	return s.reserve(n)
}

// reserve makes sure the shard holds places for n new entries, taking
// from the Map's count what it lacks if that many are free.
func (s *Shard[V]) reserve(n int) bool {
	need := int64(n - s.reserved)
	if need <= 0 {
		return true
	}
	for {
		k := s.m.keys.Load()
		if k+need > s.m.maxKeys {
			return false
		}
		if s.m.keys.CompareAndSwap(k, k+need) {
			s.reserved += int(need)
			return true
		}
	}
}

// Wrote counts a write to the shard. Every 64th write drops up to 32 dead
// entries (at now), visiting at most 128.
func (s *Shard[V]) Wrote(now int64) {
	if s.writes++; s.writes%sweepEvery == 0 {
		s.sweep(now, sweepBatch)
	}
}

// sweep drops up to limit dead entries, visiting at most sweepVisits×limit,
// and gives back the units of those it drops (and those that dead freed
// tidying). Map iteration starts at a random entry, so successive sweeps
// cover the whole shard.
func (s *Shard[V]) sweep(now int64, limit int) (freed int) {
	seen := 0
	defer func() {
		if freed > 0 {
			s.m.keys.Add(-int64(freed))
		}
	}()
	for k, v := range s.entries {
		if s.drop(k, v, now, false) {
			if freed++; freed >= limit {
				return freed
			}
		}
		if seen++; seen >= sweepVisits*limit {
			return freed
		}
	}
	return freed
}
