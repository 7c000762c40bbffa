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

// TestMemorySweepJudgesLeasesByTheirOwnClock: two identities on clocks a
// year apart share a store; the background sweep must leave identity a's
// lease, live by a's clock, as the Redis store does (its key expires by
// the TTL a's own time gave it). The sweep used to read one clock for the
// whole store, the last operation's, and dropped a's lease: a's second
// acquire with Limit 1 was allowed and its release of the first returned
// false.
func TestMemorySweepJudgesLeasesByTheirOwnClock(t *testing.T) {
	ctx := context.Background()
	run := func(t *testing.T, s Store, swept func(t *testing.T)) {
		l := newLimiter(t, s, Policy{Name: "cap", Limit: 1, LeaseTTL: 30 * time.Second}, "clocks")
		probe := newLimiter(t, s, Policy{Name: "probe", Limit: 1, LeaseTTL: 50 * time.Millisecond}, "clocks")
		aClock := time.Now().AddDate(-1, 0, 0)
		first, err := l.AcquireAt(ctx, aClock, "a")
		if err != nil || !first.Allowed {
			t.Fatalf("a's first acquire: %+v, %v", first, err)
		}
		if r, err := l.Acquire(ctx, "b"); err != nil || !r.Allowed {
			t.Fatalf("b's acquire at the real clock: %+v, %v", r, err)
		}
		if r, err := probe.Acquire(ctx, "probe"); err != nil || !r.Allowed {
			t.Fatalf("the probe's acquire: %+v, %v", r, err)
		}
		swept(t)
		aClock = aClock.Add(2 * time.Second)
		if r, err := l.AcquireAt(ctx, aClock, "a"); err != nil || r.Allowed {
			t.Fatalf("a's second acquire 2 s later by a's clock, Limit 1: %+v, %v; want refused", r, err)
		}
		if released, err := l.ReleaseAt(ctx, aClock, first.Lease); err != nil || !released {
			t.Fatalf("releasing a's first lease: %v, %v; want true", released, err)
		}
	}
	t.Run("memory", func(t *testing.T) {
		// One shard: the sweep that drops the probe's lease visits every
		// lease in the same hold of its lock.
		m, err := NewMemoryStore(MemoryOptions{Shards: 1, SweepInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		run(t, m, func(t *testing.T) {
			// Wait for a sweep to drop the probe's lease, expired by the
			// real clock; the deadline only bounds a failing run.
			deadline := time.Now().Add(30 * time.Second)
			for m.Len() == 3 {
				if time.Now().After(deadline) {
					t.Fatalf("30 s on, the probe's expired lease is still held")
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	})
	t.Run("redis", func(t *testing.T) {
		s, _ := newRedisStore(t)
		run(t, s, func(*testing.T) {})
	})
}
