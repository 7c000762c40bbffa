package quota

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/redis/go-redis/v9"
)

// t0 is the step tables' origin: 21 days 12 hours before the end of
// December 2026 (UTC).
var t0 = time.Date(2026, 12, 10, 12, 0, 0, 0, time.UTC)

const untilNewYear = 516 * time.Hour

type qstep struct {
	name    string
	at      time.Duration // offset from t0
	op      opKind
	id      string
	amount  int64
	want    view
	wantErr error
}

type qcase struct {
	name   string
	policy Policy
	opts   Options
	steps  []qstep
}

func monthly(limit int64) Policy {
	return Policy{Name: "tokens", Limit: limit, Calendar: Calendar{Unit: Month}}
}

func quotaCases(t *testing.T) []qcase {
	ny := mustLoad(t, "America/New_York")
	const m = time.Minute
	dec := "2026-12"
	return []qcase{
		{name: "check", policy: monthly(100), steps: []qstep{
			{"first", 0, opCheck, "", 50, view{Allowed: true, Used: 50, Remaining: 50, Charged: 50, Period: dec}, nil},
			{"crosses soft threshold", m, opCheck, "", 40, view{Allowed: true, Used: 90, Remaining: 10, Charged: 40, Soft: true, Period: dec}, nil},
			{"does not fit", 2 * m, opCheck, "", 20, view{Reason: ReasonExhausted, Used: 90, Remaining: 10, Soft: true, Period: dec, RetryAfter: untilNewYear - 2*m}, nil},
			{"fills exactly", 3 * m, opCheck, "", 10, view{Allowed: true, Used: 100, Charged: 10, Soft: true, Exhausted: true, Period: dec}, nil},
			{"peek when full", 4 * m, opCheck, "", 0, view{Reason: ReasonExhausted, Used: 100, Soft: true, Exhausted: true, Period: dec, RetryAfter: untilNewYear - 4*m}, nil},
			{"larger than the limit", 5 * m, opCheck, "", 101, view{Reason: ReasonCostExceedsLimit, Used: 100, Soft: true, Exhausted: true, Period: dec}, nil},
			{"new month, fresh allowance", untilNewYear, opCheck, "", 1, view{Allowed: true, Used: 1, Remaining: 99, Charged: 1, Period: "2027-01"}, nil},
			{"peek", untilNewYear + m, opCheck, "", 0, view{Allowed: true, Used: 1, Remaining: 99, Period: "2027-01"}, nil},
		}},
		{name: "reserve and settle", policy: monthly(1000), steps: []qstep{
			{"hold estimate", 0, opReserve, "r1", 500, view{Allowed: true, Reserved: 500, Remaining: 500, Period: dec}, nil},
			{"second hold does not fit: hint is the first hold's expiry", m, opReserve, "r2", 600, view{Reason: ReasonExhausted, Reserved: 500, Remaining: 500, Period: dec, RetryAfter: 9 * m}, nil},
			{"settle below estimate refunds", 2 * m, opSettle, "r1", 300, view{Allowed: true, Used: 300, Remaining: 700, Charged: 300, Refunded: 200, Period: dec}, nil},
			{"now the second hold fits", 3 * m, opReserve, "r2", 600, view{Allowed: true, Used: 300, Reserved: 600, Remaining: 100, Soft: true, Period: dec}, nil},
			{"overrun is charged in full", 4 * m, opSettle, "r2", 900, view{Allowed: true, Used: 1200, Charged: 900, Soft: true, Exhausted: true, Period: dec}, nil},
			{"retry replays, charging nothing", 5 * m, opSettle, "r2", 900, view{Allowed: true, Used: 1200, Replayed: true, Soft: true, Exhausted: true, Period: dec}, nil},
			{"retry with another amount replays the first", 5 * m, opSettle, "r2", 5, view{Allowed: true, Used: 1200, Replayed: true, Soft: true, Exhausted: true, Period: dec}, nil},
			{"exhausted", 6 * m, opCheck, "", 1, view{Reason: ReasonExhausted, Used: 1200, Soft: true, Exhausted: true, Period: dec, RetryAfter: untilNewYear - 6*m}, nil},
		}},
		{name: "unsettled hold expires", policy: monthly(1000), steps: []qstep{
			{"hold", 0, opReserve, "r1", 800, view{Allowed: true, Reserved: 800, Remaining: 200, Soft: true, Period: dec}, nil},
			{"blocked by the hold", 9 * m, opCheck, "", 300, view{Reason: ReasonExhausted, Reserved: 800, Remaining: 200, Soft: true, Period: dec, RetryAfter: m}, nil},
			{"hold expired at its ttl", 10 * m, opCheck, "", 300, view{Allowed: true, Used: 300, Remaining: 700, Charged: 300, Period: dec}, nil},
			{"late settle is charged, unmatched", 11 * m, opSettle, "r1", 100, view{Allowed: true, Used: 400, Remaining: 600, Charged: 100, Unmatched: true, Period: dec}, nil},
			{"and replays", 12 * m, opSettle, "r1", 100, view{Allowed: true, Used: 400, Remaining: 600, Unmatched: true, Replayed: true, Period: dec}, nil},
		}},
		{name: "duplicate reserve", policy: monthly(1000), steps: []qstep{
			{"hold", 0, opReserve, "r1", 100, view{Allowed: true, Reserved: 100, Remaining: 900, Period: dec}, nil},
			{"same id holds nothing more", m, opReserve, "r1", 200, view{Allowed: true, Reserved: 100, Remaining: 900, Replayed: true, Period: dec}, nil},
			{"settle", 2 * m, opSettle, "r1", 50, view{Allowed: true, Used: 50, Remaining: 950, Charged: 50, Refunded: 50, Period: dec}, nil},
			{"reserve a settled id", 3 * m, opReserve, "r1", 100, view{}, ErrAlreadySettled},
			{"nothing changed", 4 * m, opCheck, "", 0, view{Allowed: true, Used: 50, Remaining: 950, Period: dec}, nil},
		}},
		{name: "settle in the reservation's period", policy: Policy{Name: "daily", Limit: 1000, Calendar: Calendar{Unit: Day, Location: ny}}, steps: []qstep{
			{"reserve at 23:59 new york", 17*time.Hour - m, opReserve, "r1", 400, view{Allowed: true, Reserved: 400, Remaining: 600, Period: "2026-12-10"}, nil},
			{"settle at 00:01 goes to the day before", 17*time.Hour + m, opSettle, "r1", 300, view{Allowed: true, Used: 300, Remaining: 700, Charged: 300, Refunded: 100, Period: "2026-12-10"}, nil},
			{"the new day is untouched", 17*time.Hour + 2*m, opCheck, "", 0, view{Allowed: true, Remaining: 1000, Period: "2026-12-11"}, nil},
			{"retry replays from the day before", 17*time.Hour + 3*m, opSettle, "r1", 300, view{Allowed: true, Used: 300, Remaining: 700, Replayed: true, Period: "2026-12-10"}, nil},
			{"check counts on the new day", 17*time.Hour + 4*m, opCheck, "", 1, view{Allowed: true, Used: 1, Remaining: 999, Charged: 1, Period: "2026-12-11"}, nil},
		}},
		// A settle that finds no live hold is charged to the period current
		// when it arrives, even when its hold expired before midnight; its
		// replay repeats the first outcome's standing, not the current one.
		{name: "hold expired before midnight, settled after", policy: Policy{Name: "daily", Limit: 1000, Calendar: Calendar{Unit: Day, Location: ny}}, opts: Options{HoldTTL: 40 * time.Second}, steps: []qstep{
			{"reserve at 23:58:40", 17*time.Hour - 80*time.Second, opReserve, "r1", 20, view{Allowed: true, Reserved: 20, Remaining: 980, Period: "2026-12-10"}, nil},
			{"the hold expired at 23:59:20", 17*time.Hour - 30*time.Second, opCheck, "", 0, view{Allowed: true, Remaining: 1000, Period: "2026-12-10"}, nil},
			{"settle at 00:00:25 is charged to the new day, unmatched", 17*time.Hour + 25*time.Second, opSettle, "r1", 25, view{Allowed: true, Used: 25, Remaining: 975, Charged: 25, Unmatched: true, Period: "2026-12-11"}, nil},
			{"a check after it", 17*time.Hour + m, opCheck, "", 10, view{Allowed: true, Used: 35, Remaining: 965, Charged: 10, Period: "2026-12-11"}, nil},
			{"a replay answers the first outcome's standing", 17*time.Hour + 2*m, opSettle, "r1", 25, view{Allowed: true, Used: 25, Remaining: 975, Unmatched: true, Replayed: true, Period: "2026-12-11"}, nil},
		}},
		{name: "reserve retried across the boundary", policy: Policy{Name: "daily", Limit: 1000, Calendar: Calendar{Unit: Day, Location: ny}}, steps: []qstep{
			{"reserve at 23:59 new york", 17*time.Hour - m, opReserve, "r1", 400, view{Allowed: true, Reserved: 400, Remaining: 600, Period: "2026-12-10"}, nil},
			{"a retry at 00:01 replays the day before's hold", 17*time.Hour + m, opReserve, "r1", 400, view{Allowed: true, Reserved: 400, Remaining: 600, Replayed: true, Period: "2026-12-10"}, nil},
			{"the new day holds nothing", 17*time.Hour + 2*m, opCheck, "", 0, view{Allowed: true, Remaining: 1000, Period: "2026-12-11"}, nil},
			{"settle goes to the day before", 17*time.Hour + 3*m, opSettle, "r1", 300, view{Allowed: true, Used: 300, Remaining: 700, Charged: 300, Refunded: 100, Period: "2026-12-10"}, nil},
			{"reserve of the id settled the day before", 17*time.Hour + 4*m, opReserve, "r1", 400, view{}, ErrAlreadySettled},
			{"a settle retry still replays", 17*time.Hour + 5*m, opSettle, "r1", 300, view{Allowed: true, Used: 300, Remaining: 700, Replayed: true, Period: "2026-12-10"}, nil},
			{"the new day is still untouched", 17*time.Hour + 6*m, opCheck, "", 0, view{Allowed: true, Remaining: 1000, Period: "2026-12-11"}, nil},
		}},
		{name: "settled before midnight, reserved again after", policy: Policy{Name: "daily", Limit: 1000, Calendar: Calendar{Unit: Day, Location: ny}}, steps: []qstep{
			{"reserve", 17*time.Hour - 2*m, opReserve, "r1", 400, view{Allowed: true, Reserved: 400, Remaining: 600, Period: "2026-12-10"}, nil},
			{"settle at 23:59", 17*time.Hour - m, opSettle, "r1", 300, view{Allowed: true, Used: 300, Remaining: 700, Charged: 300, Refunded: 100, Period: "2026-12-10"}, nil},
			{"reserve of the settled id at 00:01", 17*time.Hour + m, opReserve, "r1", 400, view{}, ErrAlreadySettled},
			{"the new day holds nothing", 17*time.Hour + 2*m, opCheck, "", 0, view{Allowed: true, Remaining: 1000, Period: "2026-12-11"}, nil},
		}},
		{name: "settled after midnight, retried past the grace", policy: Policy{Name: "daily", Limit: 1000, Calendar: Calendar{Unit: Day, Location: ny}}, steps: []qstep{
			{"reserve at 23:55", 17*time.Hour - 5*m, opReserve, "r1", 400, view{Allowed: true, Reserved: 400, Remaining: 600, Period: "2026-12-10"}, nil},
			{"settle at 00:04 goes to the day before", 17*time.Hour + 4*m, opSettle, "r1", 300, view{Allowed: true, Used: 300, Remaining: 700, Charged: 300, Refunded: 100, Period: "2026-12-10"}, nil},
			{"a retry at 01:01, inside the settled ttl, replays", 17*time.Hour + 61*m, opSettle, "r1", 300, view{Allowed: true, Used: 300, Remaining: 700, Replayed: true, Period: "2026-12-10"}, nil},
			{"the new day is untouched", 17*time.Hour + 62*m, opCheck, "", 0, view{Allowed: true, Remaining: 1000, Period: "2026-12-11"}, nil},
		}},
		{name: "hold longer than the grace", policy: Policy{Name: "daily", Limit: 1000, Calendar: Calendar{Unit: Day, Location: ny}}, opts: Options{HoldTTL: 3 * time.Hour}, steps: []qstep{
			{"reserve at 23:59", 17*time.Hour - m, opReserve, "r1", 400, view{Allowed: true, Reserved: 400, Remaining: 600, Period: "2026-12-10"}, nil},
			{"settle at 01:30, inside the hold, goes to the day before", 17*time.Hour + 90*m, opSettle, "r1", 300, view{Allowed: true, Used: 300, Remaining: 700, Charged: 300, Refunded: 100, Period: "2026-12-10"}, nil},
			{"the new day is untouched", 17*time.Hour + 91*m, opCheck, "", 0, view{Allowed: true, Remaining: 1000, Period: "2026-12-11"}, nil},
		}},
		{name: "settle without reserve", policy: monthly(1000), steps: []qstep{
			{"charged", 0, opSettle, "x", 70, view{Allowed: true, Used: 70, Remaining: 930, Charged: 70, Unmatched: true, Period: dec}, nil},
			{"cancel a hold with actual 0", m, opReserve, "y", 500, view{Allowed: true, Used: 70, Reserved: 500, Remaining: 430, Period: dec}, nil},
			{"cancelled", 2 * m, opSettle, "y", 0, view{Allowed: true, Used: 70, Remaining: 930, Refunded: 500, Period: dec}, nil},
		}},
		{name: "too many pending", policy: monthly(1000), opts: Options{MaxPending: 2}, steps: []qstep{
			{"a", 0, opReserve, "a", 10, view{Allowed: true, Reserved: 10, Remaining: 990, Period: dec}, nil},
			{"b", m, opReserve, "b", 10, view{Allowed: true, Reserved: 20, Remaining: 980, Period: dec}, nil},
			{"c refused until a expires", 2 * m, opReserve, "c", 10, view{Reason: ReasonTooManyPending, Reserved: 20, Remaining: 980, Period: dec, RetryAfter: 8 * m}, nil},
			{"settle a", 3 * m, opSettle, "a", 10, view{Allowed: true, Used: 10, Reserved: 10, Remaining: 980, Charged: 10, Period: dec}, nil},
			{"c fits now", 4 * m, opReserve, "c", 10, view{Allowed: true, Used: 10, Reserved: 20, Remaining: 970, Period: dec}, nil},
		}},
		// RetryAfter is when enough holds have expired for the cost to
		// fit, not the earliest hold's expiry: it answered 8m (when a's 3
		// come back, still 2 short), and at 10m1s the check was denied
		// again with 59s.
		{name: "retry after enough holds expire", policy: monthly(10), steps: []qstep{
			{"check 4", 0, opCheck, "", 4, view{Allowed: true, Used: 4, Remaining: 6, Charged: 4, Period: dec}, nil},
			{"hold a 3", 0, opReserve, "a", 3, view{Allowed: true, Used: 4, Reserved: 3, Remaining: 3, Period: dec}, nil},
			{"hold b 3", m, opReserve, "b", 3, view{Allowed: true, Used: 4, Reserved: 6, Soft: true, Exhausted: true, Period: dec}, nil},
			{"5 fits once a and b expired", 2 * m, opCheck, "", 5, view{Reason: ReasonExhausted, Used: 4, Reserved: 6, Soft: true, Exhausted: true, Period: dec, RetryAfter: 9 * m}, nil},
			{"a expired, still short", 10*m + time.Second, opCheck, "", 5, view{Reason: ReasonExhausted, Used: 4, Reserved: 3, Remaining: 3, Period: dec, RetryAfter: 59 * time.Second}, nil},
			{"b expired: fits", 11 * m, opCheck, "", 5, view{Allowed: true, Used: 9, Remaining: 1, Charged: 5, Soft: true, Period: dec}, nil},
		}},
		{name: "too many pending until enough holds expire", policy: monthly(10), opts: Options{MaxPending: 2}, steps: []qstep{
			{"check 3", 0, opCheck, "", 3, view{Allowed: true, Used: 3, Remaining: 7, Charged: 3, Period: dec}, nil},
			{"a 2", 0, opReserve, "a", 2, view{Allowed: true, Used: 3, Reserved: 2, Remaining: 5, Period: dec}, nil},
			{"b 4", m, opReserve, "b", 4, view{Allowed: true, Used: 3, Reserved: 6, Remaining: 1, Soft: true, Period: dec}, nil},
			{"c 4 fits once b expired too", 2 * m, opReserve, "c", 4, view{Reason: ReasonTooManyPending, Used: 3, Reserved: 6, Remaining: 1, Soft: true, Period: dec, RetryAfter: 9 * m}, nil},
			{"c 1 once a expired", 2 * m, opReserve, "c", 1, view{Reason: ReasonTooManyPending, Used: 3, Reserved: 6, Remaining: 1, Soft: true, Period: dec, RetryAfter: 8 * m}, nil},
			{"c 8 never this period", 2 * m, opReserve, "c", 8, view{Reason: ReasonTooManyPending, Used: 3, Reserved: 6, Remaining: 1, Soft: true, Period: dec, RetryAfter: untilNewYear - 2*m}, nil},
		}},
		{name: "idempotency window", policy: monthly(1000), opts: Options{SettledTTL: time.Hour}, steps: []qstep{
			{"settle", 0, opSettle, "x", 5, view{Allowed: true, Used: 5, Remaining: 995, Charged: 5, Unmatched: true, Period: dec}, nil},
			{"replayed inside the window", 59 * m, opSettle, "x", 5, view{Allowed: true, Used: 5, Remaining: 995, Unmatched: true, Replayed: true, Period: dec}, nil},
			{"forgotten after it", 60 * m, opSettle, "x", 5, view{Allowed: true, Used: 10, Remaining: 990, Charged: 5, Unmatched: true, Period: dec}, nil},
		}},
		{name: "max settled", policy: monthly(1000), opts: Options{MaxSettled: 2}, steps: []qstep{
			{"a", 0, opSettle, "a", 1, view{Allowed: true, Used: 1, Remaining: 999, Charged: 1, Unmatched: true, Period: dec}, nil},
			{"b", time.Second, opSettle, "b", 1, view{Allowed: true, Used: 2, Remaining: 998, Charged: 1, Unmatched: true, Period: dec}, nil},
			{"c pushes a out", 2 * time.Second, opSettle, "c", 1, view{Allowed: true, Used: 3, Remaining: 997, Charged: 1, Unmatched: true, Period: dec}, nil},
			{"b still replays", 3 * time.Second, opSettle, "b", 1, view{Allowed: true, Used: 2, Remaining: 998, Unmatched: true, Replayed: true, Period: dec}, nil},
			{"a is charged again", 4 * time.Second, opSettle, "a", 1, view{Allowed: true, Used: 4, Remaining: 996, Charged: 1, Unmatched: true, Period: dec}, nil},
		}},
		{name: "restore", policy: monthly(100), steps: []qstep{
			{"restore a fresh period replaces nothing", 0, opRestore, "", 20, view{Allowed: true, Used: 20, Remaining: 80, Period: dec}, nil},
			{"use", 1, opCheck, "", 10, view{Allowed: true, Used: 30, Remaining: 70, Charged: 10, Period: dec}, nil},
			{"restore says what it replaced", m, opRestore, "", 10, view{Allowed: true, Used: 10, Remaining: 90, Period: dec, Replaced: 30}, nil},
			{"counts on", 2 * m, opCheck, "", 5, view{Allowed: true, Used: 15, Remaining: 85, Charged: 5, Period: dec}, nil},
		}},
		// A restore of usage that was not lost keeps the holds, as
		// docs/quotas.md says (only one of lost usage drops them).
		{name: "restore keeps holds", policy: monthly(100), steps: []qstep{
			{"hold", 0, opReserve, "k1", 10, view{Allowed: true, Reserved: 10, Remaining: 90, Period: dec}, nil},
			{"restore", m, opRestore, "", 50, view{Allowed: true, Used: 50, Reserved: 10, Remaining: 40, Period: dec}, nil},
			{"settle is matched", 2 * m, opSettle, "k1", 4, view{Allowed: true, Used: 54, Remaining: 46, Charged: 4, Refunded: 6, Period: dec}, nil},
		}},
		{name: "custom soft threshold", policy: monthly(10), opts: Options{SoftThreshold: 0.5}, steps: []qstep{
			{"below", 0, opCheck, "", 4, view{Allowed: true, Used: 4, Remaining: 6, Charged: 4, Period: dec}, nil},
			{"at", m, opCheck, "", 1, view{Allowed: true, Used: 5, Remaining: 5, Charged: 1, Soft: true, Period: dec}, nil},
		}},
	}
}

func runStep(ctx context.Context, q *Quota, identity string, s qstep) (Result, error) {
	at := t0.Add(s.at)
	switch s.op {
	case opCheck:
		return q.CheckAt(ctx, at, identity, s.amount)
	case opReserve:
		return q.ReserveAt(ctx, at, identity, s.id, s.amount)
	case opSettle:
		return q.SettleAt(ctx, at, identity, s.id, s.amount)
	}
	return q.RestoreAt(ctx, at, identity, s.amount)
}

// TestSteps runs the shared table against every store; they must agree
// exactly.
func TestSteps(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		for _, c := range quotaCases(t) {
			t.Run(c.name, func(t *testing.T) {
				c.opts.Prefix = "steps"
				q := newQuota(t, b.store, c.policy, c.opts)
				for i, s := range c.steps {
					r, err := runStep(context.Background(), q, c.name, s)
					if s.wantErr != nil {
						if !errors.Is(err, s.wantErr) {
							t.Fatalf("step %d %q: err = %v, want %v", i, s.name, err, s.wantErr)
						}
						continue
					}
					if err != nil {
						t.Fatalf("step %d %q: %v", i, s.name, err)
					}
					if got := viewOf(r); got != s.want {
						t.Fatalf("step %d %q:\n got %+v\nwant %+v", i, s.name, got, s.want)
					}
					if r.Limit != c.policy.Limit {
						t.Fatalf("step %d: limit %d, want %d", i, r.Limit, c.policy.Limit)
					}
				}
			})
		}
	})
}

// TestStateLost deletes the usage counter behind the quota's back; the
// marker must turn the next operations into ErrQuotaStateLost (writing
// nothing) until Restore.
func TestStateLost(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		q := newQuota(t, b.store, monthly(100), Options{Prefix: "lost"})
		if _, err := q.CheckAt(ctx, t0, "alice", 60); err != nil {
			t.Fatal(err)
		}
		if _, err := q.ReserveAt(ctx, t0, "alice", "r1", 10); err != nil {
			t.Fatal(err)
		}
		b.dropUsage(t, usageKey(q, "alice", t0))
		at := t0.Add(time.Minute)
		for name, op := range map[string]func() (Result, error){
			"check":   func() (Result, error) { return q.CheckAt(ctx, at, "alice", 1) },
			"peek":    func() (Result, error) { return q.CheckAt(ctx, at, "alice", 0) },
			"reserve": func() (Result, error) { return q.ReserveAt(ctx, at, "alice", "r2", 1) },
			"settle":  func() (Result, error) { return q.SettleAt(ctx, at, "alice", "r1", 5) },
		} {
			if r, err := op(); !errors.Is(err, ErrQuotaStateLost) {
				t.Fatalf("%s after the usage vanished: %+v, %v; want ErrQuotaStateLost", name, r, err)
			}
		}
		if b.client != nil {
			if n := b.client.Exists(ctx, usageKey(q, "alice", t0)).Val(); n != 0 {
				t.Fatalf("a refused operation recreated the usage key")
			}
		}
		// Another identity, never seen, starts fresh.
		if r, err := q.CheckAt(ctx, at, "bob", 1); err != nil || r.Used != 1 {
			t.Fatalf("fresh identity: %+v, %v", r, err)
		}
		r, err := q.RestoreAt(ctx, at, "alice", 70)
		if err != nil || r.Used != 70 || r.Reserved != 0 || !r.ReplacedLost || r.Replaced != 0 {
			t.Fatalf("restore: %+v, %v", r, err)
		}
		if r, err := q.CheckAt(ctx, at, "alice", 31); err != nil || r.Allowed {
			t.Fatalf("check 31 after restore to 70: %+v, %v", r, err)
		}
		if r, err := q.CheckAt(ctx, at, "alice", 30); err != nil || !r.Allowed || r.Used != 100 {
			t.Fatalf("check 30 after restore to 70: %+v, %v", r, err)
		}
	})
}

// TestBadInput checks that every invalid argument is refused with a
// specific error and changes nothing.
func TestBadInput(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		q := newQuota(t, b.store, monthly(100), Options{Prefix: "bad"})
		long := string(make([]byte, MaxRequestIDLen+1))
		for _, tt := range []struct {
			name string
			call func() (Result, error)
			want error
		}{
			{"negative cost", func() (Result, error) { return q.CheckAt(ctx, t0, "u", -1) }, floodgate.ErrInvalidCost},
			{"huge cost", func() (Result, error) { return q.CheckAt(ctx, t0, "u", floodgate.MaxCost+1) }, floodgate.ErrInvalidCost},
			{"zero estimate", func() (Result, error) { return q.ReserveAt(ctx, t0, "u", "r", 0) }, floodgate.ErrInvalidCost},
			{"negative actual", func() (Result, error) { return q.SettleAt(ctx, t0, "u", "r", -5) }, floodgate.ErrInvalidCost},
			{"empty request id", func() (Result, error) { return q.ReserveAt(ctx, t0, "u", "", 1) }, floodgate.ErrInvalidKey},
			{"request id with space", func() (Result, error) { return q.SettleAt(ctx, t0, "u", "a b", 1) }, floodgate.ErrInvalidKey},
			{"request id too long", func() (Result, error) { return q.SettleAt(ctx, t0, "u", long, 1) }, floodgate.ErrInvalidKey},
			{"restore negative", func() (Result, error) { return q.RestoreAt(ctx, t0, "u", -1) }, floodgate.ErrInvalidCost},
			{"restore too large", func() (Result, error) { return q.RestoreAt(ctx, t0, "u", MaxUsed+1) }, floodgate.ErrInvalidCost},
			// Charged to period "0001-01" and "3000-01" before.
			{"zero time", func() (Result, error) { return q.CheckAt(ctx, time.Time{}, "u", 1) }, floodgate.ErrInvalidTime},
			{"year 3000", func() (Result, error) {
				return q.ReserveAt(ctx, time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), "u", "r", 1)
			}, floodgate.ErrInvalidTime},
		} {
			if _, err := tt.call(); !errors.Is(err, tt.want) {
				t.Errorf("%s: err = %v, want %v", tt.name, err, tt.want)
			}
		}
		if r, err := q.CheckAt(ctx, t0, "u", 0); err != nil || r.Used != 0 || r.Reserved != 0 {
			t.Fatalf("state after bad input: %+v, %v", r, err)
		}
		if b.client != nil {
			if keys := b.client.Keys(ctx, "bad:*").Val(); len(keys) != 0 {
				t.Fatalf("bad input wrote keys %v", keys)
			}
		}
		//lint:ignore SA1012 a nil context is the bad input under test
		if _, err := q.CheckAt(nil, t0, "u", 1); !errors.Is(err, floodgate.ErrNilContext) {
			t.Errorf("nil context: %v", err)
		}
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := q.CheckAt(cancelled, t0, "u", 1); !errors.Is(err, floodgate.ErrStoreUnavailable) || !strings.Contains(err.Error(), " check: ") {
			t.Fatalf("cancelled context: %v, want ErrStoreUnavailable naming the check", err)
		}
		// A status's error names the status: no check was sent.
		if _, err := q.Status(cancelled, "u"); !errors.Is(err, floodgate.ErrStoreUnavailable) || !strings.Contains(err.Error(), " status: ") {
			t.Fatalf("status with a cancelled context: %v, want ErrStoreUnavailable naming the status", err)
		}
	})
}

func TestNewValidates(t *testing.T) {
	m, err := NewMemoryStore(MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	good := monthly(10)
	for _, tt := range []struct {
		name  string
		store Store
		p     Policy
		o     Options
	}{
		{"nil store", nil, good, Options{}},
		{"bad name", m, Policy{Name: "a:b", Limit: 1, Calendar: Calendar{Unit: Day}}, Options{}},
		{"zero limit", m, Policy{Name: "a", Calendar: Calendar{Unit: Day}}, Options{}},
		{"no calendar", m, Policy{Name: "a", Limit: 1}, Options{}},
		{"bad prefix", m, good, Options{Prefix: "a{b"}},
		{"soft above 1", m, good, Options{SoftThreshold: 1.5}},
		{"soft negative", m, good, Options{SoftThreshold: -0.1}},
		{"negative grace", m, good, Options{Grace: -time.Second}},
		{"hold too short", m, good, Options{HoldTTL: time.Microsecond}},
		{"settled ttl negative", m, good, Options{SettledTTL: -time.Hour}},
		{"max pending too large", m, good, Options{MaxPending: MaxPendingLimit + 1}},
		{"max settled negative", m, good, Options{MaxSettled: -1}},
	} {
		if _, err := New(tt.store, tt.p, tt.o); !errors.Is(err, floodgate.ErrInvalidPolicy) && !errors.Is(err, floodgate.ErrInvalidKey) {
			t.Errorf("%s: New err = %v, want an invalid-policy error", tt.name, err)
		}
	}
	if _, err := NewMemoryStore(MemoryOptions{Shards: -1}); err == nil {
		t.Error("NewMemoryStore accepted -1 shards")
	}
	if _, err := NewRedisStore(nil); err == nil {
		t.Error("NewRedisStore accepted a nil client")
	}
	// A nil pointer inside the interface used to be accepted, then panic on
	// first use.
	for _, s := range []Store{(*MemoryStore)(nil), (*RedisStore)(nil)} {
		if q, err := New(s, good, Options{}); q != nil || !errors.Is(err, floodgate.ErrInvalidPolicy) {
			t.Errorf("New(%T(nil)) = %v, %v; want ErrInvalidPolicy", s, q, err)
		}
	}
	if s, err := NewRedisStore((*redis.Client)(nil)); s != nil || !errors.Is(err, floodgate.ErrInvalidPolicy) {
		t.Errorf("NewRedisStore(nil *redis.Client) = %v, %v; want ErrInvalidPolicy", s, err)
	}
}

func TestResultFloodgate(t *testing.T) {
	end := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		in   Result
		want floodgate.Result
	}{
		{Result{Allowed: true, Limit: 100, Remaining: 40, Period: Period{End: end}},
			floodgate.Result{Allowed: true, Limit: 100, Remaining: 40, ResetAt: end}},
		{Result{Reason: ReasonExhausted, Limit: 100, RetryAfter: time.Hour, Period: Period{End: end}},
			floodgate.Result{Limit: 100, ResetAt: end, RetryAfter: time.Hour, Reason: floodgate.ReasonLimited}},
		{Result{Reason: ReasonTooManyPending, Limit: 100, RetryAfter: time.Minute, Period: Period{End: end}},
			floodgate.Result{Limit: 100, ResetAt: end, RetryAfter: time.Minute, Reason: floodgate.ReasonLimited}},
		{Result{Reason: ReasonCostExceedsLimit, Limit: 100, Period: Period{End: end}},
			floodgate.Result{Limit: 100, ResetAt: end, Reason: floodgate.ReasonCostExceedsLimit}},
	} {
		if got := tt.in.Floodgate(); got != tt.want {
			t.Errorf("%+v.Floodgate() = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

// TestMemoryStoreMaxKeysExact: a MemoryStore with MaxKeys 10 (default 64
// partitions) holds exactly 10 identity periods, refusing the rest with
// ErrStoreFull (it used to round per partition and hold 64).
func TestMemoryStoreMaxKeysExact(t *testing.T) {
	m, err := NewMemoryStore(MemoryOptions{MaxKeys: 10})
	if err != nil {
		t.Fatal(err)
	}
	q, err := New(m, monthly(100), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	held := 0
	for i := range 2000 {
		_, err := q.CheckAt(ctx, t0, fmt.Sprint("id", i), 1)
		switch {
		case err == nil:
			held++
		case !errors.Is(err, floodgate.ErrStoreFull):
			t.Fatalf("id%d: %v, want nil or ErrStoreFull", i, err)
		}
	}
	if held != 10 || m.slots.Len() != 10 {
		t.Fatalf("%d identities admitted, %d periods held; want 10 of each", held, m.slots.Len())
	}
}

// TestPreviousPeriodLost: a settle after midnight whose id the new day does
// not know, while the day before's usage is lost inside its grace, is
// refused with ErrQuotaStateLost naming that day and charges nothing,
// until RestorePeriod restores it (or the grace passes).
func TestPreviousPeriodLost(t *testing.T) {
	moscow, err := time.LoadLocation("Europe/Moscow")
	if err != nil {
		t.Skip(err)
	}
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		q := newQuota(t, b.store, Policy{Name: "mday", Limit: 100, Calendar: Calendar{Unit: Day, Location: moscow}}, Options{Prefix: "prevlost"})
		before := time.Date(2026, 12, 5, 20, 58, 0, 0, time.UTC) // 23:58 in Moscow
		after := time.Date(2026, 12, 5, 21, 0, 25, 0, time.UTC)
		if _, err := q.ReserveAt(ctx, before, "u", "L1", 10); err != nil {
			t.Fatal(err)
		}
		if _, err := q.CheckAt(ctx, before, "u", 40); err != nil {
			t.Fatal(err)
		}
		b.dropUsage(t, usageKey(q, "u", before))
		for _, id := range []string{"L1", "new"} {
			r, err := q.SettleAt(ctx, after, "u", id, 7)
			if !errors.Is(err, ErrQuotaStateLost) || !strings.Contains(err.Error(), "period 2026-12-05") {
				t.Fatalf("settle %s after the day before was lost: %+v, %v; want ErrQuotaStateLost naming 2026-12-05", id, r, err)
			}
		}
		if r, err := q.CheckAt(ctx, after, "u", 0); err != nil || r.Used != 0 || r.Period.Key != "2026-12-06" {
			t.Fatalf("the new day after the refused settles: %+v, %v", r, err)
		}
		if b.client != nil {
			if n := b.client.Exists(ctx, usageKey(q, "u", before)).Val(); n != 0 {
				t.Fatalf("a refused settle recreated the lost usage key")
			}
		}
		// ErrInvalidPeriod, and still ErrInvalidKey for the callers
		// written when it was that; its text says "invalid period", not
		// "invalid key" (a walk found that confusing for a period).
		if _, err := q.RestorePeriodAt(ctx, after, "u", "2026-12-04", 1); !errors.Is(err, ErrInvalidPeriod) || !errors.Is(err, floodgate.ErrInvalidKey) ||
			strings.Contains(err.Error(), "invalid key") || !strings.Contains(err.Error(), `invalid period "2026-12-04"`) {
			t.Fatalf("restore of a period two days back: %v, want ErrInvalidPeriod (and ErrInvalidKey) saying invalid period", err)
		}
		r, err := q.RestorePeriodAt(ctx, after, "u", "2026-12-05", 50)
		if err != nil || r.Period.Key != "2026-12-05" || r.Used != 50 || !r.ReplacedLost {
			t.Fatalf("restore of the day before: %+v, %v", r, err)
		}
		// Its hold went with the lost state: the settle is unmatched, in
		// the new day.
		if r, err := q.SettleAt(ctx, after, "u", "L1", 7); err != nil || r.Period.Key != "2026-12-06" || !r.Unmatched || r.Used != 7 {
			t.Fatalf("settle after the restore: %+v, %v", r, err)
		}
		// Past the grace the day before's usage may have expired by
		// itself: a lost one is no longer told apart.
		b.dropUsage(t, usageKey(q, "u", before))
		late := time.Date(2026, 12, 5, 22, 0, 0, 0, time.UTC)
		if r, err := q.SettleAt(ctx, late, "u", "later", 3); err != nil || r.Period.Key != "2026-12-06" || r.Used != 10 {
			t.Fatalf("settle past the grace: %+v, %v", r, err)
		}
	})
}
