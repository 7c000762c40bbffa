package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// benchKeys is the number of identities the benchmarks spread over.
const benchKeys = 10_000

// BenchmarkDecide measures single-layer decisions per algorithm on a
// private redis-server, spread over 10k random identities, with 1, 16, 64
// and 256 concurrent callers. It reports decisions/s and allocations.
func BenchmarkDecide(b *testing.B) {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 512, ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = c.Close() })
	s, err := New(c, Options{})
	if err != nil {
		b.Fatal(err)
	}
	prefix := uniquePrefix(b)
	for _, p := range allAlgorithms(b, 100, time.Minute) {
		keys := make([]string, benchKeys)
		for i := range keys {
			keys[i] = floodgate.Key(prefix, p, fmt.Sprintf("user-%d", i))
		}
		b.Run(p.Algorithm.String(), func(b *testing.B) {
			for _, callers := range []int{1, 16, 64, 256} {
				b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
					benchDecide(b, s, p, keys, callers)
				})
			}
		})
	}
}

func benchDecide(b *testing.B, s *Store, p floodgate.Policy, keys []string, callers int) {
	ctx := context.Background()
	loop := func(next func() bool, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 7))
		layers := []floodgate.Layer{{Policy: p, Cost: 1}}
		out := make([]floodgate.Result, 1)
		for next() {
			layers[0].Key = keys[r.IntN(len(keys))]
			if err := s.Decide(ctx, time.Now().UnixMicro(), layers, out); err != nil {
				b.Error(err)
				return
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	if callers == 1 {
		i := 0
		loop(func() bool { i++; return i <= b.N }, 1)
	} else {
		procs := runtime.GOMAXPROCS(0)
		b.SetParallelism((callers + procs - 1) / procs)
		var seed atomic.Uint64
		b.RunParallel(func(pb *testing.PB) {
			loop(pb.Next, seed.Add(1))
		})
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}
