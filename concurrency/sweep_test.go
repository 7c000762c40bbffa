package concurrency

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestMemorySweepsIdleExpiredLeases: a MemoryStore not full drops the
// leases that expired, and the identities left with none, without any
// further operation. It used to keep them until an operation on the
// identity or a full store's pass found them: serve's gauge counted 951
// leases held of --memory-max-leases 1,000 for as long as it ran, every
// one expired.
func TestMemorySweepsIdleExpiredLeases(t *testing.T) {
	m, err := NewMemoryStore(MemoryOptions{MaxKeys: 1000, MaxLeases: 1000, SweepInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	l := newLimiter(t, m, Policy{Name: "cap", Limit: 3, LeaseTTL: 50 * time.Millisecond}, "sweep")
	ctx := context.Background()
	const identities = 300
	for i := range identities {
		for range 3 {
			if r, err := l.Acquire(ctx, fmt.Sprint("user", i)); err != nil || !r.Allowed {
				t.Fatalf("acquire for user%d: %+v, %v", i, r, err)
			}
		}
	}
	if n := m.Len(); n == 0 {
		t.Fatalf("no lease held after %d acquires", 3*identities)
	}
	// Poll until the sweep has dropped every lease; the deadline only
	// bounds a failing run.
	deadline := time.Now().Add(30 * time.Second)
	for m.Len() != 0 || m.sets.Len() != 0 {
		if time.Now().After(deadline) {
			held, _ := m.sets.Keys()
			t.Fatalf("30 s after the acquires: %d expired leases of %d identities still held (%d counted)", m.Len(), m.sets.Len(), held)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if held, _ := m.sets.Keys(); held != 0 {
		t.Fatalf("every identity dropped, %d still counted", held)
	}
	// The store still works, and a new identity is swept again.
	if r, err := l.Acquire(ctx, "later"); err != nil || !r.Allowed {
		t.Fatalf("acquire after the sweep: %+v, %v", r, err)
	}
	for m.Len() != 0 {
		if time.Now().After(deadline.Add(30 * time.Second)) {
			t.Fatalf("the lease acquired after a sweep emptied the store was not swept")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
