package algo

import (
	"time"

	"github.com/floodgate-rl/floodgate"
)

// stepResult is Result in integer microseconds, as the step functions and
// the Lua scripts compute it.
type stepResult struct {
	allowed   bool
	remaining int64
	resetAt   int64 // Unix µs
	retry     int64 // µs
	delay     int64 // µs
	reason    floodgate.Reason
}

// fill writes r, under a policy of the given limit, to out.
func (r *stepResult) fill(out *floodgate.Result, limit int64) {
	*out = floodgate.Result{
		Allowed:    r.allowed,
		Limit:      limit,
		Remaining:  max(r.remaining, 0),
		ResetAt:    time.UnixMicro(r.resetAt),
		RetryAfter: time.Duration(r.retry) * time.Microsecond,
		Delay:      time.Duration(r.delay) * time.Microsecond,
		Reason:     r.reason,
	}
}

// ResultFromMicros builds a Result from the integer fields a store computed
// (for example decoded from a Lua reply). Times are Unix microseconds,
// durations microseconds. limit is the Result's Limit: pass the policy's
// Capacity, as Step does, so that Remaining counts down from it.
func ResultFromMicros(allowed bool, limit, remaining, resetAtMicros, retryMicros, delayMicros int64, reason floodgate.Reason) floodgate.Result {
	var out floodgate.Result
	r := stepResult{allowed, remaining, resetAtMicros, retryMicros, delayMicros, reason}
	r.fill(&out, limit)
	return out
}
