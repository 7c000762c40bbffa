package fallback

import (
	"errors"
	"fmt"
)

// Sentinel errors of this package, wrapped with %w.
var (
	// ErrInvalidOptions reports Options that New cannot use.
	ErrInvalidOptions = errors.New("fallback: invalid options")
	// ErrBreakerOpen is the error passed to OnFallback (and recorded in
	// Outcome.Err) for a decision that did not go to the primary store
	// because the circuit breaker is open.
	ErrBreakerOpen = errors.New("fallback: circuit breaker open")
	// ErrBudgetSpent is the error recorded in Outcome.Err (and passed to
	// OnFallback) for a decision taken by the failure mode without
	// calling the primary store because earlier calls of the same request
	// had used its budget (SpendBudget, NewRequestContext); Store.Call
	// returns it without calling its function in that case.
	ErrBudgetSpent = errors.New("fallback: the budget was spent on earlier calls of the request")
)

// Mode says how a policy is decided while the primary store is failing.
// The zero value means "not set": a policy without a mode of its own gets
// Options.DefaultMode, whose own zero value means ModeLocal.
type Mode uint8

// The modes.
const (
	// ModeLocal decides with the local (in-process) store at a wider,
	// per-instance limit (see Options.Instances, Options.Factor and
	// Options.LocalPolicy). Over-admission while degraded: up to the local
	// limit per instance, per window, on top of what the primary had
	// already admitted. The default, meant for throughput limits.
	ModeLocal Mode = iota + 1
	// ModeOpen admits every request whose cost fits the policy's capacity
	// and counts it only in metrics. Over-admission while degraded:
	// unbounded.
	ModeOpen
	// ModeClosed denies every request (Reason floodgate.ReasonLimited,
	// RetryAfter the earliest the breaker can close: with background
	// probes (Options.Probe), the probe interval times the successes it
	// needs; without, until it next lets a call through, or one open
	// period when it is not open). Meant for
	// login protection and billing, where admitting too much costs more
	// than refusing. Over-admission: none.
	ModeClosed
)

// String returns the mode's name: "local", "open" or "closed".
func (m Mode) String() string {
	switch m {
	case ModeLocal:
		return "local"
	case ModeOpen:
		return "open"
	case ModeClosed:
		return "closed"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// ParseMode returns the mode named s ("local", "open" or "closed"), for
// configuration files.
func ParseMode(s string) (Mode, error) {
	for m := ModeLocal; m <= ModeClosed; m++ {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown failure mode %q (want local, open or closed)", ErrInvalidOptions, s)
}

func (m Mode) valid() bool { return m >= ModeLocal && m <= ModeClosed }

// Reason says why a decision was taken by the failure mode instead of the
// primary store. The zero value, ReasonNone, means it was not.
type Reason uint8

// The reasons, a closed set (they are metric label values).
const (
	// ReasonNone: the primary store decided.
	ReasonNone Reason = iota
	// ReasonTimeout: the primary did not answer within the budget (or four
	// fifths of the caller's time left, if shorter), or was not asked
	// because earlier calls of the same request had used the budget (a
	// tier lookup, a decision of the same batch that timed out: Err is
	// ErrBudgetSpent) or the caller's deadline had passed.
	ReasonTimeout
	// ReasonUnavailable: the primary failed before applying anything
	// (floodgate.ErrStoreUnavailable): refused connection, no route, an
	// error reply such as OOM or READONLY... A refused connection is
	// reported so only when the Redis client gives up within the budget:
	// with go-redis's default dial attempts (five, with backoff) it is
	// ReasonTimeout. See the package documentation, Redis client options.
	ReasonUnavailable
	// ReasonIndeterminate: the primary failed after the decision may have
	// been applied (floodgate.ErrIndeterminate). It is never retried
	// against the primary, which could count the request twice.
	ReasonIndeterminate
	// ReasonBreakerOpen: the circuit breaker kept the call from the
	// primary.
	ReasonBreakerOpen
	// ReasonError: any other store error (for example
	// floodgate.ErrBadReply).
	ReasonError
	// ReasonForeignValue: a key the decision needs holds a value
	// floodgate did not write (floodgate.ErrForeignValue: a stray SET, a
	// key of another type, a state written by a build of another format
	// after a rollback or beside older instances). The primary is
	// healthy and the breaker stays closed, but that identity is decided
	// by the failure mode until the key expires, if it ever does: delete
	// it, or find the instance writing another format. Outcome.Err (and
	// OnFallback's error) names the decision's keys.
	ReasonForeignValue
)

// Reasons returns every reason but ReasonNone, for example to create all
// metric series up front.
func Reasons() []Reason {
	return []Reason{ReasonTimeout, ReasonUnavailable, ReasonIndeterminate, ReasonBreakerOpen, ReasonError, ReasonForeignValue}
}

// String returns the reason's snake_case name, as used in the reason label
// of rate_limit_fallback_total.
func (r Reason) String() string {
	switch r {
	case ReasonNone:
		return "none"
	case ReasonTimeout:
		return "timeout"
	case ReasonUnavailable:
		return "unavailable"
	case ReasonIndeterminate:
		return "indeterminate"
	case ReasonBreakerOpen:
		return "breaker_open"
	case ReasonError:
		return "error"
	case ReasonForeignValue:
		return "foreign_value"
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}
