// Package degraded tells a caller that does not import package fallback
// (httplimit: fallback needs go-redis, which a memstore user of the
// middleware should not link) how a decision was taken: a fallback.Store
// notes each decision its failure mode takes in the Record of the context
// (NewContext, Note), besides fallback's own Outcome.
//
// Whether a decider's decisions can be taken so is known once, when the
// caller is built (Reports): package floodgate tells what store a
// *floodgate.Limiter (or a type embedding one) decides against and what
// store a wrapper with an Unwrap() floodgate.Store method (a
// denycache.Store) wraps, package fallback which stores are its own, each
// through a hook set by its init, so that neither needs an exported
// method for it. A store wrapper that caches decisions (denycache) asks
// too, and reads a Record of its own to leave the failure modes'
// decisions out, then notes them in its caller's.
package degraded

import (
	"context"
	"sync"
)

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

// Record holds the Outcome of the decisions taken with a context of
// NewContext. It is safe for concurrent use: a Decider of the caller's
// own may take several decisions with one context at once (a review: two
// Limiters decided in parallel raced on a bare Outcome). Of several
// decisions, it keeps the degraded one whose failure mode is strictest
// (closed, then local, then open), the first of equals: a decision of
// the primary never erases a failure mode's.
type Record struct {
	mu sync.Mutex
	o  Outcome
}

// Outcome returns what r holds now.
func (r *Record) Outcome() Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.o
}

// note keeps o if it is degraded and stricter than what r holds.
func (r *Record) note(o Outcome) {
	if !o.Degraded {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.o.Degraded || strictness(o.Mode) > strictness(r.o.Mode) {
		r.o = o
	}
}

// strictness orders failure modes: closed, then local, then open.
func strictness(mode string) int {
	switch mode {
	case "closed":
		return 3
	case "local":
		return 2
	case "open":
		return 1
	}
	return 0
}

// recordCtx is a context carrying a Record it holds itself: one
// allocation for both.
type recordCtx struct {
	context.Context
	r Record
}

// Value returns the Record for key and asks the parent otherwise.
func (c *recordCtx) Value(k any) any {
	if k == (key{}) {
		return &c.r
	}
	return c.Context.Value(k)
}

// NewContext returns a copy of ctx carrying a new Record, and that
// Record, to which a fallback.Store notes each decision its failure mode
// takes with that context (Note).
func NewContext(ctx context.Context) (context.Context, *Record) {
	c := &recordCtx{Context: ctx}
	return c, &c.r
}

// Note notes o, a decision's Outcome, in the Record ctx carries, if any
// (and o is degraded).
func Note(ctx context.Context, o Outcome) {
	if r, _ := ctx.Value(key{}).(*Record); r != nil {
		r.note(o)
	}
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
// decisions are noted in the context's Record.
func SetReporter(f func(store any) bool) { isReporter = f }

// maxDepth bounds how many wrappers Reports looks through, against an
// Unwrap that returns its own store.
const maxDepth = 32

// Reports reports whether the decisions of d, a store or a
// *floodgate.Limiter, may be taken by a failure mode and noted in the
// Record of NewContext: d is a fallback.Store, or a Limiter deciding
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
