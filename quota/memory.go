package quota

import (
	"context"
	"fmt"

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
	// MaxKeys caps the number of identity periods held at once, exactly.
	// Each partition holds its share: MaxKeys divided by the number of
	// partitions, the first MaxKeys%partitions one more, so the shares add
	// up to MaxKeys. An identity's periods belong to one partition (by a
	// hash of its hash tag); when that partition is full and nothing
	// expired in it can be reclaimed, an operation that would create a new
	// period fails with floodgate.ErrStoreFull, even while other
	// partitions have room. (For a second after a look at every period of
	// a partition found none expired, further looks sample it, so one that
	// expires in that second may be reclaimed a little later.) Default
	// 1,000,000.
	MaxKeys int
}

// MemoryStore is an in-process quota Store with the same semantics as
// RedisStore. It is safe for concurrent use. Expiry follows the callers'
// clock (the times passed to the Quota), like the Redis script's own
// arithmetic; an identity's periods share one lock. Usage is per process.
type MemoryStore struct {
	// slots holds the identity periods by keySet.usage, sharded by the
	// identity's hash tag so that every period of one identity is under
	// one lock.
	slots *shardmap.Map[*slot]
}

// slot is one identity period: its ledger (nil once lost) and the
// expiries of the ledger and of its marker, in Unix µs.
type slot struct {
	l        *ledger
	expireAt int64
	markerAt int64
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore(opts MemoryOptions) (*MemoryStore, error) {
	slots, err := shardmap.New(shardmap.Options{Shards: opts.Shards, MaxKeys: opts.MaxKeys}, (*slot).dead)
	if err != nil {
		return nil, fmt.Errorf("%w: quota memory store: %w", floodgate.ErrInvalidPolicy, err)
	}
	return &MemoryStore{slots: slots}, nil
}

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
		cs.l = nil // expired: forget the ledger, keep the marker's expiry
	}
	// Make room before deciding, so that a full store changes nothing.
	if cs == nil && !sh.Room(now, 1) {
		return reply{}, fmt.Errorf("%w: %d quota periods in shard (cap %d)", floodgate.ErrStoreFull, sh.Len(), sh.Cap())
	}
	l, curDirty, prevDirty, rep := step(req, cur, cs.markerLive(now), prev)
	if curDirty {
		if cs == nil {
			cs = &slot{}
			sh.Put(req.cur.usage, cs)
		}
		cs.l, cs.expireAt, cs.markerAt = l, req.expireAt, req.markerAt
	}
	if prevDirty {
		ps.expireAt = req.prevExpireAt
	}
	sh.Wrote(now)
	return rep, nil
}
