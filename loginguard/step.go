package loginguard

// This file is the single definition of the guard's behaviour: a pure
// function over three dimension states at a caller-supplied time, in
// integer microseconds. The memory backend runs it under a lock; the Lua
// scripts in lua/ mirror it line for line and the shared vectors
// (vectors_test.go) hold both to the same results.

// op is one guard operation.
type op uint8

const (
	// opCheck decides an attempt and, when it may proceed, counts it as in
	// progress in every dimension.
	opCheck op = iota
	// opPeek decides without writing anything.
	opPeek
	// opFailure counts a failed attempt.
	opFailure
	// opSuccess settles a successful attempt.
	opSuccess
	// opAbandon settles an attempt whose password was never checked.
	opAbandon
)

// state is one dimension's stored state. The zero value is fresh.
type state struct {
	N int64 // failures within the window
	P int64 // attempts in progress
	T int64 // last attempt or failure, Unix µs
	U int64 // locked until, Unix µs; 0 when not locked
}

// fresh reports whether s carries nothing worth storing.
func (s state) fresh() bool { return s.N == 0 && s.P == 0 && s.U == 0 }

// reply is the result of one operation.
type reply struct {
	action  Action
	until   int64 // Unix µs, for Delay and Locked
	by      Dimension
	crossed Dimensions
	states  [numDims]state
	nows    [numDims]int64 // each dimension's effective time
	write   bool           // states must be stored (or deleted when fresh)
}

// normalize forgets what has expired in s at now and returns the state and
// the time to judge it at: never earlier than the state's own last
// attempt, so an instance whose clock is behind cannot undo a delay or
// reopen a window.
func (p *params) normalize(d int, s state, now int64) (state, int64) {
	if now < s.T {
		now = s.T
	}
	if s.N > 0 && now-s.T >= p.dims[d].window {
		s.N = 0
	}
	if s.P > 0 && now-s.T >= p.attemptTimeout {
		s.P = 0
	}
	if s.U <= now {
		s.U = 0
	}
	return s, now
}

// delayFor returns the delay of the k-th failure beyond the Delay rung
// (k = 0 for the first): BaseDelay doubled k times, capped at MaxDelay.
func (p *params) delayFor(k int64) int64 {
	d := p.baseDelay
	for i := int64(0); i < k && d < p.maxDelay; i++ {
		d *= 2
	}
	return min(d, p.maxDelay)
}

// dimVerdict is one dimension's ladder applied to s at now.
//
// Attempts in progress count towards the lock as towards the other
// rungs: while failures plus attempts in progress reach Lock, those
// attempts could lock the dimension when they fail, so no other is let
// through (Delay) until they are settled or, at the latest, expire
// (AttemptTimeout after the dimension's last attempt, always after now
// when one is in progress). The password checks a dimension lets through
// before its lock are thus at most Lock, however many arrive at once.
// With none in progress, failures at or above Lock only follow a lock
// that ended: one attempt may then proceed, and its failure locks again.
//
// The Delay rung's wait is BaseDelay doubled for each failure and attempt
// in progress beyond Delay, after the last attempt, but never past what
// the state holds: unless settled sooner, the attempts in progress expire
// at s.T+AttemptTimeout (after now when there are any), and from then the
// failures alone decide. So with attempts in progress the wait ends at
// the earlier of that delay's end and the later of their expiry and the
// failures' own delay's end (their expiry when the failures alone are
// below Delay). Whether an attempt waits now is unchanged (now is before
// their expiry); only the end answered is not overstated.
func (p *params) dimVerdict(d int, s state, now int64) (Action, int64) {
	if s.U > now {
		return Locked, s.U
	}
	l := p.dims[d]
	e := s.N + s.P
	var until int64
	if l.delay > 0 && e >= l.delay {
		end := s.T + p.delayFor(e-l.delay)
		if s.P > 0 {
			// The attempts in progress expire together, AttemptTimeout
			// after the last attempt; from then on the failures alone
			// count, so the delay holds no longer than until then or
			// until the failures' own delay ends, whichever is later.
			expiry := s.T + p.attemptTimeout
			if s.N >= l.delay {
				expiry = max(expiry, s.T+p.delayFor(s.N-l.delay))
			}
			end = min(end, expiry)
		}
		if now < end {
			until = end
		}
	}
	if l.lock > 0 && s.P > 0 && e >= l.lock {
		until = max(until, s.T+p.attemptTimeout)
	}
	if until > 0 {
		return Delay, until
	}
	if l.captcha > 0 && e >= l.captcha {
		return CaptchaRequired, 0
	}
	return Allow, 0
}

// verdict combines the dimensions: the most severe action wins, the later
// end on a tie, the first dimension on an exact tie. Unless strict, an
// account delay or lock is only a CAPTCHA for a pair with a clean record.
func (p *params) verdict(r *reply) {
	var acts [numDims]Action
	var untils [numDims]int64
	for d := range numDims {
		acts[d], untils[d] = p.dimVerdict(d, r.states[d], r.nows[d])
	}
	pair := r.states[DimPair-1]
	if !p.strict && pair.N+pair.P == 0 && acts[DimAccount-1] > CaptchaRequired {
		acts[DimAccount-1], untils[DimAccount-1] = CaptchaRequired, 0
	}
	best := 0
	for d := 1; d < numDims; d++ {
		if acts[d] > acts[best] || acts[d] == acts[best] && untils[d] > untils[best] {
			best = d
		}
	}
	r.action, r.until, r.by = acts[best], untils[best], Dimension(best+1)
	if r.action == Allow {
		r.by = 0
	}
}

// step applies o to the three states (account, IP, pair) at now.
func (p *params) step(o op, in [numDims]state, now int64) reply {
	var r reply
	for d := range numDims {
		r.states[d], r.nows[d] = p.normalize(d, in[d], now)
	}
	switch o {
	case opCheck, opPeek:
		p.verdict(&r)
		if o == opCheck && r.action <= CaptchaRequired {
			for d := range numDims {
				r.states[d].P++
				r.states[d].T = r.nows[d]
			}
			r.write = true
		}
	case opFailure:
		for d := range numDims {
			s := &r.states[d]
			s.N++
			s.P = max(s.P-1, 0)
			s.T = r.nows[d]
			if l := p.dims[d]; l.lock > 0 && s.N >= l.lock && s.U == 0 {
				s.U = r.nows[d] + l.lockout
				r.crossed |= 1 << d
			}
		}
		r.write = true
		p.verdict(&r)
	case opSuccess:
		for d := range numDims {
			s := &r.states[d]
			s.P = max(s.P-1, 0)
			switch Dimension(d + 1) {
			case DimAccount:
				s.N = 0
			case DimPair:
				s.N, s.U = 0, 0
			}
		}
		r.write = true
		p.verdict(&r)
	case opAbandon:
		for d := range numDims {
			r.states[d].P = max(r.states[d].P-1, 0)
		}
		r.write = true
		p.verdict(&r)
	}
	return r
}

// ttlMillis returns how long, in whole milliseconds (at least 1), stored
// state s of dimension d must be kept when written at now: until its
// failures, its attempts in progress and its lock have all expired. After
// that it is equivalent to the fresh state, so the TTL only reclaims
// memory; the behaviour is decided by the timestamps.
func (p *params) ttlMillis(d int, s state, now int64) int64 {
	var exp int64
	if s.N > 0 {
		exp = s.T + p.dims[d].window
	}
	if s.P > 0 {
		exp = max(exp, s.T+p.attemptTimeout)
	}
	exp = max(exp, s.U)
	return max((exp-now+999)/1000, 1)
}
