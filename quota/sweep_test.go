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

// TestMemorySweepJudgesHoldsByTheirOwnClock: two identities on clocks
// three days apart share a store; the background sweep must leave
// identity a's hold, live by a's clock, as the Redis store does. The sweep
// used to read one clock for the whole store, the last operation's, and
// dropped a's hold: a's second reserve of 60 was allowed (120 held of a
// limit of 100) and settling the first answered Unmatched.
func TestMemorySweepJudgesHoldsByTheirOwnClock(t *testing.T) {
	ctx := context.Background()
	run := func(t *testing.T, s Store, swept func(t *testing.T)) {
		q := newQuota(t, s, Policy{Name: "tokens", Limit: 100, Calendar: Calendar{Unit: Month}}, Options{HoldTTL: 30 * time.Second})
		probe := newQuota(t, s, Policy{Name: "probe", Limit: 100, Calendar: Calendar{Unit: Month}}, Options{HoldTTL: 50 * time.Millisecond})
		aClock := time.Now().AddDate(0, 0, -3)
		if r, err := q.ReserveAt(ctx, aClock, "a", "r1", 60); err != nil || !r.Allowed {
			t.Fatalf("a's first reserve: %+v, %v", r, err)
		}
		if r, err := q.Reserve(ctx, "b", "r1", 10); err != nil || !r.Allowed {
			t.Fatalf("b's reserve at the real clock: %+v, %v", r, err)
		}
		if r, err := probe.Reserve(ctx, "probe", "r1", 10); err != nil || !r.Allowed {
			t.Fatalf("the probe's reserve: %+v, %v", r, err)
		}
		swept(t)
		aClock = aClock.Add(2 * time.Second)
		if r, err := q.ReserveAt(ctx, aClock, "a", "r2", 60); err != nil || r.Allowed || r.Reserved != 60 {
			t.Fatalf("a's second reserve of 60, 2 s later by a's clock: %+v, %v; want refused, 60 reserved", r, err)
		}
		if r, err := q.SettleAt(ctx, aClock, "a", "r1", 60); err != nil || r.Unmatched || r.Used != 60 || r.Reserved != 0 {
			t.Fatalf("settling a's first reserve: %+v, %v; want matched, used 60, reserved 0", r, err)
		}
	}
	t.Run("memory", func(t *testing.T) {
		// One shard: the sweep that drops the probe's hold visits every
		// period in the same hold of its lock.
		m, err := NewMemoryStore(MemoryOptions{Shards: 1, SweepInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		run(t, m, func(t *testing.T) {
			// Wait for a sweep to drop the probe's hold, expired by the
			// real clock; the deadline only bounds a failing run.
			deadline := time.Now().Add(30 * time.Second)
			for _, records := m.Len(); records == 3; _, records = m.Len() {
				if time.Now().After(deadline) {
					t.Fatalf("30 s on, the probe's expired hold is still held")
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
