package fallback

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/degraded"
)

// init tells package degraded which stores write their failure modes'
// decisions to its Outcome (httplimit reads it without importing this
// package).
func init() {
	degraded.SetReporter(func(store any) bool {
		s, ok := store.(*Store)
		return ok && s != nil
	})
}

// Outcome tells how one decision was taken. Attach one to the context with
// NewContext before calling the Limiter; Store.Decide fills it in.
//
// A degraded result is an ordinary floodgate.Result: in ModeOpen it is
// allowed with Remaining computed as if the identity were fresh; in
// ModeClosed it is denied with floodgate.ReasonLimited and RetryAfter the
// earliest the breaker can close (see ModeClosed); in ModeLocal it is the local
// store's result, whose Limit is the widened local limit. Outcome is how a
// caller tells these apart from the primary's decisions, for example to add
// a response header or skip billing.
type Outcome struct {
	// Degraded reports that the failure mode, not the primary store,
	// took the decision.
	Degraded bool
	// Mode is the failure mode applied: the strictest of the layers' modes
	// (closed, then local, then open). Zero when not degraded.
	Mode Mode
	// Reason says why the primary did not decide. ReasonNone when it did.
	Reason Reason
	// Err is the primary's error (ErrBreakerOpen when it was not called
	// because the breaker is open, ErrBudgetSpent when earlier calls of
	// the same request had used the budget), or, when Decide returned an
	// error, that error. Nil on success.
	Err error

	// spent is the part of the next decision's budget that earlier calls
	// of the same request used (SpendBudget); Decide takes it.
	spent time.Duration
	// failed is, in a request's Outcome (NewRequestContext), the time the
	// failed primary calls of its decisions and Store.Call calls took,
	// MaxBudget once a call of the request timed out. It comes out of the
	// budget of each later decision of the request.
	failed time.Duration
	// counted is the part of failed that the request's failed Store.Call
	// calls since its last decision took: the caller spends their time
	// for that decision too (SpendBudget, as a tier lookup does), which
	// does not count it again.
	counted time.Duration
	// request marks the Outcome of NewRequestContext.
	request bool
}

// set records v as the outcome of a decision, which took what SpendBudget
// recorded, keeping what o holds for the request it belongs to.
func (o *Outcome) set(v Outcome) {
	v.failed, v.request = o.failed, o.request
	*o = v
}

// fail records a failed primary call of o's request that took d, or
// that timed out, which takes the whole budget: with Redis stalled, the
// request's later decisions do not wait again. It does nothing for an
// Outcome that is not a request's.
func (o *Outcome) fail(d time.Duration, timedOut bool) {
	if o == nil || !o.request {
		return
	}
	if timedOut {
		d = MaxBudget
	}
	o.failed = min(o.failed+max(d, 0), MaxBudget)
}

// failCall is fail for a failed Store.Call call, whose time the caller
// may also spend (SpendBudget) for the decision it serves.
func (o *Outcome) failCall(d time.Duration, timedOut bool) {
	if o == nil || !o.request {
		return
	}
	o.fail(d, timedOut)
	o.counted += max(d, 0)
}

// SpendBudget records that d of the budget of the next decision made with
// ctx went on earlier calls to the primary's backend for the same request
// (a tier lookup through Store.Call, say): that decision's call gets the
// budget less d, and when nothing is left it is taken by the failure mode
// at once (ReasonTimeout) without calling the primary, so that a stalled
// backend delays a request by one budget, not one per call. ctx must
// carry an Outcome (NewContext, NewOutcomeContext, NewRequestContext);
// otherwise SpendBudget does nothing. Calls add up until a decision takes
// them.
func SpendBudget(ctx context.Context, d time.Duration) {
	if o := outcomeFrom(ctx); o != nil && d > 0 {
		// The time of the request's failed Store.Call calls is in
		// o.failed already.
		n := min(d, o.counted)
		o.counted -= n
		o.spent += d - n
	}
}

type outcomeKey struct{}

// NewContext returns a copy of ctx carrying o, which Store.Decide
// overwrites with the outcome of each decision made with that context. o
// must not be shared by concurrent decisions.
func NewContext(ctx context.Context, o *Outcome) context.Context {
	return context.WithValue(ctx, outcomeKey{}, o)
}

// NewOutcomeContext returns a copy of ctx carrying a new Outcome, and that
// Outcome, as NewContext does, in one allocation instead of two.
func NewOutcomeContext(ctx context.Context) (context.Context, *Outcome) {
	c := &outcomeCtx{Context: ctx}
	return c, &c.o
}

// NewRequestContext is NewOutcomeContext for all the decisions of one
// request: the checks of a batch, the descriptors of an Envoy request
// decided one by one, a decision made again without its shadow layers.
// They share one budget for a failing primary: the time the request's
// failed primary calls took (its decisions' and its Store.Call calls')
// comes out of each later decision's budget, and a call that timed out
// takes all of it. Once it is used up, the request's
// remaining decisions are taken by the failure mode at once, with
// ReasonTimeout and ErrBudgetSpent, and its remaining Store.Call calls
// return ErrBudgetSpent, without calling the primary.
// A stalled primary then delays the request by one budget and counts one
// failure toward the breaker, not one per decision; a primary that
// answers is asked for every decision, as without it. Use a new one per
// request: nothing made with it after one of its calls timed out reaches
// the primary. The Outcome must not be shared by concurrent decisions.
func NewRequestContext(ctx context.Context) (context.Context, *Outcome) {
	c := &outcomeCtx{Context: ctx}
	c.o.request = true
	return c, &c.o
}

// outcomeCtx is a context carrying an Outcome it holds itself.
type outcomeCtx struct {
	context.Context
	o Outcome
}

// Value returns the Outcome for outcomeKey and asks the parent otherwise.
func (c *outcomeCtx) Value(key any) any {
	if key == (outcomeKey{}) {
		return &c.o
	}
	return c.Context.Value(key)
}

func outcomeFrom(ctx context.Context) *Outcome {
	o, _ := ctx.Value(outcomeKey{}).(*Outcome)
	return o
}

// Degraded is one decision taken by a failure mode, as Options.OnDegraded
// receives it.
type Degraded struct {
	// Layers are the decision's layers: each one's policy (in serve,
	// "policy.layer", or an Envoy descriptor's derived name), storage
	// key and cost. The slice is the caller's: read it during the call,
	// do not keep it or change it.
	Layers []floodgate.Layer
	// Mode is the failure mode applied, as Outcome.Mode: the strictest
	// of the layers' modes.
	Mode Mode
	// Reason says why the primary did not decide, as Outcome.Reason.
	Reason Reason
	// Err is the primary's error, as Outcome.Err and OnFallback's
	// (ErrBreakerOpen, ErrBudgetSpent when it was not called).
	Err error
}

// strictness orders modes: a decision over layers of several modes applies
// the strictest.
func strictness(m Mode) int {
	switch m {
	case ModeClosed:
		return 3
	case ModeLocal:
		return 2
	}
	return 1
}

// degrade decides by the failure mode after the primary failed (or was not
// called) for reason, whose error is cause.
func (s *Store) degrade(ctx context.Context, o *Outcome, br *breaker, now int64, layers []floodgate.Layer, out []floodgate.Result, reason Reason, cause error) error {
	var modes [floodgate.MaxLayers]Mode
	mode := ModeOpen
	for i, l := range layers {
		modes[i] = s.Mode(l.Policy.Name)
		if strictness(modes[i]) > strictness(mode) {
			mode = modes[i]
		}
	}
	switch mode {
	case ModeClosed:
		decideClosed(br, now, layers, modes[:len(layers)], out)
	case ModeLocal:
		if err := s.decideLocal(ctx, now, layers, modes[:len(layers)], out); err != nil {
			if errors.Is(err, floodgate.ErrInvalidPolicy) {
				// A LocalPolicy that returns an unusable policy is a
				// configuration error, not an outage: reported as such, a
				// caller that fails open on an unavailable store does not
				// stop limiting because of it.
				err = fmt.Errorf("fallback: local decision (primary: %v): %w", cause, err)
			} else {
				err = fmt.Errorf("%w: primary: %w; local: %w", floodgate.ErrStoreUnavailable, cause, err)
			}
			if o != nil {
				o.set(Outcome{Err: err})
			}
			return err
		}
	default:
		decideOpen(now, layers, out)
	}
	if s.obs != nil {
		s.obs.ObserveFallback(mode, reason)
	}
	if s.onFallback != nil {
		s.onFallback(reason, cause)
	}
	if s.onDegraded != nil {
		s.onDegraded(ctx, Degraded{Layers: layers, Mode: mode, Reason: reason, Err: cause})
	}
	if o != nil {
		o.set(Outcome{Degraded: true, Mode: mode, Reason: reason, Err: cause})
	}
	degraded.Note(ctx, degraded.Outcome{Degraded: true, Mode: mode.String(), Reason: reason.String(), Err: cause})
	return nil
}

// decideClosed denies: closed layers with ReasonLimited, the others are
// left admitting so that floodgate.NewDecision marks them ReasonOtherLayer.
func decideClosed(br *breaker, now int64, layers []floodgate.Layer, modes []Mode, out []floodgate.Result) {
	retry := br.retryHint().Microseconds()
	for i, l := range layers {
		if modes[i] == ModeClosed {
			out[i] = algo.ResultFromMicros(false, l.Policy.Capacity(), 0, now+retry, retry, 0, floodgate.ReasonLimited)
		} else {
			out[i] = openResult(now, l)
		}
	}
}

// decideOpen admits every layer whose cost fits its capacity.
func decideOpen(now int64, layers []floodgate.Layer, out []floodgate.Result) {
	for i, l := range layers {
		out[i] = openResult(now, l)
	}
}

// openResult is an open-mode result: admitted as if the identity were
// fresh, unless the cost can never pass.
func openResult(now int64, l floodgate.Layer) floodgate.Result {
	capacity := l.Policy.Capacity()
	if l.Cost > capacity {
		return algo.ResultFromMicros(false, l.Policy.Capacity(), capacity, now, 0, 0, floodgate.ReasonCostExceedsLimit)
	}
	return algo.ResultFromMicros(true, l.Policy.Capacity(), capacity-l.Cost, now, 0, 0, floodgate.ReasonNone)
}

// scratch holds a local decision's layers and results: passed to the
// local store through an interface, arrays on the stack would escape to
// the heap at every degraded decision (3 KB each).
type scratch struct {
	layers  [floodgate.MaxLayers]floodgate.Layer
	results [floodgate.MaxLayers]floodgate.Result
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// decideLocal decides the local-mode layers with the local store at their
// widened limits, all or nothing, and the open-mode layers as open. If an
// open-mode layer can never admit its cost, the local layers only peek.
func (s *Store) decideLocal(ctx context.Context, now int64, layers []floodgate.Layer, modes []Mode, out []floodgate.Result) error {
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	buf := &sc.layers
	var idx [floodgate.MaxLayers]int
	local := buf[:0]
	openDenied := false
	for i, l := range layers {
		if modes[i] != ModeLocal {
			out[i] = openResult(now, l)
			openDenied = openDenied || !out[i].Allowed
			continue
		}
		p, err := s.localPolicy(l.Policy)
		if err != nil {
			return err
		}
		idx[len(local)] = i
		local = append(local, floodgate.Layer{Policy: p, Key: l.Key, Cost: l.Cost})
	}
	if openDenied {
		for i := range local {
			local[i].Cost = 0
		}
	}
	res := &sc.results
	// The local store is in-process and quick; it must decide even when
	// the caller's deadline was spent waiting for the primary.
	if err := s.local.Decide(context.WithoutCancel(ctx), now, local, res[:len(local)]); err != nil {
		return err
	}
	for j := range local {
		out[idx[j]] = res[j]
	}
	return nil
}

// localPolicy returns the policy ModeLocal applies in place of p.
func (s *Store) localPolicy(p floodgate.Policy) (floodgate.Policy, error) {
	if s.localPol != nil {
		q := s.localPol(p)
		if q.Name != p.Name || q.Algorithm != p.Algorithm {
			return floodgate.Policy{}, fmt.Errorf("%w: LocalPolicy changed policy %q to %q (%v to %v); it must keep the name and algorithm",
				floodgate.ErrInvalidPolicy, p.Name, q.Name, p.Algorithm, q.Algorithm)
		}
		if err := q.Validate(); err != nil {
			return floodgate.Policy{}, fmt.Errorf("LocalPolicy for %q: %w", p.Name, err)
		}
		return q, nil
	}
	return scalePolicy(p, int(s.instances.Load()), s.factor), nil
}

// scalePolicy returns p with its limit and burst multiplied by
// factor/instances (rounded up, at least 1). If the result is not a valid
// policy (a rate finer than one unit per microsecond, say), p is returned
// unchanged.
func scalePolicy(p floodgate.Policy, instances int, factor float64) floodgate.Policy {
	if instances == 1 && factor == 1 {
		return p
	}
	scale := func(n int64) int64 {
		x := math.Ceil(float64(n) * factor / float64(instances))
		switch {
		case x < 1:
			return 1
		case x > floodgate.MaxLimit:
			return floodgate.MaxLimit
		}
		return int64(x)
	}
	q := p
	q.Limit = scale(p.Limit)
	if p.Burst != 0 {
		q.Burst = scale(p.Burst)
	}
	switch q.Algorithm {
	case floodgate.SlidingLog:
		q.Limit = min(q.Limit, floodgate.MaxSlidingLogLimit)
	case floodgate.TokenBucket, floodgate.GCRA:
		q.Limit = min(q.Limit, p.Window.Microseconds())
	}
	if q.Validate() != nil {
		return p
	}
	return q
}
