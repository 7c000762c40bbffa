// Package denycache wraps a floodgate.Store with a local cache of denials,
// so that a flood of requests from an identity that is already limited
// costs no store round trips.
//
// When the store denies a layer on its own account, the cache remembers,
// for that key and policy, the cost c that was denied and the instant
// T = now + RetryAfter until which that cost cannot fit. A later decision
// before T in which every layer is covered by such a denial (same policy,
// and the cost c, or any cost of at least c when c was denied as above
// the policy's capacity) is denied locally: each layer gets its
// remembered result with RetryAfter recomputed as T − now (however long
// MaxTTL lets the entry answer), and Saved counts one round trip saved.
//
// Why this never admits what the store would deny: the cache only ever
// answers with denials; everything else goes to the store. Since a denied
// decision writes nothing, skipping the store leaves its state exactly as
// the store alone would have.
//
// While every caller of the store decides on one clock, a cached denial is
// also one the store would repeat: until T, a layer's room for its key can
// only shrink (other requests consume, a denied request consumes nothing,
// and time has not yet freed enough for c), and a larger cost fits even
// less (but may need a longer wait, so a limited denial answers its own
// cost only). The package's differential test checks this against the
// bare store with random traffic on one clock (which moves forward in
// most steps, back in some, within the bound below): same decisions, same
// reasons; a cached RetryAfter can only be shorter (it is exact for the
// cost that was denied, but for a layer that requests through another
// cache, another instance's, consumed since). A layer the store admits
// through this cache drops its key's entry: a smaller cost admitted after
// a denial leaves the entry's Remaining and RetryAfter untrue (an outside
// walk saw a cached Remaining of 5 where the store said 0, and a retry
// hint 400 ms short). The binding layer is the same but in one case: a
// layered denial binds the layer with the longest wait (floodgate.Outlasts),
// and when a cached wait is shorter than the store's the cache may bind
// another denying layer, whose wait is then no longer than the one the
// store alone would report, and a client that waits it may be denied
// again.
//
// Clocks that disagree make the cache deny what the store would admit,
// never the reverse, by at most the disagreement. A key's state keeps the
// latest time it was decided at, and the store decides a now earlier than
// that at that time (see algo.Step). So when another instance whose clock
// is d ahead of this one's decides the key, the room its time frees is
// there for this instance's requests too, up to d before T on this
// instance's clock, while the cache still denies them until T; the same
// happens when this instance's clock steps back by d after it learnt the
// denial (and MaxTTL then runs d longer in real time). Such a denial comes
// with a RetryAfter up to d longer than the store's. The under-admission is
// bounded per entry by the skew between the instances sharing the store, or
// the step, and by the entry's life; disciplined clocks (clocksync, see
// docs/operations.md) keep it within their error.
//
// Layered decisions: answered locally only when all their layers are cached
// denials, because then every layer's outcome is known. A decision in which
// one layer is limited and the others would admit still goes to the store:
// the cache cannot know the other layers' current state (shared layers are
// consumed by other identities) and the caller reports them. Single-layer
// decisions, the flood case, are answered whenever covered.
//
// Peeks (cost 0 on every layer) always go to the store; a denied peek still
// teaches the cache that a cost of 1 does not fit.
//
// Behind a fallback.Store (package fallback), a decision taken by a
// failure mode while the primary store fails (fallback.ModeClosed's
// denial of every request, or the local store's at its own limit) is
// not the primary's state: it is passed on but never cached, so that the
// primary decides again as soon as it is back. The cache learns which
// decisions those were from the fallback store, through the context of
// each call, at the cost of one allocation per call to it when the
// caller's context does not carry a place for it already (httplimit's
// does); over any other store, nothing. Unwrap returns the wrapped store:
// httplimit looks through it for a fallback.Store, and answers its
// failure modes' decisions apart.
//
// What it cannot see: a denial lifted by a change outside the normal flow
// (an administrator resetting a key). Forget drops a key's entry, and
// Options.MaxTTL bounds how long any entry answers before a decision asks
// the store again; its answer admitting drops the entry. A changed policy
// (a new limit under the same name) never matches an entry of the old
// one.
package denycache

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/degraded"
	"github.com/floodgate-rl/floodgate/internal/nilcheck"
	"github.com/floodgate-rl/floodgate/internal/shardmap"
)

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// MaxEntries caps the number of cached denials, exactly. Each shard
	// holds its share: MaxEntries divided by the number of shards, the
	// first MaxEntries%shards shards one more, so the shares add up to
	// MaxEntries. A denial cached in a full shard evicts that shard's least
	// recently used one, even while other shards have room. Default 10,000.
	MaxEntries int
	// MaxTTL is the longest a cached denial answers, whatever its
	// RetryAfter, before a decision asks the store again: the first
	// decision after it goes to the store, the others are answered from
	// the entry, renewed for another MaxTTL, until the store's answer
	// replaces it (a denial) or drops it (an admission); when that
	// decision gets no answer from the store (an error, or a failure
	// mode's decision), the entry lapses and is not renewed again: every
	// decision asks the store until one is answered (a decision its own
	// caller cancelled only lets the next one renew it). A reset made
	// outside this process is so noticed within MaxTTL and one store call
	// of the next decision answered. Default 10s; 1ms..floodgate.MaxWindow.
	MaxTTL time.Duration
	// Shards is the number of independently locked partitions, rounded up
	// to a power of two, and lowered to MaxEntries when MaxEntries is
	// smaller. Default 16; at most 1,024.
	Shards int
}

// Store is a floodgate.Store that answers repeated denials locally and
// passes everything else to the wrapped store. It is safe for concurrent
// use.
type Store struct {
	next   floodgate.Store
	seed   maphash.Seed
	shards []shard
	maxTTL int64 // µs
	saved  atomic.Uint64
	// evicted counts the entries evicted while they still answered
	// (see Evicted).
	evicted atomic.Uint64
	// admits counts, by key hash, the admissions the store made through
	// the cache and the keys Forget dropped: a denial the store gave
	// before one of its key's slot is not learnt (see learn).
	admits [admitSlots]atomic.Uint64
	// degrades says next's decisions may be taken by a failure mode (a
	// fallback.Store, or a store wrapping one), which are not cached.
	degrades bool
}

type shard struct {
	mu     sync.Mutex
	m      map[string]*list.Element // of *entry, by key
	lru    list.List                // front = most recently used
	perCap int                      // entries before the least recently used is evicted
}

// admitSlots is the number of counters of admissions and resets (Store.
// admits), a power of two: 32 KiB, so that keys decided at the same time
// rarely share one.
const admitSlots = 4096

// entry is the last denial of one key on its own account.
type entry struct {
	key    string
	policy floodgate.Policy
	cost   int64            // the cost that was denied
	result floodgate.Result // as the store returned it
	retry  int64            // when the denied cost fits again (Unix µs)
	until  int64            // the entry answers while now < until: min(retry, learnt or renewed + MaxTTL)
	// failing is set when the decision that renewed the entry got no
	// answer from the store (see failed): the entry is not renewed
	// again, so every decision asks the store until one is answered.
	failing bool
}

// New returns a Store caching the denials of next.
func New(next floodgate.Store, opts Options) (*Store, error) {
	if nilcheck.IsNil(next) {
		return nil, fmt.Errorf("%w: denycache: nil store (%T)", floodgate.ErrInvalidPolicy, next)
	}
	if opts.MaxEntries < 0 {
		return nil, fmt.Errorf("%w: denycache: max entries %d is negative", floodgate.ErrInvalidPolicy, opts.MaxEntries)
	}
	if opts.MaxEntries == 0 {
		opts.MaxEntries = 10_000
	}
	if opts.MaxTTL == 0 {
		opts.MaxTTL = 10 * time.Second
	}
	if opts.MaxTTL < time.Millisecond || opts.MaxTTL > floodgate.MaxWindow {
		return nil, fmt.Errorf("%w: denycache: max TTL %v out of range 1ms..%v", floodgate.ErrInvalidPolicy, opts.MaxTTL, floodgate.MaxWindow)
	}
	if opts.Shards < 0 || opts.Shards > 1024 {
		return nil, fmt.Errorf("%w: denycache: shards %d out of range 0..1024", floodgate.ErrInvalidPolicy, opts.Shards)
	}
	if opts.Shards == 0 {
		opts.Shards = 16
	}
	caps := shardmap.Split(opts.Shards, opts.MaxEntries)
	s := &Store{next: next, seed: maphash.MakeSeed(), shards: make([]shard, len(caps)), maxTTL: opts.MaxTTL.Microseconds()}
	s.degrades, _ = degraded.Reports(next)
	for i := range s.shards {
		s.shards[i].m = make(map[string]*list.Element)
		s.shards[i].perCap = caps[i]
	}
	return s, nil
}

// Unwrap returns the store s wraps, so that a caller looking for a
// store's kind (httplimit, for a fallback.Store) can look through s.
func (s *Store) Unwrap() floodgate.Store {
	if s == nil {
		return nil
	}
	return s.next
}

// Saved returns the number of decisions answered from the cache, each one
// a store round trip saved.
func (s *Store) Saved() uint64 { return s.saved.Load() }

// Evicted returns the number of entries evicted, to make room for
// another key's denial, while they still answered (before their MaxTTL
// or their retry instant): each may cost the store the decisions it
// would have answered. A count that keeps growing says MaxEntries is
// too small for the keys being denied at once.
func (s *Store) Evicted() uint64 { return s.evicted.Load() }

// Len returns the number of cached denials, lapsed ones not yet evicted
// included.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.lru.Len()
		sh.mu.Unlock()
	}
	return n
}

// Forget drops the cached denial of key, for example after an
// administrator reset the key.
func (s *Store) Forget(key string) {
	sh := s.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s.admitted(key)
	if el, ok := sh.m[key]; ok {
		sh.lru.Remove(el)
		delete(sh.m, key)
	}
}

// admitted counts an admission or a reset of key in its slot of admits,
// before its entry is dropped.
func (s *Store) admitted(key string) {
	s.admits[maphash.String(s.seed, key)&(admitSlots-1)].Add(1)
}

// admitsOf returns the count of key's slot of admits.
func (s *Store) admitsOf(key string) uint64 {
	return s.admits[maphash.String(s.seed, key)&(admitSlots-1)].Load()
}

func (s *Store) shardOf(key string) *shard {
	return &s.shards[shardmap.Index(maphash.String(s.seed, key), len(s.shards))]
}

// Decide implements floodgate.Store: it answers from the cache when every
// layer is covered by a remembered denial, and otherwise asks the wrapped
// store, remembering the layers it denies. A nil ctx is refused
// (floodgate.ErrNilContext), and a ctx already done is answered with an
// error wrapping floodgate.ErrStoreUnavailable and ctx.Err(), as the
// stores answer it, also when the cache could answer: nothing is decided.
// A decision a fallback store's failure mode took is not remembered (see
// the package documentation).
func (s *Store) Decide(ctx context.Context, now int64, layers []floodgate.Layer, out []floodgate.Result) error {
	if ctx == nil {
		return fmt.Errorf("denycache: %w", floodgate.ErrNilContext)
	}
	if len(layers) == 0 || len(layers) > floodgate.MaxLayers || len(out) != len(layers) {
		return fmt.Errorf("%w: %d layers, %d results", floodgate.ErrInvalidLayers, len(layers), len(out))
	}
	consuming := false
	for _, l := range layers {
		if err := floodgate.ValidateCost(l.Cost); err != nil {
			return err
		}
		consuming = consuming || l.Cost > 0
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("denycache: %w: %w", floodgate.ErrStoreUnavailable, err)
	}
	var renewed [floodgate.MaxLayers]*entry
	if consuming && s.answer(now, layers, out, &renewed) {
		s.saved.Add(1)
		return nil
	}
	// Each layer's count of admissions before the store decides: a
	// denial it gives may predate an admission or a reset that this
	// decision would otherwise learn it after.
	var admits [floodgate.MaxLayers]uint64
	for i, l := range layers {
		admits[i] = s.admitsOf(l.Key)
	}
	if s.degrades {
		// Told by the fallback store whether its failure mode decided,
		// in a Record of this decision's own (the caller's may hold
		// other decisions', some taken at the same time), then passed
		// on to the caller's, as it would be without the cache.
		dctx, rec := degraded.NewContext(ctx)
		if err := s.next.Decide(dctx, now, layers, out); err != nil {
			s.failed(now, layers, &renewed, err)
			return err
		}
		if o := rec.Outcome(); o.Degraded {
			// Not the primary's state: a ModeClosed denial says
			// nothing of the identity's limit, and must end with the
			// outage.
			s.failed(now, layers, &renewed, o.Err)
			degraded.Note(ctx, o)
			return nil
		}
	} else if err := s.next.Decide(ctx, now, layers, out); err != nil {
		s.failed(now, layers, &renewed, err)
		return err
	}
	for i, l := range layers {
		s.learn(now, l, out[i], admits[i])
	}
	return nil
}

// failed undoes what a decision the store did not answer (err, or a
// failure mode's decision, whose primary error is err) did to the cache:
// the entries it renewed as their asker (see answer) lapse again at now
// and are marked failing, so that every decision after it asks the store
// instead of the entry answering a whole MaxTTL more (a review: a reset
// went unseen for another MaxTTL after an asker's call failed or was
// cancelled, and for the whole of an outage behind a fallback) or being
// renewed by each asker for the decisions in flight beside it (an outside
// walk: 1-2 % of a flooded identity's checks answered from the cache,
// not degraded, through 8 s of a Cluster primary's outage at a 200 ms
// MaxTTL); and when the store may have
// admitted it all the same (ErrIndeterminate: sent, answer lost), its
// keys' entries go, as an admission's would.
func (s *Store) failed(now int64, layers []floodgate.Layer, renewed *[floodgate.MaxLayers]*entry, err error) {
	indeterminate := errors.Is(err, floodgate.ErrIndeterminate)
	// A caller that cancelled its own decision says nothing of the
	// store: the next decision renews the entry, as after a success (a
	// review: marked failing, every decision in flight went to the store
	// for a round trip).
	gone := errors.Is(err, context.Canceled)
	for i, l := range layers {
		if indeterminate {
			s.Forget(l.Key)
			continue
		}
		ent := renewed[i]
		if ent == nil {
			continue
		}
		sh := s.shardOf(l.Key)
		sh.mu.Lock()
		if el, ok := sh.m[l.Key]; ok && el.Value.(*entry) == ent {
			ent.until = min(ent.until, now)
			ent.failing = !gone
		}
		sh.mu.Unlock()
	}
}

// covers reports whether ent answers layer l at now: the same policy,
// before the denial lapses, and the cost denied, or for a cost above the
// policy's capacity any cost at least that one (a larger cost would be
// denied too, but its wait can be longer than the entry's: a review saw
// a cost of 8 told the wait of a cost of 1, 10 s where the store said
// 80 s). stale reports an entry that would cover l but for its MaxTTL,
// while its denial still holds (before its retry instant, or a cost above
// the capacity): see answer.
func (ent *entry) covers(now int64, l floodgate.Layer) (ok, stale bool) {
	if l.Policy != ent.policy || l.Cost < ent.cost {
		return false, false
	}
	if ent.result.Reason == floodgate.ReasonLimited && l.Cost != ent.cost {
		return false, false
	}
	if now < ent.until {
		return true, false
	}
	return false, ent.retry == 0 || now < ent.retry
}

// answer fills out when every layer is covered. Layers' keys are looked up
// one shard at a time; an entry lapsing in between only makes the answer
// one that was true a moment earlier, like any answer already in flight.
//
// An entry past its MaxTTL whose denial still holds is renewed for
// another MaxTTL by the first decision that finds it so, which goes on to
// the store (answer returns false) while the decisions after it are
// answered from the renewed entry: one decision per lapse asks the store
// whether the key was reset, where every decision in flight used to (an
// outside walk counted 50-60 per lapse at 64 callers on one identity).
// Its answer replaces the entry (denied), or drops it (admitted: a reset).
// An entry whose asker got no answer (failing) is not renewed: each
// decision asks the store until one is answered.
func (s *Store) answer(now int64, layers []floodgate.Layer, out []floodgate.Result, renewed *[floodgate.MaxLayers]*entry) bool {
	for i, l := range layers {
		sh := s.shardOf(l.Key)
		sh.mu.Lock()
		el, found := sh.m[l.Key]
		if !found {
			sh.mu.Unlock()
			return false
		}
		ent := el.Value.(*entry)
		ok, stale := ent.covers(now, l)
		if !ok {
			if stale && !ent.failing {
				ent.until = now + s.maxTTL
				if ent.retry != 0 {
					ent.until = min(ent.until, ent.retry)
				}
				renewed[i] = ent
			}
			sh.mu.Unlock()
			return false
		}
		sh.lru.MoveToFront(el)
		out[i] = ent.result
		if ent.result.Reason == floodgate.ReasonLimited {
			out[i].RetryAfter = time.Duration(ent.retry-now) * time.Microsecond
		}
		sh.mu.Unlock()
	}
	return true
}

// learn remembers a layer the store denied on its own account, replacing
// the key's older denial. A layer the store admitted (a smaller cost than
// the entry's, or after a reset), or would have admitted in a decision
// another layer denied, drops the key's denial: what an admission
// consumed makes the entry's Remaining and RetryAfter untrue, and a layer
// admitting says the entry may be wrong (its key was reset). The next
// decision asks the store again. A denial is not learnt when its key's
// slot of admits has counted an admission or a reset since before the
// store decided (admits, the count then): the store may have decided it
// before that admission, whose learn ran first (a review saw 3 of 40
// concurrent pairs cache a denial from before an admission); another key
// sharing the slot only costs a denial not learnt. A peek's denial (cost
// 0) is learnt as a cost of 1, which its result describes.
func (s *Store) learn(now int64, l floodgate.Layer, r floodgate.Result, admits uint64) {
	var retry int64
	until := now + s.maxTTL
	switch {
	case r.Allowed:
		s.Forget(l.Key)
		return
	case r.Reason == floodgate.ReasonLimited && r.RetryAfter > 0:
		retry = now + r.RetryAfter.Microseconds()
		until = min(until, retry)
	case r.Reason == floodgate.ReasonCostExceedsLimit:
		// Permanent for this policy; bounded by MaxTTL.
	default:
		return // another layer's denial, or nothing to rely on
	}
	ent := &entry{key: l.Key, policy: l.Policy, cost: max(l.Cost, 1), result: r, retry: retry, until: until}
	sh := s.shardOf(l.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if s.admitsOf(l.Key) != admits {
		return
	}
	if el, ok := sh.m[l.Key]; ok {
		el.Value = ent
		sh.lru.MoveToFront(el)
		return
	}
	sh.m[l.Key] = sh.lru.PushFront(ent)
	for sh.lru.Len() > sh.perCap {
		old := sh.lru.Back()
		sh.lru.Remove(old)
		gone := old.Value.(*entry)
		delete(sh.m, gone.key)
		if now < gone.until {
			s.evicted.Add(1)
		}
	}
}
