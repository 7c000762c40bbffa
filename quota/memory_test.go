package quota

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/heapsize"
)

// memQuota is the quota the memory tests measure with: the name of the
// built-in example's, monthly.
func memQuota(t testing.TB, m *MemoryStore) *Quota {
	return newQuota(t, m, Policy{Name: "llm-tokens", Limit: 1 << 40, Calendar: Calendar{Unit: Month}}, Options{})
}

// longID returns request id i padded to n bytes.
func longID(i, n int) string { return fmt.Sprintf("%0*d", n, i) }

// TestMemoryPerPeriod measures the heap one identity period costs in a
// MemoryStore (period slot, ledger, map entry, key, and a reservation or
// outcome with its request id), with identities of 64 bytes (the longest
// kept readable in keys: 91-byte keys) and 36-byte request ids (a UUID),
// and checks it against the figures MemoryOptions.MaxKeys and
// docs/operations.md state. Every string the store keeps is made inside
// the measurement, as a request's decoding makes it. It used to be 346
// bytes a period checked, 779 with one reservation held and 1,499 with one
// settled: each ledger made two maps up front, and a settled reservation
// left a map's group of 8 slots and a heap item behind.
func TestMemoryPerPeriod(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation sizes")
	}
	const n = 50_000
	ctx := context.Background()
	identity := func(i int) string { return longID(i, floodgate.MaxIdentityLen) }
	for _, c := range []struct {
		name  string
		op    func(q *Quota, i int) error
		bound int64 // bytes per period
	}{
		{"checked", func(q *Quota, i int) error {
			_, err := q.CheckAt(ctx, t0, identity(i), 1)
			return err
		}, 330},
		{"one reservation held", func(q *Quota, i int) error {
			_, err := q.ReserveAt(ctx, t0, identity(i), longID(i, 36), 1)
			return err
		}, 400},
		{"one reservation settled", func(q *Quota, i int) error {
			if _, err := q.ReserveAt(ctx, t0, identity(i), longID(i, 36), 1); err != nil {
				return err
			}
			_, err := q.SettleAt(ctx, t0, identity(i), longID(i, 36), 1)
			return err
		}, 440},
	} {
		var m *MemoryStore
		grew := heapsize.Growth(func() any {
			var err error
			if m, err = NewMemoryStore(MemoryOptions{MaxKeys: 2 * n, MaxRecords: 2 * n}); err != nil {
				t.Fatal(err)
			}
			q := memQuota(t, m)
			for i := range n {
				if err := c.op(q, i); err != nil {
					t.Fatal(err)
				}
			}
			return m
		})
		per := grew / n
		keyLen := len(usageKey(memQuota(t, m), identity(0), t0))
		t.Logf("%s: %d bytes per period (%d-byte keys, 36-byte request ids)", c.name, per, keyLen)
		if m.slots.Len() != n {
			t.Fatalf("%s: %d periods, want %d", c.name, m.slots.Len(), n)
		}
		if per > c.bound {
			t.Errorf("%s: %d bytes per period, want at most %d", c.name, per, c.bound)
		}
	}
}

// TestMemoryPerRecord measures the heap one reservation, and one
// settlement outcome, costs beyond its period, with request ids of
// MaxRequestIDLen bytes, the most a caller can make it cost: alone in its
// period, 20 to a period (just past the size at which a period indexes its
// ids, where a record costs the most), and 10,000 in one period (the
// default Options.MaxPending); the figures MemoryOptions.MaxRecords and
// docs/operations.md state.
func TestMemoryPerRecord(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation sizes")
	}
	ctx := context.Background()
	const records = 20_000
	for _, perPeriod := range []int{1, 20, 10_000} {
		periods := records / perPeriod
		identity := func(p int) string { return longID(p, floodgate.MaxIdentityLen) }
		var m *MemoryStore
		var q *Quota
		heapsize.Growth(func() any {
			var err error
			if m, err = NewMemoryStore(MemoryOptions{MaxRecords: 2 * records}); err != nil {
				t.Fatal(err)
			}
			q = memQuota(t, m)
			for p := range periods {
				if _, err := q.CheckAt(ctx, t0, identity(p), 1); err != nil {
					t.Fatal(err)
				}
			}
			return m
		})
		held := heapsize.Growth(func() any {
			for p := range periods {
				for i := range perPeriod {
					if r, err := q.ReserveAt(ctx, t0, identity(p), longID(i, MaxRequestIDLen), 1); err != nil || !r.Allowed {
						t.Fatalf("reserve %d of period %d: %+v, %v", i, p, r, err)
					}
				}
			}
			return nil
		}) / records
		// Settling the holds frees theirs and keeps the outcomes: their
		// cost is what the holds cost and what settling them added.
		settled := held + heapsize.Growth(func() any {
			for p := range periods {
				for i := range perPeriod {
					if _, err := q.SettleAt(ctx, t0, identity(p), longID(i, MaxRequestIDLen), 1); err != nil {
						t.Fatal(err)
					}
				}
			}
			return nil
		})/records
		t.Logf("%d per period, %d-byte request ids: %d bytes per reservation held, %d per settlement outcome", perPeriod, MaxRequestIDLen, held, settled)
		if got, _ := m.slots.Units(); got != records {
			t.Fatalf("%d records counted, want %d", got, records)
		}
		const bound = 330
		if held > bound || settled > bound {
			t.Errorf("%d per period: %d bytes per reservation, %d per outcome; want at most %d", perPeriod, held, settled, bound)
		}
		runtime.KeepAlive(m)
	}
}

// TestMemoryStoreMaxRecords: a MemoryStore holds at most MaxRecords
// reservations and outcomes across identities, refusing a reserve or an
// unmatched settle beyond them with ErrStoreFull (changing nothing), while
// settling a held reservation, checks and replays go on; expired
// reservations make room again. One identity could hold MaxPending
// reservations and MaxSettled outcomes per period, whatever the store's
// size, before.
func TestMemoryStoreMaxRecords(t *testing.T) {
	ctx := context.Background()
	m, err := NewMemoryStore(MemoryOptions{MaxRecords: 10})
	if err != nil {
		t.Fatal(err)
	}
	q := newQuota(t, m, monthly(1000), Options{HoldTTL: time.Minute})
	for i := range 10 { // across identities and shards
		if r, err := q.ReserveAt(ctx, t0, fmt.Sprint("u", i%3), fmt.Sprint("r", i), 1); err != nil || !r.Allowed {
			t.Fatalf("reserve %d: %+v, %v", i, r, err)
		}
	}
	full := func(name string, r Result, err error) {
		t.Helper()
		if !errors.Is(err, floodgate.ErrStoreFull) {
			t.Fatalf("%s: %+v, %v; want ErrStoreFull", name, r, err)
		}
	}
	r, err := q.ReserveAt(ctx, t0, "u0", "r10", 1)
	full("11th reservation", r, err)
	r, err = q.ReserveAt(ctx, t0, "new", "r10", 1)
	full("11th reservation, new identity", r, err)
	r, err = q.SettleAt(ctx, t0, "u1", "never-reserved", 1)
	full("unmatched settle", r, err)
	if r, err := q.CheckAt(ctx, t0, "u1", 0); err != nil || r.Used != 0 || r.Reserved != 3 {
		t.Fatalf("u1 after the refusals: %+v, %v; want nothing changed", r, err)
	}
	// What adds no record goes on.
	if r, err := q.SettleAt(ctx, t0, "u0", "r0", 5); err != nil || r.Used != 5 || r.Unmatched {
		t.Fatalf("settle of a held reservation: %+v, %v", r, err)
	}
	if r, err := q.SettleAt(ctx, t0, "u0", "r0", 5); err != nil || !r.Replayed {
		t.Fatalf("settle replay: %+v, %v", r, err)
	}
	if r, err := q.ReserveAt(ctx, t0, "u1", "r1", 1); err != nil || !r.Replayed {
		t.Fatalf("reserve replay: %+v, %v", r, err)
	}
	if r, err := q.CheckAt(ctx, t0, "new", 7); err != nil || !r.Allowed {
		t.Fatalf("check: %+v, %v", r, err)
	}
	if got, _ := m.slots.Units(); got != 10 {
		t.Fatalf("%d records counted, want 10", got)
	}
	// Once the holds expire, their room is found again, wherever they
	// are (trimming gives their estimates back).
	later := t0.Add(2 * time.Minute)
	for i := range 9 {
		if r, err := q.ReserveAt(ctx, later, "new", fmt.Sprint("s", i), 1); err != nil || !r.Allowed {
			t.Fatalf("reserve %d after the holds expired: %+v, %v", i, r, err)
		}
	}
	r, err = q.ReserveAt(ctx, later, "new", "s9", 1)
	full("reservation beyond the outcome and 9 holds", r, err)
	if r, err := q.CheckAt(ctx, later, "u2", 0); err != nil || r.Reserved != 0 {
		t.Fatalf("u2 after its holds were reclaimed: %+v, %v", r, err)
	}
}

// TestMemoryRecordsCounted runs random operations over a few identities,
// two periods and expiring holds and outcomes against a store with a
// small MaxRecords, and checks after each that the store's count is the
// records its periods hold, never above the cap.
func TestMemoryRecordsCounted(t *testing.T) {
	const maxRecords = 40
	ctx := context.Background()
	m, err := NewMemoryStore(MemoryOptions{MaxRecords: maxRecords, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	p := Policy{Name: "daily", Limit: 50, Calendar: Calendar{Unit: Day}}
	q := newQuota(t, m, p, Options{HoldTTL: 20 * time.Minute, SettledTTL: time.Hour, Grace: time.Minute, MaxPending: 8, MaxSettled: 12})
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Date(2026, 12, 10, 22, 0, 0, 0, time.UTC)
	now := start
	identities := []string{"a", "b", "c", "d", "e"}
	full := 0
	for i := range 5000 {
		now = now.Add(time.Duration(rng.IntN(40)) * time.Second)
		id := identities[rng.IntN(len(identities))]
		rid := fmt.Sprint("r", rng.IntN(60))
		switch rng.IntN(4) {
		case 0, 1:
			_, err = q.ReserveAt(ctx, now, id, rid, 1+rng.Int64N(5))
		case 2:
			_, err = q.SettleAt(ctx, now, id, rid, rng.Int64N(5))
		default:
			_, err = q.CheckAt(ctx, now, id, rng.Int64N(3))
		}
		switch {
		case errors.Is(err, floodgate.ErrStoreFull):
			full++
		case errors.Is(err, ErrAlreadySettled):
		case err != nil:
			t.Fatalf("op %d: %v", i, err)
		}
		counted, _ := m.slots.Units()
		held := 0
		for _, id := range identities {
			for d := start; !d.After(now.Add(24 * time.Hour)); d = d.Add(24 * time.Hour) {
				key := usageKey(q, id, d)
				sh := m.lock(key)
				held += sh.Get(key).records()
				sh.Unlock()
			}
		}
		if counted != held || counted > maxRecords {
			t.Fatalf("op %d at %s: %d records counted, %d held (cap %d)", i, now.Format(time.TimeOnly), counted, held, maxRecords)
		}
	}
	if full == 0 || full > 4000 {
		t.Fatalf("%d of 5000 operations refused for want of records: the test should reach the cap sometimes", full)
	}
	t.Logf("%d of 5000 operations refused, the store full", full)
}

// TestMemoryStoreFullErrorSaysWhat: the two ways a memory store is full
// read differently.
func TestMemoryStoreFullErrorSaysWhat(t *testing.T) {
	ctx := context.Background()
	m, err := NewMemoryStore(MemoryOptions{MaxKeys: 1, MaxRecords: 1})
	if err != nil {
		t.Fatal(err)
	}
	q := newQuota(t, m, monthly(100), Options{})
	if _, err := q.ReserveAt(ctx, t0, "a", "r1", 1); err != nil {
		t.Fatal(err)
	}
	_, err = q.ReserveAt(ctx, t0, "a", "r2", 1)
	if !errors.Is(err, floodgate.ErrStoreFull) || !strings.Contains(err.Error(), "reservations and settlement outcomes") {
		t.Errorf("records full: %v", err)
	}
	_, err = q.CheckAt(ctx, t0, "b", 1)
	if !errors.Is(err, floodgate.ErrStoreFull) || !strings.Contains(err.Error(), "quota periods") {
		t.Errorf("periods full: %v", err)
	}
}
