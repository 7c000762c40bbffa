package quota

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/shardmap"
)

// MemoryOptions configures a MemoryStore. The zero value is ready to use.
type MemoryOptions struct {
	// Shards is the number of independently locked partitions, rounded up
	// to a power of two, and lowered to MaxKeys when MaxKeys is smaller.
	// Default 64; at most 65,536.
	Shards int
	// MaxKeys caps the number of identity periods held at once by the
	// whole store, exactly, however they fall across partitions: a
	// check that would charge, a reserve, a settle or a restore for a
	// period the store does not hold fails with floodgate.ErrStoreFull
	// only when the store holds MaxKeys periods and none it reaches has
	// expired (a status, or a check that charges nothing, is answered
	// from nothing: usage 0). (When it is full, a look at every
	// period of every partition runs at most once a second, further looks
	// sampling the operation's own partition, so a period that expires in
	// that second may be reclaimed a little later; see
	// shardmap.Shard.Room.) Default 1,000,000. A period costs about 260
	// bytes of heap with a 64-byte identity (a 94-byte key; longer keys
	// add their bytes), plus what MaxRecords counts (TestMemoryPerPeriod).
	MaxKeys int
	// MaxRecords caps the reservations and settlement outcomes held at
	// once by all periods together, exactly. Options.MaxPending and
	// Options.MaxSettled bound them per period, not per store: without
	// this cap, periods × (MaxPending + MaxSettled) records could be held.
	// A Reserve or Settle that would add one (a request id neither the
	// current nor the previous period knows) when none is free fails with
	// floodgate.ErrStoreFull, after dropping every expired one it can
	// reach (see shardmap.Shard.TakeUnits); settling a held reservation
	// adds none. Default 1,000,000. A record costs 160 to 280 bytes of
	// heap with a request id of MaxRequestIDLen bytes, depending on how
	// many its period holds (TestMemoryPerRecord).
	MaxRecords int
	// SweepInterval is how often the store, while it holds identity periods
	// or records, visits all of them to drop the expired ones (see
	// shardmap.Options.SweepInterval), so that Len counts live ones and
	// memory follows them without traffic: an expired identity period (its
	// usage and its lost-state marker, which outlives it by 24 h, both
	// expired), reservation or settlement outcome is dropped between a
	// second and a second plus SweepInterval after it expired by its
	// identity's callers' clock (the time the last write to its period
	// passed, advanced by the process's monotonic clock), so the sweep
	// leaves identities on different clocks what their own clock holds
	// live, as in RedisStore (the few expired entries a write to their
	// partition or a full store's pass drops are judged by that writer's
	// clock: mixing clocks far apart in one store can lose a hold that
	// way). The sweep assumes each identity's clock advances with
	// real time, as serve's and a caller's passing time.Now() do; a library
	// user replaying times that do not (a simulation) sets SweepInterval
	// negative, and expired entries then go as before: as operations on
	// their period, writes to their partition, or a full store come across
	// them. Default 30 s; negative turns the background sweep off.
	SweepInterval time.Duration
}

// MemoryStore is an in-process quota Store with the same semantics as
// RedisStore. It is safe for concurrent use. Expiry follows the callers'
// clock (the times passed to the Quota), like the Redis script's own
// arithmetic; an identity's periods share one lock. Usage is per process.
// Make it with NewMemoryStore: the zero MemoryStore is not usable (New
// refuses it).
type MemoryStore struct {
	// slots holds the identity periods by keySet.usage, sharded by the
	// identity's hash tag so that every period of one identity is under
	// one lock.
	slots *shardmap.Map[*slot]
}

// slot is one identity period: its ledger (nil once lost or expired), the
// expiries of the ledger and of its marker, in Unix µs, and the clock its
// last write passed (for the background sweep).
type slot struct {
	shardmap.Clock
	l        *ledger
	expireAt int64
	markerAt int64
}

func (s *MemoryStore) usable() error {
	if s.slots == nil {
		return fmt.Errorf("%w: quota: a zero MemoryStore cannot count; make it with NewMemoryStore", floodgate.ErrInvalidPolicy)
	}
	return nil
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore(opts MemoryOptions) (*MemoryStore, error) {
	if opts.MaxRecords < 0 {
		return nil, fmt.Errorf("%w: quota memory store: max records %d is negative", floodgate.ErrInvalidPolicy, opts.MaxRecords)
	}
	slots, err := shardmap.NewCounted(shardmap.Options{Shards: opts.Shards, MaxKeys: opts.MaxKeys, SweepInterval: opts.SweepInterval, MaxUnits: opts.MaxRecords},
		(*slot).dead, shardmap.Units[*slot]{Of: (*slot).records, Tidy: (*slot).tidy})
	if err != nil {
		return nil, fmt.Errorf("%w: quota memory store: %w", floodgate.ErrInvalidPolicy, err)
	}
	return &MemoryStore{slots: slots}, nil
}

// Len returns the identity periods the store holds (expired ones not yet
// dropped by the background sweep included, see
// MemoryOptions.SweepInterval) and the reservations and settlement outcomes in them,
// a moment's values under concurrent use.
func (m *MemoryStore) Len() (periods, records int) {
	records, _ = m.slots.Units()
	return m.slots.Len(), records
}

// Close ends the store's background sweeps, waiting for one under way to
// finish; the store still works, its expired entries dropped only by
// operations. A store needs no Close: the sweeps stop by themselves once
// it is empty, leaving no goroutine or timer; one dropped while it holds
// entries is otherwise swept, and kept from the garbage collector, until
// they have all expired.
func (m *MemoryStore) Close() { m.slots.Close() }

// lock locks and returns the shard of a key, the one of its hash tag.
func (m *MemoryStore) lock(key string) *shardmap.Shard[*slot] {
	return m.slots.Lock(algo.HashTag(key))
}

func (sl *slot) live(now int64) *ledger {
	if sl == nil || sl.l == nil || now >= sl.expireAt {
		return nil
	}
	return sl.l
}

func (sl *slot) markerLive(now int64) bool { return sl != nil && now < sl.markerAt }

func (sl *slot) dead(now int64) bool { return sl.live(now) == nil && !sl.markerLive(now) }

// records returns the reservations and settlement outcomes sl holds,
// expired or not.
func (sl *slot) records() int {
	if sl == nil || sl.l == nil {
		return 0
	}
	return sl.l.records()
}

// tidy drops, when the store is short of records, what expired at now: the
// whole ledger once the period's usage expired, else every expired hold
// (giving its estimate back) and outcome, which operations on the period
// drop 64 of each at a time.
func (sl *slot) tidy(now int64) {
	if sl.l == nil {
		return
	}
	if sl.live(now) == nil {
		sl.l = nil
		return
	}
	for sl.l.trim(now) {
	}
}

func (m *MemoryStore) apply(ctx context.Context, req *request) (reply, error) {
	if err := ctx.Err(); err != nil {
		return reply{}, fmt.Errorf("%w: %w", floodgate.ErrStoreUnavailable, err)
	}
	sh := m.lock(req.cur.usage)
	defer sh.Unlock()
	now := req.now
	cs := sh.Get(req.cur.usage)
	var prev *ledger
	ps := sh.Get(req.prev.usage)
	if req.op == opSettle || req.op == opReserve {
		prev = ps.live(now)
	}
	cur := cs.live(now)
	if cs != nil && cur == nil && cs.l != nil {
		// Expired: forget the ledger, keep the marker's expiry.
		sh.AddUnits(-cs.records())
		cs.l = nil
	}
	// Make room before deciding, so that a full store changes nothing:
	// for a new period, and for a record a reserve or settle may add.
	if cs == nil && !sh.Room(now, 1) {
		// A check that writes nothing (a status, a check of cost 0 or
		// of more than the limit) is answered from nothing, as it is
		// while the store has room: its step touches only the fresh
		// ledger it makes, dropped here. It was refused (a status of
		// a third identity with MaxKeys 2 answered 503).
		if req.op == opCheck {
			if _, dirty, _, rep := step(req, nil, false, nil, false); !dirty {
				return rep, nil
			}
		}
		held, most := m.slots.Keys()
		return reply{}, fmt.Errorf("%w: %d quota periods held (cap %d)", floodgate.ErrStoreFull, held, most)
	}
	taken := 0
	if addsRecord(req, cur, prev) {
		if !sh.TakeUnits(now, 1) {
			held, most := m.slots.Units()
			return reply{}, fmt.Errorf("%w: %d quota reservations and settlement outcomes held (cap %d)", floodgate.ErrStoreFull, held, most)
		}
		taken = 1
	}
	// Room may have dropped ps (dead, so prev is nil and the step leaves
	// it alone) and TakeUnits tidied entries, each counting what it
	// freed: count from here.
	before := cs.records() + ps.records()
	l, curDirty, prevDirty, rep := step(req, cur, cs.markerLive(now), prev, ps.markerLive(now))
	if curDirty {
		if cs == nil {
			cs = &slot{}
			sh.Put(req.cur.usage, cs, now)
		} else {
			sh.Stamp(cs, now)
		}
		// An expiry is never shortened: calendars differing only in
		// their zone share the period (see floodgate.Calendar.StorageTag),
		// and a write under the zone whose period ends sooner must not
		// end the usage another zone still counts.
		cs.l, cs.expireAt, cs.markerAt = l, max(cs.expireAt, req.expireAt), max(cs.markerAt, req.markerAt)
	}
	if prevDirty {
		ps.expireAt = max(ps.expireAt, req.prevExpireAt)
		sh.Stamp(ps, now)
	}
	sh.AddUnits(cs.records() + ps.records() - before - taken)
	sh.Wrote(now)
	return rep, nil
}
