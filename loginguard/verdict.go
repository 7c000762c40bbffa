package loginguard

import (
	"fmt"
	"strings"
	"time"
)

// Action is what a login attempt must do, from least to most severe.
type Action uint8

// The actions.
const (
	// Allow: check the password.
	Allow Action = iota
	// CaptchaRequired: check the password only if the client solved a
	// CAPTCHA with this attempt; otherwise ask for one.
	CaptchaRequired
	// Delay: refuse this attempt without checking the password; the client
	// may try again after Verdict.RetryAfter (and will then need a
	// CAPTCHA when the ladder requires one).
	Delay
	// Locked: refuse without checking the password until Verdict.Until.
	Locked
)

// String returns the action's snake_case name.
func (a Action) String() string {
	switch a {
	case Allow:
		return "allow"
	case CaptchaRequired:
		return "captcha_required"
	case Delay:
		return "delay"
	case Locked:
		return "locked"
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Dimension is one of the three things failures are counted against.
type Dimension uint8

// The dimensions. The zero value means none.
const (
	// DimAccount counts failures against one account, from any address.
	DimAccount Dimension = iota + 1
	// DimIP counts failures from one address (or network, see
	// Options.IPv4Prefix and IPv6Prefix), against any account.
	DimIP
	// DimPair counts failures against one account from one address.
	DimPair
)

// numDims is the number of dimensions.
const numDims = 3

// Outcome.Failures has one count per dimension.
var _ = [numDims]int64(Outcome{}.Failures)

// String returns "account", "ip" or "pair" ("none" for the zero value).
func (d Dimension) String() string {
	switch d {
	case 0:
		return "none"
	case DimAccount:
		return "account"
	case DimIP:
		return "ip"
	case DimPair:
		return "pair"
	}
	return fmt.Sprintf("Dimension(%d)", uint8(d))
}

// Dimensions is a set of dimensions.
type Dimensions uint8

// Has reports whether d is in the set.
func (s Dimensions) Has(d Dimension) bool {
	return d >= DimAccount && d <= DimPair && s&(1<<(d-1)) != 0
}

// String lists the set, e.g. "account+pair" ("none" when empty).
func (s Dimensions) String() string {
	var parts []string
	for d := DimAccount; d <= DimPair; d++ {
		if s.Has(d) {
			parts = append(parts, d.String())
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}

// Verdict is what Check decided for one login attempt.
type Verdict struct {
	// Action is what the attempt must do.
	Action Action
	// RetryAfter is, for Delay and Locked, how long until the attempt can
	// proceed (e.g. 4s, 29m12s); zero otherwise. A Delay that waits for
	// attempts in progress which could reach the Lock rung lasts until
	// they expire (Options.AttemptTimeout after the dimension's last
	// attempt): those settled sooner let an attempt proceed sooner, unless
	// their failures lock the dimension. A Delay rung's wait that
	// attempts in progress lengthen lasts no longer than until they
	// expire, unless the failures alone hold it longer: a typo after
	// many attempts left unsettled, the failures below the Delay rung
	// without them, waits at most AttemptTimeout, not MaxDelay. A failure
	// recorded meanwhile can lengthen the wait.
	RetryAfter time.Duration
	// Until is, for Delay and Locked, when the attempt can proceed; zero
	// otherwise.
	Until time.Time
	// By is the dimension that decided the action (the most severe one;
	// zero for Allow). It is for logs and metrics: show clients only the
	// Action and RetryAfter, the same for every account.
	By Dimension
}

// Proceed reports whether the password may be checked (Allow, or
// CaptchaRequired with a solved CAPTCHA).
func (v Verdict) Proceed() bool { return v.Action == Allow || v.Action == CaptchaRequired }

// String describes the verdict, e.g. "locked for 29m12s by account".
func (v Verdict) String() string {
	switch v.Action {
	case Allow:
		return "allow"
	case CaptchaRequired:
		return "captcha_required by " + v.By.String()
	}
	return fmt.Sprintf("%s for %v by %s", v.Action, v.RetryAfter, v.By)
}

// Outcome is what Failure recorded.
type Outcome struct {
	// Next is the verdict the same account from the same address would
	// get right after this failure.
	Next Verdict
	// Locked is the set of dimensions this failure locked. A dimension's
	// lock is set by exactly one failure, the one that reaches its Lock
	// threshold while it is not locked.
	Locked Dimensions
	// Failures is the number of failures each dimension counts after this
	// one, indexed by Dimension-1 (account, IP, pair).
	Failures [3]int64
}

// DimensionStatus is the stored state of one dimension.
type DimensionStatus struct {
	// Failures counted within the dimension's window.
	Failures int64
	// Pending is the number of attempts that passed Check and have not yet
	// been settled by Failure or Success (nor timed out).
	Pending int64
	// LastAttempt is the time of the dimension's last attempt or failure;
	// zero when it has none.
	LastAttempt time.Time
	// LockedUntil is when the dimension's lock ends; zero when it is not
	// locked.
	LockedUntil time.Time
}

// Status is the standing of one account and address, as Status reads it
// without counting anything.
type Status struct {
	// Verdict is what Check would decide now.
	Verdict Verdict
	// Account, IP and Pair are the three dimensions' states.
	Account, IP, Pair DimensionStatus
}
