package quota

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// TestMemorySweepsIdleExpiredRecords: a MemoryStore not full drops the
// reservations that expired without any further operation, and keeps the
// periods (whose usage and lost-state marker live on). It used to keep
// expired records until an operation on the period, or one short of
// records, found them.
func TestMemorySweepsIdleExpiredRecords(t *testing.T) {
	m, err := NewMemoryStore(MemoryOptions{SweepInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	q := newQuota(t, m, Policy{Name: "tokens", Limit: 1000, Calendar: Calendar{Unit: Month}}, Options{HoldTTL: 50 * time.Millisecond})
	ctx := context.Background()
	const identities = 200
	for i := range identities {
		if r, err := q.Reserve(ctx, fmt.Sprint("user", i), "r1", 10); err != nil || !r.Allowed {
			t.Fatalf("reserve for user%d: %+v, %v", i, r, err)
		}
	}
	if periods, records := m.Len(); periods != identities || records != identities {
		t.Fatalf("after %d reserves: %d periods, %d records held", identities, periods, records)
	}
	// Poll until the sweep has dropped every hold; the deadline only
	// bounds a failing run.
	deadline := time.Now().Add(30 * time.Second)
	for _, records := m.Len(); records != 0; _, records = m.Len() {
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the reserves: %d expired holds still held", records)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if periods, _ := m.Len(); periods != identities {
		t.Fatalf("%d periods held after the sweep, want %d (their markers live)", periods, identities)
	}
	if r, err := q.Status(ctx, "user0"); err != nil || r.Used != 0 || r.Reserved != 0 {
		t.Fatalf("status after the hold expired: %+v, %v", r, err)
	}
}

// TestMemoryFullAnswersReadsFromNothing: with the store holding MaxKeys
// periods, a status, a check of cost 0 and one above the limit of an
// identity it does not hold are answered as before it filled (used 0),
// creating nothing, while a check that would charge is refused. The
// status used to fail with ErrStoreFull (a 503 in serve).
func TestMemoryFullAnswersReadsFromNothing(t *testing.T) {
	m, err := NewMemoryStore(MemoryOptions{MaxKeys: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	q := newQuota(t, m, Policy{Name: "tokens", Limit: 100, Calendar: Calendar{Unit: Month}}, Options{})
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if r, err := q.CheckAt(ctx, t0, id, 1); err != nil || !r.Allowed {
			t.Fatalf("check for %s: %+v, %v", id, r, err)
		}
	}
	if r, err := q.CheckAt(ctx, t0, "c", 0); err != nil || !r.Allowed || r.Used != 0 || r.Remaining != 100 {
		t.Fatalf("status of a third identity in a full store: %+v, %v; want allowed, used 0, remaining 100", r, err)
	}
	if r, err := q.CheckAt(ctx, t0, "c", 0); err != nil || !r.Allowed || r.Remaining != 100 {
		t.Fatalf("check of cost 0: %+v, %v", r, err)
	}
	if r, err := q.CheckAt(ctx, t0, "c", 101); err != nil || r.Allowed || r.Reason != ReasonCostExceedsLimit {
		t.Fatalf("check above the limit: %+v, %v", r, err)
	}
	if r, err := q.CheckAt(ctx, t0, "c", 1); !errors.Is(err, floodgate.ErrStoreFull) {
		t.Fatalf("a charging check in a full store: %+v, %v; want ErrStoreFull", r, err)
	}
	if periods, _ := m.Len(); periods != 2 {
		t.Fatalf("%d periods held, want 2", periods)
	}
}
