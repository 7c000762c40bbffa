// Package fallback keeps a rate limiter deciding when its primary store
// (Redis) fails.
//
// A Store wraps a primary floodgate.Store and a local one (usually a
// memstore.Store). Every primary call runs under a deadline: the caller's
// context, shortened to a per-policy budget of tens of milliseconds. When
// the call fails, times out or the circuit breaker keeps it from being made,
// the decision is taken by the policy's failure Mode: ModeLocal decides
// with the local store at a wider per-instance limit, ModeOpen admits,
// ModeClosed denies. A circuit breaker stops calling a dead primary, lets a
// few probes through after a jittered pause, and returns to central counting
// by itself once they succeed. The decisions of one request (a batch of
// checks; NewRequestContext) share one budget for a failing primary: once
// one of its calls has timed out, the rest are taken by the failure mode
// at once.
//
// A failure that may have happened after the primary applied the decision
// (floodgate.ErrIndeterminate) is never retried against the primary: a retry
// could count the request twice. It goes to the failure mode like any other
// failure.
//
// Callers learn how a decision was taken through an Outcome attached to the
// context (NewContext), and operators through the Observer (see package
// metrics) and the OnFallback and OnDegraded hooks. Package httplimit
// learns it by itself on a *floodgate.Limiter over a Store: it answers a
// ModeClosed denial as a failed store (503) and marks the others.
//
// # Redis client options
//
// For a primary on Redis (redisstore.Store), build the go-redis client so
// that a Redis that is down fails within the budget:
//
//	redis.NewClient(&redis.Options{
//		Addr:                  addr,
//		ContextTimeoutEnabled: true, // the budget's deadline bounds the round trip
//		DialerRetries:         1,    // dial once per command that needs a connection
//		MaxRetries:            1,    // a plain command is sent again once...
//		MinRetryBackoff:       -1,   // ...without a pause
//		MaxRetryBackoff:       -1,
//	})
//
// (the same on redis.FailoverOptions; on redis.ClusterOptions the dial
// attempts and the backoffs, MaxRedirects bounding its retries; serve's
// clients are built so: config.DialAttempts, config.CommandRetries). With
// go-redis v9.23's defaults, a refused connection is dialled five times
// with backoff (about 400 ms) and a plain command retried three times
// after pauses of 10 ms and more, so a decision on a Redis refusing
// connections uses the whole budget and is reported as ReasonTimeout, not
// ReasonUnavailable, until the breaker opens. The scripts floodgate sends
// are never sent again whatever MaxRetries says.
package fallback

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/deadline"
	"github.com/floodgate-rl/floodgate/internal/nilcheck"
)

// DefaultBudget is the primary call budget when Options.Budget is zero.
const DefaultBudget = 50 * time.Millisecond

// MaxBudget is the largest budget accepted: a rate limiter that waits
// longer than this on its store is no longer protecting anything.
const MaxBudget = 10 * time.Second

// Observer receives what a Store sees, for metrics. Its methods are called
// synchronously on the decision path (ObserveBreaker while the breaker's
// lock is held, so changes arrive in order): they must be fast and must not
// call back into the Store. Package metrics implements it.
type Observer interface {
	// ObservePrimary reports one call to the primary store: how long it
	// took and its error (nil on success).
	ObservePrimary(d time.Duration, err error)
	// ObserveFallback reports one decision taken by failure mode m for
	// reason r.
	ObserveFallback(m Mode, r Reason)
	// ObserveBreaker reports the new state of the breaker of a partition
	// (DefaultPartition without Options.Partition), once when the breaker
	// is created and then at every change.
	ObserveBreaker(partition string, s BreakerState)
}

// CauseObserver is implemented by an Observer that wants to know why a
// breaker opened and why it stays open, to log it (serve does): the
// error of the failed call that opened it, and the result of each
// background probe (Options.Probe) while it is open.
type CauseObserver interface {
	// ObserveBreakerCause is called in place of Observer.ObserveBreaker,
	// at the same moments and under the same lock, with cause: the
	// error of the failed call (a decision, a Call or CallWrite, or a
	// half-open probe) that opened the breaker when s is BreakerOpen,
	// nil otherwise.
	ObserveBreakerCause(partition string, s BreakerState, cause error)
	// ObserveProbe reports one background probe of partition while its
	// breaker is open: the probe's error, nil when it succeeded. It is
	// called from the probe's goroutine, about every
	// BreakerOptions.ProbeInterval, with no lock held, before the
	// breaker acts on the result (so a closing is reported after the
	// probe that closed it). It must not call back into the Store.
	ObserveProbe(partition string, err error)
}

// BreakerForgetter is implemented by an Observer that keeps something per
// partition (a metric series): ForgetBreaker is called when the Store
// drops a partition's breaker because the partition is gone (its probe
// returned ErrPartitionGone).
type BreakerForgetter interface {
	ForgetBreaker(partition string)
}

// ErrPartitionGone is returned (wrapped or not) by an Options.Probe whose
// partition no longer exists: a Redis Cluster primary no longer in the
// slot map (failed over to its replica, or removed). Its breaker closes and
// is dropped, so that BreakerStates (readiness) and the breaker metric stop
// listing a node that serves nothing; a key that maps to that name again
// gets a new breaker.
var ErrPartitionGone = errors.New("fallback: the partition is gone")

// Options configures a Store. The zero value is ready to use: every policy
// falls back to the local store at its own limit per instance, primary
// calls have a 50ms budget, and the breaker uses its defaults.
type Options struct {
	// DefaultMode is the failure mode of policies not in Modes. Zero means
	// ModeLocal.
	DefaultMode Mode
	// Modes sets the failure mode per policy name, e.g. {"login": ModeClosed}.
	// The map is copied by New.
	Modes map[string]Mode
	// ModeFor, if set, returns the failure mode of a policy, or 0 to let
	// Modes and DefaultMode decide. It is asked at every degraded
	// decision, so it can follow a configuration reloaded live (for
	// example a policy's on_redis_failure). Keep it fast.
	ModeFor func(policy string) Mode
	// Budget bounds each primary call. When the caller's deadline leaves
	// less than the budget, the call gets four fifths of the time left, so
	// that the failure mode answers before that deadline; time spent on
	// earlier calls of the same request (SpendBudget), and the time the
	// failed calls of a request's earlier decisions took
	// (NewRequestContext), come out of it.
	// Zero means DefaultBudget (50ms); at most MaxBudget.
	Budget time.Duration
	// Budgets sets the budget per policy name. A decision over several
	// layers uses the smallest of its layers' budgets. Copied by New.
	Budgets map[string]time.Duration
	// Instances is the number of instances expected to share the primary;
	// ModeLocal divides each limit (and burst) by it. Zero means 1.
	Instances int
	// Factor multiplies each limit (and burst) in ModeLocal after the
	// division by Instances, so that uneven load across instances is not
	// denied too early: the local limit is ceil(limit / Instances × Factor),
	// at least 1. Zero means 1; e.g. Instances 10 and Factor 2 let each of
	// 10 instances admit a fifth of the limit, 2× the limit in total.
	Factor float64
	// LocalPolicy, if set, replaces Instances and Factor: it returns the
	// policy the local store applies in place of p. It must keep p.Name and
	// p.Algorithm and return a valid policy; if it does not, the decision
	// fails with floodgate.ErrInvalidPolicy.
	LocalPolicy func(p floodgate.Policy) floodgate.Policy
	// Breaker configures the circuit breakers.
	Breaker BreakerOptions
	// Partition, if set, names the failure domain of a storage key, and
	// each domain gets its own breaker: with Redis Cluster, name the primary
	// serving the key's slot (see ClusterPartition), so that one dead
	// primary opens only its own breaker and keys on the others keep
	// central counting. A decision uses the breaker of its first layer's
	// key; one whose layers span partitions (a Redis Cluster decision
	// split over primaries) is decided by its failure mode while any of
	// their breakers is open, and a failure the primary reports with a
	// floodgate.FailedKeyError counts against that key's partition. ""
	// means DefaultPartition. At most MaxPartitions breakers are kept.
	// Nil: one breaker. Partition is called with the decision's context,
	// already bounded by its budget.
	Partition func(ctx context.Context, key string) string
	// Partitions, if set with Partition, lists the partitions that exist
	// now (for Redis Cluster, the primaries of the slot map: see
	// ClusterPartitions). Every PartitionSweep, a closed breaker whose
	// partition is no longer listed is dropped, and forgotten by the
	// Observer (BreakerForgetter): a primary demoted by a coordinated
	// failover, whose breaker never opened (an open one's Probe finds
	// its partition gone). A listing that fails drops nothing. Close
	// stops the sweep. Nil: such breakers stay, closed.
	Partitions func(ctx context.Context) ([]string, error)
	// PartitionSweep is how often Partitions is called. Zero means 10s.
	PartitionSweep time.Duration
	// Probe, if set, checks the health of the primary's partition (see
	// Partition; DefaultPartition without it), for example with a PING or
	// a small write. While a breaker is open, Probe is called in the
	// background every Breaker.ProbeInterval (jittered), whatever the
	// traffic, each call bounded by Budget; after Breaker.ProbeSuccesses
	// successes in a row the breaker closes. Requests are then never used
	// as probes, and recovery takes about ProbeSuccesses × ProbeInterval
	// after the primary is healthy, however long the outage. Call Close to
	// stop the probes. Nil: probes are requests let through after the open
	// period (Breaker.OpenFor, doubling up to MaxOpenFor).
	Probe func(ctx context.Context, partition string) error
	// OnFallback, if set, is called after every decision taken by a failure
	// mode, with its reason and the primary's error (ErrBreakerOpen when
	// the breaker kept the call from the primary), so the application can
	// alert or log. It runs synchronously on the decision path: keep it
	// fast.
	OnFallback func(reason Reason, err error)
	// OnDegraded, if set, is called after every decision taken by a
	// failure mode, as OnFallback (after it), with the decision's
	// context and what OnFallback lacks: its layers and the mode applied
	// (see Degraded). Serve logs each such decision with it at debug
	// level. It runs synchronously on the decision path: keep it fast,
	// and cheap when it does nothing (a logger's Enabled check before
	// anything is built).
	OnDegraded func(ctx context.Context, d Degraded)
	// Observer, if set, receives latencies, fallbacks and breaker changes.
	Observer Observer
	// Now returns the current time for the breaker's timing (not for
	// decisions: those use the time the Limiter passes). Default time.Now.
	Now func() time.Time
}

// Store is a floodgate.Store that decides with a primary store and, when
// that fails, with a failure mode. It is safe for concurrent use. Make it
// with New: the zero Store is not usable (floodgate.New refuses it).
type Store struct {
	primary, local floodgate.Store

	defMode    Mode
	modes      map[string]Mode
	modeFor    func(string) Mode
	budget     time.Duration
	budgets    map[string]time.Duration
	instances  atomic.Int64
	factor     float64
	localPol   func(floodgate.Policy) floodgate.Policy
	onFallback func(Reason, error)
	onDegraded func(context.Context, Degraded)
	obs        Observer
	now        func() time.Time
	breakers   *breakers
	// ticks gives primary calls their budget deadlines, sharing a timer
	// per millisecond instead of one per call (internal/deadline).
	ticks *deadline.Ticks
}

// New returns a Store deciding with primary and, while primary fails, by
// each policy's failure mode, using local for ModeLocal. It reports
// invalid options wrapped in ErrInvalidOptions.
// Usable returns nil for a Store made by New, and an error wrapping
// ErrInvalidOptions for the zero Store, which has no stores to decide with
// (see algo.UsableChecker).
func (s *Store) Usable() error {
	if s.primary == nil {
		return fmt.Errorf("%w: a zero fallback.Store has no stores; make it with fallback.New", ErrInvalidOptions)
	}
	return nil
}

func New(primary, local floodgate.Store, opts Options) (*Store, error) {
	if nilcheck.IsNil(primary) {
		return nil, fmt.Errorf("%w: nil primary store (%T)", ErrInvalidOptions, primary)
	}
	if nilcheck.IsNil(local) {
		return nil, fmt.Errorf("%w: nil local store (%T)", ErrInvalidOptions, local)
	}
	for _, st := range []struct {
		name  string
		store floodgate.Store
	}{{"primary", primary}, {"local", local}} {
		if u, ok := st.store.(interface{ Usable() error }); ok { // algo.UsableChecker
			if err := u.Usable(); err != nil {
				// The zero memstore.Store (say): its first decision
				// would panic.
				return nil, fmt.Errorf("%w: %s store: %w", ErrInvalidOptions, st.name, err)
			}
		}
	}
	if opts.DefaultMode == 0 {
		opts.DefaultMode = ModeLocal
	}
	if !opts.DefaultMode.valid() {
		return nil, fmt.Errorf("%w: default mode %v", ErrInvalidOptions, opts.DefaultMode)
	}
	modes := make(map[string]Mode, len(opts.Modes))
	for name, m := range opts.Modes {
		if !m.valid() {
			return nil, fmt.Errorf("%w: policy %q: mode %v (want ModeLocal, ModeOpen or ModeClosed)", ErrInvalidOptions, name, m)
		}
		modes[name] = m
	}
	if opts.Budget == 0 {
		opts.Budget = DefaultBudget
	}
	if err := validBudget("budget", opts.Budget); err != nil {
		return nil, err
	}
	budgets := make(map[string]time.Duration, len(opts.Budgets))
	for name, b := range opts.Budgets {
		if err := validBudget(fmt.Sprintf("policy %q: budget", name), b); err != nil {
			return nil, err
		}
		budgets[name] = b
	}
	if opts.Instances < 0 || opts.Instances > 1_000_000 {
		return nil, fmt.Errorf("%w: instances %d out of range 0..1000000", ErrInvalidOptions, opts.Instances)
	}
	if opts.Instances == 0 {
		opts.Instances = 1
	}
	if opts.Factor < 0 || opts.Factor > 1_000_000 || opts.Factor != opts.Factor {
		return nil, fmt.Errorf("%w: factor %v out of range 0..1000000", ErrInvalidOptions, opts.Factor)
	}
	if opts.Factor == 0 {
		opts.Factor = 1
	}
	if err := opts.Breaker.validate(); err != nil {
		return nil, err
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Store{
		ticks:      deadline.New(),
		primary:    primary,
		local:      local,
		defMode:    opts.DefaultMode,
		modes:      modes,
		modeFor:    opts.ModeFor,
		budget:     opts.Budget,
		budgets:    budgets,
		factor:     opts.Factor,
		localPol:   opts.LocalPolicy,
		onFallback: opts.OnFallback,
		onDegraded: opts.OnDegraded,
		obs:        opts.Observer,
		now:        opts.Now,
	}
	s.instances.Store(int64(opts.Instances))
	s.breakers = newBreakers(opts.Breaker, opts.Now, opts.Observer, opts.Partition, opts.Probe, opts.Budget)
	if opts.Partition != nil && opts.Partitions != nil {
		every := opts.PartitionSweep
		if every <= 0 {
			every = DefaultPartitionSweep
		}
		s.breakers.sweep(opts.Partitions, every)
	}
	return s, nil
}

// DefaultPartitionSweep is Options.PartitionSweep's default.
const DefaultPartitionSweep = 10 * time.Second

// Close stops the background health probes (Options.Probe) and the sweep
// of gone partitions (Options.Partitions), and waits for them to return. The Store keeps deciding; an open breaker then stays
// open. Close is safe to call more than once.
func (s *Store) Close() { s.breakers.close() }

// SetInstances changes the number of instances ModeLocal divides limits
// by (see Options.Instances), for example to the live count of instances
// heartbeating into Redis. n below 1 is taken as 1. Safe for concurrent
// use; it applies to the next decision.
func (s *Store) SetInstances(n int) {
	s.instances.Store(int64(min(max(n, 1), 1_000_000)))
}

// Instances returns the number of instances ModeLocal divides limits by.
func (s *Store) Instances() int { return int(s.instances.Load()) }

func validBudget(what string, b time.Duration) error {
	if b <= 0 || b > MaxBudget {
		return fmt.Errorf("%w: %s %v out of range (0, %v]", ErrInvalidOptions, what, b, MaxBudget)
	}
	return nil
}

// Mode returns the failure mode of the policy named name: ModeFor's
// answer, else Modes', else DefaultMode.
func (s *Store) Mode(name string) Mode {
	if s.modeFor != nil {
		if m := s.modeFor(name); m.valid() {
			return m
		}
	}
	if m, ok := s.modes[name]; ok {
		return m
	}
	return s.defMode
}

// Budget returns the primary call budget of the policy named name.
func (s *Store) Budget(name string) time.Duration {
	if b, ok := s.budgets[name]; ok {
		return b
	}
	return s.budget
}

// BreakerState returns the most severe state among the circuit breakers
// (open, then half-open, then closed).
func (s *Store) BreakerState() BreakerState {
	worst := BreakerClosed
	for _, st := range s.breakers.states() {
		if st > worst {
			worst = st
		}
	}
	return worst
}

// BreakerStates returns the state of every breaker by partition name.
func (s *Store) BreakerStates() map[string]BreakerState { return s.breakers.states() }

// Decide implements floodgate.Store. It asks the primary store under the
// layers' budget unless the breaker is open; when the primary fails it
// decides by the failure mode and returns nil. A context whose deadline
// has already passed, or whose request's earlier calls used the budget
// (SpendBudget; NewRequestContext, after a call timed out), is decided by
// the failure mode at once (ReasonTimeout) without asking the primary. It
// returns an error only for a nil ctx (floodgate.ErrNilContext), for
// invalid layers (the primary's floodgate.ErrInvalid* errors, returned as
// they are), when the caller's
// context was cancelled (the primary's error), or when ModeLocal's local
// store fails too (wrapping floodgate.ErrStoreUnavailable and both
// errors).
func (s *Store) Decide(ctx context.Context, now int64, layers []floodgate.Layer, out []floodgate.Result) error {
	if ctx == nil {
		return errNilContext
	}
	if len(layers) == 0 || len(layers) > floodgate.MaxLayers || len(out) != len(layers) {
		return fmt.Errorf("%w: %d layers, %d results", floodgate.ErrInvalidLayers, len(layers), len(out))
	}
	o := outcomeFrom(ctx)
	if err := ctx.Err(); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			// The caller's deadline passed before the decision (spent on
			// earlier calls of the same request): no time to ask the
			// primary, which is not to blame.
			return s.degrade(ctx, o, s.breakers.shared, now, layers, out, ReasonTimeout, err)
		}
		return fmt.Errorf("%w: %w", floodgate.ErrStoreUnavailable, err)
	}
	budget := s.Budget(layers[0].Policy.Name)
	for _, l := range layers[1:] {
		budget = min(budget, s.Budget(l.Policy.Name))
	}
	if o != nil && o.spent+o.failed != 0 {
		// Earlier Redis calls of the same request (a tier lookup, the
		// failed calls of its earlier decisions) used part of the
		// budget: Redis delays a request by one budget at most, not one
		// per call, and a stalled Redis is blamed once per request.
		budget -= o.spent + o.failed
		o.spent, o.counted = 0, 0
		if budget <= 0 {
			return s.degrade(ctx, o, s.breakers.shared, now, layers, out, ReasonTimeout, ErrBudgetSpent)
		}
	}
	br := s.breakers.shared
	if s.breakers.partition != nil {
		// A shared deadline, like the call's below: with Redis Cluster
		// this bounds every decision's partition lookup, whose time
		// comes out of the call's budget.
		pstart := time.Now()
		pctx, pcancel := s.ticks.WithTimeout(ctx, pstart, budget)
		br = s.breakers.forKey(pctx, layers[0].Key)
		pcancel()
		if budget -= time.Since(pstart); budget <= 0 {
			return s.degrade(ctx, o, br, now, layers, out, ReasonTimeout, ErrBudgetSpent)
		}
	}
	if s.breakers.partition != nil && len(layers) > 1 {
		// The other layers may live on other partitions (a Redis Cluster
		// decision split over primaries): one whose breaker is open
		// cannot be decided there, so neither can the decision.
		for _, l := range layers[1:] {
			if other := s.breakers.forKey(ctx, l.Key); other != br && other.isOpen() {
				return s.degrade(ctx, o, other, now, layers, out, ReasonBreakerOpen, ErrBreakerOpen)
			}
		}
	}
	t, gen := br.acquireGen()
	if t == ticketDenied {
		// No budget context (and its timer) on this path: while the
		// breaker is open, a decision costs what a local one costs.
		return s.degrade(ctx, o, br, now, layers, out, ReasonBreakerOpen, ErrBreakerOpen)
	}
	start := time.Now()
	// The budget's deadline shares its timer with the calls of the same
	// millisecond and may come up to a millisecond early. A caller's
	// deadline earlier than the budget (Envoy's is 20 ms by default)
	// shortens the call so that it ends a fifth of the caller's time
	// before that deadline: the failure mode then answers while the
	// caller still waits, and the failure counts against Redis. Ending
	// the call at the caller's deadline itself answered too late, and a
	// gRPC caller that gave up first cancelled the call, which the
	// breaker does not count: a stalled Redis then never opened it. A
	// caller that cancels its context meanwhile gets its answer when the
	// call returns, within the budget (internal/deadline), a bound below
	// 16 ms (Envoy's 20 ms deadline gives one) included: such a call
	// ended with its caller's cancellation, and callers whose decisions
	// went alone (one at a time) kept the breaker closed on a stalled
	// Redis (lonecancel). A call not sent yet for a caller that has gone
	// is still dropped (deadline.Gone).
	cctx, cancel := s.ticks.WithCallTimeout(ctx, start, callBound(ctx, start, budget))
	defer cancel()
	err := s.primary.Decide(cctx, now, layers, out)
	elapsed := time.Since(start)
	if s.obs != nil && !errors.Is(err, context.Canceled) {
		// A call the caller's cancellation ended (dropped from the queue
		// unsent for a client that had gone) says nothing of Redis: as a
		// Redis error, client hang-ups fed rate_limit_redis_errors_total
		// and its latency histogram (hangupwalk).
		s.obs.ObservePrimary(elapsed, err)
	}
	if err == nil {
		br.release(t, verdictSuccess)
		if o != nil {
			o.set(Outcome{})
		}
		return nil
	}
	if isCallerError(err) || callerGone(err) {
		// Not the primary's fault: bad input, or a caller that gave up.
		br.release(t, verdictNeutral)
		if o != nil {
			o.set(Outcome{Err: err})
		}
		return err
	}
	if errors.Is(err, floodgate.ErrForeignValue) {
		// One identity's key holds something floodgate did not write: the
		// primary answered, and counting it would let that one key open
		// the breaker for every identity. Decided locally all the same.
		// The error names the decision's keys (Redis's WRONGTYPE names
		// none), for the operator who must delete the one at fault.
		br.release(t, verdictNeutral)
		return s.degrade(ctx, o, br, now, layers, out, ReasonForeignValue, fmt.Errorf("keys %q: %w", layerKeys(layers), err))
	}
	var fk *floodgate.FailedKeyError
	if s.breakers.partition != nil && errors.As(err, &fk) {
		if other := s.breakers.forKey(ctx, fk.Key); other != br {
			// The call that failed went to another partition (a split
			// Cluster decision): blame its breaker, not the first
			// layer's, whose primary may be healthy (a dead primary
			// opened the breaker of the one holding a global layer,
			// and every identity's decisions went to the fallback).
			br.release(t, verdictNeutral)
			if ot := other.acquire(); ot != ticketDenied {
				other.releaseCause(ot, verdictFailure, err)
			}
			br = other
			t = ticketDenied
		}
	}
	if t != ticketDenied {
		br.releaseGen(t, verdictFailure, gen, err)
	}
	o.fail(elapsed, timedOut(cctx, err))
	return s.degrade(ctx, o, br, now, layers, out, classify(err), err)
}

// Call runs fn, a call to the primary's backend other than a decision (a
// tier lookup, a read), through the circuit breaker of key's partition
// (DefaultPartition when key is ""), so that it is not made while the
// breaker is open and its failures count toward opening it. It returns
// ErrBreakerOpen without calling fn when the breaker is open,
// ErrBudgetSpent without calling fn when ctx is a request's
// (NewRequestContext) whose failed calls have used the budget
// (Options.Budget; a call of fn that times out uses all of it), and
// otherwise fn's error. A failure of fn counts toward opening the
// breaker; a success does not count as one toward keeping it closed (or
// closing it): a read that works says little about whether writes can be
// made (with Redis out of memory, tier lookups succeed while every
// decision fails). Decisions, and writes through CallWrite, vouch for the
// primary's health. fn runs under ctx as given (no budget is added):
// bound ctx as the operation needs. fn should return nil for errors that
// say nothing about the backend's health (bad input, a reply the caller
// does not like); an error after ctx was cancelled by the caller is not
// counted either. A nil fn is an error wrapping floodgate.ErrInvalidPolicy,
// and a nil ctx one wrapping floodgate.ErrNilContext, both returned
// before the breaker is consulted.
func (s *Store) Call(ctx context.Context, key string, fn func(ctx context.Context) error) error {
	if fn == nil {
		return fmt.Errorf("%w: fallback: Call: nil function", floodgate.ErrInvalidPolicy)
	}
	return s.call(ctx, key, fn, nil)
}

// CallWrite is Call for an operation that may write (a quota or lease
// script): when fn returns wrote true and a nil error, the call vouches
// for the primary as a successful decision does: it ends the run of
// consecutive failures, counts as a success in the failure rate and, as a
// half-open probe, toward closing the breaker. A success with wrote false
// is neutral, as Call's. fn should report wrote only when the primary
// accepted a write that a Redis out of memory refuses (a command that can
// grow memory: ZADD, HSET), so that such a Redis still opens the breaker.
// Redis 7 (checked on 7.0.15) refuses a script without flags (no "#!lua"
// line, as floodgate's are) only at its first such command, and only when
// the script wrote nothing before it: a script that only reads or deletes
// (a lease release: ZREM) succeeds on a Redis out of memory and says
// nothing of its health, and one that deleted something first (an
// expired lease trimmed) may then add even there; such successes are
// rare next to the decisions failing meanwhile, which still open the
// breaker by their failure rate. A nil fn or ctx is an error, as for Call.
func (s *Store) CallWrite(ctx context.Context, key string, fn func(ctx context.Context) (wrote bool, err error)) error {
	if fn == nil {
		return fmt.Errorf("%w: fallback: CallWrite: nil function", floodgate.ErrInvalidPolicy)
	}
	return s.call(ctx, key, nil, fn)
}

// call is Call with read, or CallWrite with write (the other nil).
func (s *Store) call(ctx context.Context, key string, read func(ctx context.Context) error, write func(ctx context.Context) (bool, error)) error {
	if ctx == nil {
		return errNilContext
	}
	br := s.breakers.shared
	if key != "" {
		br = s.breakers.forKey(ctx, key)
	}
	if err := ctx.Err(); err != nil {
		return err // the caller's time ran out before the call: not the backend's fault
	}
	o := outcomeFrom(ctx)
	if o != nil && o.failed >= s.budget {
		return ErrBudgetSpent
	}
	t, gen := br.acquireGen()
	if t == ticketDenied {
		return ErrBreakerOpen
	}
	start := time.Now()
	var err error
	wrote := false
	if read != nil {
		err = read(ctx)
	} else {
		wrote, err = write(ctx)
	}
	elapsed := time.Since(start)
	if s.obs != nil && !errors.Is(err, context.Canceled) {
		s.obs.ObservePrimary(elapsed, err)
	}
	switch {
	case err == nil && wrote:
		br.release(t, verdictSuccess)
	case err == nil:
		br.release(t, verdictNeutral)
	case isCallerError(err) || errors.Is(err, floodgate.ErrForeignValue) || callerGone(err):
		br.release(t, verdictNeutral)
	default:
		br.releaseGen(t, verdictFailure, gen, err)
		// The request's budget pays for the failed call (all of it if
		// the call timed out), as for a failed decision: a Redis whose
		// lookups fail slowly (go-redis redialling a refused
		// connection) delays the request by one budget in all, not by
		// one lookup per check.
		o.failCall(elapsed, timedOut(ctx, err))
	}
	return err
}

// errNilContext is Decide's, Call's and CallWrite's error for a nil
// context.
var errNilContext = fmt.Errorf("fallback: %w", floodgate.ErrNilContext)

// layerKeys returns the keys of layers.
func layerKeys(layers []floodgate.Layer) []string {
	keys := make([]string, len(layers))
	for i := range layers {
		keys[i] = layers[i].Key
	}
	return keys
}

// timedOut reports a failed call that ran out of time: its context's
// deadline passed, or err says so.
func timedOut(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
}

// callBound returns how long a primary call started at start may take:
// the budget, or, when the caller's deadline leaves less than that, four
// fifths of the caller's time left, so that the failure mode can answer
// before the caller's deadline.
func callBound(ctx context.Context, start time.Time, budget time.Duration) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		if left := d.Sub(start); left-left/5 < budget {
			return max(left-left/5, 0)
		}
	}
	return budget
}

// callerGone reports a call that failed because its caller went away:
// err wraps context.Canceled, which only a caller's cancellation gives
// (the store's own bounds are deadlines). The Redis store's queue drops
// a queued call whose client has gone (deadline.Gone: serve's
// --decision-timeout and envoyrls's own timeout are shared deadlines,
// which do not end with the client's request) with such an error, and
// nothing was sent; a call sent ends by its own bound or with its
// answer, never with its caller's cancellation (Ticks.WithCallTimeout,
// whatever the bound). Counted against the primary, clients hanging up
// while their calls waited in the queue could open the breaker of a
// healthy Redis. A call that was sent and
// failed by its own bound (timed out on a stalled Redis) counts against
// it whether or not its client has gone since: reading the client's
// departure (the context's end, or deadline.Gone) kept the breaker
// closed on a stalled Redis when every client gave up before the
// failure, HTTP clients with short timeouts (review11) and gRPC callers
// cancelling before their deadline, as Envoy does when the downstream
// request is reset (hangupwalk).
func callerGone(err error) bool {
	return errors.Is(err, context.Canceled)
}

// isCallerError reports errors caused by the request itself, which say
// nothing about the primary's health and would fail the same anywhere.
func isCallerError(err error) bool {
	return errors.Is(err, floodgate.ErrInvalidPolicy) || errors.Is(err, floodgate.ErrInvalidCost) ||
		errors.Is(err, floodgate.ErrInvalidKey) || errors.Is(err, floodgate.ErrInvalidLayers) ||
		errors.Is(err, floodgate.ErrInvalidTime)
}

// classify returns the fallback reason for a primary error. Indeterminate
// comes first: a timeout after the script was sent is indeterminate. A
// foreign value comes before unavailable, which it also wraps: it is one
// key, not the store, and an operator looking at Redis's health would not
// find it.
func classify(err error) Reason {
	switch {
	case errors.Is(err, floodgate.ErrForeignValue):
		return ReasonForeignValue
	case errors.Is(err, floodgate.ErrIndeterminate):
		return ReasonIndeterminate
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return ReasonTimeout
	case errors.Is(err, floodgate.ErrStoreUnavailable):
		return ReasonUnavailable
	}
	return ReasonError
}
