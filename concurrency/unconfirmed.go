package concurrency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate/replicawait"
)

// UnconfirmedError is Acquire's error for a slot that a Redis primary
// gave but that a replicawait.Client's replicas did not confirm in time:
// a failover could lose it, so the lease is not granted. Acquire releases
// it again at once, so that no slot stays taken under a lease the caller
// never learnt; Released reports whether that worked. When it did not
// (ReleaseErr says why), the slot stays taken until Lease.Expires unless
// the caller releases Lease. The error wraps Err, the acquire's (which
// wraps replicawait.ErrNotReplicated and floodgate.ErrIndeterminate).
type UnconfirmedError struct {
	// Policy is the concurrency policy's name, e.g. "uploads".
	Policy string
	// Lease is the lease the primary gave.
	Lease Lease
	// Released reports that Lease was released again (on the primary at
	// least: a failover could still lose the release, and the lease then
	// ends at Lease.Expires).
	Released bool
	// ReleaseErr is the release's error when Released is false.
	ReleaseErr error
	// Err is the acquire's error.
	Err error
}

func (e *UnconfirmedError) Error() string {
	if e.Released {
		return fmt.Sprintf("concurrency %q acquire: not granted, lease %s released again: %v", e.Policy, e.Lease.ID, e.Err)
	}
	return fmt.Sprintf("concurrency %q acquire: not granted, and lease %s not released (%v): %v", e.Policy, e.Lease.ID, e.ReleaseErr, e.Err)
}

// Unwrap returns Err.
func (e *UnconfirmedError) Unwrap() error { return e.Err }

// UnconfirmedReleaseTimeout bounds the release of an unconfirmed lease,
// whatever is left of the acquire's deadline: the release has its own
// time, so that an acquire that spent its deadline waiting for replicas
// still frees its slot.
const UnconfirmedReleaseTimeout = 500 * time.Millisecond

// unconfirmed releases lease, taken at now on the primary but not
// confirmed by its replicas (err), and returns the *UnconfirmedError
// saying so. The release is bounded by UnconfirmedReleaseTimeout alone,
// neither ctx's deadline nor its cancellation (a caller gone must not
// leave the slot taken), and is sent without waiting for replicas
// (replicawait.WithoutWait): a deletion frees the slot on the primary
// whatever they say. A replica that got the acquire (WAIT counted fewer
// than required, but not none) and not yet the release could, promoted,
// hold the lease until its lease TTL: the cost of not waiting, against a
// slot left taken on the primary for every acquire refused. Under load it queued behind the operations
// waiting for replicas (replicawait's MaxConcurrent places) inside what
// the acquire left of its deadline, and failed: an outside walk saw 50
// concurrent acquirers against a frozen replica leave every slot taken
// until lease_ttl.
func (l *Limiter) unconfirmed(ctx context.Context, now time.Time, lease Lease, err error) error {
	rctx, cancel := context.WithTimeout(replicawait.WithoutWait(context.WithoutCancel(ctx)), UnconfirmedReleaseTimeout)
	defer cancel()
	e := &UnconfirmedError{Policy: l.policy.Name, Lease: lease, Err: err}
	// ReleaseAt answers false without an error for a lease already gone
	// (nothing holds the slot either way).
	_, rerr := l.ReleaseAt(rctx, now, lease)
	if rerr == nil || errors.Is(rerr, replicawait.ErrNotReplicated) {
		e.Released = true
	} else {
		e.ReleaseErr = rerr
	}
	return e
}
