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
	"math/bits"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/monoclock"
	"github.com/floodgate-rl/floodgate/internal/shardmap"
)

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Shards is the number of independently locked partitions of the key
	// space, rounded up to a power of two; lowered, when MaxKeys is small,
	// to the largest power of two whose shards hold at least 16
	// identities each (one shard when MaxKeys is below 32), which keeps
	// room for the protected identities of every shard. Default 64; at
	// most 65,536.
	Shards int
	// MaxKeys caps the number of identities tracked at once, so a flood of
	// distinct identities cannot exhaust memory. Each shard holds its
	// share: MaxKeys divided by the number of shards, the first
	// MaxKeys%shards shards one more, so the shares add up to exactly
	// MaxKeys (with MaxKeys 100 and the default 64 shards, 4 shards of 25:
	// see Shards). An identity belongs to one shard (by a hash of its key);
	// a new identity whose shard is full takes the place of an expired
	// entry of that shard or, when there is none, of the shard's least
	// recently used identity decided only once (see Store), even while
	// other shards have room, so a decision never fails because the store
	// is full. Eviction so starts before the store holds MaxKeys
	// identities: with 100,000, when it held 92,294 to 95,216 distinct
	// identities in three runs; with 1,000, 615 to 806
	// (docs/operations.md). (A layered decision whose layers' new keys
	// share a full shard with nothing else to evict there may take it past
	// its share by up to floodgate.MaxLayers-1 entries until its next
	// eviction.) Each tracked identity costs about 175 bytes plus its key
	// (TestMemoryPerKey measured 152 at 100,000 identities and 173 at
	// 1,000,000, the map's fill varying), so the default bound is about 205
	// MB with 30-byte keys. Default 1,000,000.
	MaxKeys int
	// SweepInterval is how often a Store holding entries visits all of
	// them to delete the expired ones (see Sweep), so that the memory of
	// identities no longer in use is given back without traffic. A
	// sweep costs about 180 ns of CPU per entry visited (0.18 s for a
	// million live entries on a loaded 2-core machine: 0.6 % of a CPU at
	// the default), the shards' locks held shardmap.SweepHold entries at
	// a time.
	// Default 30 s; negative turns the background sweep off (Sweep, and
	// the few expired entries writes reclaim as they go, still work).
	SweepInterval time.Duration
}

// Store is an in-memory floodgate.Store. It is safe for concurrent use.
// Make it with New: the zero Store is not usable (floodgate.New refuses
// it).
// A state is kept as long as the Redis store keeps its key (the TTL and
// Keep of algo.Transition: a bucket's life twice, at most a window more,
// and a TTL that ends late enough kept rather than written again), so that
// with callers' clocks further apart than algo.TTLSlack, when a state
// expires, which then decides, is the same in both stores.
// Expiry runs on the process's monotonic clock, not on the decisions'
// timestamps, so a wall clock jumping backwards neither keeps state alive
// nor revives it. The clock is read through a monoclock.Clock: a reading a
// timer refreshes every 10 ms while the Store is in use, since reading the
// clock itself on every decision cost about a sixth of one. States may so
// expire up to a tick (plus the scheduler's delay in running the timer)
// early, well inside the second of slack every TTL carries
// (algo.TTLSlack). The timer stops when the Store has not been used
// for a second, so a Store needs no Close.
//
// Expired entries are deleted by a sweep every Options.SweepInterval,
// run by a timer while the Store holds entries, which stops once it is
// empty (so it also needs no Close; no goroutine exists between sweeps):
// memory follows the live identities, up to an interval late. An
// abandoned Store is so kept from the garbage collector until its last
// entry has expired.
//
// When a new identity's shard holds its share of the bound
// (Options.MaxKeys), which can be before the Store as a whole holds
// MaxKeys, the Store evicts rather than refuses: a new identity replaces
// an expired entry if one is found, else the least recently used
// identity that has been decided only once, else the least recently used
// of all. Identities decided at least twice (an application's real
// users) are kept in a protected part of up to four fifths of the bound,
// so a flood of distinct one-off identities, however large, evicts only
// other one-off identities and never changes the decisions of known
// ones. The protected part is itself least recently used first: a flood
// of identities each decided twice, enough to fill it, pushes out the
// known identities idle meanwhile. An evicted identity starts afresh if
// it comes back, like one whose state expired: size MaxKeys for the live
// identities of the longest window and watch Evictions.
type Store struct {
	seed   maphash.Seed
	shards []shard
	clock  *monoclock.Clock

	sweeper *shardmap.Sweeper // the background sweep (nil: off)
	sweepMu sync.Mutex        // one Sweep at a time
}

type shard struct {
	_         [64]byte // keep each shard's lock and counters off its neighbours' cache lines
	mu        sync.Mutex
	writes    uint32
	perCap    int    // entries before a new one evicts
	protCap   int    // entries the protected list may hold
	lazy      uint32 // pushes before a protected entry is moved again (see touch)
	entries   map[string]*entry
	peak      int  // the most entries since entries was made (see Sweep)
	probation list // see evict.go
	protected list
	evictions uint64
	_         [64]byte
}

type entry struct {
	state      algo.State
	expires    int64  // monotonic µs on Store.clock
	key        string // the map's key, to delete the entry when evicted
	prev, next *entry // its recency list
	seg        uint8  // which list: segProbation or segProtected
	at         uint32 // its list's pushes when it was put at the front
}

// minShare is the fewest identities a shard is given when MaxKeys allows:
// New uses fewer shards rather than smaller ones.
const minShare = 16

// New returns an empty Store.
func New(opts Options) (*Store, error) {
	if opts.Shards < 0 || opts.Shards > 1<<16 {
		return nil, fmt.Errorf("%w: memstore: shards %d out of range 0..65536", floodgate.ErrInvalidPolicy, opts.Shards)
	}
	if opts.MaxKeys < 0 {
		return nil, fmt.Errorf("%w: memstore: max keys %d is negative", floodgate.ErrInvalidPolicy, opts.MaxKeys)
	}
	if opts.Shards == 0 {
		opts.Shards = 64
	}
	if opts.MaxKeys == 0 {
		opts.MaxKeys = 1_000_000
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = shardmap.DefaultSweepInterval
	}
	// A shard of a few identities would have no protected part (four
	// fifths of one is none): a small store gets fewer, larger shards.
	limit := 1 << (bits.Len(uint(max(1, opts.MaxKeys/minShare))) - 1) // a power of two, as shard counts are
	opts.Shards = min(opts.Shards, limit)
	caps := shardmap.Split(opts.Shards, opts.MaxKeys)
	s := &Store{
		seed:   maphash.MakeSeed(),
		shards: make([]shard, len(caps)),
		clock:  monoclock.New(),
	}
	s.sweeper = shardmap.NewSweeper(opts.SweepInterval, func() { s.Sweep() }, s.Len)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.entries = make(map[string]*entry)
		sh.perCap = caps[i]
		sh.protCap = sh.perCap * protectedShare / 5
		sh.lazy = uint32(max(sh.protCap/2, 1))
		sh.probation.init()
		sh.protected.init()
	}
	return s, nil
}

// Evictions returns how many live identities the Store has dropped to make
// room for new ones since it was made (expired entries reclaimed are not
// counted). A growing count means MaxKeys is smaller than the identities
// in use, or a flood of distinct identities is under way.
func (s *Store) Evictions() uint64 {
	var n uint64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.evictions
		sh.mu.Unlock()
	}
	return n
}

// Len returns the number of identities currently stored, expired ones not
// yet reclaimed included (the sweep deletes them within
// Options.SweepInterval).
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

func (s *Store) shardOf(key string) int {
	return shardmap.Index(maphash.String(s.seed, key), len(s.shards))
}

// Decide implements floodgate.Store: all layers are decided under their
// shards' locks (taken in ascending order), and committed only if every
// layer admits. A nil ctx is refused (floodgate.ErrNilContext), and so are
// layers floodgate.CheckLayers refuses; nothing is decided then.
func (s *Store) Decide(ctx context.Context, now int64, layers []floodgate.Layer, out []floodgate.Result) error {
	if ctx == nil {
		return fmt.Errorf("memstore: %w", floodgate.ErrNilContext)
	}
	// As redisstore: layers the Limiter did not check (a caller of
	// Decide itself) are refused, not decided under a zero policy.
	if err := floodgate.CheckLayers(now, layers, out); err != nil {
		return err
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
		if e != nil {
			if e.expires > mono {
				states[i] = e.state
			}
			if !isPinned(e, ents[:i]) { // two layers may share a key
				sh.use(e, mono)
			}
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
	for i, l := range layers {
		o := &outcomes[i]
		if !o.Commit {
			continue
		}
		sh := &s.shards[idx[i]]
		e := ents[i]
		if e == nil {
			// Two layers may share a key: the first one stored it.
			if e = sh.entries[l.Key]; e == nil {
				// A new entry keeps its own copy of the key: the caller may
				// reuse the key's bytes (see BorrowsKeys). An existing entry
				// is updated through its pointer, never by assigning to the
				// map, which would store the caller's key in place of the
				// copy.
				sh.makeRoom(mono, ents[:len(layers)])
				e = &entry{}
				sh.insert(strings.Clone(l.Key), e)
				s.sweeper.Arm()
			}
			ents[i] = e
		}
		e.state = compact(o.State)
		if !o.Keep { // Keep: the entry was live and stored for long enough (see algo.Transition)
			e.expires = mono + o.TTL
		}
	}
	// Sweep only once every write is done: a sweep must not reclaim an
	// expired entry a later layer is about to overwrite.
	for i := range layers {
		if outcomes[i].Commit {
			s.shards[idx[i]].wrote(mono)
		}
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
	if e != nil {
		if e.expires > mono {
			st = &e.state
		}
		if !sh.recent(e, mono) {
			sh.use(e, mono)
		}
	}
	var o algo.Transition
	algo.StepTo(&o, &l.Policy, st, now, l.Cost)
	*out = o.Result
	if !o.Commit {
		return nil
	}
	if e == nil {
		sh.makeRoom(mono, nil)
		e = &entry{}
		sh.insert(strings.Clone(l.Key), e) // see Decide
		s.sweeper.Arm()
	}
	e.state = compact(o.State)
	if !o.Keep { // see Decide
		e.expires = mono + o.TTL
	}
	sh.wrote(mono)
	return nil
}

// zeroState is the state of an identity with none stored; never written.
var zeroState algo.State

// wrote counts a write and, every sweepEvery writes, reclaims a few
// expired entries of a busy shard between the background sweeps.
func (sh *shard) wrote(mono int64) {
	sh.writes++
	if sh.writes%sweepEvery == 0 {
		sh.sweep(mono, 32, nil)
	}
}

// recent reports whether e is a live protected entry near enough the front
// of its list that a decision on it changes nothing (see touch): the
// common case, checked inline before calling use.
func (sh *shard) recent(e *entry, mono int64) bool {
	return e.seg == segProtected && e.expires > mono && sh.protected.pushes-e.at < sh.lazy
}

// use records a decision on an existing entry. An expired entry counts as
// new (back to the front of probation); a live one is touched.
func (sh *shard) use(e *entry, mono int64) {
	if e.expires > mono {
		sh.touch(e)
		return
	}
	sh.listOf(e).remove(e)
	e.seg = segProbation
	sh.probation.pushFront(e)
}

// sweepEvery is how many writes to a shard trigger one incremental sweep.
const sweepEvery = 256

// sweep deletes up to limit expired entries not in pinned, visiting at
// most 4×limit (map iteration starts at a random place, so repeated sweeps
// cover the shard), and returns how many it deleted.
func (sh *shard) sweep(mono int64, limit int, pinned []*entry) int {
	seen, freed := 0, 0
	for _, e := range sh.entries {
		if e.expires <= mono && !isPinned(e, pinned) {
			sh.drop(e)
			freed++
			if freed >= limit {
				return freed
			}
		}
		seen++
		if seen >= 4*limit {
			return freed
		}
	}
	return freed
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

// Usable returns nil for a Store made by New, and an error wrapping
// floodgate.ErrInvalidPolicy for the zero Store, which cannot decide
// (see algo.UsableChecker).
func (s *Store) Usable() error {
	if s.shards == nil {
		return fmt.Errorf("%w: memstore: a zero Store cannot decide; make it with memstore.New", floodgate.ErrInvalidPolicy)
	}
	return nil
}

// Reset forgets key's state (for example an admin unlocking an identity)
// and reports whether there was any that had not expired.
func (s *Store) Reset(key string) bool {
	sh := &s.shards[s.shardOf(key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.entries[key]
	if e == nil {
		return false
	}
	live := e.expires > s.clock.Now()
	sh.drop(e)
	return live
}
