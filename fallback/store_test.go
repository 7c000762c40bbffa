package fallback_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/memstore"
)

// scripted is a primary store for unit tests: it decides with a memstore
// unless told to fail, and counts the calls it receives.
type scripted struct {
	inner *memstore.Store
	calls atomic.Int64
	mu    sync.Mutex
	fail  error         // returned (after the inner decision when applied) if set
	apply bool          // apply the decision before failing (an indeterminate failure)
	hang  bool          // block until the context ends
	bound time.Duration // the time left to the last call's deadline
}

// lastBound returns the time the last call had left to its deadline when
// it started (0 without a deadline).
func (s *scripted) lastBound() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bound
}

func newScripted(t *testing.T) *scripted {
	t.Helper()
	m, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &scripted{inner: m}
}

func (s *scripted) set(fail error, apply, hang bool) {
	s.mu.Lock()
	s.fail, s.apply, s.hang = fail, apply, hang
	s.mu.Unlock()
}

func (s *scripted) Decide(ctx context.Context, now int64, layers []floodgate.Layer, out []floodgate.Result) error {
	s.calls.Add(1)
	s.mu.Lock()
	s.bound = 0
	if d, ok := ctx.Deadline(); ok {
		s.bound = time.Until(d)
	}
	fail, apply, hang := s.fail, s.apply, s.hang
	s.mu.Unlock()
	if hang {
		<-ctx.Done()
		return fmt.Errorf("%w: waiting for reply: %w", floodgate.ErrIndeterminate, ctx.Err())
	}
	if fail == nil || apply {
		if err := s.inner.Decide(ctx, now, layers, out); err != nil {
			return err
		}
	}
	return fail
}

// recorder implements fallback.Observer and the OnFallback hook.
type recorder struct {
	mu        sync.Mutex
	primary   int
	fallbacks map[string]int // "mode/reason"
	states    []fallback.BreakerState
	hooked    []fallback.Reason
	hookErrs  []error
}

func (r *recorder) ObservePrimary(time.Duration, error) {
	r.mu.Lock()
	r.primary++
	r.mu.Unlock()
}

func (r *recorder) ObserveFallback(m fallback.Mode, reason fallback.Reason) {
	r.mu.Lock()
	if r.fallbacks == nil {
		r.fallbacks = map[string]int{}
	}
	r.fallbacks[m.String()+"/"+reason.String()]++
	r.mu.Unlock()
}

func (r *recorder) ObserveBreaker(partition string, s fallback.BreakerState) {
	r.mu.Lock()
	r.states = append(r.states, s)
	r.mu.Unlock()
}

func (r *recorder) hook(reason fallback.Reason, err error) {
	r.mu.Lock()
	r.hooked = append(r.hooked, reason)
	r.hookErrs = append(r.hookErrs, err)
	r.mu.Unlock()
}

func (r *recorder) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fallbacks[key]
}

type fixture struct {
	primary *scripted
	local   *memstore.Store
	store   *fallback.Store
	lim     *floodgate.Limiter
	rec     *recorder
	clock   *clock
}

// clock is a settable breaker clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newFixture(t *testing.T, opts fallback.Options) *fixture {
	t.Helper()
	f := &fixture{primary: newScripted(t), rec: &recorder{}, clock: &clock{t: time.Now()}}
	var err error
	if f.local, err = memstore.New(memstore.Options{}); err != nil {
		t.Fatal(err)
	}
	opts.Observer = f.rec
	opts.OnFallback = f.rec.hook
	if opts.Now == nil {
		opts.Now = f.clock.Now
	}
	if f.store, err = fallback.New(f.primary, f.local, opts); err != nil {
		t.Fatal(err)
	}
	if f.lim, err = floodgate.New(f.store, floodgate.Options{Prefix: "fb"}); err != nil {
		t.Fatal(err)
	}
	return f
}

// mustPolicy returns a function that fails t on a constructor's error, so
// that mustPolicy(t)(floodgate.NewFixedWindow(...)) reads as one call.
func mustPolicy(t *testing.T) func(floodgate.Policy, error) floodgate.Policy {
	return func(p floodgate.Policy, err error) floodgate.Policy {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
}

// allow decides one request and returns its result and outcome.
func (f *fixture) allow(t *testing.T, p floodgate.Policy, id string, cost int64) (floodgate.Result, fallback.Outcome) {
	t.Helper()
	var o fallback.Outcome
	res, err := f.lim.AllowN(fallback.NewContext(context.Background(), &o), p, id, cost)
	if err != nil {
		t.Fatalf("AllowN(%s, %q, %d): %v", p.Name, id, cost, err)
	}
	return res, o
}

func TestHealthyPrimaryDecides(t *testing.T) {
	f := newFixture(t, fallback.Options{})
	p := mustPolicy(t)(floodgate.NewFixedWindow("api", 3, time.Hour))
	for i := range 4 {
		res, o := f.allow(t, p, "u1", 1)
		if res.Allowed != (i < 3) || o.Degraded || o.Reason != fallback.ReasonNone || o.Err != nil {
			t.Fatalf("request %d: %+v, outcome %+v", i, res, o)
		}
	}
	if n := f.local.Len(); n != 0 {
		t.Fatalf("local store holds %d identities while the primary is healthy", n)
	}
	if f.rec.primary != 4 {
		t.Fatalf("observer saw %d primary calls, want 4", f.rec.primary)
	}
}

func TestLocalModeWidensPerInstance(t *testing.T) {
	// 10 instances, factor 2: each instance admits ceil(100/10×2) = 20.
	f := newFixture(t, fallback.Options{Instances: 10, Factor: 2, Breaker: fallback.BreakerOptions{FailureThreshold: 1000, FailureRate: -1}})
	f.primary.set(fmt.Errorf("%w: dial tcp: connection refused", floodgate.ErrStoreUnavailable), false, false)
	p := mustPolicy(t)(floodgate.NewSlidingWindow("api", 100, time.Hour))
	admitted := 0
	for range 30 {
		res, o := f.allow(t, p, "u1", 1)
		if !o.Degraded || o.Mode != fallback.ModeLocal || o.Reason != fallback.ReasonUnavailable {
			t.Fatalf("outcome %+v, want degraded local unavailable", o)
		}
		if res.Limit != 20 {
			t.Fatalf("local limit %d, want 20", res.Limit)
		}
		if res.Allowed {
			admitted++
		}
	}
	if admitted != 20 {
		t.Fatalf("admitted %d in local mode, want 20", admitted)
	}
	if got := f.rec.count("local/unavailable"); got != 30 {
		t.Fatalf("observed %d local/unavailable fallbacks, want 30", got)
	}
	if len(f.rec.hooked) != 30 || !errors.Is(f.rec.hookErrs[0], floodgate.ErrStoreUnavailable) {
		t.Fatalf("hook called %d times (first error %v), want 30 with the primary's error", len(f.rec.hooked), f.rec.hookErrs)
	}
}

func TestModesPerPolicy(t *testing.T) {
	f := newFixture(t, fallback.Options{
		Modes:   map[string]fallback.Mode{"login": fallback.ModeClosed, "bulk": fallback.ModeOpen},
		Breaker: fallback.BreakerOptions{FailureThreshold: 5, OpenFor: 3 * time.Second, Jitter: -1},
	})
	f.primary.set(errors.New("boom"), false, false)
	login := mustPolicy(t)(floodgate.NewFixedWindow("login", 5, time.Minute))
	bulk := mustPolicy(t)(floodgate.NewTokenBucket("bulk", 2, time.Minute, 0))

	res, o := f.allow(t, login, "alice", 1)
	if res.Allowed || res.Reason != floodgate.ReasonLimited || res.RetryAfter <= 0 || o.Mode != fallback.ModeClosed || o.Reason != fallback.ReasonError {
		t.Fatalf("closed: %+v, outcome %+v; want denied with a retry hint, mode closed, reason error", res, o)
	}
	for i := range 10 {
		res, o = f.allow(t, bulk, "bob", 2)
		if !res.Allowed || res.Remaining != 0 || o.Mode != fallback.ModeOpen {
			t.Fatalf("open request %d: %+v, outcome %+v; want admitted", i, res, o)
		}
	}
	res, o = f.allow(t, bulk, "bob", 3)
	if res.Allowed || res.Reason != floodgate.ReasonCostExceedsLimit {
		t.Fatalf("open mode, cost above capacity: %+v, want denied cost_exceeds_limit", res)
	}
	// Open the breaker (5 failures so far... make sure), then a closed
	// decision's RetryAfter is the time until the next probe.
	for range 5 {
		f.allow(t, bulk, "bob", 1)
	}
	if st := f.store.BreakerState(); st != fallback.BreakerOpen {
		t.Fatalf("breaker %v after repeated failures, want open", st)
	}
	f.clock.Advance(time.Second)
	res, o = f.allow(t, login, "alice", 1)
	if res.RetryAfter != 2*time.Second || o.Reason != fallback.ReasonBreakerOpen || !errors.Is(o.Err, fallback.ErrBreakerOpen) {
		t.Fatalf("closed while open: retry %v, outcome %+v; want 2s, breaker_open", res.RetryAfter, o)
	}
	if f.local.Len() != 0 {
		t.Fatalf("open and closed modes wrote %d identities to the local store", f.local.Len())
	}
}

func TestMixedLayers(t *testing.T) {
	f := newFixture(t, fallback.Options{Modes: map[string]fallback.Mode{"billing": fallback.ModeClosed, "edge": fallback.ModeOpen}})
	f.primary.set(fmt.Errorf("%w: reset", floodgate.ErrStoreUnavailable), false, false)
	edge := mustPolicy(t)(floodgate.NewFixedWindow("edge", 1000, time.Minute))
	user := mustPolicy(t)(floodgate.NewSlidingWindow("user", 2, time.Minute))
	billing := mustPolicy(t)(floodgate.NewFixedWindow("billing", 100, time.Hour))
	ctx := context.Background()

	// edge (open) + user (local): local decides the user layer, all or nothing.
	for i := range 3 {
		var o fallback.Outcome
		d, err := f.lim.AllowLayers(fallback.NewContext(ctx, &o), 1,
			floodgate.LayerSpec{Policy: edge, Identity: "global"}, floodgate.LayerSpec{Policy: user, Identity: "u1"})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != (i < 2) || o.Mode != fallback.ModeLocal {
			t.Fatalf("request %d: allowed %v mode %v, want %v local", i, d.Allowed, o.Mode, i < 2)
		}
		if i == 2 && (d.Binding != 1 || d.Layers[0].Reason != floodgate.ReasonOtherLayer) {
			t.Fatalf("denied decision: binding %d, layers %+v; want the user layer binding", d.Binding, d.Layers)
		}
	}
	// Any closed layer closes the whole decision and consumes nothing locally.
	before := f.local.Len()
	var o fallback.Outcome
	d, err := f.lim.AllowLayers(fallback.NewContext(ctx, &o), 1,
		floodgate.LayerSpec{Policy: user, Identity: "u2"}, floodgate.LayerSpec{Policy: billing, Identity: "u2"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.Binding != 1 || d.Layers[0].Reason != floodgate.ReasonOtherLayer || o.Mode != fallback.ModeClosed {
		t.Fatalf("closed layer: %+v, outcome %+v", d, o)
	}
	if f.local.Len() != before {
		t.Fatal("a closed decision wrote to the local store")
	}
	// An open layer whose cost can never pass makes the local layers peek.
	d, err = f.lim.AllowLayers(ctx, 1,
		floodgate.LayerSpec{Policy: edge, Identity: "global", Cost: 5000}, floodgate.LayerSpec{Policy: user, Identity: "u3"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.Layers[1].Remaining != 2 {
		t.Fatalf("open layer over capacity: %+v; want denied and the local layer untouched", d)
	}
}
