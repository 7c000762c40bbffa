// Package memstore is Floodgate's in-process store: the same decisions as
// the Redis store, computed by algo.Step under sharded locks. Use it to
// rate limit inside one process, or as the local fallback when Redis is
// unreachable. Counters are per process: N instances each with a memstore
// admit N times the limit.
package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/monoclock"
)

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Shards is the number of independently locked partitions of the key
	// space, rounded up to a power of two. Default 64.
	Shards int
	// MaxKeys caps the number of identities tracked at once, so a flood of
	// distinct identities cannot exhaust memory. When the cap is reached
	// and no expired state can be reclaimed, a decision for a new identity
	// fails with floodgate.ErrStoreFull. Default 1,000,000.
	MaxKeys int
}

// Store is an in-memory floodgate.Store. It is safe for concurrent use.
// Expiry runs on the process's monotonic clock, not on the decisions'
// timestamps, so a wall clock jumping backwards neither keeps state alive
// nor revives it. The clock is read through a monoclock.Clock: a reading a
// timer refreshes every 10 ms while the Store is in use, since reading the
// clock itself on every decision cost about a sixth of one. States may so
// expire up to a tick (plus the scheduler's delay in running the timer)
// early, well inside the second of slack every TTL carries
// (algo.TTLSlack). The timer stops when the Store has not been used
// for a second, so a Store needs no Close.
type Store struct {
	seed   maphash.Seed
	shards []shard
	mask   uint64
	perCap int
	clock  *monoclock.Clock
}

type shard struct {
	_       [64]byte // keep each shard's lock and counters off its neighbours' cache lines
	mu      sync.Mutex
	writes  uint32
	entries map[string]*entry
	_       [40]byte
}

type entry struct {
	state   algo.State
	expires int64 // monotonic µs on Store.clock
}

// New returns an empty Store.
func New(opts Options) (*Store, error) {
	if opts.Shards < 0 || opts.Shards > 1<<16 {
		return nil, fmt.Errorf("memstore: shards %d out of range 0..65536", opts.Shards)
	}
	if opts.MaxKeys < 0 {
		return nil, fmt.Errorf("memstore: max keys %d is negative", opts.MaxKeys)
	}
	if opts.Shards == 0 {
		opts.Shards = 64
	}
	if opts.MaxKeys == 0 {
		opts.MaxKeys = 1_000_000
	}
	n := 1
	for n < opts.Shards {
		n <<= 1
	}
	s := &Store{
		seed:   maphash.MakeSeed(),
		shards: make([]shard, n),
		mask:   uint64(n - 1),
		perCap: max(opts.MaxKeys/n, 1),
		clock:  monoclock.New(),
	}
	for i := range s.shards {
		s.shards[i].entries = make(map[string]*entry)
	}
	return s, nil
}

// Len returns the number of identities currently stored, expired ones not
// yet reclaimed included.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.entries)
		sh.mu.Unlock()
	}
	return n
}

func (s *Store) shardOf(key string) int { return int(maphash.String(s.seed, key) & s.mask) }

// Decide implements floodgate.Store: all layers are decided under their
// shards' locks (taken in ascending order), and committed only if every
// layer admits.
func (s *Store) Decide(ctx context.Context, now int64, layers []floodgate.Layer, out []floodgate.Result) error {
	if len(layers) == 0 || len(layers) > floodgate.MaxLayers || len(out) != len(layers) {
		return fmt.Errorf("%w: %d layers, %d results", floodgate.ErrInvalidLayers, len(layers), len(out))
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", floodgate.ErrStoreUnavailable, err)
	}
	if len(layers) == 1 {
		return s.decideOne(now, &layers[0], &out[0])
	}
	var idx [floodgate.MaxLayers]int
	var locked [floodgate.MaxLayers]int
	nl := 0
	for i, l := range layers {
		idx[i] = s.shardOf(l.Key)
		// Insert into the sorted set of shards to lock.
		j := nl
		for j > 0 && locked[j-1] > idx[i] {
			j--
		}
		if j > 0 && locked[j-1] == idx[i] {
			continue
		}
		copy(locked[j+1:nl+1], locked[j:nl])
		locked[j] = idx[i]
		nl++
	}
	for _, k := range locked[:nl] {
		s.shards[k].mu.Lock()
	}
	defer func() {
		for _, k := range locked[:nl] {
			s.shards[k].mu.Unlock()
		}
	}()

	mono := s.clock.Now() // under the locks, so no wait for them ages it
	var outcomes [floodgate.MaxLayers]algo.Transition
	var ents [floodgate.MaxLayers]*entry
	var states [floodgate.MaxLayers]algo.State
	all := true
	for i := range layers {
		l := &layers[i]
		sh := &s.shards[idx[i]]
		e := sh.entries[l.Key]
		if e != nil && e.expires > mono {
			states[i] = e.state
		}
		ents[i] = e
		algo.StepTo(&outcomes[i], &l.Policy, &states[i], now, l.Cost)
		out[i] = outcomes[i].Result
		if !outcomes[i].Result.Allowed {
			all = false
		}
	}
	if !all {
		// Layers that would have admitted report their standing without
		// the request, since nothing is consumed.
		for i, l := range layers {
			if out[i].Allowed && l.Cost > 0 {
				out[i] = algo.Standing(l.Policy, states[i], now)
			}
		}
		return nil
	}
	// Make room for new identities before writing anything, so a full
	// store fails the whole decision rather than part of it.
	for i, l := range layers {
		if outcomes[i].Commit && ents[i] == nil {
			sh := &s.shards[idx[i]]
			if len(sh.entries) >= s.perCap {
				sh.sweep(mono, len(sh.entries))
				if len(sh.entries) >= s.perCap {
					return fmt.Errorf("%w: %d identities in shard (cap %d); new key %q not tracked", floodgate.ErrStoreFull, len(sh.entries), s.perCap, l.Key)
				}
			}
		}
	}
	for i, l := range layers {
		o := &outcomes[i]
		if !o.Commit {
			continue
		}
		sh := &s.shards[idx[i]]
		e := ents[i]
		if e == nil {
			// A new entry keeps its own copy of the key: the caller may reuse
			// the key's bytes (see BorrowsKeys). An existing entry is updated
			// through its pointer, never by assigning to the map, which would
			// store the caller's key in place of the copy.
			e = &entry{}
			sh.entries[strings.Clone(l.Key)] = e
		}
		e.state = compact(o.State)
		e.expires = mono + o.TTL
		sh.wrote(mono)
	}
	return nil
}

// decideOne is Decide for one layer: one lock, no per-layer arrays.
func (s *Store) decideOne(now int64, l *floodgate.Layer, out *floodgate.Result) error {
	sh := &s.shards[s.shardOf(l.Key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	mono := s.clock.Now() // see Decide
	e := sh.entries[l.Key]
	st := &zeroState
	if e != nil && e.expires > mono {
		st = &e.state
	}
	var o algo.Transition
	algo.StepTo(&o, &l.Policy, st, now, l.Cost)
	*out = o.Result
	if !o.Commit {
		return nil
	}
	if e == nil {
		if len(sh.entries) >= s.perCap {
			sh.sweep(mono, len(sh.entries))
			if len(sh.entries) >= s.perCap {
				return fmt.Errorf("%w: %d identities in shard (cap %d); new key %q not tracked", floodgate.ErrStoreFull, len(sh.entries), s.perCap, l.Key)
			}
		}
		e = &entry{}
		sh.entries[strings.Clone(l.Key)] = e // see Decide
	}
	e.state = compact(o.State)
	e.expires = mono + o.TTL
	sh.wrote(mono)
	return nil
}

// zeroState is the state of an identity with none stored; never written.
var zeroState algo.State

// wrote counts a write and, every sweepEvery writes, reclaims a few
// expired entries, so memory follows the live identities without a
// background goroutine.
func (sh *shard) wrote(mono int64) {
	sh.writes++
	if sh.writes%sweepEvery == 0 {
		sh.sweep(mono, 32)
	}
}

// sweepEvery is how many writes to a shard trigger one incremental sweep.
const sweepEvery = 256

// sweep deletes up to limit expired entries, visiting at most 4×limit
// (map iteration starts at a random place, so repeated sweeps cover the
// shard).
func (sh *shard) sweep(mono int64, limit int) {
	seen, freed := 0, 0
	for k, e := range sh.entries {
		if e.expires <= mono {
			delete(sh.entries, k)
			freed++
			if freed >= limit {
				return
			}
		}
		seen++
		if seen >= 4*limit {
			return
		}
	}
}

// compact bounds the memory a sliding log holds: once the live entries use
// less than a quarter of the backing array, they are copied to a fresh one.
func compact(st algo.State) algo.State {
	if c := cap(st.Log); c > 16 && len(st.Log) < c/4 {
		st.Log = append(make([]algo.LogEntry, 0, 2*len(st.Log)), st.Log...)
	}
	return st
}

// BorrowsKeys reports true: the Store keeps no reference to a layer's Key
// after Decide returns (it stores a copy of each new key), so a
// floodgate.Limiter may build keys in a reused buffer (see
// algo.KeyBorrower).
func (s *Store) BorrowsKeys() bool { return true }

// Reset forgets key's state (for example an admin unlocking an identity).
func (s *Store) Reset(key string) {
	sh := &s.shards[s.shardOf(key)]
	sh.mu.Lock()
	delete(sh.entries, key)
	sh.mu.Unlock()
}
