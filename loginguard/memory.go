package loginguard

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// MemoryOptions configures a Memory backend. The zero value is ready to
// use.
type MemoryOptions struct {
	// MaxKeys caps the number of states kept, so a flood of made-up
	// account names cannot exhaust memory. When it is reached and no
	// expired state can be reclaimed, an operation that would add a state
	// fails with floodgate.ErrStoreFull (and a login endpoint should then
	// fail closed). Default 1,000,000.
	MaxKeys int
}

// Memory is the in-process Backend: the step function under one mutex.
// Its state is per process, so it suits a single instance; use NewRedis
// for several. It is safe for concurrent use. Expiry runs on the
// monotonic clock; behaviour depends only on the timestamps the guard
// passes, exactly as with Redis.
type Memory struct {
	mu      sync.Mutex
	states  map[string]*memState
	maxKeys int
	started time.Time
	writes  int
}

type memState struct {
	s       state
	expires int64 // monotonic µs since started
}

// NewMemory returns an empty Memory backend.
func NewMemory(opts MemoryOptions) (*Memory, error) {
	if opts.MaxKeys < 0 {
		return nil, fmt.Errorf("%w: max keys %d is negative", ErrInvalidOptions, opts.MaxKeys)
	}
	if opts.MaxKeys == 0 {
		opts.MaxKeys = 1_000_000
	}
	return &Memory{states: make(map[string]*memState), maxKeys: opts.MaxKeys, started: time.Now()}, nil
}

// Len returns the number of states held, expired ones not yet reclaimed
// included.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.states)
}

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
	m.mu.Lock()
	defer m.mu.Unlock()
	mono := m.mono()
	var in [numDims]state
	for d, k := range keys {
		if e := m.states[k]; e != nil && e.expires > mono {
			in[d] = e.s
		}
	}
	r := p.step(o, in, now)
	if !r.write {
		return r, nil
	}
	added := 0
	for d, k := range keys {
		if !r.states[d].fresh() && m.states[k] == nil {
			added++
		}
	}
	if added > 0 && len(m.states)+added > m.maxKeys {
		m.sweep(mono, len(m.states))
		if len(m.states)+added > m.maxKeys {
			return reply{}, fmt.Errorf("%w: %d login states held (cap %d)", floodgate.ErrStoreFull, len(m.states), m.maxKeys)
		}
	}
	for d, k := range keys {
		s := r.states[d]
		if s.fresh() {
			delete(m.states, k)
			continue
		}
		e := m.states[k]
		if e == nil {
			e = &memState{}
			m.states[k] = e
		}
		e.s = s
		e.expires = mono + p.ttlMillis(d, s, r.nows[d])*1000
	}
	m.writes++
	if m.writes%64 == 0 {
		m.sweep(mono, 32)
	}
	return r, nil
}

func (m *Memory) remove(ctx context.Context, d Dimension, id string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", floodgate.ErrStoreUnavailable, err)
	}
	m.mu.Lock()
	delete(m.states, memTags[d-1]+id)
	m.mu.Unlock()
	return nil
}

// sweep deletes up to limit expired states, visiting at most 4×limit.
func (m *Memory) sweep(mono int64, limit int) {
	seen, freed := 0, 0
	for k, e := range m.states {
		if e.expires <= mono {
			delete(m.states, k)
			if freed++; freed >= limit {
				return
			}
		}
		if seen++; seen >= 4*limit {
			return
		}
	}
}
