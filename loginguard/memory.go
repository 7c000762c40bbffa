package loginguard

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/shardmap"
)

// MemoryOptions configures a Memory backend. The zero value is ready to
// use.
type MemoryOptions struct {
	// MaxKeys caps the number of states kept, so a flood of made-up
	// account names cannot exhaust memory. When it is reached and no
	// expired state can be reclaimed, an operation that would add a state
	// fails with floodgate.ErrStoreFull (and a login endpoint should then
	// fail closed). A look at every state runs at most once a second;
	// further looks in that second sample the states (a full store does
	// not cost every refused attempt a pass over all of them), so a state
	// that expires in that second may be reclaimed a little later.
	// Refusing rather than evicting keeps a flood from lifting real
	// locks, but the flood then refuses every login: a failure adds up to
	// three states (account, address, pair; about 140 bytes each), so
	// failures from about MaxKeys/3 distinct addresses and accounts within
	// the states' lifetime (the longest of the windows and lockouts) take
	// logins down until states expire. Size MaxKeys for that, watch for
	// ErrStoreFull, or use the Redis backend, bounded by Redis's memory.
	// Default 1,000,000.
	MaxKeys int
}

// Memory is the in-process Backend: the step function under one mutex.
// Its state is per process, so it suits a single instance; use NewRedis
// for several. It is safe for concurrent use. Expiry runs on the
// monotonic clock; behaviour depends only on the timestamps the guard
// passes, exactly as with Redis.
type Memory struct {
	// states holds every state in one shard: an attempt's three states
	// change together, under one lock. Expiry is in monotonic µs since
	// started.
	states  *shardmap.Map[*memState]
	started time.Time
}

type memState struct {
	shardmap.Clock
	s       state
	expires int64 // monotonic µs since started
}

func (e *memState) expired(mono int64) bool { return e.expires <= mono }

// NewMemory returns an empty Memory backend.
func NewMemory(opts MemoryOptions) (*Memory, error) {
	states, err := shardmap.New(shardmap.Options{Shards: 1, MaxKeys: opts.MaxKeys}, (*memState).expired)
	if err != nil {
		return nil, fmt.Errorf("%w: memory backend: %w", ErrInvalidOptions, err)
	}
	return &Memory{states: states, started: time.Now()}, nil
}

// Len returns the number of states held, expired ones not yet reclaimed
// included.
func (m *Memory) Len() int { return m.states.Len() }

var memTags = [numDims]string{"a:", "i:", "p:"}

func (m *Memory) mono() int64 { return time.Since(m.started).Microseconds() }

func (m *Memory) run(ctx context.Context, o op, now int64, ids *[numDims]string, p *params) (reply, error) {
	if err := ctx.Err(); err != nil {
		return reply{}, fmt.Errorf("%w: %w", floodgate.ErrStoreUnavailable, err)
	}
	var keys [numDims]string
	for d := range numDims {
		keys[d] = memTags[d] + ids[d]
	}
	sh := m.states.Lock("")
	defer sh.Unlock()
	mono := m.mono()
	var in [numDims]state
	for d, k := range keys {
		if e := sh.Get(k); e != nil && e.expires > mono {
			in[d] = e.s
		}
	}
	r := p.step(o, in, now)
	if !r.write {
		return r, nil
	}
	added := 0
	for d, k := range keys {
		if !r.states[d].fresh() && sh.Get(k) == nil {
			added++
		}
	}
	if added > 0 && !sh.Room(mono, added) {
		held, most := m.states.Keys()
		return reply{}, fmt.Errorf("loginguard: %w: %d login states held (cap %d)", floodgate.ErrStoreFull, held, most)
	}
	for d, k := range keys {
		s := r.states[d]
		if s.fresh() {
			sh.Delete(k)
			continue
		}
		e := sh.Get(k)
		if e == nil {
			e = &memState{}
			sh.Put(k, e, mono)
		}
		e.s = s
		e.expires = mono + p.ttlMillis(d, s, r.nows[d])*1000
	}
	sh.Wrote(mono)
	return r, nil
}

func (m *Memory) remove(ctx context.Context, ids *[numDims]string) ([numDims]bool, error) {
	var had [numDims]bool
	if err := ctx.Err(); err != nil {
		return had, fmt.Errorf("%w: %w", floodgate.ErrStoreUnavailable, err)
	}
	mono := m.mono()
	sh := m.states.Lock("")
	for d, id := range ids {
		if id == "" {
			continue
		}
		k := memTags[d] + id
		if e := sh.Get(k); e != nil {
			had[d] = e.expires > mono
			sh.Delete(k)
		}
	}
	sh.Unlock()
	return had, nil
}
