package floodgate

import (
	"fmt"
	"time"
)

// Reason says why a request was denied.
type Reason uint8

// The reasons.
const (
	// ReasonNone: the request was allowed.
	ReasonNone Reason = iota
	// ReasonLimited: the limit is used up for now; RetryAfter says when a
	// request of the same cost can pass.
	ReasonLimited
	// ReasonCostExceedsLimit: the cost is larger than the policy's
	// Capacity (for GCRA with MaxDelay, than Capacity plus what MaxDelay
	// allows; see Policy.Capacity), so the request can never pass;
	// RetryAfter is zero.
	ReasonCostExceedsLimit
	// ReasonOtherLayer: this layer would have admitted the request, but
	// another layer of the same decision denied it, so nothing was consumed.
	ReasonOtherLayer
)

// String returns the reason's snake_case name.
func (r Reason) String() string {
	switch r {
	case ReasonNone:
		return "none"
	case ReasonLimited:
		return "limited"
	case ReasonCostExceedsLimit:
		return "cost_exceeds_limit"
	case ReasonOtherLayer:
		return "other_layer"
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Result is the outcome of one decision for one policy.
type Result struct {
	// Allowed reports whether the request was admitted (and its cost
	// consumed). For a peek (cost 0) it reports whether a request of cost 1
	// would be admitted now; nothing is consumed.
	Allowed bool
	// Limit is the most the policy admits at once, so that a fresh
	// identity's Remaining (on a peek) equals it: the policy's Limit for
	// FixedWindow, SlidingLog, SlidingWindow and Quota (e.g. 100 for 100
	// requests per minute), its Burst for TokenBucket and GCRA (e.g. 20
	// for 60 per minute with bursts of 20); see Policy.Capacity.
	Limit int64
	// Remaining is how many cost units could still be admitted right now,
	// after this request, e.g. 99 after the first request of a fresh
	// 100/minute policy. Never negative.
	Remaining int64
	// ResetAt is when the identity's state returns to fresh: the end of the
	// current window for FixedWindow, the moment the bucket is full again
	// for TokenBucket and GCRA, e.g. 2026-12-01T10:01:00Z.
	ResetAt time.Time
	// RetryAfter is, for a denied request, how long to wait before a request
	// of the same cost can pass (e.g. 12.5s); zero when allowed or when the
	// cost exceeds the capacity (Reason tells which).
	RetryAfter time.Duration
	// Delay is, for an allowed GCRA request with MaxDelay set, how long the
	// caller should wait before acting on it so that the output rate is
	// smooth (e.g. 40ms); for a peek, the Delay a request of cost 1 would
	// get now; zero otherwise.
	Delay time.Duration
	// Reason says why the request was denied; ReasonNone when allowed.
	Reason Reason
}
