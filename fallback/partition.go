package fallback

import (
	"context"
	"sync"
	"time"
)

// DefaultPartition names the breaker of a Store without Options.Partition,
// and the one shared by keys beyond MaxPartitions.
const DefaultPartition = "primary"

// MaxPartitions bounds the number of breakers a Store keeps; keys of
// further partitions share the DefaultPartition breaker.
const MaxPartitions = 1024

// breakers holds one breaker per failure domain of the primary: a single
// one, or one per partition name (for example per Redis Cluster primary),
// created on first use.
type breakers struct {
	opts      BreakerOptions
	now       func() time.Time
	obs       Observer
	partition func(ctx context.Context, key string) string
	probe     func(ctx context.Context, partition string) error
	probeTime time.Duration
	stop      chan struct{}
	stopOnce  sync.Once
	wg        sync.WaitGroup
	shared    *breaker

	mu sync.RWMutex
	m  map[string]*breaker
}

func newBreakers(opts BreakerOptions, now func() time.Time, obs Observer, partition func(context.Context, string) string,
	probe func(context.Context, string) error, probeTimeout time.Duration) *breakers {
	b := &breakers{opts: opts, now: now, obs: obs, partition: partition, probe: probe, probeTime: probeTimeout,
		stop: make(chan struct{}), m: map[string]*breaker{}}
	b.shared = b.create(DefaultPartition)
	return b
}

// close stops the background probes and waits for them to return.
func (b *breakers) close() {
	b.stopOnce.Do(func() { close(b.stop) })
	b.wg.Wait()
}

// create returns a new breaker for partition name, reporting its state to
// the observer.
func (b *breakers) create(name string) *breaker {
	var onChange func(BreakerState, error)
	co, _ := b.obs.(CauseObserver)
	switch {
	case co != nil:
		onChange = func(s BreakerState, cause error) { co.ObserveBreakerCause(name, s, cause) }
		co.ObserveBreakerCause(name, BreakerClosed, nil)
	case b.obs != nil:
		onChange = func(s BreakerState, _ error) { b.obs.ObserveBreaker(name, s) }
		b.obs.ObserveBreaker(name, BreakerClosed)
	}
	br := newBreaker(name, b.opts, b.now, onChange)
	if b.probe != nil {
		br.prober = &prober{
			probe:   func(ctx context.Context) error { return b.probe(ctx, name) },
			gone:    func() { b.forget(name, br) },
			timeout: b.probeTime, stop: b.stop, wg: &b.wg,
		}
		if co != nil {
			br.prober.observe = func(err error) { co.ObserveProbe(name, err) }
		}
	}
	return br
}

// forget drops br, the breaker of partition name (never the shared one),
// and tells the observer, unless a newer breaker has taken the name since
// (its series is its own). br may already be dropped: a caller that held
// it reopened it, and its series came back with it. Under b.mu, as the
// creation of a breaker for name (forKey) is, so that the two reports
// reach the observer in order.
func (b *breakers) forget(name string, br *breaker) {
	if br == b.shared {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if cur, ok := b.m[name]; ok && cur != br {
		return
	}
	delete(b.m, name)
	if f, ok := b.obs.(BreakerForgetter); ok {
		f.ForgetBreaker(name)
	}
}

// sweep drops, every interval until close, the closed breakers of
// partitions that list no longer names (see Options.Partitions).
func (b *breakers) sweep(list func(ctx context.Context) ([]string, error), every time.Duration) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-b.stop:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), every)
			names, err := list(ctx)
			cancel()
			if err != nil || len(names) == 0 {
				continue // an empty listing is taken for a failed one
			}
			live := make(map[string]bool, len(names))
			for _, n := range names {
				live[n] = true
			}
			b.mu.RLock()
			var gone []*breaker
			for name, br := range b.m {
				if !live[name] {
					gone = append(gone, br)
				}
			}
			b.mu.RUnlock()
			for _, br := range gone {
				if st, _ := br.snapshot(); st == BreakerClosed {
					b.forget(br.name, br)
				}
			}
		}
	}()
}

// forKey returns the breaker guarding key.
func (b *breakers) forKey(ctx context.Context, key string) *breaker {
	if b.partition == nil {
		return b.shared
	}
	name := b.partition(ctx, key)
	if name == "" || name == DefaultPartition {
		return b.shared
	}
	b.mu.RLock()
	br, ok := b.m[name]
	b.mu.RUnlock()
	if ok {
		return br
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if br, ok := b.m[name]; ok {
		return br
	}
	if len(b.m) >= MaxPartitions {
		return b.shared
	}
	br = b.create(name)
	b.m[name] = br
	return br
}

// states returns every breaker's state by partition name.
func (b *breakers) states() map[string]BreakerState {
	out := map[string]BreakerState{}
	st, _ := b.shared.snapshot()
	out[DefaultPartition] = st
	b.mu.RLock()
	defer b.mu.RUnlock()
	for name, br := range b.m {
		out[name], _ = br.snapshot()
	}
	return out
}
