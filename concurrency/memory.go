package concurrency

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/shardmap"
	"github.com/floodgate-rl/floodgate/internal/zset"
)

// MemoryOptions configures a MemoryStore. The zero value is ready to use.
type MemoryOptions struct {
	// Shards is the number of independently locked partitions, rounded up
	// to a power of two, and lowered to MaxKeys when MaxKeys is smaller.
	// Default 64; at most 65,536.
	Shards int
	// MaxKeys caps the identities tracked at once by the whole store,
	// exactly, however they fall across partitions: an Acquire for a new
	// identity fails with floodgate.ErrStoreFull only when the store
	// tracks MaxKeys identities and none it reaches has expired (see
	// shardmap.Shard.Room). Default 1,000,000. An identity costs about
	// 240 bytes of heap with its first lease and a 64-byte identity (an
	// 83-byte key; longer keys add their bytes; TestMemoryPerLease).
	MaxKeys int
	// MaxLeases caps the leases held at once by all identities together,
	// exactly: a policy's Limit bounds them per identity, not per store.
	// An Acquire that would take one when none is free fails with
	// floodgate.ErrStoreFull, after dropping every expired lease it can
	// reach (see shardmap.Shard.TakeUnits). Every tracked identity holds
	// a lease, so there are never more identities than MaxLeases either.
	// Default 1,000,000. A lease beyond an identity's first costs about
	// 115 bytes of heap (TestMemoryPerLease).
	MaxLeases int
	// SweepInterval is how often the store, while it holds leases, visits
	// all of them to drop the expired ones (see
	// shardmap.Options.SweepInterval), so that Len counts live ones and
	// memory follows them without traffic: an expired lease (and an identity
	// with no lease left) is dropped between a second and a second plus
	// SweepInterval after it expired by its identity's callers' clock (the
	// time its last acquire or renew passed, advanced by the process's
	// monotonic clock), so the sweep leaves identities on different clocks
	// what their own clock holds live, as in RedisStore (the few expired
	// leases a write to their partition or a full store's pass drops are
	// judged by that writer's clock: mixing clocks far apart in one store
	// can lose a lease that way). The sweep assumes each
	// identity's clock advances with real time, as serve's and a caller's
	// passing time.Now() do; a library user replaying times that do not
	// (a simulation) sets SweepInterval negative, and expired leases then
	// go as before: as operations on their identity, writes to their
	// partition, or a full store come across them. Default 30 s; negative
	// turns the background sweep off.
	SweepInterval time.Duration
}

// MemoryStore is an in-process lease Store with the same semantics as
// RedisStore. It is safe for concurrent use. Leases expire by the
// callers' clock (the times given to the Limiter), as in the Redis script.
// An identity's state is dropped when its last lease is gone. Make it with
// NewMemoryStore: the zero MemoryStore is not usable (New refuses it).
type MemoryStore struct {
	sets *shardmap.Map[*leaseSet] // by key
}

func (s *MemoryStore) usable() error {
	if s.sets == nil {
		return fmt.Errorf("%w: concurrency: a zero MemoryStore cannot hold leases; make it with NewMemoryStore", floodgate.ErrInvalidPolicy)
	}
	return nil
}

// leaseSet is one identity's leases: lease ids ordered by expiry, like the
// sorted set of the Redis form.
type leaseSet struct {
	shardmap.Clock
	zset.Set[struct{}]
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore(opts MemoryOptions) (*MemoryStore, error) {
	if opts.MaxLeases < 0 {
		return nil, fmt.Errorf("%w: concurrency memory store: max leases %d is negative", floodgate.ErrInvalidPolicy, opts.MaxLeases)
	}
	sets, err := shardmap.NewCounted(shardmap.Options{Shards: opts.Shards, MaxKeys: opts.MaxKeys, SweepInterval: opts.SweepInterval, MaxUnits: opts.MaxLeases},
		(*leaseSet).gone, shardmap.Units[*leaseSet]{Of: (*leaseSet).Len, Tidy: (*leaseSet).trim})
	if err != nil {
		return nil, fmt.Errorf("%w: concurrency memory store: %w", floodgate.ErrInvalidPolicy, err)
	}
	return &MemoryStore{sets: sets}, nil
}

// Len returns the leases the store holds (expired ones not yet dropped
// included: the background sweep drops them, see
// MemoryOptions.SweepInterval), a moment's value under concurrent use.
func (m *MemoryStore) Len() int {
	held, _ := m.sets.Units()
	return held
}

// Close ends the store's background sweeps, waiting for one under way to
// finish; the store still works, its expired entries dropped only by
// operations. A store needs no Close: the sweeps stop by themselves once
// it is empty, leaving no goroutine or timer; one dropped while it holds
// entries is otherwise swept, and kept from the garbage collector, until
// they have all expired.
func (m *MemoryStore) Close() { m.sets.Close() }

func (m *MemoryStore) apply(ctx context.Context, req *request) (reply, error) {
	if err := ctx.Err(); err != nil {
		return reply{}, fmt.Errorf("%w: %w", floodgate.ErrStoreUnavailable, err)
	}
	sh := m.sets.Lock(req.key)
	defer sh.Unlock()
	set := sh.Get(req.key)
	if set != nil {
		n := set.Len()
		set.trim(req.now)
		sh.AddUnits(set.Len() - n)
	}
	defer func() {
		if set != nil && set.Len() == 0 {
			sh.Delete(req.key)
		}
	}()
	switch req.op {
	case opAcquire:
		live := int64(0)
		if set != nil {
			live = int64(set.Len())
		}
		if live >= req.limit {
			return reply{count: live, at: set.freeing(live - req.limit)}, nil
		}
		if set != nil && set.Has(req.id) {
			return reply{}, fmt.Errorf("%w: lease id %q already held", floodgate.ErrBadReply, req.id)
		}
		if set == nil && !sh.Room(req.now, 1) {
			held, most := m.sets.Keys()
			return reply{}, fmt.Errorf("%w: %d identities tracked (cap %d)", floodgate.ErrStoreFull, held, most)
		}
		if !sh.TakeUnits(req.now, 1) {
			held, most := m.sets.Units()
			return reply{}, fmt.Errorf("%w: %d leases held (cap %d)", floodgate.ErrStoreFull, held, most)
		}
		if set == nil {
			set = new(leaseSet)
			sh.Put(req.key, set, req.now)
		} else {
			sh.Stamp(set, req.now)
		}
		at := req.now + req.ttl
		set.Add(req.id, struct{}{}, at)
		sh.Wrote(req.now)
		return reply{ok: true, count: live + 1, at: at}, nil
	case opRelease:
		if set == nil {
			return reply{}, nil
		}
		held := set.Has(req.id)
		if held {
			set.Remove(req.id)
			sh.AddUnits(-1)
		}
		return reply{ok: held}, nil
	default: // renew
		if set == nil {
			return reply{}, nil
		}
		_, at, held := set.Get(req.id)
		if !held {
			return reply{}, nil
		}
		at = max(at, req.now+req.ttl)
		set.SetExpiry(req.id, at)
		sh.Stamp(set, req.now)
		return reply{ok: true, at: at}, nil
	}
}

// gone drops the leases expired at now and reports whether none is left:
// the holders crashed, and the identity's set can go.
func (s *leaseSet) gone(now int64) bool {
	s.trim(now)
	return s.Len() == 0
}

// trim drops every lease expired at now. Each lease is popped once, so the
// cost is amortized over the acquisitions.
func (s *leaseSet) trim(now int64) {
	for {
		if _, _, ok := s.PopExpired(now); !ok {
			return
		}
	}
}

// freeing returns when the live leases fall below the limit by
// themselves, over live leases of which over are above it (live - limit):
// the expiry of the (over+1)-th earliest, the earliest one while the
// leases fill the limit exactly, a later one after the limit was lowered
// below them. trim must have run.
func (s *leaseSet) freeing(over int64) int64 {
	at, _ := s.NthExpiry(int(over))
	return at
}
