package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
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
					resetStats(b, c)
					benchDecide(b, s, p, keys, callers)
					reportServerCPU(b, c)
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

// resetStats clears the private server's command statistics.
func resetStats(b *testing.B, c *redis.Client) {
	b.Helper()
	if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
}

// reportServerCPU reports the Redis CPU time the scripts used per decision
// ("redis-µs/op", from INFO commandstats: the time spent inside EVALSHA and
// EVAL), the one number that says whether a change made the scripts
// cheaper, whatever the noise of client-side throughput on a shared machine.
func reportServerCPU(b *testing.B, c *redis.Client) {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var usec float64
	for _, line := range strings.Split(info, "\r\n") {
		for _, cmd := range []string{"evalsha", "eval"} {
			rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":")
			if !ok {
				continue
			}
			for _, f := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					n, err := strconv.ParseFloat(v, 64)
					if err != nil {
						b.Fatalf("commandstats %q: %v", line, err)
					}
					usec += n
				}
			}
		}
	}
	b.ReportMetric(usec/float64(b.N), "redis-µs/op")
}

// BenchmarkDecideLayers measures two-layer decisions (a per-user fixed
// window, a global GCRA) on a private redis-server with the slot check on:
// both layers in one slot (one script), in two slots and admitted (two
// reserve scripts, sent concurrently: one round trip), and in two slots
// with the per-user layer denying (two reserves, then one release). It
// reports decisions/s, Redis CPU per decision and allocations.
func BenchmarkDecideLayers(b *testing.B) {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 512, ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = c.Close() })
	s, err := New(c, Options{SlotCheck: SlotCheckOn})
	if err != nil {
		b.Fatal(err)
	}
	prefix := uniquePrefix(b)
	user := mustPolicy(b, floodgate.Policy{Name: "user", Algorithm: floodgate.FixedWindow, Limit: 1 << 30, Window: time.Minute})
	global := mustPolicy(b, floodgate.Policy{Name: "global", Algorithm: floodgate.GCRA, Limit: 1 << 30, Window: time.Hour})
	strict := mustPolicy(b, floodgate.Policy{Name: "strict", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Minute})
	for _, tc := range []struct {
		name       string
		user       floodgate.Policy
		cost       int64
		sameSlot   bool
		wantAllows bool
	}{
		{"one-slot", user, 1, true, true},
		{"split", user, 1, false, true},
		{"split-denied", strict, 2, false, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for _, callers := range []int{1, 64} {
				b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
					resetStats(b, c)
					benchLayers(b, s, func(r *rand.Rand, layers []floodgate.Layer) {
						id := fmt.Sprintf("user-%d", r.IntN(benchKeys))
						gid := "global"
						if tc.sameSlot {
							gid = id
						}
						layers[0] = floodgate.Layer{Policy: tc.user, Key: floodgate.Key(prefix, tc.user, id), Cost: tc.cost}
						layers[1] = floodgate.Layer{Policy: global, Key: floodgate.Key(prefix, global, gid), Cost: 1}
					}, tc.wantAllows, callers)
					reportServerCPU(b, c)
				})
			}
		})
	}
}

func benchLayers(b *testing.B, s *Store, fill func(*rand.Rand, []floodgate.Layer), wantAllowed bool, callers int) {
	ctx := context.Background()
	loop := func(next func() bool, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 7))
		layers := make([]floodgate.Layer, 2)
		out := make([]floodgate.Result, 2)
		for next() {
			fill(r, layers)
			if err := s.Decide(ctx, time.Now().UnixMicro(), layers, out); err != nil {
				b.Error(err)
				return
			}
			if allowed := out[0].Allowed && out[1].Allowed; allowed != wantAllowed {
				b.Errorf("allowed %v, want %v: %+v", allowed, wantAllowed, out)
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
