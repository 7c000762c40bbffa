package quota

import (
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// Sentinel errors of this package. Errors wrap them (or the floodgate
// sentinels for bad input and store failures) with %w; test with errors.Is.
var (
	// ErrQuotaStateLost reports that the current period's usage is missing
	// from the store although a marker written with it says it existed: the
	// counter was deleted, evicted under memory pressure or lost in a
	// failover. Counting on would start from a fresh allowance, so nothing
	// was decided; fail closed and repair the usage with Quota.Restore. A
	// Settle of an id the current period does not know reports it for the
	// previous period too, when that one's usage is missing within
	// Options.Grace of its end; repair it with Quota.RestorePeriod. A
	// marker key holding anything floodgate did not write (on Redis,
	// anything but the string "1") is not a marker: the operation fails
	// with floodgate.ErrStoreUnavailable and floodgate.ErrForeignValue,
	// writing nothing (Restore too).
	ErrQuotaStateLost = errors.New("quota: usage state lost")
	// ErrAlreadySettled reports a Reserve for a request id that was already
	// settled in this period (the id must identify one unit of work).
	ErrAlreadySettled = errors.New("quota: request already settled")
	// ErrInvalidPeriod reports a period RestorePeriod cannot restore: its
	// key is neither the current period's nor the previous one's.
	// errors.Is matches it to floodgate.ErrInvalidKey too, which it was
	// reported as before, so that callers testing for bad input keep
	// treating it as such.
	ErrInvalidPeriod error = invalidPeriod{}
)

// invalidPeriod is ErrInvalidPeriod: an invalid key to errors.Is,
// without saying "invalid key" of a period.
type invalidPeriod struct{}

func (invalidPeriod) Error() string { return "quota: invalid period" }

// Is reports target as floodgate.ErrInvalidKey.
func (invalidPeriod) Is(target error) bool { return target == floodgate.ErrInvalidKey }

// Reason says why a quota request was denied.
type Reason uint8

// The reasons.
const (
	// ReasonNone: the request was allowed.
	ReasonNone Reason = iota
	// ReasonExhausted: used plus reserved plus the cost exceeds the limit;
	// RetryAfter hints when it may fit.
	ReasonExhausted
	// ReasonCostExceedsLimit: the cost alone exceeds the limit, so it can
	// never pass in any period; RetryAfter is zero.
	ReasonCostExceedsLimit
	// ReasonTooManyPending: the identity already holds
	// Options.MaxPending live reservations in this period.
	ReasonTooManyPending
)

// String returns the reason's snake_case name.
func (r Reason) String() string {
	switch r {
	case ReasonNone:
		return "none"
	case ReasonExhausted:
		return "exhausted"
	case ReasonCostExceedsLimit:
		return "cost_exceeds_limit"
	case ReasonTooManyPending:
		return "too_many_pending"
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Result is the outcome of one quota operation. All amounts are in the
// quota's cost unit (requests, tokens, cents...).
type Result struct {
	// Allowed reports that the operation took effect: a Check consumed its
	// cost, a Reserve holds its estimate, a Settle committed the actual
	// cost (a Settle is always allowed: the work was done). For a peek
	// (cost 0) it reports whether one more unit fits. A duplicate Reserve
	// or Settle reports the original outcome.
	Allowed bool
	// Reason says why the operation was denied; ReasonNone when allowed.
	Reason Reason
	// Limit is the quota's limit for the period, e.g. 1,000,000 tokens.
	Limit int64
	// Used is the usage committed in the period after the operation, e.g.
	// 812,400 tokens. It can exceed Limit when settled costs overran their
	// estimates.
	Used int64
	// Reserved is the sum of the live reservations' estimates, e.g. 8,000
	// tokens held by requests in flight.
	Reserved int64
	// Remaining is Limit - Used - Reserved, floored at zero: what a Check
	// or Reserve can still take, e.g. 179,600.
	Remaining int64
	// Fraction is (Used + Reserved) / Limit, e.g. 0.8204; above 1 when
	// overrun.
	Fraction float64
	// Soft reports Fraction >= Options.SoftThreshold (default 0.8), the
	// moment to warn the user that the quota is running out.
	Soft bool
	// Exhausted reports Used + Reserved >= Limit: nothing more fits this
	// period. A Settle whose actual cost overran reports it here.
	Exhausted bool
	// Charged is what the operation added to Used: the cost of an allowed
	// Check, the actual cost of a Settle, zero otherwise (a replayed Settle
	// included: it charges nothing).
	Charged int64
	// Refunded is, for a Settle, how much of the reservation's estimate was
	// not used (estimate - actual when positive), e.g. 1,200 tokens; zero
	// for a replayed Settle, which gives nothing back.
	Refunded int64
	// Replayed reports that the request id had already been settled (or,
	// for Reserve, is already held): nothing changed. Used, Reserved and
	// Unmatched repeat the first outcome (and so Remaining, Fraction, Soft
	// and Exhausted describe it, not the current standing); Charged and
	// Refunded are zero,
	// as nothing was charged or given back this time (the first Settle's
	// result has them).
	Replayed bool
	// Unmatched reports a Settle that found no live reservation for its
	// id (never reserved, or the hold expired after Options.HoldTTL): the
	// actual cost was charged all the same, to the period current when
	// the Settle arrived, even when the hold was made and expired in the
	// previous one.
	Unmatched bool
	// Replaced is, for a Restore, the committed usage it replaced, e.g.
	// 812,400 tokens: zero when the period had none, and when its usage
	// was lost (ReplacedLost). Zero for the other operations.
	Replaced int64
	// ReplacedLost reports a Restore that found the period's usage lost
	// (missing while its marker remained, the condition of
	// ErrQuotaStateLost) and cleared that condition: what it replaced is
	// unknown.
	ReplacedLost bool
	// Period is the period the operation applied to. A Settle applies to
	// the previous period when the reservation was made there and its
	// hold is still live; an unmatched one to the current period.
	Period Period
	// RetryAfter is, for a request denied with ReasonExhausted or
	// ReasonTooManyPending, a hint of when it may fit: when enough
	// reservations will have expired for it to fit (those expiring first
	// given back first, and for ReasonTooManyPending enough to leave
	// fewer than Options.MaxPending: one, or more after it was lowered), if
	// that comes before the period ends, else when the period ends (e.g.
	// 9 days 4 hours). At most 128 reservations are counted: when more
	// must expire, it is the 128th's expiry, before which it cannot fit
	// (a request then answers further). Settles and new reservations in
	// the meantime can make it fit sooner or later. Zero otherwise.
	RetryAfter time.Duration
}

// Floodgate returns r as a floodgate.Result, for example to write the
// X-RateLimit-* headers: ResetAt is the period's end.
func (r Result) Floodgate() floodgate.Result {
	fr := floodgate.Result{
		Allowed:    r.Allowed,
		Limit:      r.Limit,
		Remaining:  r.Remaining,
		ResetAt:    r.Period.End,
		RetryAfter: r.RetryAfter,
	}
	switch r.Reason {
	case ReasonExhausted, ReasonTooManyPending:
		fr.Reason = floodgate.ReasonLimited
	case ReasonCostExceedsLimit:
		fr.Reason = floodgate.ReasonCostExceedsLimit
	}
	return fr
}
