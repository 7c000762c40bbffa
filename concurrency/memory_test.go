package concurrency

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/heapsize"
)

// TestMemoryPerLease measures the heap an identity with one lease costs
// in a MemoryStore (set, map entry, key, lease and its 26-byte id), with
// identities of 64 bytes (the longest kept readable in keys), and what
// each further lease of an identity holding 10,000 costs; the figures
// MemoryOptions and docs/operations.md state. It used to be 474 bytes an
// identity: each set made a map up front.
func TestMemoryPerLease(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation sizes")
	}
	const n = 50_000
	ctx := context.Background()
	var m *MemoryStore
	var l *Limiter
	perIdentity := heapsize.Growth(func() any {
		var err error
		if m, err = NewMemoryStore(MemoryOptions{MaxKeys: 2 * n, MaxLeases: 2 * n}); err != nil {
			t.Fatal(err)
		}
		l = newLimiter(t, m, Policy{Name: "llm-calls", Limit: 10_000, LeaseTTL: time.Hour}, "fg")
		for i := range n {
			if r, err := l.AcquireAt(ctx, t0, fmt.Sprintf("%064d", i)); err != nil || !r.Allowed {
				t.Fatalf("acquire %d: %+v, %v", i, r, err)
			}
		}
		return m
	}) / n
	perLease := heapsize.Growth(func() any {
		for i := range 10_000 {
			if r, err := l.AcquireAt(ctx, t0, "one"); err != nil || !r.Allowed {
				t.Fatalf("acquire %d: %+v, %v", i, r, err)
			}
		}
		return nil
	}) / 10_000
	t.Logf("%d bytes per identity with one lease (%d-byte keys), %d per further lease", perIdentity, len(l.Key(fmt.Sprintf("%064d", 0))), perLease)
	if held, _ := m.sets.Units(); held != n+10_000 {
		t.Fatalf("%d leases counted, want %d", held, n+10_000)
	}
	if perIdentity > 300 || perLease > 160 {
		t.Errorf("%d bytes per identity, %d per further lease; want at most 300 and 160", perIdentity, perLease)
	}
	runtime.KeepAlive(m)
}

// TestMemoryStoreMaxLeases: a MemoryStore holds at most MaxLeases leases
// across identities (a policy's Limit bounds them only per identity),
// refusing an Acquire beyond them with ErrStoreFull; released and expired
// leases make room again, wherever they were.
func TestMemoryStoreMaxLeases(t *testing.T) {
	ctx := context.Background()
	m, err := NewMemoryStore(MemoryOptions{MaxLeases: 10})
	if err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, m, Policy{Name: "cap", Limit: 100, LeaseTTL: time.Minute}, "cap")
	var leases []Lease
	for i := range 10 {
		r, err := l.AcquireAt(ctx, t0, fmt.Sprint("u", i%4))
		if err != nil || !r.Allowed {
			t.Fatalf("acquire %d: %+v, %v", i, r, err)
		}
		leases = append(leases, r.Lease)
	}
	for _, id := range []string{"u0", "new"} {
		if r, err := l.AcquireAt(ctx, t0, id); !errors.Is(err, floodgate.ErrStoreFull) || !strings.Contains(err.Error(), "leases held") {
			t.Fatalf("11th lease, %s: %+v, %v; want ErrStoreFull", id, r, err)
		}
	}
	if ok, err := l.ReleaseAt(ctx, t0, leases[3]); err != nil || !ok {
		t.Fatalf("release: %v, %v", ok, err)
	}
	if r, err := l.AcquireAt(ctx, t0, "new"); err != nil || !r.Allowed {
		t.Fatalf("after a release: %+v, %v", r, err)
	}
	if _, err := l.AcquireAt(ctx, t0, "new"); !errors.Is(err, floodgate.ErrStoreFull) {
		t.Fatalf("full again: %v", err)
	}
	// The holders crashed: their leases expire and free the store.
	later := t0.Add(2 * time.Minute)
	for i := range 10 {
		if r, err := l.AcquireAt(ctx, later, "late"); err != nil || !r.Allowed {
			t.Fatalf("acquire %d after expiry: %+v, %v", i, r, err)
		}
	}
	if held, _ := m.sets.Units(); held != 10 {
		t.Fatalf("%d leases counted, want 10", held)
	}
}
