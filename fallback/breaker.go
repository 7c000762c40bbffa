package fallback

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// BreakerState is the state of the circuit breaker in front of the primary
// store. Its numeric value is what the rate_limit_breaker_state gauge shows.
type BreakerState uint8

// The breaker states.
const (
	// BreakerClosed: every call goes to the primary (central counting).
	BreakerClosed BreakerState = iota
	// BreakerHalfOpen: a few probe calls go to the primary; the rest are
	// decided by the failure mode until the probes succeed.
	BreakerHalfOpen
	// BreakerOpen: no call goes to the primary until the open period ends.
	BreakerOpen
)

// String returns "closed", "half_open" or "open".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerHalfOpen:
		return "half_open"
	case BreakerOpen:
		return "open"
	}
	return fmt.Sprintf("BreakerState(%d)", uint8(s))
}

// BreakerOptions configures the circuit breaker. The zero value gives the
// documented defaults.
type BreakerOptions struct {
	// FailureThreshold is how many consecutive failed primary calls open
	// the breaker. Default 10: a few timeouts in a row under CPU
	// saturation must not send traffic to the fallback. Calls that were
	// in flight together when one of them failed count once: a stall of a
	// fifth of a second times out every call sent during it at once (an
	// outside walk saw ten concurrent decisions open the breaker of a
	// Cluster primary frozen for 185 ms), which is one event, not ten; a
	// primary that stays down fails the calls sent after each failure too,
	// and they count.
	FailureThreshold int
	// FailureRate opens the breaker when, over the last Window, at least
	// MinCalls calls were made and at least this fraction of them failed.
	// It catches a primary failing often but not every time. 0 means 0.5;
	// a negative value disables it; at most 1.
	FailureRate float64
	// MinCalls is how many calls the last Window must hold before
	// FailureRate applies. Default 10.
	MinCalls int
	// Window is the span over which FailureRate is measured, in ten
	// slices. Default 10s; at least 10ms.
	Window time.Duration
	// ProbeInterval is the mean time between two background health probes
	// while the breaker is open, when the Store has Options.Probe; each
	// wait is jittered by ±Jitter. Default 200ms.
	ProbeInterval time.Duration
	// OpenFor is how long the breaker stays open the first time, before it
	// lets probes through. Each failed probe doubles it, up to MaxOpenFor;
	// closing resets it. Default 1s.
	OpenFor time.Duration
	// MaxOpenFor caps the open period. Default 30s; at least OpenFor.
	MaxOpenFor time.Duration
	// Jitter spreads each open period by ±Jitter of its length, so that
	// many instances that lost Redis together do not probe it together.
	// 0 means 0.2; a negative value disables jitter; at most 0.9.
	Jitter float64
	// HalfOpenProbes is how many probe calls may be in flight at once while
	// half-open; other calls meanwhile are decided by the failure mode.
	// Default 1.
	HalfOpenProbes int
	// ProbeSuccesses is how many successful probes close the breaker. A
	// failed probe opens it again (or, for background probes, starts the
	// count again). Default 3.
	ProbeSuccesses int
}

func (o *BreakerOptions) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: breaker: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	if o.FailureThreshold < 0 || o.FailureThreshold > 1_000_000 {
		return bad("failure threshold %d out of range 0..1000000", o.FailureThreshold)
	}
	if o.OpenFor < 0 || o.OpenFor > time.Hour {
		return bad("open period %v out of range 0..1h", o.OpenFor)
	}
	if o.MaxOpenFor < 0 || o.MaxOpenFor > time.Hour {
		return bad("max open period %v out of range 0..1h", o.MaxOpenFor)
	}
	if o.Jitter > 0.9 || o.Jitter != o.Jitter {
		return bad("jitter %v above 0.9", o.Jitter)
	}
	if o.HalfOpenProbes < 0 || o.HalfOpenProbes > 1000 {
		return bad("half-open probes %d out of range 0..1000", o.HalfOpenProbes)
	}
	if o.ProbeSuccesses < 0 || o.ProbeSuccesses > 1000 {
		return bad("probe successes %d out of range 0..1000", o.ProbeSuccesses)
	}
	if o.FailureRate > 1 || o.FailureRate != o.FailureRate {
		return bad("failure rate %v above 1", o.FailureRate)
	}
	if o.MinCalls < 0 || o.MinCalls > 1_000_000 {
		return bad("min calls %d out of range 0..1000000", o.MinCalls)
	}
	if o.Window != 0 && (o.Window < 10*time.Millisecond || o.Window > time.Hour) {
		return bad("window %v out of range 10ms..1h", o.Window)
	}
	if o.ProbeInterval != 0 && (o.ProbeInterval < time.Millisecond || o.ProbeInterval > time.Minute) {
		return bad("probe interval %v out of range 1ms..1m", o.ProbeInterval)
	}
	if o.FailureThreshold == 0 {
		o.FailureThreshold = 10
	}
	switch {
	case o.FailureRate == 0:
		o.FailureRate = 0.5
	case o.FailureRate < 0:
		o.FailureRate = 0
	}
	if o.MinCalls == 0 {
		o.MinCalls = 10
	}
	if o.Window == 0 {
		o.Window = 10 * time.Second
	}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = 200 * time.Millisecond
	}
	if o.OpenFor == 0 {
		o.OpenFor = time.Second
	}
	if o.MaxOpenFor == 0 {
		o.MaxOpenFor = max(30*time.Second, o.OpenFor)
	}
	if o.MaxOpenFor < o.OpenFor {
		return bad("max open period %v below open period %v", o.MaxOpenFor, o.OpenFor)
	}
	switch {
	case o.Jitter == 0:
		o.Jitter = 0.2
	case o.Jitter < 0:
		o.Jitter = 0
	}
	if o.HalfOpenProbes == 0 {
		o.HalfOpenProbes = 1
	}
	if o.ProbeSuccesses == 0 {
		o.ProbeSuccesses = 3
	}
	return nil
}

// ticket says how a call was let through by the breaker.
type ticket uint8

const (
	ticketDenied ticket = iota // the breaker is open: do not call the primary
	ticketNormal               // breaker closed: an ordinary call
	ticketProbe                // half-open: this call probes the primary
)

// verdict is what a primary call told the breaker.
type verdict uint8

const (
	verdictSuccess verdict = iota // the primary answered
	verdictFailure                // the primary failed (counts toward opening)
	verdictNeutral                // says nothing about the primary's health
)

// windowSlices is the number of slices of BreakerOptions.Window.
const windowSlices = 10

// slice counts the calls of one slice of the failure-rate window.
type slice struct {
	index          int64 // which slice of time it counts (0: unused)
	calls, failers int
}

// breaker is a circuit breaker that opens on consecutive failures or on a
// failure rate over a sliding window. Without a background probe it lets
// a bounded number of half-open probes through after a jittered,
// exponentially growing open period; with one (prober), it stays open
// until the background probes succeed, whatever the traffic. It is safe
// for concurrent use.
type breaker struct {
	name     string // the partition it guards
	opts     BreakerOptions
	now      func() time.Time
	onChange func(BreakerState, error) // the new state, and the error that opened it
	epoch    time.Time
	prober   *prober // nil: probes are calls let through while half-open

	mu        sync.Mutex
	state     BreakerState
	failures  int    // consecutive failures while closed
	gen       uint64 // counted failures so far: a call admitted before the last one fails with it
	successes int    // successful probes since half-open
	inFlight  int    // probes in flight
	openFor   time.Duration
	openUntil time.Time // end of the open period (monotonic reading)
	rnd       *rand.Rand
	window    [windowSlices]slice
	probing   bool // a background probe loop is running
}

// prober runs background health probes of an open breaker's partition.
type prober struct {
	probe   func(ctx context.Context) error
	gone    func()        // called once the probe reports ErrPartitionGone, after the breaker closed
	observe func(error)   // nil, or told each probe's result (CauseObserver.ObserveProbe)
	timeout time.Duration // of one probe
	stop    <-chan struct{}
	wg      *sync.WaitGroup
}

func newBreaker(name string, opts BreakerOptions, now func() time.Time, onChange func(BreakerState, error)) *breaker {
	return &breaker{
		name:     name,
		opts:     opts,
		now:      now,
		onChange: onChange,
		epoch:    now(),
		openFor:  opts.OpenFor,
		rnd:      rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
	}
}

// acquire says whether a call may go to the primary, and as what.
func (b *breaker) acquire() ticket {
	t, _ := b.acquireGen()
	return t
}

// acquireGen is acquire, also returning the breaker's failure generation
// at admission, for releaseGen.
func (b *breaker) acquireGen() (ticket, uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerClosed:
		return ticketNormal, b.gen
	case BreakerOpen:
		if b.prober != nil || b.now().Before(b.openUntil) {
			return ticketDenied, b.gen
		}
		b.setState(BreakerHalfOpen, nil)
		b.successes, b.inFlight = 0, 0
	}
	if b.inFlight >= b.opts.HalfOpenProbes {
		return ticketDenied, b.gen
	}
	b.inFlight++
	return ticketProbe, b.gen
}

// isOpen reports whether acquire would deny a call now: the breaker is
// open and not yet letting half-open probes through. It changes nothing.
func (b *breaker) isOpen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state == BreakerOpen && (b.prober != nil || b.now().Before(b.openUntil))
}

// release records the outcome of a call that acquire let through, a
// failure counting toward FailureThreshold whatever else failed while it
// was in flight.
func (b *breaker) release(t ticket, v verdict) { b.releaseCause(t, v, nil) }

// releaseCause is release with the error of a failed call (nil
// otherwise), reported as the cause if the failure opens the breaker.
func (b *breaker) releaseCause(t ticket, v verdict, cause error) {
	b.mu.Lock()
	gen := b.gen
	b.mu.Unlock()
	b.releaseGen(t, v, gen, cause)
}

// releaseGen records the outcome of a call that acquireGen let through at
// failure generation gen: a failure after another failure was counted
// since gen (the two calls were in flight together) does not count again,
// toward FailureThreshold or in the failure rate. cause is the failed
// call's error (nil otherwise), reported if the failure opens the
// breaker.
func (b *breaker) releaseGen(t ticket, v verdict, gen uint64, cause error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch t {
	case ticketNormal:
		if b.state != BreakerClosed {
			return // a late answer from before the breaker opened
		}
		switch v {
		case verdictSuccess:
			b.failures = 0
			b.count(false)
		case verdictFailure:
			// A failure after another was counted since gen (the calls
			// were in flight together, as in a stall) counts neither
			// toward FailureThreshold nor in the failure rate: on a
			// quiet instance, the calls of one stall alone would
			// otherwise reach MinCalls, all failed.
			if gen != b.gen {
				return
			}
			b.failures++
			b.gen++
			if rate := b.count(true); b.failures >= b.opts.FailureThreshold || rate {
				b.open(cause)
			}
		}
	case ticketProbe:
		if b.state != BreakerHalfOpen {
			return
		}
		b.inFlight--
		switch v {
		case verdictSuccess:
			b.successes++
			if b.successes >= b.opts.ProbeSuccesses {
				b.close()
			}
		case verdictFailure:
			b.openFor = min(2*b.openFor, b.opts.MaxOpenFor)
			b.open(cause)
		}
	}
}

// count records a call made while closed in the failure-rate window and
// reports whether the window's failure rate now opens the breaker. b.mu is
// held.
func (b *breaker) count(failed bool) bool {
	width := b.opts.Window / windowSlices
	idx := int64(b.now().Sub(b.epoch)/width) + 1
	sl := &b.window[idx%windowSlices]
	if sl.index != idx {
		*sl = slice{index: idx}
	}
	sl.calls++
	if failed {
		sl.failers++
	}
	if !failed || b.opts.FailureRate == 0 {
		return false
	}
	calls, failers := 0, 0
	for _, w := range b.window {
		if w.index > idx-windowSlices {
			calls += w.calls
			failers += w.failers
		}
	}
	return calls >= b.opts.MinCalls && float64(failers) >= b.opts.FailureRate*float64(calls)
}

// close returns to central counting, forgetting past failures. b.mu is
// held.
func (b *breaker) close() {
	b.failures = 0
	b.openFor = b.opts.OpenFor
	b.window = [windowSlices]slice{}
	b.setState(BreakerClosed, nil)
}

// jittered spreads d by ±Jitter. b.mu is held.
func (b *breaker) jittered(d time.Duration) time.Duration {
	if j := b.opts.Jitter; j > 0 {
		d = time.Duration(float64(d) * (1 + j*(2*b.rnd.Float64()-1)))
	}
	return d
}

// open starts an open period of b.openFor, jittered, or, with a prober,
// starts the background probes; cause is the error of the failed call
// that opened it. b.mu is held.
func (b *breaker) open(cause error) {
	b.openUntil = b.now().Add(b.jittered(b.openFor))
	b.setState(BreakerOpen, cause)
	if b.prober != nil && !b.probing {
		b.probing = true
		b.prober.wg.Add(1)
		go b.probeLoop()
	}
}

// probeLoop probes the primary every ProbeInterval (jittered) until
// ProbeSuccesses probes in a row succeed, then closes the breaker. It
// stops early when the Store is closed.
func (b *breaker) probeLoop() {
	defer b.prober.wg.Done()
	ok := 0
	for {
		b.mu.Lock()
		wait := b.jittered(b.opts.ProbeInterval)
		b.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-b.prober.stop:
			t.Stop()
			b.mu.Lock()
			b.probing = false
			b.mu.Unlock()
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), b.prober.timeout)
		err := b.prober.probe(ctx)
		cancel()
		if b.prober.observe != nil {
			b.prober.observe(err)
		}
		if errors.Is(err, ErrPartitionGone) {
			// Nothing is behind this breaker any more: close it (a
			// caller holding it goes to the primary, which redirects)
			// and let the Store forget it.
			b.mu.Lock()
			b.probing = false
			if b.state == BreakerOpen {
				b.close()
			}
			b.mu.Unlock()
			if b.prober.gone != nil {
				b.prober.gone()
			}
			return
		}
		if err != nil {
			ok = 0
			continue
		}
		if ok++; ok < b.opts.ProbeSuccesses {
			continue
		}
		b.mu.Lock()
		b.probing = false
		if b.state == BreakerOpen {
			b.close()
		}
		b.mu.Unlock()
		return
	}
}

// setState changes the state and reports the change, with cause, the
// error that opened the breaker (nil for other states). b.mu is held, so
// changes are reported in order.
func (b *breaker) setState(s BreakerState, cause error) {
	if b.state == s {
		return
	}
	b.state = s
	if b.onChange != nil {
		b.onChange(s, cause)
	}
}

// snapshot returns the state and, when open, how long until probes are let
// through.
func (b *breaker) snapshot() (BreakerState, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == BreakerOpen {
		return b.state, max(b.openUntil.Sub(b.now()), 0)
	}
	return b.state, 0
}

// retryHint is how long a ModeClosed denial asks the client to wait: with
// a prober, the probes it takes to close (ProbeInterval × ProbeSuccesses,
// whether it is open yet or not); without, until the breaker lets probes
// through, or one base open period when it is not open.
func (b *breaker) retryHint() time.Duration {
	if b.prober != nil {
		return b.opts.ProbeInterval * time.Duration(b.opts.ProbeSuccesses)
	}
	if _, wait := b.snapshot(); wait > 0 {
		return wait
	}
	return b.opts.OpenFor
}
