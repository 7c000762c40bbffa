package floodgate

import (
	"fmt"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/internal/clip"
	"github.com/floodgate-rl/floodgate/internal/duration"
)

// Algorithm selects how a [Policy] counts. The zero value is invalid.
type Algorithm uint8

// The algorithms. Each one's worst-case over-admission is stated on its
// constant; none admits more than its limit inside any of its own windows
// except where stated.
const (
	// FixedWindow counts requests in aligned windows of Policy.Window
	// (aligned to the Unix epoch). State: one counter. Worst case: up to
	// 2×Limit in any sliding interval of length Window that straddles a
	// window edge (Limit at the end of one window, Limit at the start of the
	// next).
	FixedWindow Algorithm = iota + 1
	// SlidingLog records every admitted request with its time and admits a
	// request only if the costs recorded in the last Window plus its own
	// cost fit in Limit. Exact: never more than Limit in any interval of
	// length Window. State: O(Limit) entries, so Limit is capped at
	// MaxSlidingLogLimit.
	SlidingLog
	// SlidingWindow (sliding window counter) estimates the count in the last
	// Window as the current aligned window's count plus the previous one's
	// weighted by how much of it still overlaps. State: two counters.
	// Worst case: the estimate assumes the previous window's requests were
	// spread evenly; if they were bunched at its end, up to about 2×Limit
	// can pass in one sliding interval (rare in practice; Cloudflare measured
	// 0.003% of requests misjudged).
	SlidingWindow
	// TokenBucket holds up to Burst tokens (default Limit), refilled at
	// Limit per Window, one token per Window/Limit (rounded down to whole
	// microseconds: see Policy.Interval). A request takes Cost tokens.
	// Worst case: Burst plus Limit per Window in any interval of length
	// Window (a full bucket drained, then the refill).
	TokenBucket
	// GCRA (generic cell rate algorithm, the leaky bucket as a meter) keeps
	// one theoretical arrival time, and the time of the latest admitted
	// request (a clock behind it is decided at that time). It admits Limit per Window with bursts
	// of up to Burst (default Limit), one unit per Window/Limit rounded
	// down to whole microseconds (see Policy.Interval), and with MaxDelay > 0 it admits a
	// request that would conform within MaxDelay and reports the Delay to
	// wait (traffic shaping). Worst case: same as TokenBucket.
	GCRA
	// Quota counts usage per calendar period (Policy.Calendar: a day, an
	// ISO week, a month or a month anchored to a subscription day, in a time
	// zone), for billing limits such as 10,000 requests or 2M LLM tokens a
	// month. Each period has its own key, named after the period, that
	// expires an hour after the period ends. Exact within a period; an
	// instance whose clock is on the other side of a period boundary counts
	// in its own period. A decision whose period does not lie within the
	// Unix epoch..MaxTimeMicros (a week quota on 1970-01-02, a month quota
	// in September 2112) is refused with ErrInvalidTime by every store.
	// For reserve-then-settle and lost-state detection use package quota.
	Quota
)

var algorithmNames = [...]string{
	FixedWindow:   "fixed_window",
	SlidingLog:    "sliding_log",
	SlidingWindow: "sliding_window",
	TokenBucket:   "token_bucket",
	GCRA:          "gcra",
	Quota:         "quota",
}

// String returns the algorithm's snake_case name, as used in configuration
// files and metrics labels.
func (a Algorithm) String() string {
	if a >= FixedWindow && int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// short is the algorithm's tag inside storage keys.
func (a Algorithm) short() string {
	switch a {
	case FixedWindow:
		return "fw"
	case SlidingLog:
		return "sl"
	case SlidingWindow:
		return "sw"
	case TokenBucket:
		return "tb"
	case GCRA:
		return "gc"
	case Quota:
		return "qt"
	}
	return "xx"
}

// ParseAlgorithm returns the algorithm named s (its String form; "leaky_bucket"
// is accepted for GCRA).
func ParseAlgorithm(s string) (Algorithm, error) {
	for a := FixedWindow; a <= Quota; a++ {
		if algorithmNames[a] == s {
			return a, nil
		}
	}
	if s == "leaky_bucket" {
		return GCRA, nil
	}
	return 0, fmt.Errorf("%w: unknown algorithm %q (want fixed_window, sliding_log, sliding_window, token_bucket, gcra, leaky_bucket or quota)", ErrInvalidPolicy, s)
}

// Limits on parameters. Those on numbers keep every quantity the
// algorithms compute below 2^53, so Go and Lua (whose numbers are doubles)
// agree exactly.
const (
	// MaxLimit is the largest Limit and Burst.
	MaxLimit = 1 << 40
	// MaxCost is the largest cost of one request.
	MaxCost = MaxLimit
	// MaxSlidingLogLimit is the largest Limit of a SlidingLog policy, whose
	// memory grows with the limit.
	MaxSlidingLogLimit = 100_000
	// MinWindow and MaxWindow bound Policy.Window.
	MinWindow = time.Millisecond
	MaxWindow = 400 * 24 * time.Hour
	// maxSpanMicros bounds Burst×interval and MaxDelay (about 35 years).
	maxSpanMicros = 1 << 50
	// MaxMaxDelay bounds Policy.MaxDelay: 2^50µs, 13031d5h58m26.842624s
	// (about 35.7 years).
	MaxMaxDelay = maxSpanMicros * time.Microsecond
	// MaxNameLen is the longest policy name.
	MaxNameLen = 64
	// MaxLayers is the most layers one decision may have.
	MaxLayers = 16
	// MaxIdentityLen is the longest identity kept readable in a key;
	// longer identities, and any containing bytes outside
	// [A-Za-z0-9_.@+=/-], are replaced by a hash.
	MaxIdentityLen = 64
	// MaxPrefixLen is the longest key prefix (Options.Prefix).
	MaxPrefixLen = 64
)

// Policy is one rate limit. It is a plain value: copy it freely. Build it
// with a constructor (NewFixedWindow...) or fill the fields and call
// Validate; the Limiter validates every policy it is given.
type Policy struct {
	// Name namespaces the policy's keys, so two policies never share state.
	// 1 to 64 characters from [A-Za-z0-9_.-]. Changing a policy's limits
	// while keeping its Name keeps the identities' current state, which
	// the count algorithms hold as counts (a lower Limit applies to what
	// was used), TokenBucket as the tokens left (capped at the new Burst:
	// a lower limit does not apply to what was used) and GCRA as a time
	// (what was used counts as that time in the new Window/Limit
	// intervals); docs/configuration.md works through examples.
	Name string
	// Algorithm selects how requests are counted.
	Algorithm Algorithm
	// Limit is the number of cost units admitted per Window, or per
	// calendar period for Quota (1..MaxLimit).
	Limit int64
	// Window is the period Limit applies to (MinWindow..MaxWindow). For
	// TokenBucket and GCRA it sets the rate: one unit per Window/Limit,
	// which must be at least one microsecond. Quota requires zero.
	Window time.Duration
	// Calendar cuts time into periods for Quota (required there); other
	// algorithms require the zero Calendar.
	Calendar Calendar
	// Burst is, for TokenBucket, the bucket capacity and, for GCRA, the
	// largest burst admitted at once. Zero means Limit. Other algorithms
	// require zero.
	Burst int64
	// MaxDelay, for GCRA only, admits a request that would conform within
	// MaxDelay and reports in Result.Delay how long to wait before acting on
	// it (shaping instead of denying). Zero disables shaping. It admits
	// requests beyond Burst at once, each with its Delay, up to Burst +
	// MaxDelay/(Window/Limit) units (see Capacity): e.g. 5 per 2s, Burst 5,
	// MaxDelay 1s admits a cost of 7 with a Delay of 800ms. That is
	// shaping, not over-admission, when callers wait out the Delay (Wait
	// does). At most MaxMaxDelay.
	MaxDelay time.Duration
}

// Must returns p, and panics if err is not nil. It is for policies built
// from constants, where an error is a programming mistake caught at
// start-up:
//
//	var perUser = floodgate.Must(floodgate.NewTokenBucket("api", 100, time.Minute, 20))
//
// Policies built from configuration or user input should check the error.
func Must(p Policy, err error) Policy {
	if err != nil {
		panic(err)
	}
	return p
}

func newPolicy(p Policy) (Policy, error) {
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	return p, nil
}

// NewFixedWindow returns a validated FixedWindow policy admitting limit units
// per window.
func NewFixedWindow(name string, limit int64, window time.Duration) (Policy, error) {
	return newPolicy(Policy{Name: name, Algorithm: FixedWindow, Limit: limit, Window: window})
}

// NewSlidingLog returns a validated SlidingLog policy admitting limit units
// in any interval of length window.
func NewSlidingLog(name string, limit int64, window time.Duration) (Policy, error) {
	return newPolicy(Policy{Name: name, Algorithm: SlidingLog, Limit: limit, Window: window})
}

// NewSlidingWindow returns a validated SlidingWindow (sliding window
// counter) policy admitting about limit units in any interval of length
// window.
func NewSlidingWindow(name string, limit int64, window time.Duration) (Policy, error) {
	return newPolicy(Policy{Name: name, Algorithm: SlidingWindow, Limit: limit, Window: window})
}

// NewTokenBucket returns a validated TokenBucket policy refilling limit
// tokens per window into a bucket of burst tokens (0 means limit): one
// token per Interval, window/limit rounded down to whole microseconds,
// which admits more than limit per window when window/limit is not a
// whole number of microseconds (see Policy.Interval).
func NewTokenBucket(name string, limit int64, window time.Duration, burst int64) (Policy, error) {
	return newPolicy(Policy{Name: name, Algorithm: TokenBucket, Limit: limit, Window: window, Burst: burst})
}

// NewGCRA returns a validated GCRA policy admitting limit units per window
// with bursts of up to burst (0 means limit): one unit per Interval,
// window/limit rounded down to whole microseconds, which admits more than
// limit per window when window/limit is not a whole number of
// microseconds (see Policy.Interval).
func NewGCRA(name string, limit int64, window time.Duration, burst int64) (Policy, error) {
	return newPolicy(Policy{Name: name, Algorithm: GCRA, Limit: limit, Window: window, Burst: burst})
}

// NewQuota returns a validated Quota policy admitting limit units per
// calendar period.
func NewQuota(name string, limit int64, cal Calendar) (Policy, error) {
	return newPolicy(Policy{Name: name, Algorithm: Quota, Limit: limit, Calendar: cal})
}

// Validate reports, wrapped in ErrInvalidPolicy, every parameter of p
// that is out of range, in one error ("...: limit 0 out of range 1..N;
// window 0s out of range 1ms..400d"), so that all can be fixed at once.
func (p Policy) Validate() error {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	nameErr := validName(p.Name)
	if nameErr != nil {
		bad("%v", nameErr)
	}
	known := p.Algorithm >= FixedWindow && p.Algorithm <= Quota
	if !known {
		bad("unknown algorithm %d", p.Algorithm)
	}
	limitOK := p.Limit >= 1 && p.Limit <= MaxLimit
	if !limitOK {
		bad("limit %d out of range 1..%d", p.Limit, int64(MaxLimit))
	}
	if p.Algorithm == Quota {
		if msg := p.Calendar.problem(); msg != "" {
			bad("%s", msg)
		}
		if p.Window != 0 || p.Burst != 0 || p.MaxDelay != 0 {
			bad("quota takes a calendar, not window, burst or max_delay")
		}
		return policyError(p.Name, nameErr, problems)
	}
	if p.Calendar != (Calendar{}) {
		bad("calendar applies to quota only")
	}
	windowOK := p.Window >= MinWindow && p.Window <= MaxWindow
	if !windowOK {
		bad("window %s out of range %s..%s", durationText(p.Window), durationText(MinWindow), durationText(MaxWindow))
	} else if p.Window%time.Microsecond != 0 {
		windowOK = false
		bad("window %v is not a whole number of microseconds", p.Window)
	}
	burstOK := p.Burst >= 0 && p.Burst <= MaxLimit
	if !burstOK {
		bad("burst %d out of range 0..%d", p.Burst, int64(MaxLimit))
	}
	if p.MaxDelay < 0 || p.MaxDelay.Microseconds() > maxSpanMicros {
		bad("max_delay %s out of range 0s..%s", durationText(p.MaxDelay), duration.Format(MaxMaxDelay))
	}
	switch p.Algorithm {
	case TokenBucket, GCRA:
		if limitOK && windowOK {
			iv := p.interval()
			if iv < 1 {
				bad("rate %d per %v is finer than one unit per microsecond", p.Limit, p.Window)
			} else if burstOK && p.burst() > maxSpanMicros/iv {
				bad("burst %d × interval %dµs is too long", p.burst(), iv)
			}
		}
		if p.Algorithm == TokenBucket && p.MaxDelay != 0 {
			bad("max_delay applies to gcra only")
		}
	default:
		if p.Burst != 0 {
			bad("burst applies to token_bucket and gcra only")
		}
		if p.MaxDelay != 0 && known {
			bad("max_delay applies to gcra only")
		}
	}
	if p.Algorithm == SlidingLog && p.Limit > MaxSlidingLogLimit {
		bad("sliding_log limit %d above %d (its memory grows with the limit; use sliding_window)", p.Limit, MaxSlidingLogLimit)
	}
	return policyError(p.Name, nameErr, problems)
}

// policyError joins the problems of the policy named name into one error
// wrapping ErrInvalidPolicy, or returns nil when there are none. A bad
// name is reported alone, as it is (it would be misquoted as the policy's).
func policyError(name string, nameErr error, problems []string) error {
	switch {
	case len(problems) == 0:
		return nil
	case nameErr != nil:
		return fmt.Errorf("%w: %s", ErrInvalidPolicy, strings.Join(problems, "; "))
	}
	return fmt.Errorf("%w: policy %q: %s", ErrInvalidPolicy, name, strings.Join(problems, "; "))
}

// burst returns the effective burst of a bucket policy.
func (p Policy) burst() int64 {
	if p.Burst == 0 {
		return p.Limit
	}
	return p.Burst
}

// interval returns the emission interval of a bucket policy in microseconds
// (Window/Limit, rounded down).
func (p Policy) interval() int64 { return p.Window.Microseconds() / p.Limit }

// Interval returns the time a TokenBucket or GCRA policy takes to refill
// one unit: Window/Limit rounded down to whole microseconds, as both
// stores count. When Window/Limit is not a whole number of microseconds
// the policy admits Window/Interval units per Window, more than Limit:
// 300,000 per second refills every 3µs (not 3.33), 333,333 a second,
// 11% more; 501 per millisecond every 1µs, 1,000 a millisecond. A rate
// of at most 10,000 per second (100µs or more per unit) is within 1% of
// Limit. It returns 0 for the other algorithms and for a policy that
// Validate refuses.
func (p Policy) Interval() time.Duration {
	if (p.Algorithm != TokenBucket && p.Algorithm != GCRA) || p.Validate() != nil {
		return 0
	}
	return time.Duration(p.interval()) * time.Microsecond
}

// Capacity returns the most a policy can admit at once: Burst (or Limit) for
// the bucket algorithms, Limit for the others. A request whose cost exceeds
// Capacity is always denied with ReasonCostExceedsLimit, except under a GCRA
// policy with MaxDelay: it shapes, so it admits, with a Delay, any cost
// that fits in Burst plus MaxDelay's worth of emission intervals
// (MaxDelay/(Window/Limit)), and refuses outright only a larger one.
func (p Policy) Capacity() int64 {
	switch p.Algorithm {
	case TokenBucket, GCRA:
		return p.burst()
	}
	return p.Limit
}

// String describes the policy, e.g. "api: sliding_window 100/1m0s".
func (p Policy) String() string {
	if p.Algorithm == Quota {
		return fmt.Sprintf("%s: quota %d/%s", p.Name, p.Limit, p.Calendar.Unit)
	}
	s := fmt.Sprintf("%s: %s %d/%s", p.Name, p.Algorithm, p.Limit, durationText(p.Window))
	if p.Burst != 0 {
		s += fmt.Sprintf(" burst %d", p.Burst)
	}
	if p.MaxDelay != 0 {
		s += fmt.Sprintf(" max delay %v", p.MaxDelay)
	}
	return s
}

// durationText writes d as the configuration does: whole days as "30d",
// anything else as Go writes it ("1m0s", "36h0m0s").
func durationText(d time.Duration) string {
	const day = 24 * time.Hour
	if d >= day && d%day == 0 {
		return fmt.Sprintf("%dd", d/day)
	}
	return d.String()
}

func validName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("policy name %q (%d bytes) must be 1..%d characters", clip.Text(name, 80), len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		if !isNameByte(name[i]) {
			return fmt.Errorf("policy name %q: %s not in [A-Za-z0-9_.-]", clip.Text(name, 80), clip.Char(name, i))
		}
	}
	return nil
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}
