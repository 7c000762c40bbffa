// Package degraded tells a caller that does not import package fallback
// (httplimit: fallback needs go-redis, which a memstore user of the
// middleware should not link) how a decision was taken: a fallback.Store
// writes each decision its failure mode takes into the Outcome of the
// context (NewContext), besides fallback's own Outcome.
//
// Whether a decider's decisions can be taken so is known once, when the
// caller is built (Reports): package floodgate tells what store a
// *floodgate.Limiter (or a type embedding one) decides against and what
// store a wrapper with an Unwrap() floodgate.Store method (a
// denycache.Store) wraps, package fallback which stores are its own, each
// through a hook set by its init, so that neither needs an exported
// method for it. A store wrapper that caches decisions (denycache) asks
// too, and reads the Outcome to leave the failure modes' decisions out.
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
	inner      func(d any) (next any, store, ok bool)
	isReporter func(store any) bool
)

// SetInner is called by package floodgate's init with a function that
// looks one step into d: for a *floodgate.Limiter (or a type embedding
// one) it returns the store the Limiter decides against, for a store
// with an Unwrap() floodgate.Store method (denycache's) the store it
// wraps, each with store and ok true for a store, ok alone for a
// Limiter; for another store, nothing with store true; for anything
// else, nothing.
func SetInner(f func(d any) (next any, store, ok bool)) { inner = f }

// SetReporter is called by package fallback's init with a function
// reporting whether a store is a fallback.Store, whose failure modes'
// decisions are written to the context's Outcome.
func SetReporter(f func(store any) bool) { isReporter = f }

// maxDepth bounds how many wrappers Reports looks through, against an
// Unwrap that returns its own store.
const maxDepth = 32

// Reports reports whether the decisions of d, a store or a
// *floodgate.Limiter, may be taken by a failure mode and written to the
// Outcome of NewContext: d is a fallback.Store, or a Limiter deciding
// against one (a type embedding a *Limiter included), looking through
// every store with an Unwrap() floodgate.Store method. known is false
// when it could not tell: d, or what it wraps, is neither a store nor
// a Limiter (a Decider of the caller's own around one, say). A program
// that does not link package fallback has no fallback.Store: Reports
// answers false, known, for anything.
func Reports(d any) (reports, known bool) {
	if isReporter == nil {
		return false, true
	}
	for range maxDepth {
		if d == nil {
			return false, true
		}
		if isReporter(d) {
			return true, true
		}
		if inner == nil {
			return false, false
		}
		next, store, ok := inner(d)
		if !ok {
			return false, store
		}
		d = next
	}
	return false, false
}
