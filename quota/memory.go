package quota

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"

	"github.com/floodgate-rl/floodgate"
)

// MemoryOptions configures a MemoryStore. The zero value is ready to use.
type MemoryOptions struct {
	// Shards is the number of independently locked partitions, rounded up
	// to a power of two. Default 64; at most 65,536.
	Shards int
	// MaxKeys caps the number of identity periods held at once; when it
	// is reached and nothing expired can be reclaimed, an operation that
	// would create a new one fails with floodgate.ErrStoreFull. Default
	// 1,000,000.
	MaxKeys int
}

// MemoryStore is an in-process quota Store with the same semantics as
// RedisStore. It is safe for concurrent use. Expiry follows the callers'
// clock (the times passed to the Quota), like the Redis script's own
// arithmetic; an identity's periods share one lock. Usage is per process.
type MemoryStore struct {
	seed   maphash.Seed
	shards []memShard
	mask   uint64
	perCap int
}

type memShard struct {
	mu     sync.Mutex
	slots  map[string]*slot // by keySet.usage
	writes uint32
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
	if opts.Shards < 0 || opts.Shards > 1<<16 {
		return nil, fmt.Errorf("%w: quota memory store: shards %d out of range 0..65536", floodgate.ErrInvalidPolicy, opts.Shards)
	}
	if opts.MaxKeys < 0 {
		return nil, fmt.Errorf("%w: quota memory store: max keys %d is negative", floodgate.ErrInvalidPolicy, opts.MaxKeys)
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
	m := &MemoryStore{seed: maphash.MakeSeed(), shards: make([]memShard, n), mask: uint64(n - 1), perCap: max(opts.MaxKeys/n, 1)}
	for i := range m.shards {
		m.shards[i].slots = make(map[string]*slot)
	}
	return m, nil
}

// shard returns the shard of a key by its hash tag, so that every period of
// one identity is under one lock.
func (m *MemoryStore) shard(key string) *memShard {
	return &m.shards[maphash.String(m.seed, floodgate.HashTag(key))&m.mask]
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
	sh := m.shard(req.cur.usage)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := req.now
	cs := sh.slots[req.cur.usage]
	var prev *ledger
	ps := sh.slots[req.prev.usage]
	if req.op == opSettle {
		prev = ps.live(now)
	}
	cur := cs.live(now)
	if cs != nil && cur == nil && cs.l != nil {
		cs.l = nil // expired: forget the ledger, keep the marker's expiry
	}
	// Make room before deciding, so that a full store changes nothing.
	if cs == nil && len(sh.slots) >= m.perCap {
		sh.sweep(now, len(sh.slots))
		if len(sh.slots) >= m.perCap {
			return reply{}, fmt.Errorf("%w: %d quota periods in shard (cap %d)", floodgate.ErrStoreFull, len(sh.slots), m.perCap)
		}
	}
	l, curDirty, prevDirty, rep := step(req, cur, cs.markerLive(now), prev)
	if curDirty {
		if cs == nil {
			cs = &slot{}
			sh.slots[req.cur.usage] = cs
		}
		cs.l, cs.expireAt, cs.markerAt = l, req.expireAt, req.markerAt
	}
	if prevDirty {
		ps.expireAt = req.prevExpireAt
	}
	if sh.writes++; sh.writes%64 == 0 {
		sh.sweep(now, 32)
	}
	return rep, nil
}

// sweep deletes up to limit dead slots, visiting at most 4×limit.
func (sh *memShard) sweep(now int64, limit int) {
	seen, freed := 0, 0
	for k, sl := range sh.slots {
		if sl.dead(now) {
			delete(sh.slots, k)
			if freed++; freed >= limit {
				return
			}
		}
		if seen++; seen >= 4*limit {
			return
		}
	}
}
