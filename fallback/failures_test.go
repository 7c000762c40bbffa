package fallback_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/memstore"
)

func TestIndeterminateIsNotRetried(t *testing.T) {
	f := newFixture(t, fallback.Options{Breaker: fallback.BreakerOptions{FailureThreshold: 100, FailureRate: -1}})
	// The primary applies the decision, then the connection drops.
	f.primary.set(fmt.Errorf("%w: read: connection reset by peer", floodgate.ErrIndeterminate), true, false)
	p := mustPolicy(t)(floodgate.NewFixedWindow("api", 10, time.Hour))
	for i := range 3 {
		_, o := f.allow(t, p, "u1", 1)
		if o.Reason != fallback.ReasonIndeterminate || !errors.Is(o.Err, floodgate.ErrIndeterminate) {
			t.Fatalf("request %d outcome %+v, want indeterminate", i, o)
		}
	}
	if got := f.primary.calls.Load(); got != 3 {
		t.Fatalf("primary called %d times for 3 decisions, want 3 (no retry)", got)
	}
	// The primary counted each request exactly once.
	f.primary.set(nil, false, false)
	res, _ := f.allow(t, p, "u1", 0)
	if res.Remaining != 7 {
		t.Fatalf("primary remaining %d after 3 indeterminate requests, want 7", res.Remaining)
	}
	if got := f.rec.count("local/indeterminate"); got != 3 {
		t.Fatalf("observed %d local/indeterminate fallbacks, want 3", got)
	}
}

func TestBudgetBoundsPrimaryCall(t *testing.T) {
	const budget = 30 * time.Millisecond
	f := newFixture(t, fallback.Options{Budget: time.Second, Budgets: map[string]time.Duration{"fast": budget}})
	f.primary.set(nil, false, true)
	p := mustPolicy(t)(floodgate.NewFixedWindow("fast", 10, time.Hour))
	start := time.Now()
	res, o := f.allow(t, p, "u1", 1)
	if took := time.Since(start); took > budget+250*time.Millisecond {
		t.Fatalf("decision took %v with a %v budget", took, budget)
	}
	if !res.Allowed || o.Reason != fallback.ReasonIndeterminate {
		t.Fatalf("%+v, outcome %+v; want a local decision for an unanswered call", res, o)
	}
	if b := f.store.Budget("fast"); b != budget {
		t.Fatalf("Budget(fast) = %v", b)
	}
	if b := f.store.Budget("other"); b != time.Second {
		t.Fatalf("Budget(other) = %v", b)
	}
	// A caller's shorter deadline wins, and the decision is still taken.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := f.lim.Allow(ctx, p, "u2"); err != nil {
		t.Fatalf("decision under a short caller deadline: %v", err)
	}
	if took := time.Since(start); took > budget+250*time.Millisecond {
		t.Fatalf("decision took %v with a 5ms caller deadline", took)
	}
}

func TestBreakerStopsCallsAndRecovers(t *testing.T) {
	f := newFixture(t, fallback.Options{Breaker: fallback.BreakerOptions{
		FailureThreshold: 3, OpenFor: time.Second, Jitter: -1, HalfOpenProbes: 1, ProbeSuccesses: 2,
	}})
	p := mustPolicy(t)(floodgate.NewFixedWindow("api", 1000, time.Hour))
	f.primary.set(fmt.Errorf("%w: refused", floodgate.ErrStoreUnavailable), false, false)
	for range 3 {
		f.allow(t, p, "u1", 1)
	}
	if f.store.BreakerState() != fallback.BreakerOpen {
		t.Fatalf("breaker %v after 3 failures", f.store.BreakerState())
	}
	for range 50 {
		_, o := f.allow(t, p, "u1", 1)
		if o.Reason != fallback.ReasonBreakerOpen {
			t.Fatalf("outcome %+v while open", o)
		}
	}
	if got := f.primary.calls.Load(); got != 3 {
		t.Fatalf("primary called %d times, want 3: an open breaker must not call it", got)
	}
	// The primary comes back; after the open period, probes close the breaker.
	f.primary.set(nil, false, false)
	f.clock.Advance(time.Second)
	for i := range 2 {
		_, o := f.allow(t, p, "u1", 1)
		if o.Degraded {
			t.Fatalf("probe %d degraded: %+v", i, o)
		}
	}
	if f.store.BreakerState() != fallback.BreakerClosed {
		t.Fatalf("breaker %v after 2 successful probes, want closed", f.store.BreakerState())
	}
	want := []fallback.BreakerState{fallback.BreakerClosed, fallback.BreakerOpen, fallback.BreakerHalfOpen, fallback.BreakerClosed}
	if fmt.Sprint(f.rec.states) != fmt.Sprint(want) {
		t.Fatalf("observed breaker states %v, want %v", f.rec.states, want)
	}
}

func TestHalfOpenLetsOnlyATrickle(t *testing.T) {
	f := newFixture(t, fallback.Options{Breaker: fallback.BreakerOptions{
		FailureThreshold: 1, OpenFor: time.Second, Jitter: -1, HalfOpenProbes: 2, ProbeSuccesses: 100,
	}})
	p := mustPolicy(t)(floodgate.NewFixedWindow("api", 1_000_000, time.Hour))
	f.primary.set(errors.New("down"), false, false)
	f.allow(t, p, "u1", 1)
	// Half-open with a primary that hangs for the budget: of 100 concurrent
	// callers, only the 2 probes may reach it.
	f.primary.set(nil, false, true)
	f.clock.Advance(time.Second)
	before := f.primary.calls.Load()
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.lim.Allow(context.Background(), p, fmt.Sprint("u", i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got := f.primary.calls.Load() - before; got < 1 || got > 2 {
		t.Fatalf("%d calls reached the primary while half-open, want 1..2", got)
	}
}

func TestCallerErrorsPassThrough(t *testing.T) {
	f := newFixture(t, fallback.Options{Breaker: fallback.BreakerOptions{FailureThreshold: 1}})
	f.primary.set(fmt.Errorf("%w: key too long", floodgate.ErrInvalidKey), false, false)
	p := mustPolicy(t)(floodgate.NewFixedWindow("api", 10, time.Hour))
	for range 3 {
		if _, err := f.lim.Allow(context.Background(), p, "u1"); !errors.Is(err, floodgate.ErrInvalidKey) {
			t.Fatalf("err %v, want ErrInvalidKey passed through", err)
		}
	}
	if f.store.BreakerState() != fallback.BreakerClosed || f.rec.count("local/error") != 0 {
		t.Fatal("an invalid request tripped the breaker or was counted as a fallback")
	}
	// A cancelled caller gets an error, not a fallback decision.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f.primary.set(nil, false, false)
	if _, err := f.lim.Allow(ctx, p, "u1"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: err %v, want context.Canceled", err)
	}
	if f.primary.calls.Load() != 3 {
		t.Fatal("a cancelled caller reached the primary")
	}
	// Layers the store cannot take are refused before anything happens.
	err := f.store.Decide(context.Background(), 1, nil, nil)
	if !errors.Is(err, floodgate.ErrInvalidLayers) {
		t.Fatalf("no layers: %v", err)
	}
}

func TestLocalFailureIsReported(t *testing.T) {
	primary := newScripted(t)
	primary.set(fmt.Errorf("%w: down", floodgate.ErrStoreUnavailable), false, false)
	// The memory store no longer fails when full (it evicts): the local
	// store here fails the decisions of one identity.
	inner, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	local := &partitioned{inner: inner, bad: "u2"}
	st, err := fallback.New(primary, local, fallback.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.New(st, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := mustPolicy(t)(floodgate.NewFixedWindow("api", 10, time.Hour))
	if _, err := lim.Allow(context.Background(), p, "u1"); err != nil {
		t.Fatal(err)
	}
	_, err = lim.Allow(context.Background(), p, "u2")
	if !errors.Is(err, floodgate.ErrStoreUnavailable) || !strings.Contains(err.Error(), "node down") {
		t.Fatalf("failing local store: %v, want ErrStoreUnavailable with the local error", err)
	}
}

// partitioned fails the keys of one partition only.
type partitioned struct {
	inner *memstore.Store
	bad   string // keys containing this fail
	calls atomic.Int64
}

func (p *partitioned) Decide(ctx context.Context, now int64, layers []floodgate.Layer, out []floodgate.Result) error {
	p.calls.Add(1)
	if strings.Contains(layers[0].Key, p.bad) {
		return fmt.Errorf("%w: node down", floodgate.ErrStoreUnavailable)
	}
	return p.inner.Decide(ctx, now, layers, out)
}

func TestPartitionedBreakers(t *testing.T) {
	inner, _ := memstore.New(memstore.Options{})
	local, _ := memstore.New(memstore.Options{})
	primary := &partitioned{inner: inner, bad: "{rnodeA"}
	rec := &recorder{}
	st, err := fallback.New(primary, local, fallback.Options{
		Observer: rec,
		Breaker:  fallback.BreakerOptions{FailureThreshold: 2, OpenFor: time.Hour},
		Partition: func(_ context.Context, key string) string {
			if strings.Contains(key, "{rnodeA") {
				return "A"
			}
			return "B"
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	lim, _ := floodgate.New(st, floodgate.Options{})
	p := mustPolicy(t)(floodgate.NewFixedWindow("api", 100, time.Hour))
	for i := range 10 {
		var o fallback.Outcome
		ctx := fallback.NewContext(context.Background(), &o)
		if _, err := lim.Allow(ctx, p, fmt.Sprint("nodeA-", i)); err != nil || !o.Degraded {
			t.Fatalf("partition A request %d: %v, %+v; want degraded", i, err, o)
		}
		if _, err := lim.Allow(ctx, p, fmt.Sprint("nodeB-", i)); err != nil || o.Degraded {
			t.Fatalf("partition B request %d: %v, %+v; want central", i, err, o)
		}
	}
	states := st.BreakerStates()
	if states["A"] != fallback.BreakerOpen || states["B"] != fallback.BreakerClosed || st.BreakerState() != fallback.BreakerOpen {
		t.Fatalf("breaker states %v (worst %v), want A open, B closed", states, st.BreakerState())
	}
	if got := primary.calls.Load(); got != 12 {
		t.Fatalf("primary called %d times, want 10 for B + 2 for A before its breaker opened", got)
	}
}

// TestBackgroundProbesCloseTheBreaker: with Options.Probe, an open breaker
// sends no request to the primary (every decision is local at once), and
// background probes close it soon after the primary is healthy again,
// however long it was down: no open period doubling up to 30s.
func TestBackgroundProbesCloseTheBreaker(t *testing.T) {
	var healthy atomic.Bool
	var probes atomic.Int64
	f := newFixture(t, fallback.Options{
		Now: time.Now,
		Breaker: fallback.BreakerOptions{FailureThreshold: 3, ProbeInterval: 5 * time.Millisecond, ProbeSuccesses: 3,
			OpenFor: time.Second, MaxOpenFor: time.Hour},
		Probe: func(ctx context.Context, partition string) error {
			probes.Add(1)
			if partition != fallback.DefaultPartition {
				t.Errorf("probe of partition %q", partition)
			}
			if !healthy.Load() {
				return errors.New("down")
			}
			return nil
		},
	})
	t.Cleanup(f.store.Close)
	p := mustPolicy(t)(floodgate.NewFixedWindow("api", 1000, time.Hour))
	f.primary.set(fmt.Errorf("%w: refused", floodgate.ErrStoreUnavailable), false, false)
	for range 3 {
		f.allow(t, p, "u1", 1)
	}
	if f.store.BreakerState() != fallback.BreakerOpen {
		t.Fatalf("breaker %v after 3 failures", f.store.BreakerState())
	}
	f.primary.set(nil, false, false) // back, but only probes may find out
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		if _, o := f.allow(t, p, "u1", 1); o.Reason != fallback.ReasonBreakerOpen {
			t.Fatalf("outcome %+v while open and probes fail", o)
		}
		time.Sleep(time.Millisecond)
	}
	if got := f.primary.calls.Load(); got != 3 {
		t.Fatalf("primary called %d times, want 3: requests are not probes", got)
	}
	if n := probes.Load(); n < 5 {
		t.Fatalf("%d background probes in 300ms at a 5ms interval", n)
	}
	healthy.Store(true)
	start := time.Now()
	for f.store.BreakerState() != fallback.BreakerClosed {
		if time.Since(start) > 10*time.Second {
			t.Fatal("breaker still open 10s after the probes started succeeding")
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("closed %v after the primary was healthy (3 probes at 5ms)", time.Since(start))
	if _, o := f.allow(t, p, "u1", 1); o.Degraded {
		t.Fatalf("decision after closing degraded: %+v", o)
	}
	f.store.Close()
	f.store.Close()
}

// TestCallGoesThroughTheBreaker: Store.Call counts failures toward
// opening the breaker, refuses at once while it is open, and ignores
// caller errors.
func TestCallGoesThroughTheBreaker(t *testing.T) {
	f := newFixture(t, fallback.Options{Breaker: fallback.BreakerOptions{FailureThreshold: 2, OpenFor: time.Hour}})
	ctx := context.Background()
	calls := 0
	bad := func(context.Context) error { calls++; return fmt.Errorf("%w: nope", floodgate.ErrInvalidKey) }
	foreign := func(context.Context) error {
		calls++
		return fmt.Errorf("%w: %w: WRONGTYPE", floodgate.ErrStoreUnavailable, floodgate.ErrForeignValue)
	}
	down := func(context.Context) error { calls++; return errors.New("connection refused") }
	for range 5 {
		if err := f.store.Call(ctx, "", bad); !errors.Is(err, floodgate.ErrInvalidKey) {
			t.Fatalf("Call = %v", err)
		}
		// One key holding what floodgate did not write (a tiers hash set
		// as a string, say) says nothing about Redis's health.
		if err := f.store.Call(ctx, "", foreign); !errors.Is(err, floodgate.ErrForeignValue) {
			t.Fatalf("Call = %v", err)
		}
	}
	if f.store.BreakerState() != fallback.BreakerClosed {
		t.Fatal("caller errors or foreign values opened the breaker")
	}
	_ = f.store.Call(ctx, "", down)
	_ = f.store.Call(ctx, "k", down)
	if f.store.BreakerState() != fallback.BreakerOpen {
		t.Fatalf("breaker %v after 2 failed calls", f.store.BreakerState())
	}
	before := calls
	if err := f.store.Call(ctx, "", down); !errors.Is(err, fallback.ErrBreakerOpen) || calls != before {
		t.Fatalf("Call while open = %v (fn called %d times), want ErrBreakerOpen without a call", err, calls-before)
	}
	// Successful calls do not vouch for the primary: with reads working
	// and every decision failing (Redis out of memory), the breaker opens.
	g := newFixture(t, fallback.Options{})
	g.primary.set(fmt.Errorf("%w: OOM command not allowed", floodgate.ErrStoreUnavailable), false, false)
	q := mustPolicy(t)(floodgate.NewFixedWindow("api", 10, time.Hour))
	for i := 0; g.store.BreakerState() != fallback.BreakerOpen; i++ {
		if i == 10 {
			t.Fatal("breaker still closed after 10 failed decisions between successful reads")
		}
		for range 2 { // two reads per decision, as a tiered policy's lookups can be
			_ = g.store.Call(ctx, "", func(context.Context) error { return nil })
		}
		g.allow(t, q, "u1", 1)
	}
	// Decisions see the same breaker.
	p := mustPolicy(t)(floodgate.NewFixedWindow("api", 10, time.Hour))
	if _, o := f.allow(t, p, "u1", 1); o.Reason != fallback.ReasonBreakerOpen {
		t.Fatalf("decision after Call failures: %+v, want breaker_open", o)
	}
}

// TestCallNilFunction: Call with a nil fn returns an error saying so, for
// the shared breaker and a key's alike, and leaves the breaker as it was
// (it used to panic).
func TestCallNilFunction(t *testing.T) {
	f := newFixture(t, fallback.Options{Breaker: fallback.BreakerOptions{FailureThreshold: 1, OpenFor: time.Hour}})
	for _, key := range []string{"", "k"} {
		if err := f.store.Call(context.Background(), key, nil); err == nil || !strings.Contains(err.Error(), "nil function") {
			t.Errorf("Call(%q, nil) = %v, want an error naming the nil function", key, err)
		}
	}
	if f.store.BreakerState() != fallback.BreakerClosed {
		t.Fatalf("breaker %v after nil calls, want closed", f.store.BreakerState())
	}
}

// TestSetInstancesAndModeFor: the local limit follows SetInstances, and
// ModeFor overrides Modes at every decision.
func TestSetInstancesAndModeFor(t *testing.T) {
	var mode atomic.Value
	mode.Store(fallback.Mode(0))
	f := newFixture(t, fallback.Options{Breaker: fallback.BreakerOptions{FailureThreshold: 1, OpenFor: time.Hour},
		ModeFor: func(string) fallback.Mode { return mode.Load().(fallback.Mode) }})
	p := mustPolicy(t)(floodgate.NewFixedWindow("api", 100, time.Hour))
	f.primary.set(errors.New("down"), false, false)
	f.store.SetInstances(4)
	if got := f.store.Instances(); got != 4 {
		t.Fatalf("Instances() = %d", got)
	}
	r, o := f.allow(t, p, "u1", 1)
	if !o.Degraded || o.Mode != fallback.ModeLocal || r.Limit != 25 {
		t.Fatalf("local decision with 4 instances: limit %d, outcome %+v; want 25, local", r.Limit, o)
	}
	f.store.SetInstances(0)
	if got := f.store.Instances(); got != 1 {
		t.Fatalf("SetInstances(0) gave %d, want 1", got)
	}
	mode.Store(fallback.ModeClosed)
	if r, o := f.allow(t, p, "u2", 1); r.Allowed || o.Mode != fallback.ModeClosed {
		t.Fatalf("ModeFor closed: allowed %v, outcome %+v", r.Allowed, o)
	}
}

// TestSpendBudget: time that earlier calls of a request spent (a tier
// lookup) comes out of the next decision's budget; when none is left the
// failure mode decides at once without calling the primary, which is not
// blamed again. Spending is taken by one decision only.
func TestSpendBudget(t *testing.T) {
	const budget = 10 * time.Second // long: only a spent budget ends the hanging call below at once
	f := newFixture(t, fallback.Options{Budget: budget})
	p := mustPolicy(t)(floodgate.NewFixedWindow("api", 10, time.Hour))
	f.primary.set(nil, false, true) // the primary hangs until its context ends

	var o fallback.Outcome
	ctx := fallback.NewContext(context.Background(), &o)
	fallback.SpendBudget(ctx, budget/2)
	fallback.SpendBudget(ctx, budget/2) // spending adds up
	res, err := f.lim.Allow(ctx, p, "u1")
	if err != nil {
		t.Fatal(err)
	}
	if calls := f.primary.calls.Load(); calls != 0 {
		t.Fatalf("the primary was called %d times with the whole budget spent", calls)
	}
	if !res.Allowed || !o.Degraded || o.Mode != fallback.ModeLocal || o.Reason != fallback.ReasonTimeout {
		t.Fatalf("%+v, outcome %+v; want a local decision for a spent budget", res, o)
	}
	if got := f.rec.count("local/timeout"); got != 1 {
		t.Fatalf("local/timeout fallbacks = %d, want 1", got)
	}
	if s := f.store.BreakerState(); s != fallback.BreakerClosed {
		t.Fatalf("breaker %v: a spent budget must not count against the primary", s)
	}

	// The next decision with the same context has its whole budget.
	f.primary.set(nil, false, false)
	if _, err := f.lim.Allow(ctx, p, "u1"); err != nil {
		t.Fatal(err)
	}
	if calls := f.primary.calls.Load(); calls != 1 || o.Degraded {
		t.Fatalf("after the spent decision: %d primary calls, outcome %+v; want the primary to decide", calls, o)
	}

	// Part of the budget spent: the primary is called with the second left.
	fallback.SpendBudget(ctx, budget-time.Second)
	if _, err := f.lim.Allow(ctx, p, "u1"); err != nil {
		t.Fatal(err)
	}
	if calls := f.primary.calls.Load(); calls != 2 || o.Degraded {
		t.Fatalf("with a second left: %d primary calls, outcome %+v; want the primary to decide", calls, o)
	}
	if d := f.primary.lastBound(); d <= 0 || d > time.Second {
		t.Fatalf("the call had %v left; want at most the second the lookup left", d)
	}

	// Without an Outcome in the context, spending does nothing.
	fallback.SpendBudget(context.Background(), budget)
	if _, err := f.lim.Allow(context.Background(), p, "u2"); err != nil {
		t.Fatal(err)
	}
	if calls := f.primary.calls.Load(); calls != 3 {
		t.Fatalf("%d primary calls; want the decision without an Outcome made by the primary", calls)
	}
}

// forgetter is a recorder that also records forgotten partitions.
type forgetter struct {
	recorder
	mu        sync.Mutex
	forgotten []string
}

func (f *forgetter) ForgetBreaker(partition string) {
	f.mu.Lock()
	f.forgotten = append(f.forgotten, partition)
	f.mu.Unlock()
}

// TestGonePartitionIsForgotten: a partition whose probe says it is gone
// (ErrPartitionGone: a Cluster primary failed over to its replica, no
// longer in the slot map) has its breaker closed and dropped, and the
// observer told, so that readiness and the breaker metric stop listing a
// node that serves nothing (they listed it "closed" for ever). The other
// partitions stay.
func TestGonePartitionIsForgotten(t *testing.T) {
	inner, _ := memstore.New(memstore.Options{})
	local, _ := memstore.New(memstore.Options{})
	primary := &partitioned{inner: inner, bad: "{rnodeA"}
	var gone atomic.Bool
	obs := &forgetter{}
	st, err := fallback.New(primary, local, fallback.Options{
		Observer: obs,
		Breaker:  fallback.BreakerOptions{FailureThreshold: 2, ProbeInterval: 5 * time.Millisecond, ProbeSuccesses: 3},
		Partition: func(_ context.Context, key string) string {
			if strings.Contains(key, "{rnodeA") {
				return "A"
			}
			return "B"
		},
		Probe: func(_ context.Context, partition string) error {
			if partition == "A" && gone.Load() {
				return fmt.Errorf("%w: A left the slot map", fallback.ErrPartitionGone)
			}
			if partition == "A" {
				return errors.New("A down")
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	lim, _ := floodgate.New(st, floodgate.Options{})
	p := mustPolicy(t)(floodgate.NewFixedWindow("api", 100, time.Hour))
	for i := range 4 {
		_, _ = lim.Allow(context.Background(), p, fmt.Sprint("nodeA-", i))
		_, _ = lim.Allow(context.Background(), p, fmt.Sprint("nodeB-", i))
	}
	if s := st.BreakerStates(); s["A"] != fallback.BreakerOpen || s["B"] != fallback.BreakerClosed {
		t.Fatalf("breaker states %v, want A open, B closed", s)
	}
	time.Sleep(30 * time.Millisecond) // probes keep failing: A stays
	if _, ok := st.BreakerStates()["A"]; !ok {
		t.Fatal("partition A dropped while its probes only failed")
	}
	gone.Store(true)
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := st.BreakerStates()
		if _, ok := s["A"]; !ok {
			if s["B"] != fallback.BreakerClosed {
				t.Fatalf("breaker states %v after A was forgotten, want B still closed", s)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("partition A still listed 10 s after its probe said it is gone: %v", s)
		}
		time.Sleep(5 * time.Millisecond)
	}
	obs.mu.Lock()
	forgotten := append([]string(nil), obs.forgotten...)
	obs.mu.Unlock()
	if len(forgotten) != 1 || forgotten[0] != "A" {
		t.Fatalf("observer told to forget %v, want [A]", forgotten)
	}
	if st.BreakerState() != fallback.BreakerClosed {
		t.Fatalf("worst breaker state %v after A was forgotten", st.BreakerState())
	}
}

// TestSweepDropsOnlyClosedGonePartitions: Options.Partitions drops the
// closed breaker of a partition it no longer lists, keeps an open one (its
// probe decides) and a listed one, and an empty or failed listing drops
// nothing.
func TestSweepDropsOnlyClosedGonePartitions(t *testing.T) {
	inner, _ := memstore.New(memstore.Options{})
	local, _ := memstore.New(memstore.Options{})
	primary := &partitioned{inner: inner, bad: "{rnodeA"}
	var mu sync.Mutex
	listed, failing := []string{"A", "B", "C"}, false
	obs := &forgetter{}
	st, err := fallback.New(primary, local, fallback.Options{
		Observer: obs,
		Breaker:  fallback.BreakerOptions{FailureThreshold: 1, OpenFor: time.Hour},
		Partition: func(_ context.Context, key string) string {
			for _, p := range []string{"A", "B", "C"} {
				if strings.Contains(key, "{rnode"+p) {
					return p
				}
			}
			return ""
		},
		Partitions: func(context.Context) ([]string, error) {
			mu.Lock()
			defer mu.Unlock()
			if failing {
				return nil, errors.New("cluster unreachable")
			}
			return append([]string(nil), listed...), nil
		},
		PartitionSweep: 5 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	lim, _ := floodgate.New(st, floodgate.Options{})
	p := mustPolicy(t)(floodgate.NewFixedWindow("api", 100, time.Hour))
	for _, id := range []string{"nodeA-1", "nodeB-1", "nodeC-1"} {
		_, _ = lim.Allow(context.Background(), p, id)
	}
	if s := st.BreakerStates(); s["A"] != fallback.BreakerOpen || s["B"] != fallback.BreakerClosed || s["C"] != fallback.BreakerClosed {
		t.Fatalf("breaker states %v, want A open, B and C closed", s)
	}
	set := func(l []string, fail bool) {
		mu.Lock()
		listed, failing = l, fail
		mu.Unlock()
	}
	set(nil, false) // empty: taken for a failed listing
	time.Sleep(50 * time.Millisecond)
	set([]string{"A"}, true)
	time.Sleep(50 * time.Millisecond)
	if s := st.BreakerStates(); len(s) != 4 {
		t.Fatalf("breaker states %v after empty and failed listings, want all kept", s)
	}
	set([]string{"B"}, false) // A and C gone
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := st.BreakerStates()
		_, hasC := s["C"]
		if !hasC {
			if s["A"] != fallback.BreakerOpen || s["B"] != fallback.BreakerClosed {
				t.Fatalf("breaker states %v, want A (open) and B kept", s)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("C still listed: %v", s)
		}
		time.Sleep(5 * time.Millisecond)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if fmt.Sprint(obs.forgotten) != "[C]" {
		t.Fatalf("forgotten %v, want [C]", obs.forgotten)
	}
}

// TestCallWriteVouches: successful writes (CallWrite reporting wrote)
// keep the breaker closed through scattered failures, as decisions do;
// a CallWrite success that wrote nothing is neutral, as Call's is.
func TestCallWriteVouches(t *testing.T) {
	ctx := context.Background()
	down := func(context.Context) (bool, error) { return false, errors.New("i/o timeout") }
	for _, c := range []struct {
		name  string
		wrote bool
		want  fallback.BreakerState
	}{
		{"wrote", true, fallback.BreakerClosed},
		{"wrote nothing", false, fallback.BreakerOpen},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, fallback.Options{Breaker: fallback.BreakerOptions{OpenFor: time.Hour}})
			ok := func(context.Context) (bool, error) { return c.wrote, nil }
			for range 15 {
				for range 3 {
					if err := f.store.CallWrite(ctx, "", ok); err != nil && !errors.Is(err, fallback.ErrBreakerOpen) {
						t.Fatal(err)
					}
				}
				_ = f.store.CallWrite(ctx, "", down)
			}
			if got := f.store.BreakerState(); got != c.want {
				t.Fatalf("breaker %v after 15 scattered failures among successes, want %v", got, c.want)
			}
		})
	}
	f := newFixture(t, fallback.Options{})
	if err := f.store.CallWrite(ctx, "", nil); err == nil || !strings.Contains(err.Error(), "nil function") {
		t.Errorf("CallWrite(nil) = %v, want an error naming the nil function", err)
	}
}
