package loginguard

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// t0 is the vectors' origin.
var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

var testSecret = []byte("test-secret-0123456789abcdef-0123456789")

// clock is a settable test clock, safe for concurrent readers.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// pureBackend applies the step function to a plain map, without TTLs: the
// reference the real backends are compared with.
type pureBackend struct {
	mu sync.Mutex
	m  map[string]state
}

func newPure() *pureBackend { return &pureBackend{m: make(map[string]state)} }

func (b *pureBackend) run(ctx context.Context, o op, now int64, ids *[numDims]string, p *params) (reply, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var in [numDims]state
	for d := range numDims {
		in[d] = b.m[memTags[d]+ids[d]]
	}
	r := p.step(o, in, now)
	if r.write {
		for d := range numDims {
			if r.states[d].fresh() {
				delete(b.m, memTags[d]+ids[d])
			} else {
				b.m[memTags[d]+ids[d]] = r.states[d]
			}
		}
	}
	return r, nil
}

func (b *pureBackend) remove(ctx context.Context, ids *[numDims]string) ([numDims]bool, error) {
	var had [numDims]bool
	b.mu.Lock()
	for d, id := range ids {
		if id != "" {
			_, had[d] = b.m[memTags[d]+id]
			delete(b.m, memTags[d]+id)
		}
	}
	b.mu.Unlock()
	return had, nil
}

// backends returns the three backends every shared test runs against:
// the pure reference, Memory and Redis (on a private redis-server started
// for t).
func backends(t *testing.T) map[string]func(t *testing.T, prefix string) Backend {
	t.Helper()
	srv := redistest.Start(t)
	return map[string]func(t *testing.T, prefix string) Backend{
		"pure": func(t *testing.T, prefix string) Backend { return newPure() },
		"memory": func(t *testing.T, prefix string) Backend {
			m, err := NewMemory(MemoryOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return m
		},
		"redis": func(t *testing.T, prefix string) Backend {
			c := srv.Client(t)
			b, err := NewRedis(c, prefix)
			if err != nil {
				t.Fatal(err)
			}
			// No dimension's key ever lives without a TTL (runs before
			// the client is closed: cleanups run last-in first-out).
			t.Cleanup(func() { redistest.AuditTTL(t, c, "{"+prefix+"}*") })
			return b
		},
	}
}

func newGuard(t testing.TB, b Backend, opts Options) *Guard {
	t.Helper()
	if opts.Secret == nil {
		opts.Secret = testSecret
	}
	g, err := New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }
