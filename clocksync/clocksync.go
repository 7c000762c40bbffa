// Package clocksync disciplines a rate limiter's clock to Redis.
//
// Floodgate's scripts never call TIME: the caller's timestamp goes through
// ARGV, so that a script replays identically on replicas. But then every
// instance stamps requests with its own clock, and instances disagree: one
// whose clock runs 5 s ahead refills buckets and opens windows 5 s early.
// A Clock measures the offset between the local clock and Redis's TIME the
// way NTP does, outside the scripts: it notes the local time before and
// after each TIME call, assumes the reply was produced at the midpoint of
// that round trip, and trusts the sample with the smallest round trip (its
// error is at most half that round trip). Now returns the local time
// corrected by that offset; pass it as floodgate.Options.Clock, and every
// instance stamps requests with (nearly) Redis's time.
package clocksync

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel errors of this package, wrapped with %w.
var (
	// ErrInvalidOptions reports Options that New cannot use.
	ErrInvalidOptions = errors.New("clocksync: invalid options")
	// ErrNoSample reports a round in which no TIME call succeeded.
	ErrNoSample = errors.New("clocksync: no time sample")
)

// TimeSource is the part of a go-redis v9 client a Clock uses:
// *redis.Client, *redis.ClusterClient (which asks a random node) and the
// failover clients all satisfy it.
type TimeSource interface {
	Time(ctx context.Context) *redis.TimeCmd
}

// Observer receives each round's estimate, for metrics (package metrics
// implements it). It is called synchronously by Sync: keep it fast.
type Observer interface {
	// ObserveClock reports the offset now applied (Redis's time minus the
	// local clock; positive when the local clock is behind) and the round
	// trip of the sample it comes from.
	ObserveClock(offset, rtt time.Duration)
}

// Options configures a Clock. The zero value is ready to use.
type Options struct {
	// Interval is the time between rounds in Run. Default 10s; at least
	// 10ms. Until a round first succeeds, Run tries again every second
	// (or every Interval, if shorter): a Clock started while Redis was
	// unreachable stamps requests with the uncorrected local clock only
	// until Redis answers, not until the next Interval.
	Interval time.Duration
	// Samples is the number of TIME calls per round; the one with the
	// smallest round trip is kept. Default 5; 1..100.
	Samples int
	// Keep is the number of rounds whose best sample is remembered; the
	// offset comes from the best of them, so one round disturbed by load
	// does not move the clock. Keep × Interval should stay well below the
	// time it takes clocks to drift apart (1 minute at the defaults). A
	// round's sample that contradicts a remembered one (their offsets
	// differ by more than half their round trips added, plus StepSlack,
	// so that both cannot be right) means a clock stepped since: the
	// remembered samples it contradicts are dropped, and the offset
	// follows the step at once instead of after Keep rounds.
	// Default 6; 1..1000.
	Keep int
	// Timeout bounds each TIME call. Default 500ms.
	Timeout time.Duration
	// Now is the local clock being corrected. Default time.Now.
	Now func() time.Time
	// Observer, if set, receives the offset after every successful round.
	Observer Observer
	// OnError, if set, receives the error of every failed round in Run.
	OnError func(error)
	// OnStep, if set, is called by Sync when a round moves the offset Now
	// applies by more than StepReport from the one before it, with both:
	// Redis's clock or the local one stepped (an NTP step, a failover to
	// a Redis on another host, a virtual machine resumed). It is called
	// at most once per round, synchronously, after Observer: keep it fast.
	// The first round's offset is no step.
	OnStep func(from, to time.Duration)
}

// StepReport is how far a round must move the offset for Sync to report
// it to Options.OnStep: well above what a better sample moves it by
// (half a round trip), well below what moves windows visibly.
const StepReport = time.Second

// StepSlack is what two samples' offsets may differ by beyond their
// round trips' uncertainty (half of each) before Sync takes the difference
// for a clock step: TIME's one-microsecond resolution and a minute of
// drift of clocks a few tens of parts per million apart fit in it.
const StepSlack = time.Millisecond

// firstRetry is how soon Run tries again while no round has succeeded.
const firstRetry = time.Second

// sample is one TIME measurement.
type sample struct {
	offset, rtt time.Duration
}

// Clock is a local clock corrected by its measured offset to Redis. It is
// safe for concurrent use. Until the first successful round, Now returns
// the uncorrected local time: call Sync once before serving.
type Clock struct {
	src      TimeSource
	interval time.Duration
	samples  int
	timeout  time.Duration
	local    func() time.Time
	obs      Observer
	onError  func(error)
	onStep   func(from, to time.Duration)

	offset atomic.Int64 // ns, applied by Now
	rtt    atomic.Int64 // ns, of the sample offset comes from; 0 before the first round

	mu     sync.Mutex // serializes rounds
	rounds []sample   // best sample of each of the last Keep rounds, oldest first
	keep   int
}

// New returns a Clock measuring its offset against src.
func New(src TimeSource, opts Options) (*Clock, error) {
	if src == nil {
		return nil, fmt.Errorf("%w: nil time source", ErrInvalidOptions)
	}
	if opts.Interval != 0 && opts.Interval < 10*time.Millisecond {
		return nil, fmt.Errorf("%w: interval %v below 10ms", ErrInvalidOptions, opts.Interval)
	}
	if opts.Samples < 0 || opts.Samples > 100 {
		return nil, fmt.Errorf("%w: samples %d out of range 1..100", ErrInvalidOptions, opts.Samples)
	}
	if opts.Keep < 0 || opts.Keep > 1000 {
		return nil, fmt.Errorf("%w: keep %d out of range 1..1000", ErrInvalidOptions, opts.Keep)
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("%w: timeout %v is negative", ErrInvalidOptions, opts.Timeout)
	}
	if opts.Interval == 0 {
		opts.Interval = 10 * time.Second
	}
	if opts.Samples == 0 {
		opts.Samples = 5
	}
	if opts.Keep == 0 {
		opts.Keep = 6
	}
	if opts.Timeout == 0 {
		opts.Timeout = 500 * time.Millisecond
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Clock{
		src:      src,
		interval: opts.Interval,
		samples:  opts.Samples,
		timeout:  opts.Timeout,
		local:    opts.Now,
		obs:      opts.Observer,
		onError:  opts.OnError,
		onStep:   opts.OnStep,
		rounds:   make([]sample, 0, opts.Keep),
		keep:     opts.Keep,
	}, nil
}

// Now returns the local time corrected by the measured offset: an estimate
// of Redis's TIME. Only its Unix microseconds matter to a Limiter. Pass
// c.Now as floodgate.Options.Clock.
func (c *Clock) Now() time.Time {
	return c.local().Add(time.Duration(c.offset.Load()))
}

// Offset returns the offset Now applies (Redis's time minus the local
// clock), the round trip of the sample it was measured from (the estimate
// is within half of it, plus Redis's one-microsecond resolution), and
// whether any round has succeeded yet.
func (c *Clock) Offset() (offset, rtt time.Duration, synced bool) {
	r := c.rtt.Load()
	return time.Duration(c.offset.Load()), time.Duration(r), r > 0
}

// Sync runs one round: Samples TIME calls, the best of which joins the
// last Keep rounds' best samples, and the offset becomes that of the
// smallest round trip among them. Remembered samples the new one
// contradicts (see Options.Keep) are dropped first: a clock stepped; an
// offset moved by more than StepReport is reported to Options.OnStep. It
// returns an error wrapping ErrNoSample (and the last call's error) when
// no call succeeded, leaving the offset unchanged.
func (c *Clock) Sync(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	best, ok := sample{}, false
	var lastErr error
	for range c.samples {
		s, err := c.measure(ctx)
		if err != nil {
			lastErr = err
			if ctx.Err() != nil {
				break
			}
			continue
		}
		if !ok || s.rtt < best.rtt {
			best, ok = s, true
		}
	}
	if !ok {
		return fmt.Errorf("%w: %w", ErrNoSample, lastErr)
	}
	kept := c.rounds[:0]
	for _, s := range c.rounds {
		if consistent(s, best) {
			kept = append(kept, s)
		}
	}
	if len(kept) == c.keep {
		kept = append(kept[:0], kept[1:]...)
	}
	c.rounds = append(kept, best)
	chosen := c.rounds[0]
	for _, s := range c.rounds[1:] {
		if s.rtt < chosen.rtt {
			chosen = s
		}
	}
	prev, hadPrev := time.Duration(c.offset.Load()), c.rtt.Load() > 0
	c.offset.Store(int64(chosen.offset))
	c.rtt.Store(max(int64(chosen.rtt), 1))
	if c.obs != nil {
		c.obs.ObserveClock(chosen.offset, chosen.rtt)
	}
	if d := chosen.offset - prev; c.onStep != nil && hadPrev && (d > StepReport || d < -StepReport) {
		c.onStep(prev, chosen.offset)
	}
	return nil
}

// consistent reports whether samples a and b can both be right: the true
// offset lies within half a sample's round trip of its estimate, so two
// estimates of one unchanged offset differ by at most half their round
// trips added (plus StepSlack).
func consistent(a, b sample) bool {
	d := a.offset - b.offset
	if d < 0 {
		d = -d
	}
	return d <= (a.rtt+b.rtt)/2+StepSlack
}

// measure takes one sample: the offset of Redis's clock from the midpoint
// of the round trip.
func (c *Clock) measure(ctx context.Context) (sample, error) {
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	sent := c.local()
	server, err := c.src.Time(cctx).Result()
	received := c.local()
	if err != nil {
		return sample{}, fmt.Errorf("clocksync: TIME: %w", err)
	}
	rtt := received.Sub(sent)
	if rtt < 0 {
		return sample{}, fmt.Errorf("clocksync: local clock went back %v during a TIME call", -rtt)
	}
	return sample{offset: server.Sub(sent.Add(rtt / 2)), rtt: rtt}, nil
}

// Run calls Sync at once and then every Interval until ctx ends (every
// second, or Interval if shorter, until a round first succeeds), reporting
// failed rounds to OnError; it returns ctx's error. Run it in its own
// goroutine: go c.Run(ctx).
func (c *Clock) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if err := c.Sync(ctx); err != nil && ctx.Err() == nil && c.onError != nil {
			c.onError(err)
		}
		wait := c.interval
		if _, _, synced := c.Offset(); !synced {
			wait = min(wait, firstRetry)
		}
		t.Reset(wait)
	}
}
