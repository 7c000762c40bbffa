package algo

import (
	"time"

	"github.com/floodgate-rl/floodgate"
)

// State is the stored state of one identity under one policy, in Unix
// microseconds and cost units. The zero value is "no state" (a fresh
// identity). Its fields mean, per algorithm:
//
//	FixedWindow:   T = current window start, N = count in it
//	SlidingWindow: T = current window start, N = count in it, Prev = count in the previous window
//	TokenBucket:   T = last refill time, N = tokens
//	GCRA:          T = theoretical arrival time (TAT), N = time of the latest admitted request (0: not known)
//	SlidingLog:    Log = admitted requests, oldest first
//	Quota:         T = period start, N = used in it, Prev = period end
//
// E is what the key's time to live is decided from, as the Redis store's
// binary layouts record it (0: not recorded): for FixedWindow and
// SlidingWindow the window's length in µs (their layouts' W), for
// TokenBucket and GCRA where the key's TTL ends, in Unix µs at the clock of
// the request that set it (their layouts' E). See Transition.Keep.
type State struct {
	T, N, Prev, E int64
	Log           []LogEntry
}

// LogEntry is one admitted request of a SlidingLog policy.
type LogEntry struct {
	At   int64 // Unix µs
	Cost int64
}

// IsZero reports whether s is the fresh state.
func (s State) IsZero() bool {
	return s.T == 0 && s.N == 0 && s.Prev == 0 && s.E == 0 && len(s.Log) == 0
}

// Transition is what one Step decided: the result, and the state to store.
type Transition struct {
	// Result is the decision.
	Result floodgate.Result
	// State is the identity's state after the request. When Commit is false
	// it is equivalent to the input state and need not be stored.
	State State
	// Commit reports that the request consumed something and State must be
	// stored, with a time to live of TTL microseconds (or the one it had,
	// see Keep).
	Commit bool
	// TTL is how long, in microseconds, the store keeps State when Keep is
	// false: the time it stays meaningful (at least a millisecond) plus
	// TTLSlack, and for TokenBucket and GCRA that life again (plus the
	// slack, at most the policy's window more), whose end State.E records.
	// It is the TTL the Redis script writes (see ttlEnd in
	// redisstore/assemble.go), so that both stores drop a state at the
	// same moment.
	TTL int64
	// Keep reports that the store must keep the time to live the input
	// state was stored with instead of writing TTL: the input state was
	// stored for as long as the new one needs, or longer, as its E shows
	// (a window of the same start and length, a quota of the same period,
	// a bucket whose recorded end is late enough). The Redis script keeps
	// its key's TTL then (SET KEEPTTL), and a store that decides like it
	// must do the same: with instances' clocks further apart than
	// TTLSlack a state can still be meaningful when its TTL ends, and
	// then when it ends decides.
	Keep bool
}

// QuotaGrace is how long a Quota period's state outlives the period.
const QuotaGrace = time.Hour

// minTTL is the shortest meaningful life of a state, in µs.
const minTTL = 1000

// TTLSlack is added to every TTL. It covers clock skew between instances:
// a state written by an instance whose clock is ahead is still there when an
// instance whose clock is behind by up to TTLSlack reads it, so the slower
// instance cannot over-admit because the key expired early on the server's
// clock. It also absorbs scheduling stalls between a write and a read.
// Within that skew a state past its meaningful life decides exactly like
// the fresh state, so when the store drops it changes no decision. With a
// larger skew a state can still be meaningful, in the clock of the
// instance behind, when its TTL ends: the instance behind is then refused
// (told to retry after what the state's own time implies) until the state
// expires, and decided afresh after. Stores that follow Transition.TTL
// and Keep (memstore, and the Redis store writing binary states, its
// default) drop it at the same moment, and so decide alike.
const TTLSlack = time.Second

// Step is the single definition of every algorithm: it decides a request of
// the given cost at now (Unix µs) for policy p and state s. It is pure and
// allocation-free except for SlidingLog appends. p must be valid and cost in
// 0..MaxCost; cost 0 peeks. A denied request consumes nothing (Commit is
// false). Time never runs backwards for a state: a now earlier than the
// state's own time (a window's start, a bucket's last refill, a log's
// newest entry, GCRA's latest admitted request) is treated as that time,
// so an instance whose clock is behind cannot refill a bucket or reopen a
// window, nor is it refused for its lag.
func Step(p floodgate.Policy, s State, now, cost int64) Transition {
	var o Transition
	StepTo(&o, &p, &s, now, cost)
	return o
}

// StepTo is Step writing its outcome to o, for stores on a hot path: it
// takes the policy and state by reference instead of copying them in and
// the outcome out. It reads *p and *s and writes only *o; s must not point
// into *o.
func StepTo(o *Transition, p *floodgate.Policy, s *State, now, cost int64) {
	var r stepResult
	switch p.Algorithm {
	case floodgate.FixedWindow:
		r = stepFixedWindow(o, p, s, now, cost)
	case floodgate.SlidingWindow:
		r = stepSlidingWindow(o, p, s, now, cost)
	case floodgate.TokenBucket:
		r = stepTokenBucket(o, p, s, now, cost)
	case floodgate.GCRA:
		r = stepGCRA(o, p, s, now, cost)
	case floodgate.SlidingLog:
		r = stepSlidingLog(o, p, s, now, cost)
	case floodgate.Quota:
		r = stepQuota(o, p, s, now, cost)
	default:
		*o = Transition{State: *s}
	}
	o.Commit = r.allowed && cost > 0
	if !o.Commit {
		o.State = *s
		o.Keep = false
	}
	o.TTL = max(o.TTL, minTTL) + TTLSlack.Microseconds()
	r.fill(&o.Result, p.Capacity())
}

// Standing returns where state s stands at now under p without any
// request: the result of a peek, reported as admitted. Stores use it for
// layers that would have admitted a request another layer denied, so that
// their Remaining and ResetAt show nothing was consumed.
func Standing(p floodgate.Policy, s State, now int64) floodgate.Result {
	r := Step(p, s, now, 0).Result
	r.Allowed, r.Reason, r.RetryAfter, r.Delay = true, floodgate.ReasonNone, 0, 0
	return r
}

// admit applies the common rule: peeks ask whether one unit fits, costs
// above capacity are refused outright, others fit or not.
func admit(remaining, cost, capacity int64) (allowed bool, reason floodgate.Reason) {
	switch {
	case cost > capacity:
		return false, floodgate.ReasonCostExceedsLimit
	case cost == 0 && remaining >= 1, cost > 0 && cost <= remaining:
		return true, floodgate.ReasonNone
	}
	return false, floodgate.ReasonLimited
}

// The step functions below each decide one algorithm: they write the new
// state and its TTL (µs, before minTTL and TTLSlack) to o and return the
// decision, for StepTo to finish. They read all of *s before writing o.
func stepFixedWindow(o *Transition, p *floodgate.Policy, s *State, now, cost int64) stepResult {
	w := p.Window.Microseconds()
	if s.T != 0 && now < s.T {
		now = s.T
	}
	start := now - now%w
	n := int64(0)
	if s.T == start {
		n = s.N
	}
	r := stepResult{resetAt: start + w}
	r.allowed, r.reason = admit(p.Limit-n, cost, p.Limit)
	if r.allowed && cost > 0 {
		n += cost
	}
	r.remaining = p.Limit - n
	if r.reason == floodgate.ReasonLimited {
		r.retry = start + w - now
	}
	o.State, o.TTL = State{T: start, N: n, E: w}, start+w-now
	o.Keep = s.T == start && s.E == w
	return r
}

func stepSlidingWindow(o *Transition, p *floodgate.Policy, s *State, now, cost int64) stepResult {
	w := p.Window.Microseconds()
	if s.T != 0 && now < s.T {
		now = s.T
	}
	start := now - now%w
	var cur, prev int64
	switch s.T {
	case start:
		cur, prev = s.N, s.Prev
	case start - w:
		prev = s.N
	}
	rem := w - (now - start) // µs of the previous window still inside the sliding window
	est := weighted(prev, rem, w) + cur
	r := stepResult{}
	r.allowed, r.reason = admit(p.Limit-est, cost, p.Limit)
	if r.allowed && cost > 0 {
		cur += cost
		est += cost
	}
	r.remaining = p.Limit - est
	if cur > 0 {
		r.resetAt = start + 2*w
	} else {
		r.resetAt = start + w
	}
	if !r.allowed && r.reason != floodgate.ReasonCostExceedsLimit {
		need := max(cost, 1)
		if cur+need <= p.Limit {
			// Wait until the previous window's weight has decayed enough.
			r.retry = start + w - weightedSpan(p.Limit-cur-need, w, prev) - now
		} else {
			// Wait for the next window, then for this window's weight to decay.
			r.retry = start + 2*w - weightedSpan(p.Limit-need, w, cur) - now
		}
		r.retry = max(r.retry, 1)
	}
	o.State, o.TTL = State{T: start, N: cur, Prev: prev, E: w}, start+2*w-now
	o.Keep = s.T == start && s.E == w
	return r
}

// weighted returns floor(count × rem / w). It is computed in float64, the
// exact same IEEE operations as the Lua script, so both agree bit for bit.
func weighted(count, rem, w int64) int64 {
	if count == 0 || rem <= 0 {
		return 0
	}
	x := float64(count) * float64(rem)
	return int64(floorDiv(x, float64(w)))
}

// weightedSpan returns the largest overlap rem (µs, at most w) for which
// weighted(count, rem, w) stays within allowance, that is
// ceil((allowance+1) × w / count) − 1, in the same float64 operations as the
// Lua script.
func weightedSpan(allowance, w, count int64) int64 {
	if count == 0 {
		return w
	}
	x := float64(allowance+1) * float64(w) / float64(count)
	c := float64(int64(x))
	if c < x {
		c++
	}
	return min(int64(c)-1, w)
}

func floorDiv(x, y float64) float64 {
	q := x / y
	t := float64(int64(q))
	if t > q {
		t--
	}
	return t
}

func stepTokenBucket(o *Transition, p *floodgate.Policy, s *State, now, cost int64) stepResult {
	iv := interval(p)
	b := p.Capacity()
	tokens, last := b, now
	if s.T != 0 {
		tokens, last = s.N, s.T
		if now < last {
			now = last
		}
		add := (now - last) / iv
		tokens += add
		last += add * iv
		if tokens >= b {
			tokens, last = b, now
		}
	}
	r := stepResult{}
	r.allowed, r.reason = admit(tokens, cost, b)
	if r.allowed && cost > 0 {
		tokens -= cost
	}
	r.remaining = tokens
	r.resetAt = last + (b-tokens)*iv
	if !r.allowed && r.reason != floodgate.ReasonCostExceedsLimit {
		r.retry = last + (max(cost, 1)-tokens)*iv - now
	}
	o.State = State{T: last, N: tokens}
	bucketLife(o, p, s.E, now, r.resetAt-now)
	return r
}

func stepGCRA(o *Transition, p *floodgate.Policy, s *State, now, cost int64) stepResult {
	iv := interval(p)
	b := p.Capacity()
	tol := b * iv                         // how far the TAT may run ahead of now
	maxDelay := p.MaxDelay.Microseconds() // shaping allowance
	if now < s.N {
		now = s.N // the state's time: a clock behind its latest admitted request
	}
	tat := max(s.T, now)
	r := stepResult{}
	switch {
	case cost > (tol+maxDelay)/iv:
		r.reason = floodgate.ReasonCostExceedsLimit
	case cost == 0:
		// A peek reports what a request of cost 1 would get now: admitted
		// with the delay it would be told to wait, or its retry.
		r.allowed = tat+iv-now <= tol+maxDelay
		if r.allowed {
			r.delay = max(tat+iv-now-tol, 0)
		} else {
			r.reason = floodgate.ReasonLimited
			r.retry = tat + iv - now - tol - maxDelay
		}
	default:
		newTAT := tat + cost*iv
		if newTAT-now <= tol+maxDelay {
			r.allowed = true
			r.delay = max(newTAT-now-tol, 0)
			tat = newTAT
		} else {
			r.reason = floodgate.ReasonLimited
			r.retry = newTAT - now - tol - maxDelay
		}
	}
	r.remaining = max((tol-(tat-now))/iv, 0)
	r.resetAt = tat
	o.State = State{T: tat, N: now}
	bucketLife(o, p, s.E, now, tat-now)
	return r
}

func stepSlidingLog(o *Transition, p *floodgate.Policy, s *State, now, cost int64) stepResult {
	w := p.Window.Microseconds()
	log := s.Log
	if n := len(log); n > 0 && now < log[n-1].At {
		now = log[n-1].At
	}
	drop := 0
	for drop < len(log) && log[drop].At <= now-w {
		drop++
	}
	log = log[drop:]
	var sum int64
	for _, e := range log {
		sum += e.Cost
	}
	r := stepResult{}
	r.allowed, r.reason = admit(p.Limit-sum, cost, p.Limit)
	if r.allowed && cost > 0 {
		log = append(log, LogEntry{At: now, Cost: cost})
		sum += cost
	}
	r.remaining = p.Limit - sum
	r.resetAt = now
	if n := len(log); n > 0 {
		r.resetAt = log[n-1].At + w
	}
	if !r.allowed && r.reason != floodgate.ReasonCostExceedsLimit {
		// Find the oldest entries whose expiry frees enough room.
		need := sum + max(cost, 1) - p.Limit
		for _, e := range log {
			need -= e.Cost
			if need <= 0 {
				r.retry = e.At + w - now
				break
			}
		}
	}
	o.State, o.TTL, o.Keep = State{Log: log}, r.resetAt-now, false
	return r
}

func stepQuota(o *Transition, p *floodgate.Policy, s *State, now, cost int64) stepResult {
	if s.T != 0 && now < s.T {
		now = s.T
	}
	start, end := p.Calendar.BoundsMicros(now)
	n := int64(0)
	if s.T < end && s.Prev > start {
		// The stored period overlaps this one: it is this period, or the
		// same named period in the calendar's former time zone (the key
		// carries the period's name, not its zone), whose usage carries
		// over. Periods of one calendar never overlap, so a stored earlier
		// period (a key that is not per period) starts afresh.
		n = s.N
	}
	r := stepResult{resetAt: end}
	r.allowed, r.reason = admit(p.Limit-n, cost, p.Limit)
	if r.allowed && cost > 0 {
		n += cost
	}
	r.remaining = p.Limit - n
	if r.reason == floodgate.ReasonLimited {
		r.retry = end - now
	}
	o.State, o.TTL = State{T: start, N: n, Prev: end}, end-now+QuotaGrace.Microseconds()
	o.Keep = s.T == start && s.Prev == end
	return r
}

// bucketLife sets o.TTL, o.Keep and o.State.E of a token bucket or GCRA
// state that needs to be kept life µs from now (the request's time, after
// the step moved it to the state's own time), the key's TTL having been
// recorded to end at end (0: not recorded). It is the Redis script's
// ttlEnd (redisstore/assemble.go), for states written in binary: a TTL
// that ends late enough is kept; otherwise the one written is the life
// needed plus as much again (with the slack), at most the window more,
// and its end is recorded. A bucket's state decides as no state does once
// the bucket is full again, so the longer TTL changes no decision within
// TTLSlack of skew; beyond it, this makes a store drop the state when the
// Redis store does.
func bucketLife(o *Transition, p *floodgate.Policy, end, now, life int64) {
	life = max(life, minTTL)
	slack := TTLSlack.Microseconds()
	if end != 0 && now+life+slack <= end {
		o.TTL, o.Keep, o.State.E = life, true, end
		return
	}
	life += min(life+slack, p.Window.Microseconds())
	o.TTL, o.Keep, o.State.E = life, false, now+life+slack
}

// interval returns the emission interval of a bucket policy in
// microseconds: Window/Limit, rounded down, as Policy.Validate checks it.
func interval(p *floodgate.Policy) int64 { return p.Window.Microseconds() / p.Limit }
