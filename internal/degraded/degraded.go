// Package degraded tells a caller that does not import package fallback
// (httplimit: fallback needs go-redis, which a memstore user of the
// middleware should not link) how a decision was taken: a fallback.Store
// writes each decision its failure mode takes into the Outcome of the
// context (NewContext), besides fallback's own Outcome.
//
// Whether a decider's decisions can be taken so is known once, when the
// caller is built (Reports): package floodgate tells what store a
// *floodgate.Limiter decides against, package fallback which stores are
// its own, each through a hook set by its init, so that neither needs an
// exported method for it.
package degraded

import "context"

// Outcome is how a decision was taken: Degraded when a failure mode took
// it in place of the primary store. The zero Outcome is a decision of the
// primary (or of a store that has no failure mode).
type Outcome struct {
	// Degraded reports that the failure mode, not the primary store,
	// took the decision.
	Degraded bool
	// Mode is the failure mode applied, as fallback.Mode's String:
	// "local", "open" or "closed".
	Mode string
	// Reason says why the primary did not decide, as fallback.Reason's
	// String ("timeout", "breaker_open"...).
	Reason string
	// Err is the primary's error (fallback.ErrBreakerOpen when it was
	// not called).
	Err error
}

type key struct{}

// outcomeCtx is a context carrying an Outcome it holds itself: one
// allocation for both.
type outcomeCtx struct {
	context.Context
	o Outcome
}

// Value returns the Outcome for key and asks the parent otherwise.
func (c *outcomeCtx) Value(k any) any {
	if k == (key{}) {
		return &c.o
	}
	return c.Context.Value(k)
}

// NewContext returns a copy of ctx carrying a new Outcome, and that
// Outcome, which a fallback.Store overwrites at each decision its failure
// mode takes with that context. It must not be shared by concurrent
// decisions.
func NewContext(ctx context.Context) (context.Context, *Outcome) {
	c := &outcomeCtx{Context: ctx}
	return c, &c.o
}

// From returns the Outcome ctx carries, nil when it carries none.
func From(ctx context.Context) *Outcome {
	o, _ := ctx.Value(key{}).(*Outcome)
	return o
}

// The hooks, each set once by its package's init, before any caller can
// ask Reports.
var (
	storeOf    func(d any) (store any, ok bool)
	isReporter func(store any) bool
)

// SetStoreOf is called by package floodgate's init with a function
// returning the store a *floodgate.Limiter decides against.
func SetStoreOf(f func(d any) (any, bool)) { storeOf = f }

// SetReporter is called by package fallback's init with a function
// reporting whether a store is a fallback.Store, whose failure modes'
// decisions are written to the context's Outcome.
func SetReporter(f func(store any) bool) { isReporter = f }

// Reports reports whether the decisions of d, a store or a
// *floodgate.Limiter, may be taken by a failure mode and written to the
// Outcome of NewContext: d is a fallback.Store, or a Limiter deciding
// against one. A program that does not link package fallback has none.
func Reports(d any) bool {
	if isReporter == nil || d == nil {
		return false
	}
	if isReporter(d) {
		return true
	}
	if storeOf != nil {
		if s, ok := storeOf(d); ok {
			return isReporter(s)
		}
	}
	return false
}
