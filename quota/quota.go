// Package quota counts usage against billing-period quotas: a limit of cost
// units (requests, LLM tokens, cents) per day, ISO week, calendar month or
// month anchored to a subscription day, in the tenant's time zone.
//
// A Quota decides three kinds of operation, each one atomic in the store:
//
//   - Check consumes a known cost if it fits.
//   - Reserve holds an estimate for a request whose real cost is known only
//     afterwards (an LLM call); a denied reserve holds nothing.
//   - Settle commits the actual cost of a reservation, refunding or charging
//     the difference. It is idempotent by request id, and a reservation that
//     is never settled is released by itself after Options.HoldTTL.
//
// Usage is stored per identity and period under a key naming the period
// ("2026-12"), which expires after the period ends plus Options.Grace (or,
// if later, Options.HoldTTL or Options.SettledTTL after its last write). A
// marker written in the same step outlives it, so a usage counter that
// vanishes mid-period (deleted, evicted) is reported as ErrQuotaStateLost
// instead of silently starting a fresh allowance.
//
// Two stores have identical semantics: MemoryStore (in process) and
// RedisStore (one Lua script per operation, all keys of one identity in one
// Redis Cluster slot), as long as the times given to the ...At methods keep
// pace with real time: Redis expires a period's keys on its own clock, the
// memory store at the times it is given, so a simulation that jumps ahead
// by hours finds a finished period still in Redis (and a settlement in it
// replayed) that the memory store has already dropped.
//
// Worst-case over-admission: none. Check and Reserve admit only what fits in
// Limit - Used - Reserved. Usage can exceed the limit only through Settle,
// by the amount actual costs overrun their estimates (and by unmatched
// settlements), which the caller chose to allow because the work was done.
package quota

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/clip"
	"github.com/floodgate-rl/floodgate/internal/nilcheck"
)

// Bounds on quota parameters. They keep every quantity below 2^53, so the
// Go and Lua implementations agree exactly.
const (
	// MaxUsed caps the usage a period can record; settlements beyond it
	// saturate.
	MaxUsed = 1 << 50
	// MaxRequestIDLen is the longest request id.
	MaxRequestIDLen = 128
	// MaxPendingLimit and MaxSettledLimit bound Options.MaxPending and
	// Options.MaxSettled.
	MaxPendingLimit = 1_000_000
	MaxSettledLimit = 10_000_000
	// maxTrim is how many expired reservations, and separately how many
	// expired settlement records, one operation removes at most.
	maxTrim = 64
	// maxWalk is how many holds, in expiry order, a denial's RetryAfter
	// counts at most (ledger.fitsAt, and the literal 128 in quota.lua's
	// fits_at): a walk costs Redis about 6 µs a hold, so walking
	// MaxPending's default 10,000 blocked it 20 to 60 ms per denial.
	maxWalk = 128
	// markerExtra is how long the lost-state marker outlives the usage it
	// vouches for, so that eviction by shortest TTL takes the usage first.
	markerExtra = 24 * time.Hour
)

// Policy is one quota: Limit cost units per period of Calendar. It is a
// plain value.
type Policy struct {
	// Name namespaces the quota's keys: 1..64 bytes from [A-Za-z0-9_.-].
	// Quotas with the same Name and Calendar share usage, so tiers (free,
	// pro) should use one Name with different limits: upgrading keeps the
	// period's usage. The Calendar's Location is deliberately not part of
	// the keys (see floodgate.Calendar.StorageTag): a change of Location
	// keeps the usage of the period the old and new zones name alike, and
	// two calendars differing only in Location used at the same time share
	// one counter, so use one zone per Name. A key's TTL is never
	// shortened: it follows the latest period end any zone wrote it with.
	Name string
	// Limit is the number of cost units per period, 1..floodgate.MaxLimit.
	Limit int64
	// Calendar cuts time into periods.
	Calendar Calendar
}

// Validate reports, wrapped in floodgate.ErrInvalidPolicy, the first field
// of p out of range.
func (p Policy) Validate() error {
	// Reuse the core's name rules through a throwaway valid policy.
	probe := floodgate.Policy{Name: p.Name, Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Second}
	if err := probe.Validate(); err != nil {
		return fmt.Errorf("quota: %w", err)
	}
	if p.Limit < 1 || p.Limit > floodgate.MaxLimit {
		return fmt.Errorf("%w: quota %q: limit %d out of range 1..%d", floodgate.ErrInvalidPolicy, p.Name, p.Limit, int64(floodgate.MaxLimit))
	}
	if err := p.Calendar.Validate(); err != nil {
		return fmt.Errorf("quota %q: %w", p.Name, err)
	}
	return nil
}

// Options configures a Quota. The zero value is ready to use.
type Options struct {
	// Prefix starts every storage key. Default "fg". See
	// floodgate.ValidatePrefix.
	Prefix string
	// Clock returns the current time. Default time.Now.
	Clock func() time.Time
	// SoftThreshold is the fraction of the limit (0 < t <= 1) from which
	// Result.Soft is set. Default 0.8.
	SoftThreshold float64
	// Grace is how long a period's usage is kept after the period ends
	// (for late settlements and clocks that lag). Default 1h; at most
	// floodgate.MaxWindow; negative is invalid.
	Grace time.Duration
	// HoldTTL is how long a reservation holds its estimate when it is
	// never settled. Default 10 minutes; 1ms..floodgate.MaxWindow.
	HoldTTL time.Duration
	// SettledTTL is how long at least a settlement's outcome is
	// remembered, the window within which a repeated Settle of the same id
	// is recognised and changes nothing. An outcome written into the
	// previous period (a reservation settled after midnight) is kept as
	// long as that period's keys, which may be longer. Default 1h;
	// 1ms..floodgate.MaxWindow.
	SettledTTL time.Duration
	// MaxPending caps the live reservations of one identity in one period;
	// further Reserves are denied with ReasonTooManyPending. Default
	// 10,000; at most MaxPendingLimit.
	MaxPending int
	// MaxSettled caps the settlement outcomes remembered per identity and
	// period; beyond it the oldest is forgotten early (shortening its
	// idempotency window). Default 100,000; at most MaxSettledLimit.
	MaxSettled int
}

func (o *Options) resolve() error {
	if o.Prefix == "" {
		o.Prefix = "fg"
	}
	if err := floodgate.ValidatePrefix(o.Prefix); err != nil {
		return fmt.Errorf("quota: %w", err)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: quota options: %s", floodgate.ErrInvalidPolicy, fmt.Sprintf(format, args...))
	}
	if o.SoftThreshold == 0 {
		o.SoftThreshold = 0.8
	}
	if !(o.SoftThreshold > 0 && o.SoftThreshold <= 1) { // also rejects NaN
		return bad("soft threshold %v out of range (0, 1]", o.SoftThreshold)
	}
	if o.Grace == 0 {
		o.Grace = time.Hour
	}
	if o.Grace < 0 || o.Grace > floodgate.MaxWindow {
		return bad("grace %v out of range 0..%v", o.Grace, floodgate.MaxWindow)
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"hold TTL", &o.HoldTTL, 10 * time.Minute}, {"settled TTL", &o.SettledTTL, time.Hour}} {
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v < time.Millisecond || *d.v > floodgate.MaxWindow {
			return bad("%s %v out of range 1ms..%v", d.name, *d.v, floodgate.MaxWindow)
		}
	}
	if o.MaxPending == 0 {
		o.MaxPending = 10_000
	}
	if o.MaxPending < 1 || o.MaxPending > MaxPendingLimit {
		return bad("max pending %d out of range 1..%d", o.MaxPending, MaxPendingLimit)
	}
	if o.MaxSettled == 0 {
		o.MaxSettled = 100_000
	}
	if o.MaxSettled < 1 || o.MaxSettled > MaxSettledLimit {
		return bad("max settled %d out of range 1..%d", o.MaxSettled, MaxSettledLimit)
	}
	return nil
}

// Store applies quota operations atomically. Its implementations are
// *MemoryStore and *RedisStore; the interface is sealed so that every
// store keeps the exact semantics the shared tests check.
type Store interface {
	apply(ctx context.Context, req *request) (reply, error)
	// usable returns an error for the zero store, not made by its
	// constructor, which New refuses (its first operation would panic).
	usable() error
}

// Quota applies one Policy to identities against a Store. It is safe for
// concurrent use by multiple goroutines. Make it with New: the zero Quota
// is not usable.
type Quota struct {
	store  Store
	policy Policy
	opts   Options
}

// New returns a Quota enforcing p against store.
func New(store Store, p Policy, opts Options) (*Quota, error) {
	if nilcheck.IsNil(store) {
		return nil, fmt.Errorf("%w: quota: nil store (%T)", floodgate.ErrInvalidPolicy, store)
	}
	if err := store.usable(); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := opts.resolve(); err != nil {
		return nil, err
	}
	return &Quota{store: store, policy: p, opts: opts}, nil
}

// Policy returns the quota's policy.
func (q *Quota) Policy() Policy { return q.policy }

// PeriodAt returns the period containing t.
func (q *Quota) PeriodAt(t time.Time) Period { return q.policy.Calendar.PeriodAt(t) }

// Check consumes cost units (0..floodgate.MaxCost) of identity's quota if
// they fit; cost 0 peeks (see Status). A denied check consumes nothing.
//
// With a RedisStore on a replicawait.Client, an operation the primary
// applied but too few replicas confirmed fails with an error wrapping
// replicawait.ErrNotReplicated and floodgate.ErrIndeterminate, and comes
// with the Result of what was applied. A denial (ReasonExhausted,
// ReasonCostExceedsLimit, ReasonTooManyPending) wrote nothing a failover
// could lose, at most a trim of what expired: it is answered as the
// denial it is, without an error, whatever the replicas say. A replay,
// an id already settled and lost state write nothing either, but report
// an earlier write (or its loss) that this operation's wait for the
// replicas does not cover: they still fail with ErrNotReplicated when
// the replicas do not confirm, a replay with its Result.
func (q *Quota) Check(ctx context.Context, identity string, cost int64) (Result, error) {
	return q.CheckAt(ctx, q.opts.Clock(), identity, cost)
}

// CheckAt is Check at the given time. It, and every other ...At method,
// refuses with an error wrapping floodgate.ErrInvalidTime, writing
// nothing, a time outside 1..floodgate.MaxTimeMicros (floodgate.ValidateTime)
// or one whose period (for RestorePeriodAt, the period it restores) does
// not lie within the Unix
// epoch..floodgate.MaxTimeMicros (floodgate.ValidatePeriod: a week quota on
// 1970-01-02, in the ISO week begun on 1969-12-29; a month quota in
// September 2112), as floodgate.Limiter refuses a Quota policy's.
func (q *Quota) CheckAt(ctx context.Context, now time.Time, identity string, cost int64) (Result, error) {
	if err := floodgate.ValidateCost(cost); err != nil {
		return Result{}, fmt.Errorf("quota check: %w", err)
	}
	return q.do(ctx, now, false, opCheck, identity, "", cost)
}

// Status reports identity's standing in the current period without
// consuming anything; Allowed says whether one more unit fits.
func (q *Quota) Status(ctx context.Context, identity string) (Result, error) {
	return q.CheckAt(ctx, q.opts.Clock(), identity, 0)
}

// Reserve holds estimate units (1..floodgate.MaxCost) of identity's quota
// for the request requestID until it is settled or Options.HoldTTL passes.
// A denied reserve holds nothing, and is answered without an error
// whatever a replicawait.Client's replicas say (see Check). Reserving an
// id that is already held changes nothing and reports the hold as allowed
// with Replayed set; reserving an id already settled fails with
// ErrAlreadySettled.
func (q *Quota) Reserve(ctx context.Context, identity, requestID string, estimate int64) (Result, error) {
	return q.ReserveAt(ctx, q.opts.Clock(), identity, requestID, estimate)
}

// ReserveAt is Reserve at the given time.
func (q *Quota) ReserveAt(ctx context.Context, now time.Time, identity, requestID string, estimate int64) (Result, error) {
	if err := validRequestID(requestID); err != nil {
		return Result{}, err
	}
	if estimate < 1 || estimate > floodgate.MaxCost {
		return Result{}, fmt.Errorf("%w: quota reserve: estimate %d out of range 1..%d", floodgate.ErrInvalidCost, estimate, int64(floodgate.MaxCost))
	}
	return q.do(ctx, now, false, opReserve, identity, requestID, estimate)
}

// Settle commits the actual cost (0..floodgate.MaxCost) of the request
// requestID: its reservation, if still live, is released and actual is
// added to the usage, even when that overruns the limit (the result then
// says Exhausted). Settle is idempotent: settling an id again within
// Options.SettledTTL, from any instance, changes nothing and returns the
// first outcome with Replayed set (see Options.SettledTTL). Settling an id with no live reservation
// charges actual to the current period and reports Unmatched, unless the
// previous period's usage was lost within Options.Grace of its end: then
// it fails with ErrQuotaStateLost naming that period (see RestorePeriod).
// A live reservation made in the previous period is settled there. Settle with actual 0 cancels a reservation.
func (q *Quota) Settle(ctx context.Context, identity, requestID string, actual int64) (Result, error) {
	return q.SettleAt(ctx, q.opts.Clock(), identity, requestID, actual)
}

// SettleAt is Settle at the given time.
func (q *Quota) SettleAt(ctx context.Context, now time.Time, identity, requestID string, actual int64) (Result, error) {
	if err := validRequestID(requestID); err != nil {
		return Result{}, err
	}
	if err := floodgate.ValidateCost(actual); err != nil {
		return Result{}, fmt.Errorf("quota settle: %w", err)
	}
	return q.do(ctx, now, false, opSettle, identity, requestID, actual)
}

// Restore sets identity's committed usage in the current period to used
// (0..MaxUsed), for example from billing records after ErrQuotaStateLost.
// Live reservations and settlement records are kept when the state exists;
// otherwise the state is created and the lost condition cleared. The
// result's Replaced and ReplacedLost say what it replaced, read in the
// same atomic step, for the audit trail. An error wrapping
// replicawait.ErrNotReplicated (the primary applied the operation, too
// few replicas confirmed it) comes with the Result of what was applied,
// Replaced included, as from a check, reserve or settle (see Check).
func (q *Quota) Restore(ctx context.Context, identity string, used int64) (Result, error) {
	return q.RestoreAt(ctx, q.opts.Clock(), identity, used)
}

// RestoreAt is Restore at the given time.
func (q *Quota) RestoreAt(ctx context.Context, now time.Time, identity string, used int64) (Result, error) {
	if used < 0 || used > MaxUsed {
		return Result{}, fmt.Errorf("%w: quota restore: used %d out of range 0..%d", floodgate.ErrInvalidCost, used, int64(MaxUsed))
	}
	return q.do(ctx, now, false, opRestore, identity, "", used)
}

// RestorePeriod is Restore into the period named period: "" or the
// current period's key restores the current period, the previous
// period's key the previous one, for example after a Settle failed with
// ErrQuotaStateLost naming it (its usage was lost within Options.Grace of
// its end, when late settlements still go to it). Any other key fails
// with ErrInvalidPeriod (which errors.Is also matches to
// floodgate.ErrInvalidKey).
func (q *Quota) RestorePeriod(ctx context.Context, identity, period string, used int64) (Result, error) {
	return q.RestorePeriodAt(ctx, q.opts.Clock(), identity, period, used)
}

// RestorePeriodAt is RestorePeriod at the given time.
func (q *Quota) RestorePeriodAt(ctx context.Context, now time.Time, identity, period string, used int64) (Result, error) {
	cur := q.PeriodAt(now)
	if period == "" || period == cur.Key {
		return q.RestoreAt(ctx, now, identity, used)
	}
	prev := q.policy.Calendar.Previous(cur)
	if period != prev.Key {
		return Result{}, fmt.Errorf("%w %q for a restore: it is neither the current period (%s) nor the previous one (%s)", ErrInvalidPeriod, clip.Text(period, 40), cur.Key, prev.Key)
	}
	if used < 0 || used > MaxUsed {
		return Result{}, fmt.Errorf("%w: quota restore: used %d out of range 0..%d", floodgate.ErrInvalidCost, used, int64(MaxUsed))
	}
	return q.do(ctx, now, true, opRestore, identity, "", used)
}

func validRequestID(id string) error {
	if id == "" || len(id) > MaxRequestIDLen {
		return fmt.Errorf("%w: quota request id %q (%d bytes) must be 1..%d bytes", floodgate.ErrInvalidKey, clip.Text(id, 80), len(id), MaxRequestIDLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%w: quota request id %q: byte %#x is not printable ASCII", floodgate.ErrInvalidKey, id, c)
		}
	}
	return nil
}

// keyBase returns the common start of identity's keys in period p:
//
//	prefix ":" name ":q:{" EncodeIdentity(identity) "}:" tag
//
// for example "fg:llm:q:{ruser42}:m2026-12". The hash tag is the one
// floodgate.Key gives the identity, so the quota shares a Redis Cluster
// slot with the identity's rate limits.
func (q *Quota) keyBase(identity string, p Period) string {
	return q.opts.Prefix + ":" + q.policy.Name + ":q:{" + floodgate.EncodeIdentity(identity) + "}:" + q.policy.Calendar.StorageTag(p)
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// do applies op in the period containing now, or in the one before it
// when previous is set (a restore only).
func (q *Quota) do(ctx context.Context, now time.Time, previous bool, op opKind, identity, id string, amount int64) (Result, error) {
	if ctx == nil {
		return Result{}, fmt.Errorf("quota: %w", floodgate.ErrNilContext)
	}
	// As floodgate.Limiter: a time before the Unix epoch (the zero
	// time.Time's) or past floodgate.MaxTimeMicros is refused, not
	// charged to a period such as "0001-01".
	if err := floodgate.ValidateTime(now.UnixMicro()); err != nil {
		return Result{}, err
	}
	// As floodgate.Limiter too: a period not within the Unix
	// epoch..floodgate.MaxTimeMicros (the ISO week 1970-W01, from
	// 1969-12-29; a month in September 2112) is refused, not written.
	cal := q.policy.Calendar
	if err := floodgate.ValidatePeriod(q.policy.Name, cal, now.UnixMicro()); err != nil {
		return Result{}, err
	}
	period := cal.PeriodAt(now)
	if previous {
		period = cal.Previous(period)
		if err := floodgate.ValidatePeriod(q.policy.Name, cal, period.Start.UnixMicro()); err != nil {
			return Result{}, err
		}
	}
	base := q.keyBase(identity, period)
	// A period's keys live until its end plus Grace, and at least as long
	// as what this step may write into them: a hold (HoldTTL) or a
	// settlement outcome (SettledTTL). Without the second bound a hold
	// made just before midnight, or an outcome written just after it into
	// the previous period, vanished with that period's keys Grace after
	// midnight: its settlement, or a retry of it, was then charged again
	// to the new period.
	outlive := now.Add(max(q.opts.HoldTTL, q.opts.SettledTTL))
	expireAt := later(period.End.Add(q.opts.Grace), outlive)
	req := request{
		op:         op,
		now:        now.UnixMicro(),
		limit:      q.policy.Limit,
		amount:     amount,
		id:         id,
		hold:       q.opts.HoldTTL.Microseconds(),
		keep:       q.opts.SettledTTL.Microseconds(),
		expireAt:   expireAt.UnixMicro(),
		markerAt:   expireAt.Add(markerExtra).UnixMicro(),
		maxPending: int64(q.opts.MaxPending),
		maxSettled: int64(q.opts.MaxSettled),
		cur:        newKeySet(base),
	}
	var prev Period
	if op == opSettle || op == opReserve {
		prev = cal.Previous(period)
		req.prev = newKeySet(q.keyBase(identity, prev))
		req.prevExpireAt = later(prev.End.Add(q.opts.Grace), outlive).UnixMicro()
		req.prevGuard = now.Before(prev.End.Add(q.opts.Grace))
	}
	rep, err := q.store.apply(ctx, &req)
	if err != nil && rep.applied && rep.status.wroteNothing() {
		// A denial the replicas did not confirm changed nothing a
		// failover could lose (at most expired holds and settlement
		// records were trimmed, which the next operation trims again):
		// it is answered as the denial it is, as concurrency.Limiter
		// answers a denied acquire. It was an error wrapping
		// replicawait.ErrNotReplicated and floodgate.ErrIndeterminate,
		// which serve answered 503 for an exhausted quota.
		err = nil
	}
	if err != nil {
		// A check of cost 0 is a status, and its error says so: a log
		// line reading "check" suggested something was consumed.
		name := op.String()
		if op == opCheck && amount == 0 {
			name = "status"
		}
		err = fmt.Errorf("quota %q %s: %w", q.policy.Name, name, err)
		if rep.applied && rep.status != stLost && rep.status != stSettledID {
			// Applied on the primary, not confirmed by its replicas:
			// what was applied comes with the error.
			if rep.inPrev {
				period = prev
			}
			return q.result(now, period, rep), err
		}
		return Result{}, err
	}
	if rep.inPrev {
		period = prev
	}
	switch rep.status {
	case stLost:
		how := "Restore"
		if rep.inPrev { // a settle, refused while the previous period is lost
			how = "RestorePeriod"
		}
		return Result{}, fmt.Errorf("%w: quota %q period %s: usage missing while its marker remains; restore it with %s", ErrQuotaStateLost, q.policy.Name, period.Key, how)
	case stSettledID:
		return Result{}, fmt.Errorf("%w: quota %q: request id %q was settled in period %s", ErrAlreadySettled, q.policy.Name, id, period.Key)
	}
	return q.result(now, period, rep), nil
}

func (q *Quota) result(now time.Time, period Period, rep reply) Result {
	limit := q.policy.Limit
	taken := rep.used + rep.held
	r := Result{
		Allowed:   rep.status == stAllowed || rep.status == stReplayed,
		Limit:     limit,
		Used:      rep.used,
		Reserved:  rep.held,
		Remaining: max(limit-taken, 0),
		Fraction:  float64(taken) / float64(limit),
		Exhausted: taken >= limit,
		Replayed:  rep.status == stReplayed,
		Unmatched: rep.unmatched,
		Period:    period,
	}
	if !r.Replayed { // a replay charged and refunded nothing this time
		r.Charged, r.Refunded = rep.charged, rep.refunded
	}
	if rep.before == beforeLost {
		r.ReplacedLost = true
	} else {
		r.Replaced = rep.before
	}
	r.Soft = r.Fraction >= q.opts.SoftThreshold
	switch rep.status {
	case stDenied:
		r.Reason = ReasonExhausted
	case stTooLarge:
		r.Reason = ReasonCostExceedsLimit
	case stTooManyPending:
		r.Reason = ReasonTooManyPending
	}
	if r.Reason == ReasonExhausted || r.Reason == ReasonTooManyPending {
		r.RetryAfter = period.End.Sub(now)
		if rep.hint > 0 {
			r.RetryAfter = min(r.RetryAfter, time.Duration(rep.hint-now.UnixMicro())*time.Microsecond)
		}
		r.RetryAfter = max(r.RetryAfter, time.Microsecond)
	}
	return r
}
