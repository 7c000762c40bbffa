package concurrency

import (
	"container/heap"
	"context"
	"fmt"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/shardmap"
)

// MemoryOptions configures a MemoryStore. The zero value is ready to use.
type MemoryOptions struct {
	// Shards is the number of independently locked partitions, rounded up
	// to a power of two, and lowered to MaxKeys when MaxKeys is smaller.
	// Default 64; at most 65,536.
	Shards int
	// MaxKeys caps the identities tracked at once, exactly. Each partition
	// holds its share: MaxKeys divided by the number of partitions, the
	// first MaxKeys%partitions one more, so the shares add up to MaxKeys.
	// An identity belongs to one partition (by a hash of its key); an
	// Acquire for a new identity whose partition is full of live ones
	// fails with floodgate.ErrStoreFull, even while other partitions have
	// room. Default 1,000,000.
	MaxKeys int
}

// MemoryStore is an in-process lease Store with the same semantics as
// RedisStore. It is safe for concurrent use. Leases expire by the
// callers' clock (the times given to the Limiter), as in the Redis script.
// An identity's state is dropped when its last lease is gone.
type MemoryStore struct {
	sets *shardmap.Map[*leaseSet] // by key
}

// leaseSet is one identity's leases: id → expiry, and a min-heap of
// expiries whose stale items (released or renewed leases) are skipped.
type leaseSet struct {
	exp map[string]int64
	h   leaseHeap
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore(opts MemoryOptions) (*MemoryStore, error) {
	sets, err := shardmap.New(shardmap.Options{Shards: opts.Shards, MaxKeys: opts.MaxKeys}, (*leaseSet).gone)
	if err != nil {
		return nil, fmt.Errorf("%w: concurrency memory store: %w", floodgate.ErrInvalidPolicy, err)
	}
	return &MemoryStore{sets: sets}, nil
}

func (m *MemoryStore) apply(ctx context.Context, req *request) (reply, error) {
	if err := ctx.Err(); err != nil {
		return reply{}, fmt.Errorf("%w: %w", floodgate.ErrStoreUnavailable, err)
	}
	sh := m.sets.Lock(req.key)
	defer sh.Unlock()
	set := sh.Get(req.key)
	if set != nil {
		set.trim(req.now)
	}
	defer func() {
		if set != nil && len(set.exp) == 0 {
			sh.Delete(req.key)
		}
	}()
	switch req.op {
	case opAcquire:
		live := int64(0)
		if set != nil {
			live = int64(len(set.exp))
		}
		if live >= req.limit {
			return reply{count: live, at: set.earliest()}, nil
		}
		if set == nil {
			if !sh.Room(req.now, 1) {
				return reply{}, fmt.Errorf("%w: %d identities in shard (cap %d)", floodgate.ErrStoreFull, sh.Len(), sh.Cap())
			}
			set = &leaseSet{exp: make(map[string]int64)}
			sh.Put(req.key, set)
		}
		if _, dup := set.exp[req.id]; dup {
			return reply{}, fmt.Errorf("%w: lease id %q already held", floodgate.ErrBadReply, req.id)
		}
		at := req.now + req.ttl
		set.put(req.id, at)
		sh.Wrote(req.now)
		return reply{ok: true, count: live + 1, at: at}, nil
	case opRelease:
		if set == nil {
			return reply{}, nil
		}
		_, held := set.exp[req.id]
		delete(set.exp, req.id)
		set.maybeCompact()
		return reply{ok: held}, nil
	default: // renew
		if set == nil {
			return reply{}, nil
		}
		at, held := set.exp[req.id]
		if !held {
			return reply{}, nil
		}
		at = max(at, req.now+req.ttl)
		set.put(req.id, at)
		return reply{ok: true, at: at}, nil
	}
}

// gone drops the leases expired at now and reports whether none is left:
// the holders crashed, and the identity's set can go.
func (s *leaseSet) gone(now int64) bool {
	s.trim(now)
	return len(s.exp) == 0
}

// trim drops every lease expired at now. Each lease is popped once, so the
// cost is amortized over the acquisitions.
func (s *leaseSet) trim(now int64) {
	for len(s.h) > 0 {
		top := s.h[0]
		if at, ok := s.exp[top.id]; ok && at == top.at {
			if at > now {
				return
			}
			delete(s.exp, top.id)
		}
		heap.Pop(&s.h)
	}
}

// earliest returns the earliest live expiry; trim must have run.
func (s *leaseSet) earliest() int64 {
	for len(s.h) > 0 {
		top := s.h[0]
		if at, ok := s.exp[top.id]; ok && at == top.at {
			return at
		}
		heap.Pop(&s.h)
	}
	return 0
}

func (s *leaseSet) put(id string, at int64) {
	s.exp[id] = at
	heap.Push(&s.h, leaseItem{at: at, id: id})
	s.maybeCompact()
}

// maybeCompact rebuilds the heap when stale items dominate it.
func (s *leaseSet) maybeCompact() {
	if len(s.h) <= 2*len(s.exp)+32 {
		return
	}
	h := make(leaseHeap, 0, len(s.exp))
	for id, at := range s.exp {
		h = append(h, leaseItem{at: at, id: id})
	}
	heap.Init(&h)
	s.h = h
}

type leaseItem struct {
	at int64
	id string
}

type leaseHeap []leaseItem

func (h leaseHeap) Len() int { return len(h) }
func (h leaseHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].id < h[j].id
}
func (h leaseHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *leaseHeap) Push(x any)   { *h = append(*h, x.(leaseItem)) }
func (h *leaseHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}
