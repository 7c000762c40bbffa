package concurrency

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/replicawait"
)

// TestRedisNotReplicatedOutcomes: through a replicawait.Client asking for
// a replica that a lone Redis does not have, every lease operation runs
// on the primary and none is confirmed. An acquire granted there is not
// granted: it fails with an *UnconfirmedError and its lease is released
// again, leaving no slot taken (the walk saw ZCARD 2 after 2 such
// acquires, and the identity locked out for the lease TTL). What changed
// nothing is answered as it is: an acquire denied is a denial, a release
// of a lease not held is false, a renewal of one is ErrLeaseLost (all
// were store-not-replicated errors saying the primary applied them). A
// release or renewal of a held lease, applied on the primary alone, still
// fails with ErrNotReplicated.
func TestRedisNotReplicatedOutcomes(t *testing.T) {
	c := redistest.Start(t).Client(t)
	w, err := replicawait.New(c, replicawait.Options{Replicas: 1, Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	waiting, err := NewRedisStore(w)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := NewRedisStore(c)
	if err != nil {
		t.Fatal(err)
	}
	p := Policy{Name: "short2", Limit: 2, LeaseTTL: time.Minute}
	lw, lp := newLimiter(t, waiting, p, "nr"), newLimiter(t, plain, p, "nr")
	ctx := context.Background()
	key := lw.Key("U")

	for i := range 2 {
		r, err := lw.Acquire(ctx, "U")
		var ue *UnconfirmedError
		if !errors.As(err, &ue) || !ue.Released || !errors.Is(err, replicawait.ErrNotReplicated) || r.Allowed {
			t.Fatalf("unconfirmed acquire %d = %+v, %v; want an *UnconfirmedError, released, wrapping ErrNotReplicated", i, r, err)
		}
		if ue.Lease.ID == "" || ue.Lease.Identity != "U" {
			t.Fatalf("UnconfirmedError.Lease = %+v", ue.Lease)
		}
		if n := c.ZCard(ctx, key).Val(); n != 0 {
			t.Fatalf("after unconfirmed acquire %d: %d leases held, want 0", i, n)
		}
	}

	var held []Lease
	for range 2 {
		r, err := lp.Acquire(ctx, "U")
		if err != nil || !r.Allowed {
			t.Fatal(r, err)
		}
		held = append(held, r.Lease)
	}
	r, err := lw.Acquire(ctx, "U")
	if err != nil || r.Allowed || r.InFlight != 2 || r.RetryAfter <= 0 {
		t.Fatalf("denied acquire = %+v, %v; want a denial (in flight 2) without error", r, err)
	}
	released, err := lw.Release(ctx, Lease{Identity: "U", ID: "NOTHELD"})
	if err != nil || released {
		t.Fatalf("release of a lease not held = %v, %v; want false, nil", released, err)
	}
	if _, err := lw.Renew(ctx, Lease{Identity: "U", ID: "NOTHELD"}); !errors.Is(err, ErrLeaseLost) || errors.Is(err, replicawait.ErrNotReplicated) {
		t.Fatalf("renewal of a lease not held: %v; want ErrLeaseLost alone", err)
	}

	if _, err := lw.Renew(ctx, held[0]); !errors.Is(err, replicawait.ErrNotReplicated) {
		t.Fatalf("renewal of a held lease: %v; want ErrNotReplicated", err)
	}
	if released, err := lw.Release(ctx, held[0]); released || !errors.Is(err, replicawait.ErrNotReplicated) {
		t.Fatalf("release of a held lease = %v, %v; want an error wrapping ErrNotReplicated", released, err)
	}
	if n := c.ZCard(ctx, key).Val(); n != 1 {
		t.Fatalf("after releasing one of 2 leases on the primary: %d held, want 1", n)
	}
}
