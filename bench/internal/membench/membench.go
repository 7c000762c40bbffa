// Package membench measures in-process limiters with the standard
// library's benchmark driver (testing.Benchmark): parallel callers over a
// set of existing keys, reporting ns, bytes and allocations per decision.
package membench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/bench/internal/contender"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/ulule/limiter/v3"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"
)

// ErrDenied reports that a subject denied or failed a decision that the
// open limits should have allowed, so its numbers would not be comparable.
var ErrDenied = errors.New("membench: decisions denied or failed under open limits")

// Decider decides the request of key number i. One Decider is used by one
// goroutine at a time.
type Decider func(i int) (allowed bool, err error)

// Subject is one in-process limiter under test.
type Subject struct {
	// Name labels the subject in reports.
	Name string
	// Setup prepares the subject for keys and returns a function that makes
	// one Decider per calling goroutine, and a function releasing the
	// subject's resources.
	Setup func(keys []string) (newDecider func() Decider, closeFn func(), err error)
}

// Result is one subject's measurement.
type Result struct {
	Name string
	// NsPerOp, BytesPerOp and AllocsPerOp are per decision.
	NsPerOp     float64
	BytesPerOp  int64
	AllocsPerOp int64
	// N is the number of decisions measured.
	N int
	// Callers is the number of goroutines that called in parallel.
	Callers int
}

// Run measures s over keys with parallelism×GOMAXPROCS goroutines (see
// testing.B.SetParallelism). Every key is decided once before timing, so
// the measured decisions all hit existing state.
func Run(s Subject, keys []string, parallelism int) (Result, error) {
	if len(keys) == 0 || parallelism < 1 {
		return Result{}, fmt.Errorf("membench: %d keys, parallelism %d (want ≥ 1 each)", len(keys), parallelism)
	}
	newDecider, closeFn, err := s.Setup(keys)
	if err != nil {
		return Result{}, fmt.Errorf("membench: %s: %w", s.Name, err)
	}
	defer closeFn()
	warm := newDecider()
	for i := range keys {
		if ok, err := warm(i); err != nil || !ok {
			return Result{}, fmt.Errorf("%w: %s: key %d allowed=%v err=%v", ErrDenied, s.Name, i, ok, err)
		}
	}
	var bad atomic.Int64
	var callers atomic.Int64
	var firstErr atomic.Value
	res := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(parallelism)
		callers.Store(0)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			callers.Add(1)
			d := newDecider()
			rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
			n := len(keys)
			for pb.Next() {
				ok, err := d(rng.IntN(n))
				if err != nil || !ok {
					if bad.Add(1) == 1 {
						firstErr.Store(fmt.Sprintf("allowed=%v err=%v", ok, err))
					}
				}
			}
		})
	})
	if n := bad.Load(); n > 0 {
		return Result{}, fmt.Errorf("%w: %s: %d decisions (first: %v)", ErrDenied, s.Name, n, firstErr.Load())
	}
	return Result{
		Name:        s.Name,
		NsPerOp:     float64(res.T.Nanoseconds()) / float64(max(res.N, 1)),
		BytesPerOp:  res.AllocedBytesPerOp(),
		AllocsPerOp: res.AllocsPerOp(),
		N:           res.N,
		Callers:     int(callers.Load()),
	}, nil
}

func noop() {}

// policy returns the policy of algorithm a the memstore subjects use: an
// open limit whose state outlives the benchmark. (With the one-per-µs open
// rate of contender.OpenPolicy, a bucket's state would expire about a
// millisecond after each request, so most decisions would hit a fresh key.
// At one unit per 10 ms with an hour of burst, every request pushes the
// state's expiry further out than the time between two hits on one key.)
func policy(a floodgate.Algorithm) (floodgate.Policy, error) {
	switch a {
	case floodgate.TokenBucket:
		return floodgate.NewTokenBucket("mem", 360_000, time.Hour, 0)
	case floodgate.GCRA:
		return floodgate.NewGCRA("mem", 360_000, time.Hour, 0)
	}
	return contender.OpenPolicy("mem", a)
}

// openRate is contender.OpenLimit per contender.OpenPeriod in events per
// second, the open limit of the x/time/rate subjects.
const openRate = rate.Limit(float64(contender.OpenLimit) / float64(contender.OpenPeriod/time.Second))

// MemstoreDirect calls memstore.Store.Decide with layers built once per key
// (the storage key already encoded), under an open policy of algorithm a.
func MemstoreDirect(a floodgate.Algorithm) Subject {
	return Subject{
		Name: fmt.Sprintf("floodgate memstore %s, Store.Decide (prebuilt layers)", a),
		Setup: func(keys []string) (func() Decider, func(), error) {
			st, err := memstore.New(memstore.Options{})
			if err != nil {
				return nil, nil, err
			}
			p, err := policy(a)
			if err != nil {
				return nil, nil, err
			}
			// The storage keys are built once; the layer is filled per
			// decision from the one policy, as an application deciding
			// many identities under one policy would.
			skeys := make([]string, len(keys))
			for i, k := range keys {
				skeys[i] = floodgate.Key("fg", p, k)
			}
			ctx := context.Background()
			return func() Decider {
				layer := new([1]floodgate.Layer)
				out := new([1]floodgate.Result)
				return func(i int) (bool, error) {
					layer[0] = floodgate.Layer{Policy: p, Key: skeys[i], Cost: 1}
					err := st.Decide(ctx, time.Now().UnixMicro(), layer[:], out[:])
					return out[0].Allowed, err
				}
			}, noop, nil
		},
	}
}

// MemstoreLimiter calls floodgate.Limiter.Allow on a memstore, which
// validates the policy and builds the storage key on every call.
func MemstoreLimiter(a floodgate.Algorithm) Subject {
	return Subject{
		Name: fmt.Sprintf("floodgate memstore %s, Limiter.Allow", a),
		Setup: func(keys []string) (func() Decider, func(), error) {
			st, err := memstore.New(memstore.Options{})
			if err != nil {
				return nil, nil, err
			}
			l, err := floodgate.New(st, floodgate.Options{})
			if err != nil {
				return nil, nil, err
			}
			p, err := policy(a)
			if err != nil {
				return nil, nil, err
			}
			ctx := context.Background()
			return func() Decider {
				return func(i int) (bool, error) {
					r, err := l.Allow(ctx, p, keys[i])
					return r.Allowed, err
				}
			}, noop, nil
		},
	}
}

// Sethvargo measures sethvargo/go-limiter's memorystore (a token bucket
// per key under one map lock plus a lock per bucket).
func Sethvargo() Subject {
	return Subject{
		Name: "sethvargo/go-limiter memorystore",
		Setup: func(keys []string) (func() Decider, func(), error) {
			st, err := memorystore.New(&memorystore.Config{Tokens: 1 << 40, Interval: contender.OpenPeriod, InitialAlloc: len(keys)})
			if err != nil {
				return nil, nil, err
			}
			ctx := context.Background()
			closeFn := func() { _ = st.Close(ctx) }
			return func() Decider {
				return func(i int) (bool, error) {
					_, _, _, ok, err := st.Take(ctx, keys[i])
					return ok, err
				}
			}, closeFn, nil
		},
	}
}

// XRateSingle measures one golang.org/x/time/rate limiter shared by every
// caller, whatever the key: the floor of an in-process limiter's cost.
func XRateSingle() Subject {
	return Subject{
		Name: "x/time/rate, one limiter (keys ignored)",
		Setup: func([]string) (func() Decider, func(), error) {
			lim := rate.NewLimiter(openRate, int(contender.OpenLimit))
			return func() Decider {
				return func(int) (bool, error) { return lim.Allow(), nil }
			}, noop, nil
		},
	}
}

// XRateMap measures a map of golang.org/x/time/rate limiters, one per key,
// under a read-write mutex: the usual hand-written per-key limiter.
func XRateMap() Subject {
	return Subject{
		Name: "x/time/rate, map of limiters under a RWMutex",
		Setup: func(keys []string) (func() Decider, func(), error) {
			var mu sync.RWMutex
			m := make(map[string]*rate.Limiter, len(keys))
			get := func(k string) *rate.Limiter {
				mu.RLock()
				l := m[k]
				mu.RUnlock()
				if l != nil {
					return l
				}
				mu.Lock()
				defer mu.Unlock()
				if l = m[k]; l == nil {
					l = rate.NewLimiter(openRate, int(contender.OpenLimit))
					m[k] = l
				}
				return l
			}
			return func() Decider {
				return func(i int) (bool, error) { return get(keys[i]).Allow(), nil }
			}, noop, nil
		},
	}
}

// UluleMemory measures ulule/limiter v3's in-memory store.
func UluleMemory() Subject {
	return Subject{
		Name: "ulule/limiter v3 memory store",
		Setup: func(keys []string) (func() Decider, func(), error) {
			lim := limiter.New(ulmemory.NewStore(), limiter.Rate{Period: contender.OpenPeriod, Limit: 1 << 40})
			ctx := context.Background()
			return func() Decider {
				return func(i int) (bool, error) {
					r, err := lim.Get(ctx, keys[i])
					return !r.Reached, err
				}
			}, noop, nil
		},
	}
}

// Subjects returns every in-process subject, Floodgate's first.
func Subjects() []Subject {
	return []Subject{
		MemstoreDirect(floodgate.SlidingWindow),
		MemstoreDirect(floodgate.GCRA),
		MemstoreLimiter(floodgate.SlidingWindow),
		Sethvargo(),
		XRateSingle(),
		XRateMap(),
		UluleMemory(),
	}
}
