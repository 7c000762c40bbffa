// Package concurrency caps the requests an identity has in flight at once
// (a concurrent-requests limiter): Acquire takes a lease on one of Limit
// slots, Release gives it back, and a lease whose holder crashed expires by
// itself after the policy's LeaseTTL. Long requests can Renew their lease.
//
// Leases are kept per identity as a set of (lease id, expiry) pairs: a
// sorted set in Redis (RedisStore, one Lua script per operation) or a map
// with an expiry heap in process (MemoryStore), with identical semantics.
// Expired leases are dropped as part of each operation on their identity;
// Redis expires an idle identity's key, and MemoryStore sweeps its idle
// identities in the background (MemoryOptions.SweepInterval).
//
// An identity is any string; "" is one identity like the others, shared by
// every caller passing it (see Limiter.Acquire).
//
// Worst-case over-admission: none while holders release or renew in time.
// A holder that outlives its lease without renewing loses its slot to the
// next Acquire, so up to Limit more requests can then be running; choose a
// LeaseTTL longer than the slowest request, or Renew.
package concurrency

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/clip"
	"github.com/floodgate-rl/floodgate/internal/nilcheck"
	"github.com/floodgate-rl/floodgate/replicawait"
)

// Bounds on policies.
const (
	// MaxLimit is the largest number of concurrent leases per identity.
	MaxLimit = 1_000_000
	// MaxLeaseTTL is the longest lease.
	MaxLeaseTTL = 24 * time.Hour
	// DefaultLeaseTTL is the lease TTL of a policy that leaves it zero.
	DefaultLeaseTTL = time.Minute
	// MaxLeaseIDLen is the longest lease id accepted by Release and Renew.
	MaxLeaseIDLen = 64
	// maxTrim is how many expired leases one operation removes at most in
	// Redis; the count of live leases is exact regardless.
	maxTrim = 64
)

// ErrLeaseLost reports a Renew of a lease that is no longer held: it was
// released, or it expired and its slot may have gone to someone else.
var ErrLeaseLost = errors.New("concurrency: lease lost")

// Policy is one concurrency cap. It is a plain value.
type Policy struct {
	// Name namespaces the policy's keys: 1..64 bytes from [A-Za-z0-9_.-].
	Name string
	// Limit is the number of leases an identity may hold at once,
	// 1..MaxLimit.
	Limit int64
	// LeaseTTL is how long a lease lives unless released or renewed,
	// 1ms..MaxLeaseTTL. Zero means DefaultLeaseTTL.
	LeaseTTL time.Duration
}

func (p Policy) leaseTTL() time.Duration {
	if p.LeaseTTL == 0 {
		return DefaultLeaseTTL
	}
	return p.LeaseTTL
}

// Validate reports, wrapped in floodgate.ErrInvalidPolicy, the first field
// of p out of range.
func (p Policy) Validate() error {
	probe := floodgate.Policy{Name: p.Name, Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Second}
	if err := probe.Validate(); err != nil {
		// One prefix: "floodgate: invalid policy: concurrency policy
		// name ...", as the checks below say it (this said "concurrency:
		// floodgate: invalid policy: policy name ...").
		detail, ok := strings.CutPrefix(err.Error(), floodgate.ErrInvalidPolicy.Error()+": ")
		if !ok {
			return fmt.Errorf("concurrency: %w", err)
		}
		return fmt.Errorf("%w: concurrency %s", floodgate.ErrInvalidPolicy, detail)
	}
	if p.Limit < 1 || p.Limit > MaxLimit {
		return fmt.Errorf("%w: concurrency policy %q: limit %d out of range 1..%d", floodgate.ErrInvalidPolicy, p.Name, p.Limit, MaxLimit)
	}
	if ttl := p.leaseTTL(); ttl < time.Millisecond || ttl > MaxLeaseTTL {
		return fmt.Errorf("%w: concurrency policy %q: lease TTL %v out of range 1ms..%v", floodgate.ErrInvalidPolicy, p.Name, p.LeaseTTL, MaxLeaseTTL)
	} else if ttl%time.Microsecond != 0 {
		return fmt.Errorf("%w: concurrency policy %q: lease TTL %v is not a whole number of microseconds", floodgate.ErrInvalidPolicy, p.Name, p.LeaseTTL)
	}
	return nil
}

// Options configures a Limiter. The zero value is ready to use.
type Options struct {
	// Prefix starts every storage key. Default "fg".
	Prefix string
	// Clock returns the current time. Default time.Now.
	Clock func() time.Time
}

// Lease is one held slot. It is a plain value that can be passed to
// another goroutine or process and released from there.
type Lease struct {
	// Identity is the identity holding the slot, e.g. "user42".
	Identity string
	// ID identifies the lease among the identity's, e.g.
	// "KXGZ3V5LGWJ3QAWN7KAXMSQT6E" (128 random bits).
	ID string
	// Expires is when the lease frees its slot by itself unless renewed.
	Expires time.Time
}

// Result is the outcome of an Acquire.
type Result struct {
	// Allowed reports whether a slot was taken; Lease is then valid.
	Allowed bool
	// Lease is the slot taken; the zero Lease when denied.
	Lease Lease
	// Limit is the policy's Limit, e.g. 50.
	Limit int64
	// InFlight is the number of live leases after the call, e.g. 50.
	InFlight int64
	// Remaining is Limit - InFlight, floored at zero.
	Remaining int64
	// RetryAfter is, when denied, when enough live leases expire by
	// themselves to free a slot, e.g. 41s: the earliest expiry while the
	// leases fill the limit, a later one when more are in flight than the
	// limit (it was lowered, or the identity's tier changed, while they
	// were held). An upper bound on the wait unless leases are renewed
	// (releases usually free a slot much sooner). Zero when allowed.
	RetryAfter time.Duration
}

// Store keeps leases. Its implementations are *MemoryStore and
// *RedisStore; the interface is sealed so that both keep the semantics the
// shared tests check.
type Store interface {
	apply(ctx context.Context, req *request) (reply, error)
	// usable returns an error for the zero store, not made by its
	// constructor, which New refuses (its first operation would panic).
	usable() error
}

// Limiter applies one Policy to identities. It is safe for concurrent use.
// Make it with New: the zero Limiter is not usable.
type Limiter struct {
	store  Store
	policy Policy
	ttl    int64 // µs
	prefix string
	clock  func() time.Time
}

// New returns a Limiter enforcing p against store.
func New(store Store, p Policy, opts Options) (*Limiter, error) {
	if nilcheck.IsNil(store) {
		return nil, fmt.Errorf("%w: concurrency: nil store (%T)", floodgate.ErrInvalidPolicy, store)
	}
	if err := store.usable(); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if opts.Prefix == "" {
		opts.Prefix = "fg"
	}
	if err := floodgate.ValidatePrefix(opts.Prefix); err != nil {
		return nil, fmt.Errorf("concurrency: %w", err)
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	return &Limiter{store: store, policy: p, ttl: p.leaseTTL().Microseconds(), prefix: opts.Prefix, clock: opts.Clock}, nil
}

// Policy returns the limiter's policy.
func (l *Limiter) Policy() Policy { return l.policy }

// Key returns the storage key of identity's leases:
//
//	prefix ":" name ":cc:{" EncodeIdentity(identity) "}"
//
// in the identity's hash tag, like floodgate.Key.
func (l *Limiter) Key(identity string) string {
	return l.prefix + ":" + l.policy.Name + ":cc:{" + floodgate.EncodeIdentity(identity) + "}"
}

// Acquire takes one of identity's slots for LeaseTTL if one is free. The
// identity may be any string, "" included, as for floodgate.Limiter.Allow:
// every caller passing "" shares one set of Limit slots (a global
// concurrency limit), so a caller that could not tell who is asking
// should refuse the request rather than pass "" (the HTTP API refuses an
// empty identity value with 400 invalid-identity). An error wrapping floodgate.ErrIndeterminate means a slot may have been
// taken with a lease the caller never learnt: it frees itself after
// LeaseTTL at the latest. A slot taken on a Redis primary that a
// replicawait.Client's replicas did not confirm is not granted: Acquire
// releases it again at once and fails with an *UnconfirmedError, which
// holds the lease to release when that release failed. A denial they did
// not confirm is answered as a denial (it wrote nothing).
func (l *Limiter) Acquire(ctx context.Context, identity string) (Result, error) {
	return l.AcquireAt(ctx, l.clock(), identity)
}

// AcquireAt is Acquire at the given time.
func (l *Limiter) AcquireAt(ctx context.Context, now time.Time, identity string) (Result, error) {
	if err := checkCall(ctx, now); err != nil {
		return Result{}, err
	}
	req := request{op: opAcquire, key: l.Key(identity), id: rand.Text(), now: now.UnixMicro(), limit: l.policy.Limit, ttl: l.ttl}
	rep, err := l.store.apply(ctx, &req)
	switch {
	case err == nil:
	case !errors.Is(err, replicawait.ErrNotReplicated):
		return Result{}, fmt.Errorf("concurrency %q acquire: %w", l.policy.Name, err)
	case rep.ok:
		return Result{}, l.unconfirmed(ctx, now, Lease{Identity: identity, ID: req.id, Expires: time.UnixMicro(rep.at)}, err)
	}
	// A denial the replicas did not confirm changed nothing (at most
	// expired leases were trimmed): it is answered as the denial it is.
	r := Result{Allowed: rep.ok, Limit: l.policy.Limit, InFlight: rep.count, Remaining: max(l.policy.Limit-rep.count, 0)}
	if rep.ok {
		r.Lease = Lease{Identity: identity, ID: req.id, Expires: time.UnixMicro(rep.at)}
	} else {
		r.RetryAfter = time.Duration(max(rep.at-req.now, 1)) * time.Microsecond
	}
	return r, nil
}

// Release frees lease's slot. It is idempotent: it reports whether the
// lease was still live, and releasing it again (or after it expired)
// changes nothing and reports false, also when a replicawait.Client's
// replicas did not confirm the call (which then changed nothing they
// need). A release the primary applied but they did not confirm fails
// with an error wrapping replicawait.ErrNotReplicated: a failover could
// bring the lease back, and releasing it again is harmless, but its false
// says only that the primary it reached no longer holds the lease (a
// release that changes nothing has nothing for the replicas to confirm):
// across a failover, the new primary may still hold it until it expires.
func (l *Limiter) Release(ctx context.Context, lease Lease) (bool, error) {
	return l.ReleaseAt(ctx, l.clock(), lease)
}

// ReleaseAt is Release at the given time.
func (l *Limiter) ReleaseAt(ctx context.Context, now time.Time, lease Lease) (bool, error) {
	if err := checkCall(ctx, now); err != nil {
		return false, err
	}
	if err := validLeaseID(lease.ID); err != nil {
		return false, err
	}
	rep, err := l.store.apply(ctx, &request{op: opRelease, key: l.Key(lease.Identity), id: lease.ID, now: now.UnixMicro()})
	if err != nil && (rep.ok || !errors.Is(err, replicawait.ErrNotReplicated)) {
		return false, fmt.Errorf("concurrency %q release: %w", l.policy.Name, err)
	}
	// A release of a lease not held changes nothing the replicas need
	// (at most an expired lease is dropped): false, whatever they said.
	return rep.ok, nil
}

// Renew extends a live lease to LeaseTTL from now (never shortening it)
// and returns it with its new expiry. A lease no longer held fails with
// ErrLeaseLost, whether or not a replicawait.Client's replicas confirmed
// the call; a renewal the primary applied but they did not confirm fails
// with an error wrapping replicawait.ErrNotReplicated (a failover could
// lose it, the lease then ending at its previous expiry).
func (l *Limiter) Renew(ctx context.Context, lease Lease) (Lease, error) {
	return l.RenewAt(ctx, l.clock(), lease)
}

// RenewAt is Renew at the given time.
func (l *Limiter) RenewAt(ctx context.Context, now time.Time, lease Lease) (Lease, error) {
	if err := checkCall(ctx, now); err != nil {
		return Lease{}, err
	}
	if err := validLeaseID(lease.ID); err != nil {
		return Lease{}, err
	}
	rep, err := l.store.apply(ctx, &request{op: opRenew, key: l.Key(lease.Identity), id: lease.ID, now: now.UnixMicro(), ttl: l.ttl})
	if err != nil && (rep.ok || !errors.Is(err, replicawait.ErrNotReplicated)) {
		return Lease{}, fmt.Errorf("concurrency %q renew: %w", l.policy.Name, err)
	}
	// A lease not held is lost whatever the replicas said of the call,
	// which changed nothing they need (at most dropped the expired lease).
	if !rep.ok {
		return Lease{}, fmt.Errorf("%w: %q of %q is released or expired", ErrLeaseLost, lease.ID, lease.Identity)
	}
	lease.Expires = time.UnixMicro(rep.at)
	return lease, nil
}

// checkCall refuses a nil context and, as floodgate.Limiter does, a time
// before the Unix epoch (the zero time.Time's) or past
// floodgate.MaxTimeMicros.
func checkCall(ctx context.Context, now time.Time) error {
	if ctx == nil {
		return fmt.Errorf("concurrency: %w", floodgate.ErrNilContext)
	}
	return floodgate.ValidateTime(now.UnixMicro())
}

func validLeaseID(id string) error {
	if id == "" || len(id) > MaxLeaseIDLen {
		return fmt.Errorf("%w: lease id %q (%d bytes) must be 1..%d bytes", floodgate.ErrInvalidKey, clip.Text(id, 80), len(id), MaxLeaseIDLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%w: lease id %q: byte %#x is not printable ASCII", floodgate.ErrInvalidKey, id, c)
		}
	}
	return nil
}

// opKind is a lease operation.
type opKind uint8

const (
	opAcquire opKind = iota + 1
	opRelease
	opRenew
)

func (o opKind) code() string {
	switch o {
	case opAcquire:
		return "a"
	case opRelease:
		return "r"
	}
	return "n"
}

// request is one operation as the stores receive it: times in Unix µs of
// the caller's clock, ttl in µs.
type request struct {
	op    opKind
	key   string
	id    string
	now   int64
	limit int64
	ttl   int64
}

// reply is a store's answer. For acquire: ok = taken, count = live leases
// after, at = the new lease's expiry, or when denied when a slot frees by
// expiry alone (see Result.RetryAfter). For release: ok = a live lease was freed. For renew: ok = still
// held, at = its new expiry.
type reply struct {
	ok    bool
	count int64
	at    int64
}
