package fallback

import (
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock for the breaker's timing.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTestBreaker(t *testing.T, opts BreakerOptions) (*breaker, *fakeClock, *[]BreakerState) {
	t.Helper()
	if err := opts.validate(); err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	var changes []BreakerState
	b := newBreaker("test", opts, clk.now, func(s BreakerState, _ error) { changes = append(changes, s) })
	return b, clk, &changes
}

func TestBreakerLifecycle(t *testing.T) {
	b, clk, changes := newTestBreaker(t, BreakerOptions{
		FailureThreshold: 3, OpenFor: time.Second, MaxOpenFor: 3 * time.Second,
		Jitter: -1, HalfOpenProbes: 2, ProbeSuccesses: 2,
	})
	expect := func(step string, want ticket) {
		t.Helper()
		if got := b.acquire(); got != want {
			t.Fatalf("%s: acquire = %d, want %d", step, got, want)
		}
	}
	// Two failures, a success, then three failures: only consecutive ones count.
	for i, v := range []verdict{verdictFailure, verdictFailure, verdictSuccess, verdictFailure, verdictFailure, verdictNeutral} {
		expect("closed", ticketNormal)
		b.release(ticketNormal, v)
		if st, _ := b.snapshot(); st != BreakerClosed {
			t.Fatalf("call %d: state %v, want closed", i, st)
		}
	}
	expect("third failure", ticketNormal)
	b.release(ticketNormal, verdictFailure)
	if st, wait := b.snapshot(); st != BreakerOpen || wait != time.Second {
		t.Fatalf("after 3 failures: %v, wait %v; want open, 1s", st, wait)
	}
	expect("open", ticketDenied)
	// A late success from before the breaker opened does not close it.
	b.release(ticketNormal, verdictSuccess)
	expect("open after late success", ticketDenied)

	clk.advance(time.Second)
	expect("first probe", ticketProbe)
	expect("second probe", ticketProbe)
	expect("probes exhausted", ticketDenied)
	b.release(ticketProbe, verdictFailure) // re-opens for 2s
	if st, wait := b.snapshot(); st != BreakerOpen || wait != 2*time.Second {
		t.Fatalf("after failed probe: %v, wait %v; want open, 2s", st, wait)
	}
	b.release(ticketProbe, verdictSuccess) // the other probe, answered late: ignored
	clk.advance(2 * time.Second)
	expect("probe", ticketProbe)
	b.release(ticketProbe, verdictFailure) // re-opens for min(4s, 3s)
	if _, wait := b.snapshot(); wait != 3*time.Second {
		t.Fatalf("open period %v, want capped at 3s", wait)
	}
	clk.advance(3 * time.Second)
	expect("probe", ticketProbe)
	b.release(ticketProbe, verdictNeutral) // a cancelled probe frees its slot
	expect("probe again", ticketProbe)
	b.release(ticketProbe, verdictSuccess)
	expect("second probe", ticketProbe)
	b.release(ticketProbe, verdictSuccess)
	if st, _ := b.snapshot(); st != BreakerClosed {
		t.Fatalf("after 2 successful probes: %v, want closed", st)
	}
	expect("closed again", ticketNormal)

	// The open period was reset by closing: 3 failures open it for 1s.
	for range 3 {
		b.release(b.acquire(), verdictFailure)
	}
	if _, wait := b.snapshot(); wait != time.Second {
		t.Fatalf("open period after closing %v, want reset to 1s", wait)
	}
	want := []BreakerState{BreakerOpen, BreakerHalfOpen, BreakerOpen, BreakerHalfOpen, BreakerOpen, BreakerHalfOpen, BreakerClosed, BreakerOpen}
	if len(*changes) != len(want) {
		t.Fatalf("state changes %v, want %v", *changes, want)
	}
	for i := range want {
		if (*changes)[i] != want[i] {
			t.Fatalf("state changes %v, want %v", *changes, want)
		}
	}
}

func TestBreakerJitter(t *testing.T) {
	b, _, _ := newTestBreaker(t, BreakerOptions{FailureThreshold: 1, OpenFor: time.Second, Jitter: 0.5})
	seen := map[time.Duration]bool{}
	for range 50 {
		b.mu.Lock()
		b.open(nil)
		b.mu.Unlock()
		_, wait := b.snapshot()
		if wait < 500*time.Millisecond || wait > 1500*time.Millisecond {
			t.Fatalf("jittered open period %v outside 0.5s..1.5s", wait)
		}
		seen[wait] = true
	}
	if len(seen) < 10 {
		t.Fatalf("only %d distinct open periods in 50: jitter is not spreading probes", len(seen))
	}
}

func TestBreakerOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts BreakerOptions
	}{
		{"negative threshold", BreakerOptions{FailureThreshold: -1}},
		{"negative open", BreakerOptions{OpenFor: -time.Second}},
		{"open too long", BreakerOptions{OpenFor: 2 * time.Hour}},
		{"max below open", BreakerOptions{OpenFor: 2 * time.Second, MaxOpenFor: time.Second}},
		{"jitter too large", BreakerOptions{Jitter: 1}},
		{"negative probes", BreakerOptions{HalfOpenProbes: -1}},
		{"negative successes", BreakerOptions{ProbeSuccesses: -2}},
		{"failure rate above 1", BreakerOptions{FailureRate: 1.5}},
		{"negative min calls", BreakerOptions{MinCalls: -1}},
		{"window too short", BreakerOptions{Window: time.Millisecond}},
		{"probe interval too long", BreakerOptions{ProbeInterval: time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.opts.validate(); err == nil {
				t.Fatalf("validate(%+v) = nil, want an error", tc.opts)
			}
		})
	}
	var o BreakerOptions
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	want := BreakerOptions{FailureThreshold: 10, FailureRate: 0.5, MinCalls: 10, Window: 10 * time.Second, ProbeInterval: 200 * time.Millisecond,
		OpenFor: time.Second, MaxOpenFor: 30 * time.Second, Jitter: 0.2, HalfOpenProbes: 1, ProbeSuccesses: 3}
	if o != want {
		t.Fatalf("defaults %+v, want %+v", o, want)
	}
}

// TestBreakerCountsAStallOnce: calls in flight together that fail
// together (a stall times out every call sent during it) count once
// toward FailureThreshold; calls sent after a failure and failing in turn
// (a primary that stays down) count each. Before, 12 concurrent timeouts
// of one 185 ms stall opened a Cluster primary's breaker (an outside
// walk), sending its identities to the fallback for 0.6 s.
func TestBreakerCountsAStallOnce(t *testing.T) {
	b, clk, changes := newTestBreaker(t, BreakerOptions{})
	for range 100 { // traffic before (the failure rate stays below a half)
		tk, gen := b.acquireGen()
		b.releaseGen(tk, verdictSuccess, gen, nil)
	}
	for range 3 { // three stalls, each failing 12 calls in flight together
		var tickets []ticket
		var gens []uint64
		for range 12 {
			tk, gen := b.acquireGen()
			tickets, gens = append(tickets, tk), append(gens, gen)
		}
		clk.advance(50 * time.Millisecond)
		for i, tk := range tickets {
			b.releaseGen(tk, verdictFailure, gens[i], nil)
		}
		if len(*changes) != 0 {
			t.Fatalf("a stall failing 12 calls in flight together changed the state: %v, want closed", *changes)
		}
		for range 100 { // between stalls, successes
			tk, gen := b.acquireGen()
			b.releaseGen(tk, verdictSuccess, gen, nil)
		}
		clk.advance(time.Second)
	}
	// A primary that stays down: each call is sent after the last one
	// failed, and each counts.
	for i := range 10 {
		if st, _ := b.snapshot(); st != BreakerClosed {
			t.Fatalf("open after %d sequential failures, want 10", i)
		}
		tk, gen := b.acquireGen()
		clk.advance(50 * time.Millisecond)
		b.releaseGen(tk, verdictFailure, gen, nil)
	}
	if st, _ := b.snapshot(); st != BreakerOpen {
		t.Fatalf("after 10 sequential failures: %v, want open", st)
	}
}

// TestBreakerQuietStallCountsOnce: on an instance that made no call in
// the last Window, one stall failing 20 calls in flight together is one
// failure, in the failure rate too (the 20 used to reach MinCalls, all
// failed, and open the breaker: an outside walk saw a 0.2 s freeze of an
// idle instance's Redis do so). A primary that stays down still opens it.
func TestBreakerQuietStallCountsOnce(t *testing.T) {
	b, clk, changes := newTestBreaker(t, BreakerOptions{})
	var tickets []ticket
	var gens []uint64
	for range 20 {
		tk, gen := b.acquireGen()
		tickets, gens = append(tickets, tk), append(gens, gen)
	}
	clk.advance(200 * time.Millisecond)
	for i, tk := range tickets {
		b.releaseGen(tk, verdictFailure, gens[i], nil)
	}
	if len(*changes) != 0 {
		t.Fatalf("one stall of a quiet instance (20 calls in flight together) changed the state: %v, want closed", *changes)
	}
	for range 10 { // down for good: each call sent after the last failed
		tk, gen := b.acquireGen()
		clk.advance(50 * time.Millisecond)
		b.releaseGen(tk, verdictFailure, gen, nil)
	}
	if st, _ := b.snapshot(); st != BreakerOpen {
		t.Fatalf("after a stall and 10 sequential failures: %v, want open", st)
	}
}

// TestBreakerIgnoresScatteredTimeouts replays what CPU saturation did to
// the old breaker (5 consecutive failures opened it): bursts of 5 timeouts
// among successes. With the defaults (10 in a row, or half of at least 10
// calls over 10s) it stays closed.
func TestBreakerIgnoresScatteredTimeouts(t *testing.T) {
	b, clk, changes := newTestBreaker(t, BreakerOptions{})
	for round := range 40 {
		for i := range 25 {
			v := verdictSuccess
			if i < 5 {
				v = verdictFailure
			}
			tk := b.acquire()
			if tk != ticketNormal {
				t.Fatalf("round %d call %d: ticket %d, want a normal call (closed)", round, i, tk)
			}
			b.release(tk, v)
			clk.advance(10 * time.Millisecond)
		}
	}
	if len(*changes) != 0 {
		t.Fatalf("state changes %v under 20%% scattered failures, want none", *changes)
	}
}

// TestBreakerFailureRate opens on a high failure rate even when failures
// never come 20 in a row, and not before MinCalls calls.
func TestBreakerFailureRate(t *testing.T) {
	b, clk, _ := newTestBreaker(t, BreakerOptions{})
	for i := range 9 {
		v := verdictFailure
		if i%3 == 2 {
			v = verdictSuccess
		}
		b.release(b.acquire(), v)
		clk.advance(10 * time.Millisecond)
	}
	if st, _ := b.snapshot(); st != BreakerClosed {
		t.Fatalf("after 9 calls (6 failed): %v, want closed below MinCalls", st)
	}
	b.release(b.acquire(), verdictFailure)
	if st, _ := b.snapshot(); st != BreakerOpen {
		t.Fatalf("after 10 calls, 7 failed: %v, want open", st)
	}
	// Old failures leave the window: after 10s a fresh start.
	b2, clk2, _ := newTestBreaker(t, BreakerOptions{})
	for range 9 {
		b2.release(b2.acquire(), verdictFailure)
	}
	clk2.advance(11 * time.Second)
	for i := range 10 {
		v := verdictSuccess
		if i >= 6 {
			v = verdictFailure
		}
		b2.release(b2.acquire(), v)
	}
	if st, _ := b2.snapshot(); st != BreakerClosed {
		t.Fatalf("failures older than the window still counted: %v", st)
	}
}
