// Package deadline gives requests deadlines that share their timers.
//
// context.WithTimeout gives every request a timer, a Done channel and,
// under a cancellable parent (a server's request context), a place in the
// parent's set of children: about 1.5 µs and four allocations per request
// on a path that bounds every store call of every request, and twice that
// when a request is bounded twice (a handler's timeout, then the store's
// budget). A Ticks rounds deadlines down to a tick (a millisecond): every
// context whose deadline falls on the same tick shares one underlying
// context, its timer and its channel, so a request costs one small
// allocation. Beyond 4 s ahead, deadlines are rounded down to 64 ms
// (CoarseTick) instead, up to about 4.4 minutes ahead.
//
// The price, which the callers accept:
//   - a deadline comes up to one tick early (never late), so durations
//     shorter than MinShared ticks get a context.WithTimeout of their own;
//   - the parent's cancellation is not passed on: a context from Ticks ends
//     at its deadline, or earlier with the parent when the parent's own
//     deadline comes first (the parent is then returned as it is). A caller
//     that gives up therefore waits for its store call to finish or reach
//     the deadline; the call is bounded either way. Gone tells a caller
//     that has not sent its call yet whether the parent has ended: a
//     request whose client went away before its store call was sent is
//     not sent at all. Bind gives a call that may wait before it is sent
//     (for a connection of go-redis's pool) a context that ends when the
//     parent does, so that such a call is not sent either.
package deadline

import (
	"context"
	"sync/atomic"
	"time"
)

// Tick is the granularity of the shared deadlines.
const Tick = time.Millisecond

// MinShared is the shortest duration, in ticks, whose deadline is shared:
// the rounding then takes at most 1/MinShared of it.
const MinShared = 16

// ringSize is the number of ticks ahead a shared deadline can be (the
// horizon, 4.096 s); later deadlines are shared on coarse ticks.
const ringSize = 4096

// CoarseTick is the granularity of the shared deadlines beyond the
// horizon of Tick (4.096 s), up to ringSize coarse ticks ahead (about 4.4
// minutes): such a deadline comes up to 64 ms (1.6 %) early. Later ones
// get a context.WithDeadline of their own.
const CoarseTick = 64 * Tick

// Ticks hands out contexts with shared deadlines (see the package
// documentation). It is safe for concurrent use and must be made with
// New.
type Ticks struct {
	base   time.Time                      // the origin of tick numbers, with a monotonic reading
	ring   [ringSize]atomic.Pointer[slot] // of Tick
	coarse [ringSize]atomic.Pointer[slot] // of CoarseTick
}

// slot is one tick's shared context.
type slot struct {
	tick int64
	ctx  context.Context
	// cancel releases ctx's timer; it is never called, since ctx ends at
	// its deadline anyway, but it is kept so that the context is not
	// mistaken for a leak.
	cancel context.CancelFunc
}

// New returns a Ticks.
func New() *Ticks {
	return &Ticks{base: time.Now()}
}

// nop is the CancelFunc of a shared context: there is nothing to release.
func nop() {}

// WithTimeout returns a context that ends d after now (the caller's
// time.Now(), which it usually has at hand), or up to one tick earlier,
// and its CancelFunc, which the caller calls when done, as with
// context.WithTimeout. The context carries parent's values. When parent
// has ended already or ends first (its deadline is earlier), parent is
// returned as it is. When d is shorter than MinShared ticks or longer
// than the horizon, or now is before t was made, the context is
// context.WithDeadline's.
func (t *Ticks) WithTimeout(parent context.Context, now time.Time, d time.Duration) (context.Context, context.CancelFunc) {
	at := now.Add(d)
	if pd, ok := parent.Deadline(); ok && !pd.After(at) {
		return parent, nop
	}
	if parent.Err() != nil {
		return parent, nop
	}
	since := now.Sub(t.base)
	if d < MinShared*Tick || d > ringSize*CoarseTick || since < 0 {
		// (A d beyond the horizon is let go here, before since + d,
		// which overflows for the longest durations.)
		return context.WithDeadline(parent, at)
	}
	// On the finest ring whose horizon reaches the deadline.
	if tick := int64((since + d) / Tick); tick-int64(since/Tick) < ringSize {
		return &shared{Context: t.slot(&t.ring, Tick, tick).ctx, values: parent}, nop
	}
	if tick := int64((since + d) / CoarseTick); tick-int64(since/CoarseTick) < ringSize {
		return &shared{Context: t.slot(&t.coarse, CoarseTick, tick).ctx, values: parent}, nop
	}
	return context.WithDeadline(parent, at)
}

// WithCallTimeout is WithTimeout for a store call that, once sent, must
// end with its answer or at its deadline, never with its parent's
// cancellation: where WithTimeout gives a context of its own (d shorter
// than MinShared ticks or beyond the horizon, now before t was made), it
// gives a timer of its own whose Deadline, Done and Err are its own and
// whose values are parent's, as a shared context's, and Gone sees the
// parent's end through it. Otherwise it is WithTimeout: a shared
// context, or parent as it is when parent has ended already or its
// deadline comes first. The caller calls the CancelFunc when done.
//
// A call bound by a context that ends with its caller's cancellation
// returns that cancellation when the caller gives up while it waits for
// a reply (go-redis v9.23 does), which a store's caller reads as the
// caller's doing: with Envoy's 20 ms deadline, whose call bound is below
// MinShared ticks, callers cancelling early (a downstream request reset)
// kept a fallback's breaker closed on a stalled Redis whenever their
// calls went alone (lonecancel).
func (t *Ticks) WithCallTimeout(parent context.Context, now time.Time, d time.Duration) (context.Context, context.CancelFunc) {
	at := now.Add(d)
	if pd, ok := parent.Deadline(); ok && !pd.After(at) {
		return parent, nop
	}
	if parent.Err() != nil {
		return parent, nop
	}
	if since := now.Sub(t.base); d < MinShared*Tick || d > ringSize*CoarseTick || since < 0 {
		ctx, cancel := context.WithDeadline(context.Background(), at)
		return &shared{Context: ctx, values: parent}, cancel
	}
	return t.WithTimeout(parent, now, d)
}

// slot returns the slot of tick (of unit) in ring, made if need be.
func (t *Ticks) slot(ring *[ringSize]atomic.Pointer[slot], unit time.Duration, tick int64) *slot {
	p := &ring[tick%ringSize]
	for {
		s := p.Load()
		if s != nil && s.tick == tick {
			return s
		}
		if s != nil && s.tick > tick {
			// A later tick took the place: only a caller that was
			// descheduled for a whole horizon gets here. Its deadline
			// stays its own.
			ctx, cancel := context.WithDeadline(context.Background(), t.base.Add(time.Duration(tick)*unit))
			return &slot{tick: tick, ctx: ctx, cancel: cancel}
		}
		ctx, cancel := context.WithDeadline(context.Background(), t.base.Add(time.Duration(tick)*unit))
		n := &slot{tick: tick, ctx: ctx, cancel: cancel}
		if p.CompareAndSwap(s, n) {
			return n
		}
		cancel() // another caller made the tick's slot first
	}
}

// shared is a context from Ticks: Deadline, Done and Err are its tick's
// (or, from WithCallTimeout, its own timer's), Value is its parent's,
// except for the context package's own key, which finds the tick's
// context (see Value).
type shared struct {
	context.Context // the tick's (or its own timer's)
	values          context.Context
}

// Value returns the tick's context's value for key, if any, else the
// parent's. The tick's context (context.WithDeadline of Background) holds
// no value but the one the context package looks up to find the context
// a context's cancellation comes from: the tick's, not the parent's.
// Without it, context.Cause of c after its deadline would be the cause of
// the parent's cancellation (a client that went away) rather than
// DeadlineExceeded, and so would a derived context's. With it, a context
// derived from c (and context.AfterFunc of c) registers with the tick's
// context, instead of a goroutine watching c's Done channel.
func (c *shared) Value(key any) any {
	if key == (parentKey{}) {
		return c.values
	}
	if v := c.Context.Value(key); v != nil {
		return v
	}
	return c.values.Value(key)
}

// String describes c for debugging.
func (c *shared) String() string {
	d, _ := c.Deadline()
	return "deadline.Shared(" + d.String() + ")"
}

// parentKey is the key under which a shared context's Value returns its
// parent (see Gone).
type parentKey struct{}

// Gone returns the error of ctx, or else of the first context a shared
// context made from (Ticks.WithTimeout's parent, whose cancellation is
// not passed on) that has ended, going up every shared context ctx was
// derived from: nil while none has ended. A server's request context
// ends when its client goes away (net/http cancels it once it sees the
// connection closed, gRPC on the client's cancellation), and ctx, bounded
// by Ticks, does not: a caller about to send a store call checks Gone, so
// that nothing is sent for a client that has gone, while a call already
// sent still ends by its deadline or with its answer. It costs a Value
// lookup and an Err per context in the chain, and no allocation. The
// Value lookup passes through context.WithoutCancel: a context detached
// with it below a shared deadline still sees the request's end (no
// decision path in this module detaches a call it then queues).
func Gone(ctx context.Context) error {
	for ctx != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		p, _ := ctx.Value(parentKey{}).(context.Context)
		ctx = p
	}
	return nil
}

// Bind returns a context for a call about to be sent under ctx by a
// client that may first wait under it (go-redis waits for a free
// connection of its pool under the call's context, then sends): it has
// ctx's deadline and values, and ends with ctx, or when a context a
// shared context of ctx's chain was made from ends (when Gone would
// report it), so that a call still waiting when its caller goes is not
// sent. The CancelFunc releases it; the caller calls it when the call is
// done. Once sent, a call is not ended by the context's end (go-redis
// reads its deadline, not its Done channel, for a command in flight), so
// nothing already sent is undone. When Gone reports an error already,
// Bind returns it and nothing should be sent. When no shared context in
// ctx's chain has a parent that can end, ctx is returned as it is, without
// allocating; otherwise Bind costs a context.WithCancel, and a context.AfterFunc
// per such parent.
func Bind(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if err := Gone(ctx); err != nil {
		return ctx, nop, err
	}
	var (
		bound  context.Context
		cancel context.CancelFunc
		stops  []func() bool
	)
	for c := ctx; c != nil; {
		p, _ := c.Value(parentKey{}).(context.Context)
		if p != nil && p.Done() != nil {
			if bound == nil {
				bound, cancel = context.WithCancel(ctx)
			}
			stops = append(stops, context.AfterFunc(p, cancel))
		}
		c = p
	}
	if bound == nil {
		return ctx, nop, nil
	}
	return bound, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}, nil
}
