package floodgate

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/floodgate-rl/floodgate/internal/degraded"
	"github.com/floodgate-rl/floodgate/internal/nilcheck"
)

// init tells package degraded what store a Limiter decides against, and
// what store a store wrapper wraps, so that httplimit can learn at
// construction whether a Limiter's decisions may be taken by a
// fallback.Store's failure mode.
func init() {
	degraded.SetInner(func(d any) (any, bool, bool) {
		switch v := d.(type) {
		case limiterStorer:
			if s := v.limiterStore(); !nilcheck.IsNil(s) {
				return s, false, true
			}
			return nil, false, false
		case interface{ Unwrap() Store }:
			if s := v.Unwrap(); !nilcheck.IsNil(s) {
				return s, true, true
			}
			return nil, true, false
		case Store:
			return nil, true, false
		}
		return nil, false, false
	})
}

// limiterStorer is a *Limiter, or a type embedding one, whose unexported
// method it promotes.
type limiterStorer interface{ limiterStore() Store }

// limiterStore returns the store l decides against, nil for a nil l.
func (l *Limiter) limiterStore() Store {
	if l == nil {
		return nil
	}
	return l.store
}

// Layer is one policy applied to one stored key within a decision.
type Layer struct {
	// Policy is a valid policy.
	Policy Policy
	// Key is the storage key, as built by Key.
	Key string
	// Cost is what this request costs under this layer (0 peeks).
	Cost int64
}

// Store decides requests atomically. Implementations: memstore.Store (in
// process) and redisstore.Store (Redis, one Lua script per decision).
type Store interface {
	// Decide applies algo.Step to every layer at now (Unix microseconds),
	// all-or-nothing: if every layer admits its cost, every layer's
	// state is committed; otherwise nothing is written, and a layer that
	// would have admitted reports its algo.Standing (Allowed, with the remaining
	// capacity it still has). It stores one Result per layer in out
	// (len(out) == len(layers)). memstore and a single Redis decide all
	// layers in one atomic step; on Redis Cluster, layers on different
	// slots are reserved and released (see docs/layered.md). Layers were
	// validated by the caller; the stores of this module check them again
	// (CheckLayers) and refuse a nil ctx (ErrNilContext). On error,
	// nothing was decided; errors wrap ErrStoreUnavailable when nothing was
	// written and ErrIndeterminate when the write may have happened.
	//
	// A Store that wraps another (denycache's does) may have a method
	// Unwrap() Store returning it: httplimit looks through it for a
	// fallback.Store, whose failure modes' decisions it answers apart
	// (see httplimit's package documentation).
	Decide(ctx context.Context, now int64, layers []Layer, out []Result) error
}

// Options configures a Limiter. The zero value is ready to use.
type Options struct {
	// Prefix starts every storage key, so several applications can share
	// one Redis. Default "fg". See ValidatePrefix.
	Prefix string
	// Clock returns the current time. Default time.Now. Only the Unix
	// microseconds of its result are used.
	Clock func() time.Time
}

// Limiter applies policies to identities against a Store. It is safe for
// concurrent use by multiple goroutines. Make it with New: the zero
// Limiter is not usable.
type Limiter struct {
	store  Store
	prefix string
	clock  func() time.Time
	borrow bool // store is a KeyBorrower that borrows keys
	// period is the quota period the limiter last built a key for (see
	// keyAt).
	period atomic.Pointer[periodMemo]
}

// periodMemo is one calendar's period and its storage tag. Every decision
// of a quota policy inside the period has the same key tag, and working
// the period out from the calendar (time zone, civil date, formatting)
// costs more than the rest of building the key.
type periodMemo struct {
	cal        Calendar
	start, end int64 // Unix µs: the period is [start, end)
	tag        string
}

// keyAt is algo.KeyAt with the limiter's prefix: Key, followed for a Quota
// policy by ":" and the storage tag of the period containing now (Unix
// µs), taken from l.period when now falls inside it (the periods of a
// calendar partition time, so that period is the one containing now).
func (l *Limiter) keyAt(p Policy, identity string, now int64) string {
	if p.Algorithm != Quota {
		return key(l.prefix, p, identity, "")
	}
	m := l.period.Load()
	if m == nil || m.cal != p.Calendar || now < m.start || now >= m.end {
		per := p.Calendar.PeriodAt(time.UnixMicro(now))
		m = &periodMemo{cal: p.Calendar, start: per.Start.UnixMicro(), end: per.End.UnixMicro(), tag: p.Calendar.StorageTag(per)}
		l.period.Store(m)
	}
	return key(l.prefix, p, identity, m.tag)
}

// New returns a Limiter deciding against store.
func New(store Store, opts Options) (*Limiter, error) {
	if store == nil {
		return nil, ErrNilStore
	}
	if nilcheck.IsNil(store) {
		// A nil *memstore.Store (say) in the interface: every decision
		// would panic.
		return nil, fmt.Errorf("%w (a nil %T)", ErrNilStore, store)
	}
	if opts.Prefix == "" {
		opts.Prefix = "fg"
	}
	if err := ValidatePrefix(opts.Prefix); err != nil {
		return nil, err
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if u, ok := store.(interface{ Usable() error }); ok { // algo.UsableChecker
		if err := u.Usable(); err != nil {
			// The zero memstore.Store (say): its first decision would
			// panic. The store's error names it, and those of this
			// module wrap ErrInvalidPolicy (fallback's,
			// fallback.ErrInvalidOptions).
			return nil, err
		}
	}
	kb, ok := store.(interface{ BorrowsKeys() bool }) // algo.KeyBorrower
	return &Limiter{store: store, prefix: opts.Prefix, clock: opts.Clock, borrow: ok && kb.BorrowsKeys()}, nil
}

// Prefix returns the limiter's key prefix.
func (l *Limiter) Prefix() string { return l.prefix }

// Now returns the time the limiter stamps its decisions with: its
// Options.Clock (time.Now by default), e.g. a clocksync.Clock's Now. Code
// that decides through the limiter at a time of its own (AllowLayersAt),
// or stamps quotas and leases beside its decisions, reads the time here so
// that one clock, disciplined to Redis or not, stamps them all.
func (l *Limiter) Now() time.Time { return l.clock() }

// Key returns the storage key the limiter uses for identity under p (for a
// Quota policy, the key of the current period).
func (l *Limiter) Key(p Policy, identity string) string {
	return l.keyAt(p, identity, l.clock().UnixMicro())
}

// Allow decides one request of cost 1 by identity under p. The identity
// may be any string, "" included: every caller passing "" shares one
// count (a global limit), so a caller that could not tell who is asking
// should refuse the request rather than pass "" (httplimit treats a key
// function's "" as no key).
func (l *Limiter) Allow(ctx context.Context, p Policy, identity string) (Result, error) {
	return l.AllowN(ctx, p, identity, 1)
}

// Peek reports identity's current standing under p without consuming
// anything (a decision of cost 0): whether a request of cost 1 would be
// admitted now and, under a GCRA policy with MaxDelay, the Delay it would
// be told to wait, or else its RetryAfter.
func (l *Limiter) Peek(ctx context.Context, p Policy, identity string) (Result, error) {
	return l.AllowN(ctx, p, identity, 0)
}

// PeekAt is Peek at the given time.
func (l *Limiter) PeekAt(ctx context.Context, now time.Time, p Policy, identity string) (Result, error) {
	return l.AllowAt(ctx, now, p, identity, 0)
}

// AllowN decides one request of the given cost (0..MaxCost; 0 peeks) by
// identity under p, now.
func (l *Limiter) AllowN(ctx context.Context, p Policy, identity string, cost int64) (Result, error) {
	return l.AllowAt(ctx, l.clock(), p, identity, cost)
}

// Wait decides one request of the given cost (0..MaxCost) by identity
// under p, like AllowN, and when it is admitted with a Delay (a GCRA
// policy with MaxDelay: traffic shaping) sleeps through that delay before
// returning, so the caller can act at once. A denied request is returned
// at once, without waiting (its RetryAfter says how long to wait before
// asking again), and so is a peek (cost 0): it consumed nothing, so there
// is nothing to wait for, and its Delay is what a request of cost 1 would
// wait. If ctx ends during the sleep, Wait returns the result with ctx's
// error: the request was admitted and its cost consumed, but its slot has
// not come yet.
func (l *Limiter) Wait(ctx context.Context, p Policy, identity string, cost int64) (Result, error) {
	r, err := l.AllowN(ctx, p, identity, cost)
	if err != nil || !r.Allowed || r.Delay <= 0 || cost == 0 {
		return r, err
	}
	t := time.NewTimer(r.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return r, nil
	case <-ctx.Done():
		return r, ctx.Err()
	}
}

// AllowAt is AllowN at the given time.
func (l *Limiter) AllowAt(ctx context.Context, now time.Time, p Policy, identity string, cost int64) (Result, error) {
	if ctx == nil {
		return Result{}, ErrNilContext
	}
	if err := p.Validate(); err != nil {
		return Result{}, err
	}
	if err := ValidateCost(cost); err != nil {
		return Result{}, err
	}
	us := now.UnixMicro()
	if err := ValidateTime(us); err != nil {
		return Result{}, err
	}
	if err := checkPeriod(&p, us); err != nil {
		return Result{}, err
	}
	f := framePool.Get().(*frame)
	var key string
	if l.borrow && p.Algorithm != Quota {
		// The store copies what it keeps: build the key in f's buffer.
		f.buf = appendKey(f.buf[:0], l.prefix, p, identity, "")
		key = unsafe.String(unsafe.SliceData(f.buf), len(f.buf))
	} else {
		key = l.keyAt(p, identity, us)
	}
	f.layers[0] = Layer{Policy: p, Key: key, Cost: cost}
	err := l.store.Decide(ctx, us, f.layers[:], f.out[:])
	r := f.out[0]
	f.layers[0], f.out[0] = Layer{}, Result{}
	if cap(f.buf) > maxPooledKey {
		f.buf = nil
	}
	framePool.Put(f)
	if err != nil {
		return Result{}, err
	}
	return r, nil
}

// frame holds a single-layer decision's arguments; pooled, since a slice
// handed to the Store interface escapes to the heap.
type frame struct {
	layers [1]Layer
	out    [1]Result
	buf    []byte // the key, for a store that borrows keys
}

// maxPooledKey bounds the key buffer a pooled frame keeps (a key is at most
// about 300 bytes: prefix, policy name, algorithm, encoded identity).
const maxPooledKey = 512

var framePool = sync.Pool{New: func() any { return new(frame) }}

// ValidateCost reports, wrapped in ErrInvalidCost, a cost outside 0..MaxCost.
func ValidateCost(cost int64) error {
	if cost < 0 || cost > MaxCost {
		return fmt.Errorf("%w: cost %d out of range 0..%d", ErrInvalidCost, cost, int64(MaxCost))
	}
	return nil
}

// MaxTimeMicros is the latest decision time, in Unix microseconds: 2^52,
// in September 2112. Below it every sum the algorithms compute from a time
// stays under 2^53, exact in the Redis scripts' doubles.
const MaxTimeMicros = 1 << 52

// ValidateTime reports, wrapped in ErrInvalidTime, a decision time (Unix
// microseconds, as Store.Decide takes it) outside 1..MaxTimeMicros: the
// Unix epoch itself, the times before it (such as the zero time.Time's) and
// those after MaxTimeMicros. A state stamped at the epoch would read as no
// state at all. A Quota decision needs more: its whole calendar period
// must lie within the epoch..MaxTimeMicros, which ValidatePeriod checks
// for CheckLayers, the Limiter and package quota (a week quota is refused
// on 1970-01-02, in the ISO week that began on 1969-12-29, and a month
// quota in September 2112).
func ValidateTime(now int64) error {
	if now < 1 || now > MaxTimeMicros {
		return fmt.Errorf("%w: time %s (%dµs) out of range: after the Unix epoch, up to %s",
			ErrInvalidTime, time.UnixMicro(now).UTC().Format(time.RFC3339Nano), now, time.UnixMicro(MaxTimeMicros).UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// periodMargin is a time (µs) from the ends of epoch..MaxTimeMicros
// beyond which every calendar period containing it lies within that
// range: a period lasts at most a month and a day (31 days, plus a zone's
// clock changes), and midnight is at most 26 hours away from UTC's.
const periodMargin = 40 * 24 * int64(time.Hour/time.Microsecond)

// checkPeriod reports, wrapped in ErrInvalidTime, a Quota policy's period
// at now that ValidatePeriod refuses. Other policies have no period; p
// must be valid.
func checkPeriod(p *Policy, now int64) error {
	if p.Algorithm != Quota {
		return nil
	}
	return ValidatePeriod(p.Name, p.Calendar, now)
}

// ValidatePeriod reports, wrapped in ErrInvalidTime, the period of c
// containing now (Unix µs) when it does not lie within the Unix
// epoch..MaxTimeMicros: an ISO week begun before 1970-01-01 (1970-W01,
// from 1969-12-29), or a period ending after MaxTimeMicros (a month in
// September 2112). The stores could not keep its bounds (the Redis
// scripts refuse them), and every store must refuse what Redis does. name
// is the quota's, for the message. The Limiter and CheckLayers check a
// Quota policy's period with it, and package quota its own; a time far
// enough from both ends costs one comparison. c must be valid.
func ValidatePeriod(name string, c Calendar, now int64) error {
	if now >= periodMargin && now <= MaxTimeMicros-periodMargin {
		return nil
	}
	per := c.PeriodAt(time.UnixMicro(now))
	if start, end := per.Start.UnixMicro(), per.End.UnixMicro(); start < 0 || end > MaxTimeMicros {
		return fmt.Errorf("%w: quota policy %q: the %s period %s containing %s runs from %s to %s, outside the Unix epoch..%s",
			ErrInvalidTime, name, c.Unit, per.Key, time.UnixMicro(now).UTC().Format(time.RFC3339Nano),
			per.Start.UTC().Format(time.RFC3339Nano), per.End.UTC().Format(time.RFC3339Nano),
			time.UnixMicro(MaxTimeMicros).UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// CheckLayers reports why a Store cannot decide layers at now into out:
// no layers or more than MaxLayers, out of another length, a time out of
// range (ErrInvalidTime, within ErrInvalidLayers), an invalid policy or
// cost, a Quota layer whose period at now does not lie within the Unix
// epoch..MaxTimeMicros (ErrInvalidTime), an empty key, or one key used by
// two layers. The stores of this
// module call it first in Decide (after refusing a nil context with an
// error wrapping ErrNilContext), so that a caller that skips the
// Limiter's checks gets the same errors from every store and nothing
// is decided.
func CheckLayers(now int64, layers []Layer, out []Result) error {
	if len(layers) == 0 || len(layers) > MaxLayers {
		return fmt.Errorf("%w: %d layers (want 1..%d)", ErrInvalidLayers, len(layers), MaxLayers)
	}
	if len(out) != len(layers) {
		return fmt.Errorf("%w: %d results for %d layers", ErrInvalidLayers, len(out), len(layers))
	}
	if err := ValidateTime(now); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidLayers, err)
	}
	for i := range layers {
		l := &layers[i]
		if err := l.Policy.Validate(); err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
		if err := checkPeriod(&l.Policy, now); err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
		if err := ValidateCost(l.Cost); err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
		if l.Key == "" {
			return fmt.Errorf("%w: layer %d has an empty key", ErrInvalidKey, i)
		}
		for j := range i {
			if layers[j].Key == l.Key {
				return fmt.Errorf("%w: layers %d and %d use the same key %q", ErrInvalidLayers, j, i, l.Key)
			}
		}
	}
	return nil
}

// LayerSpec names one layer of a layered decision: a policy and the
// identity it applies to (for example "" or "global" for a server-wide
// layer, a user id for a per-user layer).
type LayerSpec struct {
	Policy   Policy
	Identity string
	// Cost overrides the decision's cost for this layer when positive, e.g.
	// a quota layer counting tokens while the others count requests; 0
	// takes the decision's cost, and a negative cost is refused
	// (ErrInvalidCost). Use Peek to make a layer check without consuming.
	Cost int64
	// Peek makes this layer check (cost 0) without consuming.
	Peek bool
}

// Decision is the outcome of a layered decision.
type Decision struct {
	// Allowed reports whether every layer admitted the request; only then
	// was anything consumed.
	Allowed bool
	// Binding is the index of the layer that drives the response. When
	// denied, it is the layer whose denial lasts longest (see Outlasts): the
	// first whose cost exceeds its capacity (waiting will not help), else
	// the one with the longest RetryAfter, so that a client that waits as
	// told finds every layer admitting it again; the first on ties. When
	// all allowed, the one with the least remaining (relative to its
	// limit, the first on ties).
	Binding int
	// Layers holds each layer's result, in the order given.
	Layers []Result
}

// Result returns the binding layer's result, the one to report to clients
// (for example in X-RateLimit-* headers). For a denied decision its Allowed
// is false even if that layer alone would have admitted the request.
func (d Decision) Result() Result {
	if d.Binding < 0 || d.Binding >= len(d.Layers) {
		return Result{} // no layers, or a Decision not built by NewDecision
	}
	r := d.Layers[d.Binding]
	r.Allowed = d.Allowed
	return r
}

// AllowLayers decides a request of the given cost against every layer as
// one all-or-nothing operation in one store call (one Redis round trip on a
// single server or a Sentinel-managed primary; on a Cluster, layers whose
// keys lie on several primaries take two or three, see docs/layered.md): if
// any layer denies, no layer consumes anything.
func (l *Limiter) AllowLayers(ctx context.Context, cost int64, specs ...LayerSpec) (Decision, error) {
	return l.AllowLayersAt(ctx, l.clock(), cost, specs...)
}

// AllowLayersAt is AllowLayers at the given time.
func (l *Limiter) AllowLayersAt(ctx context.Context, now time.Time, cost int64, specs ...LayerSpec) (Decision, error) {
	// The layers go to the store in a pooled array (a Store keeps no
	// reference to them once Decide returns); only the results, which the
	// Decision returns, are allocated.
	if ctx == nil {
		return Decision{}, ErrNilContext
	}
	f := layersPool.Get().(*layersFrame)
	defer putLayers(f, len(specs))
	layers, err := l.appendLayers(f.layers[:0], now, cost, specs)
	if err != nil {
		return Decision{}, err
	}
	out := make([]Result, len(layers))
	if err := l.store.Decide(ctx, now.UnixMicro(), layers, out); err != nil {
		return Decision{}, err
	}
	return NewDecision(out), nil
}

// layersFrame holds a layered decision's layers; pooled, as frame is.
type layersFrame struct {
	layers [MaxLayers]Layer
}

var layersPool = sync.Pool{New: func() any { return new(layersFrame) }}

// putLayers clears the first n of f's layers, the most a decision of n
// specs can have filled (dropping their keys and policies; the others are
// clear already), and returns f to the pool.
func putLayers(f *layersFrame, n int) {
	clear(f.layers[:min(n, len(f.layers))])
	layersPool.Put(f)
}

// LayersAt validates specs and builds the store layers for a decision of
// the given cost at now.
func (l *Limiter) LayersAt(now time.Time, cost int64, specs ...LayerSpec) ([]Layer, error) {
	if len(specs) == 0 || len(specs) > MaxLayers {
		return nil, fmt.Errorf("%w: %d layers (want 1..%d)", ErrInvalidLayers, len(specs), MaxLayers)
	}
	return l.appendLayers(make([]Layer, 0, len(specs)), now, cost, specs)
}

// appendLayers is LayersAt building the layers in dst[:len(specs)] (dst
// has the capacity for them: len(specs) <= MaxLayers).
func (l *Limiter) appendLayers(dst []Layer, now time.Time, cost int64, specs []LayerSpec) ([]Layer, error) {
	us := now.UnixMicro()
	if len(specs) == 0 || len(specs) > MaxLayers || cap(dst) < len(specs) {
		return nil, fmt.Errorf("%w: %d layers (want 1..%d)", ErrInvalidLayers, len(specs), MaxLayers)
	}
	if err := ValidateCost(cost); err != nil {
		return nil, err
	}
	if err := ValidateTime(us); err != nil {
		return nil, err
	}
	layers := dst[:len(specs)]
	for i, s := range specs {
		if err := s.Policy.Validate(); err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		if err := checkPeriod(&s.Policy, us); err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		if s.Cost < 0 {
			return nil, fmt.Errorf("layer %d: %w: layer cost %d is negative (0 takes the decision's cost)", i, ErrInvalidCost, s.Cost)
		}
		c := cost
		if s.Cost > 0 {
			c = s.Cost
		}
		if s.Peek {
			c = 0
		}
		if err := ValidateCost(c); err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		layers[i] = Layer{Policy: s.Policy, Key: l.keyAt(s.Policy, s.Identity, us), Cost: c}
	}
	for i := range layers {
		for j := i + 1; j < len(layers); j++ {
			if layers[i].Key == layers[j].Key {
				return nil, fmt.Errorf("%w: layers %d and %d use the same key %q", ErrInvalidLayers, i, j, layers[i].Key)
			}
		}
	}
	return layers, nil
}

// Outlasts reports whether the denial a lasts longer than the denial b,
// so that a layered decision denied by both reports a (see
// Decision.Binding): a cost above its layer's capacity, which never passes
// however long the client waits, outlasts any other denial; otherwise the
// longer RetryAfter does. Neither outlasts the other on a tie.
func Outlasts(a, b Result) bool {
	ac, bc := a.Reason == ReasonCostExceedsLimit, b.Reason == ReasonCostExceedsLimit
	if ac || bc {
		return ac && !bc
	}
	return a.RetryAfter > b.RetryAfter
}

// NewDecision combines per-layer results into a Decision, marking layers
// that would have admitted a denied request with ReasonOtherLayer.
func NewDecision(out []Result) Decision {
	d := Decision{Allowed: true, Layers: out}
	for i, r := range out {
		if !r.Allowed {
			if d.Allowed || Outlasts(r, out[d.Binding]) {
				d.Binding = i
			}
			d.Allowed = false
		}
	}
	if d.Allowed {
		best := -1.0
		for i, r := range out {
			frac := float64(r.Remaining) / float64(max(r.Limit, 1))
			if best < 0 || frac < best {
				best, d.Binding = frac, i
			}
		}
		return d
	}
	for i := range out {
		if out[i].Allowed {
			out[i].Allowed = false
			out[i].Reason = ReasonOtherLayer
		}
	}
	return d
}
