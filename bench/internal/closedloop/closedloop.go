// Package closedloop drives a closed-loop load: a fixed number of goroutines
// each call an operation back to back for a fixed time, and the run reports
// throughput and the latency distribution. It makes no judgement about the
// numbers; it only measures them.
package closedloop

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("closedloop: invalid config")

// Op is one operation under test: it decides key and reports whether the
// request was allowed.
type Op func(ctx context.Context, key string) (allowed bool, err error)

// Config describes one run.
type Config struct {
	// Workers is the number of goroutines calling Op back to back (≥ 1).
	Workers int
	// Duration is how long operations are measured (> 0).
	Duration time.Duration
	// Warmup runs operations, unmeasured, before Duration starts (≥ 0).
	Warmup time.Duration
	// Keys are the keys workers pick from, uniformly at random (≥ 1 key).
	Keys []string
	// Seed makes the key sequence reproducible; each worker derives its own
	// stream from it.
	Seed uint64
	// MeasureStart, if set, is called just before the measured period
	// starts, and MeasureEnd just after it ends (for example to snapshot
	// server counters). They run on Run's goroutine while workers keep
	// calling Op.
	MeasureStart, MeasureEnd func()
}

// Validate reports, wrapped in ErrConfig, the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Workers < 1:
		return fmt.Errorf("%w: workers %d < 1", ErrConfig, c.Workers)
	case c.Duration <= 0:
		return fmt.Errorf("%w: duration %v not positive", ErrConfig, c.Duration)
	case c.Warmup < 0:
		return fmt.Errorf("%w: warmup %v negative", ErrConfig, c.Warmup)
	case len(c.Keys) == 0:
		return fmt.Errorf("%w: no keys", ErrConfig)
	}
	return nil
}

// Stats is what one run measured.
type Stats struct {
	// Workers is the number of concurrent callers.
	Workers int
	// Elapsed is the measured time (about Config.Duration).
	Elapsed time.Duration
	// Allowed and Denied count the decisions completed while measuring.
	Allowed, Denied uint64
	// Errors counts operations that returned an error while measuring.
	Errors uint64
	// FirstError is the first error seen (warm-up included), or nil.
	FirstError error
	// Latency holds every measured operation's latency, errors included.
	Latency Histogram
}

// Decisions returns the number of decisions (allowed + denied).
func (s *Stats) Decisions() uint64 { return s.Allowed + s.Denied }

// PerSecond returns decisions per second over the measured time.
func (s *Stats) PerSecond() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Decisions()) / s.Elapsed.Seconds()
}

// phases of a run, in order.
const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseStop
)

type worker struct {
	allowed, denied, errors uint64
	firstErr                error
	hist                    Histogram
}

// Run runs op under cfg and returns what it measured. Only operations that
// start and end within the measured period count; the period lasts
// Duration, or longer until at least one operation has counted. Run returns early, with
// ctx's error, if ctx ends.
func Run(ctx context.Context, cfg Config, op Op) (*Stats, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if op == nil {
		return nil, fmt.Errorf("%w: nil op", ErrConfig)
	}
	var phase atomic.Int32
	var measured atomic.Int64 // operations counted so far
	workers := make([]worker, cfg.Workers)
	var ready, wg sync.WaitGroup
	start := make(chan struct{})
	ready.Add(cfg.Workers)
	wg.Add(cfg.Workers)
	for i := range workers {
		go func(w *worker, seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(cfg.Seed, seed))
			n := uint64(len(cfg.Keys))
			ready.Done()
			<-start
			for {
				p := phase.Load()
				if p == phaseStop {
					return
				}
				key := cfg.Keys[rng.Uint64N(n)]
				t0 := time.Now()
				allowed, err := op(ctx, key)
				d := time.Since(t0)
				if err != nil && w.firstErr == nil {
					w.firstErr = err
				}
				if p != phaseMeasure || phase.Load() != phaseMeasure {
					continue
				}
				w.hist.Record(d)
				measured.Add(1)
				switch {
				case err != nil:
					w.errors++
				case allowed:
					w.allowed++
				default:
					w.denied++
				}
			}
		}(&workers[i], uint64(i)+1)
	}
	ready.Wait()
	close(start)
	stopped := wait(ctx, cfg.Warmup)
	var t0 time.Time
	var elapsed time.Duration
	if stopped == nil {
		if cfg.MeasureStart != nil {
			cfg.MeasureStart()
		}
		phase.Store(phaseMeasure)
		t0 = time.Now()
		stopped = wait(ctx, cfg.Duration)
		// A period in which no operation both started and ended (a
		// machine stalled for all of a short Duration) measured nothing:
		// it lasts until one has.
		for stopped == nil && measured.Load() == 0 {
			stopped = wait(ctx, time.Millisecond)
		}
		phase.Store(phaseStop)
		elapsed = time.Since(t0)
		if cfg.MeasureEnd != nil {
			cfg.MeasureEnd()
		}
	}
	phase.Store(phaseStop)
	wg.Wait()
	if stopped != nil {
		return nil, stopped
	}
	st := &Stats{Workers: cfg.Workers, Elapsed: elapsed}
	for i := range workers {
		w := &workers[i]
		st.Allowed += w.allowed
		st.Denied += w.denied
		st.Errors += w.errors
		if st.FirstError == nil {
			st.FirstError = w.firstErr
		}
		st.Latency.Merge(&w.hist)
	}
	return st, nil
}

// wait sleeps for d or until ctx ends, returning ctx's error in that case.
func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
