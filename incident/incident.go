// Package incident reproduces a classic rate-limiter incident, the one
// Floodgate is built to never repeat, next to the fix.
//
// An API allowed 1,000 requests per hour per key with GET → compare → INCR.
// A client sent 50 requests at once while the counter stood at 998: all 50
// read 998, all passed the check, and the counter reached 1,048 — 48
// requests over the limit. Each command was atomic; the sequence was not.
//
// Run plays that scene twice against the same backend (in memory, or a
// real Redis): once with the naive limiter (NaiveAllow), once with
// Floodgate's limiter, whose every decision is one atomic step. The naive
// one lets about all the requests through; Floodgate lets exactly the 2
// that fit.
package incident

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/nilcheck"
	"github.com/floodgate-rl/floodgate/internal/plural"
)

// ErrInvalidOptions reports options out of range.
var ErrInvalidOptions = errors.New("incident: invalid options")

// MaxGap is the longest Options.Gap.
const MaxGap = time.Second

// Options sets the scene. The zero value is the incident's: limit 1000,
// counter at 998, 50 concurrent requests, 2ms between read and write.
type Options struct {
	// Limit is the requests allowed per hour. Default 1000.
	Limit int64
	// Start is where the counter stands when the burst arrives (0..Limit).
	// Zero means Limit-2 (998 for the default limit) unless StartAtZero is
	// set.
	Start int64
	// StartAtZero makes the counter start at 0 instead of the default.
	StartAtZero bool
	// Requests is how many requests arrive at once (1..10000). Default 50.
	Requests int
	// Gap is how long the naive limiter spends between reading the
	// counter and incrementing it: the network round trip and the
	// application's own work (0..1s). Default 2ms.
	Gap time.Duration
	// Identity is the API key the requests carry. Default "demo-key".
	Identity string
}

func (o *Options) normalize() error {
	if o.Limit == 0 {
		o.Limit = 1000
	}
	if o.Requests == 0 {
		o.Requests = 50
	}
	if o.Gap == 0 {
		o.Gap = 2 * time.Millisecond
	}
	if o.Identity == "" {
		o.Identity = "demo-key"
	}
	if o.Start == 0 && !o.StartAtZero {
		o.Start = max(o.Limit-2, 0)
	}
	switch {
	case o.Limit < 1 || o.Limit > floodgate.MaxLimit:
		return fmt.Errorf("%w: limit %d out of range 1..%d", ErrInvalidOptions, o.Limit, int64(floodgate.MaxLimit))
	case o.Start < 0 || o.Start > o.Limit:
		return fmt.Errorf("%w: start %d out of range 0..%d (the limit)", ErrInvalidOptions, o.Start, o.Limit)
	case o.Requests < 1 || o.Requests > 10_000:
		return fmt.Errorf("%w: requests %d out of range 1..10000", ErrInvalidOptions, o.Requests)
	case o.Gap < 0 || o.Gap > MaxGap:
		return fmt.Errorf("%w: gap %v out of range 0..%v (0: the default, 2ms)", ErrInvalidOptions, o.Gap, MaxGap)
	}
	return nil
}

// Outcome is what one limiter did with the burst.
type Outcome struct {
	// Allowed is how many of the requests were let through.
	Allowed int
	// Final is the counter's value afterwards: how many requests the
	// limiter believes it admitted in the hour.
	Final int64
}

// Report is the result of Run.
type Report struct {
	// Options are the scene's, defaults filled in.
	Options Options
	// Backend describes where the counters lived, e.g. "memory".
	Backend string
	// Naive is the GET → compare → INCR limiter's outcome.
	Naive Outcome
	// Atomic is Floodgate's outcome.
	Atomic Outcome
}

// Fits returns how many requests could be allowed without exceeding the
// limit: min(Limit-Start, Requests).
func (r Report) Fits() int {
	return int(min(r.Options.Limit-r.Options.Start, int64(r.Options.Requests)))
}

// OverLimit returns how many requests an outcome let through beyond the
// limit.
func (r Report) OverLimit(o Outcome) int { return max(o.Allowed-r.Fits(), 0) }

// String renders both outcomes side by side.
func (r Report) String() string {
	o := r.Options
	var b strings.Builder
	fmt.Fprintf(&b, "The incident (%s): limit %s per hour per API key, counter at %d,\n", r.Backend, plural.Count(o.Limit, "request", "requests"), o.Start)
	fmt.Fprintf(&b, "%s at the same moment. %d of them %s under the limit.\n\n", plural.Count(o.Requests, "request arrives", "requests arrive"), r.Fits(), plural.Word(r.Fits(), "fits", "fit"))
	line := func(name string, oc Outcome) {
		pad := strings.Repeat(" ", max(30-utf8.RuneCountInString(name), 1))
		fmt.Fprintf(&b, "  %s%s%4d allowed, counter %d → %d, %d over the limit\n", name, pad, oc.Allowed, o.Start, oc.Final, r.OverLimit(oc))
	}
	line("naive GET → compare → INCR:", r.Naive)
	line("floodgate (one atomic step):", r.Atomic)
	b.WriteString("\n")
	switch n := r.OverLimit(r.Naive); {
	case n > 0 && r.Naive.Allowed == o.Requests:
		fmt.Fprintf(&b, "The naive limiter let %s too many through: every request read the\n", plural.Count(n, "request", "requests"))
		b.WriteString("counter before any of them wrote it. Each command is atomic; the sequence is not.\n")
	case n > 0:
		fmt.Fprintf(&b, "The naive limiter let %s too many through: %s the counter\n", plural.Count(n, "request", "requests"), plural.Count(r.Naive.Allowed, "request read", "requests read"))
		b.WriteString("while it was still under the limit, before the others' writes reached it. Each\n")
		b.WriteString("command is atomic; the sequence is not.\n")
	default:
		b.WriteString("The naive limiter happened not to overshoot this time; the race is still there.\n")
	}
	if r.OverLimit(r.Atomic) == 0 {
		b.WriteString("Floodgate increments and compares in one atomic step, so it cannot overshoot.\n")
	}
	return b.String()
}

// Env is where the scene is played: storage for the naive counter and a
// store for Floodgate. Build it with Memory or Redis.
type Env struct {
	// Backend describes the storage, e.g. "memory" or "redis 127.0.0.1:6379".
	Backend string
	// Counter holds the naive limiter's counter.
	Counter Counter
	// Store is Floodgate's store.
	Store floodgate.Store
	// Prefix starts every key the scene writes; it must be valid for
	// floodgate.ValidatePrefix and unique to this run.
	Prefix string
	// Forget deletes the keys of Floodgate's store after the run. Nil
	// leaves them: a later Run with the same Prefix on the same Store then
	// starts from the counts this one left (Memory and Redis set it).
	Forget func(ctx context.Context, keys ...string) error
	// Warm, if set, readies the backend for n requests at once before the
	// bursts, so that they race over open connections instead of dialing
	// (Redis sets it; nil when there is nothing to prepare).
	Warm func(ctx context.Context, n int) error
}

// Run plays the scene with both limiters and deletes what it wrote: the
// naive counter through env.Counter, Floodgate's state through env.Forget
// (Memory's and Redis's environments have one), so that runs on one
// environment are alike. It refuses an environment without a counter or a
// store, including a nil pointer in one, or a RedisCounter without a
// client, with an error wrapping ErrInvalidOptions.
func Run(ctx context.Context, env Env, opts Options) (Report, error) {
	if err := opts.normalize(); err != nil {
		return Report{}, err
	}
	if err := env.check(); err != nil {
		return Report{}, err
	}
	if err := floodgate.ValidatePrefix(env.Prefix); err != nil {
		return Report{}, err
	}
	rep := Report{Options: opts, Backend: env.Backend}
	if env.Warm != nil {
		if err := env.Warm(ctx, opts.Requests); err != nil {
			return rep, fmt.Errorf("incident: opening connections for the burst: %w", err)
		}
	}
	var err error
	if rep.Naive, err = runNaive(ctx, env, opts); err != nil {
		return rep, fmt.Errorf("incident: naive limiter: %w", err)
	}
	if rep.Atomic, err = runAtomic(ctx, env, opts); err != nil {
		return rep, fmt.Errorf("incident: floodgate: %w", err)
	}
	return rep, nil
}

// check refuses an environment whose counter or store is missing: nil, or
// a nil pointer (or a RedisCounter without a client) that would panic on
// first use.
func (env Env) check() error {
	switch c := env.Counter.(type) {
	case RedisCounter:
		if nilcheck.IsNil(c.Client) {
			return fmt.Errorf("%w: environment's RedisCounter has no client (%T)", ErrInvalidOptions, c.Client)
		}
	case *RedisCounter:
		if c != nil && nilcheck.IsNil(c.Client) {
			return fmt.Errorf("%w: environment's RedisCounter has no client (%T)", ErrInvalidOptions, c.Client)
		}
	}
	if nilcheck.IsNil(env.Counter) {
		return fmt.Errorf("%w: environment lacks a counter (%T)", ErrInvalidOptions, env.Counter)
	}
	if nilcheck.IsNil(env.Store) {
		return fmt.Errorf("%w: environment lacks a store (%T)", ErrInvalidOptions, env.Store)
	}
	return nil
}

// NaiveAllow is the limiter of the incident, kept as an example of what not
// to do: it reads the counter, compares, and increments in a separate
// command, waiting gap in between as a network round trip would.
// Concurrent callers all read the same value and all pass.
func NaiveAllow(ctx context.Context, c Counter, key string, limit int64, gap time.Duration) (bool, error) {
	n, err := c.Get(ctx, key)
	if err != nil {
		return false, err
	}
	if n >= limit {
		return false, nil
	}
	if gap > 0 {
		time.Sleep(gap)
	}
	if _, err := c.Incr(ctx, key); err != nil {
		return false, err
	}
	return true, nil
}

// burst runs n calls of f at once (released together) and counts trues.
func burst(n int, f func() (bool, error)) (int, error) {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		allowed int
		first   error
	)
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ok, err := f()
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
			if ok {
				allowed++
			}
		}()
	}
	close(start)
	wg.Wait()
	return allowed, first
}

func runNaive(ctx context.Context, env Env, o Options) (Outcome, error) {
	key := env.Prefix + ":naive:{" + floodgate.EncodeIdentity(o.Identity) + "}"
	defer func() { _ = env.Counter.Delete(context.WithoutCancel(ctx), key) }()
	if err := env.Counter.Set(ctx, key, o.Start); err != nil {
		return Outcome{}, err
	}
	allowed, err := burst(o.Requests, func() (bool, error) {
		return NaiveAllow(ctx, env.Counter, key, o.Limit, o.Gap)
	})
	if err != nil {
		return Outcome{}, err
	}
	final, err := env.Counter.Get(ctx, key)
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{Allowed: allowed, Final: final}, nil
}

func runAtomic(ctx context.Context, env Env, o Options) (Outcome, error) {
	lim, err := floodgate.New(env.Store, floodgate.Options{Prefix: env.Prefix})
	if err != nil {
		return Outcome{}, err
	}
	p, err := floodgate.NewFixedWindow("incident", o.Limit, time.Hour)
	if err != nil {
		return Outcome{}, err
	}
	if env.Forget != nil {
		defer func() { _ = env.Forget(context.WithoutCancel(ctx), lim.Key(p, o.Identity)) }()
	}
	// One instant for the whole scene, so the hour cannot roll over midway.
	now := time.Now()
	if o.Start > 0 {
		r, err := lim.AllowAt(ctx, now, p, o.Identity, o.Start)
		if err != nil {
			return Outcome{}, err
		}
		if !r.Allowed {
			return Outcome{}, fmt.Errorf("presetting the counter to %d was refused (%v)", o.Start, r.Reason)
		}
	}
	allowed, err := burst(o.Requests, func() (bool, error) {
		r, err := lim.AllowAt(ctx, now, p, o.Identity, 1)
		return r.Allowed, err
	})
	if err != nil {
		return Outcome{}, err
	}
	r, err := lim.PeekAt(ctx, now, p, o.Identity)
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{Allowed: allowed, Final: o.Limit - r.Remaining}, nil
}
