package quota

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/replicawait"
)

// TestRedisNotReplicatedDenials: a RedisStore on a replicawait.Client
// asking for two replicas of a primary that has one, so that no operation
// is ever confirmed. A denial (exhausted, cost above the limit, too many
// pending) wrote nothing a failover could lose: it is answered as the
// denial it is, without an error, and as the memory store answers it. An
// outside walk saw reserve 8 of a limit of 10 after another 8, and
// reserve 20, fail wrapping ErrNotReplicated and ErrIndeterminate, which
// serve answered 503 store-not-replicated. What the primary applied (a
// hold, a charge, a settlement) still fails with ErrNotReplicated, with
// its Result, and so do a replay and a reserve of an id already settled,
// which report an earlier write this operation's wait does not cover.
func TestRedisNotReplicatedDenials(t *testing.T) {
	primary := redistest.Start(t)
	redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	c := primary.Client(t)
	ctx := context.Background()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if n, _ := c.Do(ctx, "WAIT", 1, 100).Int(); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica did not connect")
		}
	}
	w, err := replicawait.New(c, replicawait.Options{Replicas: 2, Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	waiting, err := NewRedisStore(w)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := NewMemoryStore(MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := Policy{Name: "nr", Limit: 10, Calendar: Calendar{Unit: Month}}
	opts := Options{HoldTTL: time.Minute}
	popts := Options{HoldTTL: time.Minute, MaxPending: 1}
	qr, qm := newQuota(t, waiting, p, opts), newQuota(t, mem, p, opts)
	pr, pm := newQuota(t, waiting, p, popts), newQuota(t, mem, p, popts)
	now := time.Now() // Redis expires the keys on its own clock

	type step struct {
		name   string
		do     func(q, pq *Quota) (Result, error)
		reason Reason
		// unconfirmed: the error wraps ErrNotReplicated (the primary
		// applied it, or it reports an earlier write); otherwise none.
		unconfirmed bool
	}
	reserve := func(id string, n int64) func(q, pq *Quota) (Result, error) {
		return func(q, _ *Quota) (Result, error) { return q.ReserveAt(ctx, now, "U", id, n) }
	}
	check := func(n int64) func(q, pq *Quota) (Result, error) {
		return func(q, _ *Quota) (Result, error) { return q.CheckAt(ctx, now, "U", n) }
	}
	for _, s := range []step{
		{name: "reserve 8 of 10", do: reserve("r1", 8), unconfirmed: true},
		{name: "reserve 8 more", do: reserve("r2", 8), reason: ReasonExhausted},
		{name: "reserve 20", do: reserve("r3", 20), reason: ReasonCostExceedsLimit},
		{name: "check 5", do: check(5), reason: ReasonExhausted},
		{name: "check 20", do: check(20), reason: ReasonCostExceedsLimit},
		{name: "reserve r1 again (replayed)", do: reserve("r1", 8), unconfirmed: true},
		{name: "settle r1", do: func(q, _ *Quota) (Result, error) { return q.SettleAt(ctx, now, "U", "r1", 8) }, unconfirmed: true},
		{name: "check 2", do: check(2), unconfirmed: true},
		{name: "check 1 (exhausted by settled usage)", do: check(1), reason: ReasonExhausted},
		{name: "reserve p1 (max pending 1)", do: func(_, pq *Quota) (Result, error) { return pq.ReserveAt(ctx, now, "P", "p1", 1) }, unconfirmed: true},
		{name: "reserve p2 (too many pending)", do: func(_, pq *Quota) (Result, error) { return pq.ReserveAt(ctx, now, "P", "p2", 1) }, reason: ReasonTooManyPending},
	} {
		got, err := s.do(qr, pr)
		want, merr := s.do(qm, pm)
		if merr != nil {
			t.Fatalf("%s on the memory store: %v", s.name, merr)
		}
		if s.unconfirmed {
			if !errors.Is(err, replicawait.ErrNotReplicated) || !errors.Is(err, floodgate.ErrIndeterminate) {
				t.Errorf("%s: %v; want an error wrapping ErrNotReplicated and ErrIndeterminate", s.name, err)
			}
		} else if err != nil {
			t.Errorf("%s: %v; want the denial without an error", s.name, err)
		}
		if got.Reason != s.reason || (s.reason != ReasonNone) == got.Allowed {
			t.Errorf("%s: allowed %v, reason %v; want reason %v", s.name, got.Allowed, got.Reason, s.reason)
		}
		if viewOf(got) != viewOf(want) {
			t.Errorf("%s:\n redis  %+v\n memory %+v", s.name, viewOf(got), viewOf(want))
		}
		if s.reason == ReasonExhausted || s.reason == ReasonTooManyPending {
			if got.RetryAfter <= 0 {
				t.Errorf("%s: RetryAfter %v; want positive", s.name, got.RetryAfter)
			}
		}
	}
	// An id already settled reports the settlement, an earlier write:
	// still unconfirmed.
	if _, err := qr.ReserveAt(ctx, now, "U", "r1", 1); !errors.Is(err, replicawait.ErrNotReplicated) {
		t.Errorf("reserve of a settled id: %v; want an error wrapping ErrNotReplicated", err)
	}
}
