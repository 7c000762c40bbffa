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
	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// bareScript is the smallest atomic counter, the round trip a lone
// decision is compared with (bench/'s "bare EVALSHA").
var bareScript = redis.NewScript(`local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return n`)

// BenchmarkCallers measures 1, 64 and 256 callers deciding back to back
// on a private redis-server, over 10k identities: the bare EVALSHA round trip,
// Store.Decide and Limiter.Allow of a sliding window and a GCRA policy,
// and Limiter.AllowLayers of three layers. Beside decisions/s it reports
// the CPU time of this process ("client-µs/op", getrusage: the Limiter,
// the store, go-redis and the syscalls) and of the redis-server process
// ("server-µs/op", INFO cpu) per decision, which a loaded machine moves
// far less than the rate. Run with -benchtime and -count and compare the
// sub-benchmarks of one run.
func BenchmarkCallers(b *testing.B) {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = c.Close() })
	s, err := New(c, Options{})
	if err != nil {
		b.Fatal(err)
	}
	prefix := uniquePrefix(b)
	l, err := floodgate.New(s, floodgate.Options{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	ids := make([]string, benchKeys)
	for i := range ids {
		ids[i] = "user-" + strconv.Itoa(i)
	}
	sw := newPolicy(b)(floodgate.NewSlidingWindow("sw", 1<<40, time.Hour))
	gc := newPolicy(b)(floodgate.NewGCRA("gc", 1<<30, time.Hour, 0))
	edge := newPolicy(b)(floodgate.NewFixedWindow("edge", 1<<40, time.Minute))
	quota := newPolicy(b)(floodgate.NewQuota("quota", floodgate.MaxLimit, floodgate.Calendar{Unit: floodgate.PeriodMonth}))
	bareKeys := make([]string, benchKeys)
	swKeys := make([]string, benchKeys)
	for i := range ids {
		bareKeys[i] = prefix + ":bare:{" + ids[i] + "}"
		swKeys[i] = floodgate.Key(prefix, sw, ids[i])
	}
	for _, tc := range []struct {
		name string
		op   func(r *rand.Rand) error
	}{
		{"bare-evalsha", func(r *rand.Rand) error {
			return bareScript.Run(ctx, c, bareKeys[r.IntN(len(bareKeys)):][:1], 3600).Err()
		}},
		{"store-sliding-window", func(r *rand.Rand) error {
			layers := [1]floodgate.Layer{{Policy: sw, Key: swKeys[r.IntN(len(swKeys))], Cost: 1}}
			var out [1]floodgate.Result
			return s.Decide(ctx, time.Now().UnixMicro(), layers[:], out[:])
		}},
		{"allow-sliding-window", func(r *rand.Rand) error {
			_, err := l.Allow(ctx, sw, ids[r.IntN(len(ids))])
			return err
		}},
		{"allow-gcra", func(r *rand.Rand) error {
			_, err := l.Allow(ctx, gc, ids[r.IntN(len(ids))])
			return err
		}},
		{"allow-3-layers", func(r *rand.Rand) error {
			id := ids[r.IntN(len(ids))]
			_, err := l.AllowLayers(ctx, 1,
				floodgate.LayerSpec{Policy: edge, Identity: "edge"},
				floodgate.LayerSpec{Policy: sw, Identity: id},
				floodgate.LayerSpec{Policy: quota, Identity: id})
			return err
		}},
	} {
		for _, callers := range []int{1, 64, 256} {
			b.Run(fmt.Sprintf("%s/callers=%d", tc.name, callers), func(b *testing.B) {
				warm := rand.New(rand.NewPCG(1, 2))
				for range 2000 { // keys exist, the script is loaded
					if err := tc.op(warm); err != nil {
						b.Fatal(err)
					}
				}
				cpu0, srv0 := processCPU(b), serverCPU(b, c)
				b.ReportAllocs()
				b.ResetTimer()
				if callers == 1 {
					for range b.N {
						if err := tc.op(warm); err != nil {
							b.Fatal(err)
						}
					}
				} else {
					b.SetParallelism((callers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
					var seed atomic.Uint64
					b.RunParallel(func(pb *testing.PB) {
						r := rand.New(rand.NewPCG(seed.Add(1), 2))
						for pb.Next() {
							if err := tc.op(r); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				b.StopTimer()
				cpu1, srv1 := processCPU(b), serverCPU(b, c)
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
				b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "client-µs/op")
				b.ReportMetric(float64((srv1-srv0).Microseconds())/float64(b.N), "server-µs/op")
			})
		}
	}
}

// processCPU returns this process's user+sys CPU time.
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	d, err := posix.CPUTime()
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// serverCPU returns the redis-server's user+sys CPU time (INFO cpu).
func serverCPU(b *testing.B, c *redis.Client) time.Duration {
	b.Helper()
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\r\n") {
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, f); ok {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatalf("INFO cpu %q: %v", line, err)
				}
				sum += x
			}
		}
	}
	return time.Duration(sum * float64(time.Second))
}

// newPolicy returns a function that fails b on a constructor's error.
func newPolicy(b *testing.B) func(floodgate.Policy, error) floodgate.Policy {
	return func(p floodgate.Policy, err error) floodgate.Policy {
		b.Helper()
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
}
