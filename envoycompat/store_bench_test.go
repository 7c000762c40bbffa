package envoycompat

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// BenchmarkRedisStoreIncr measures one request's counter update (one
// descriptor, 10,000 identities round robin) on a private redis-server, at
// 1, 64 and 256 concurrent callers: the store as it is (coalesced), with
// MaxBatch 1 (one script call per request), and the MULTI / INCRBY /
// EXPIRE / EXEC transaction it replaced, for reference. Besides ns/op it
// reports Redis's commands per update (INFO stats, script calls and the
// commands they run), Redis's CPU per update (INFO cpu) and this process's
// (getrusage), which move far less with the machine's load than ns/op.
//
//	go test -run X -bench RedisStoreIncr -benchtime 20000x -count 3 ./envoycompat/
func BenchmarkRedisStoreIncr(b *testing.B) {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = c.Close() })
	admin := srv.Client(b)
	ids := make([]string, 10_000)
	for i := range ids {
		ids[i] = "bench_api_user_" + strconv.Itoa(i) + "_1800001200"
	}
	variants := []struct {
		name string
		incr func(ctx context.Context, ops []*Op) error
	}{
		{"coalesced", (&RedisStore{Client: c}).Incr},
		{"one call each", (&RedisStore{Client: c, MaxBatch: 1}).Incr},
		{"multi-exec", func(ctx context.Context, ops []*Op) error { return multiIncr(ctx, c, ops) }},
	}
	for _, callers := range []int{1, 64, 256} {
		for _, v := range variants {
			b.Run(fmt.Sprintf("callers=%d/%s", callers, v.name), func(b *testing.B) {
				var next atomic.Int64
				cmds0, cpu0 := redisUsage(b, admin)
				self0 := processCPU(b)
				b.SetParallelism(max(callers/max(1, testingProcs()), 1))
				if callers == 1 {
					b.ResetTimer()
					for range b.N {
						op := &Op{Key: ids[next.Add(1)%int64(len(ids))], N: 1, TTL: time.Minute}
						if err := v.incr(context.Background(), []*Op{op}); err != nil {
							b.Fatal(err)
						}
					}
				} else {
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						op := &Op{N: 1, TTL: time.Minute}
						ops := []*Op{op}
						for pb.Next() {
							op.Key = ids[next.Add(1)%int64(len(ids))]
							if err := v.incr(context.Background(), ops); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				b.StopTimer()
				self1 := processCPU(b)
				cmds1, cpu1 := redisUsage(b, admin)
				b.ReportMetric(float64((self1-self0).Microseconds())/float64(b.N), "client-cpu-µs/op")
				b.ReportMetric(float64(cmds1-cmds0)/float64(b.N), "redis-cmds/op")
				b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "redis-cpu-µs/op")
			})
		}
	}
}

// testingProcs is GOMAXPROCS, which RunParallel multiplies SetParallelism
// by.
func testingProcs() int { return runtime.GOMAXPROCS(0) }

// multiIncr is the update RedisStore made before it used incr.lua: INCRBY
// and EXPIRE of each key in one MULTI/EXEC transaction (benchmark
// reference only).
func multiIncr(ctx context.Context, c *redis.Client, ops []*Op) error {
	cmds := make([]*redis.IntCmd, len(ops))
	_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, op := range ops {
			cmds[i] = p.IncrBy(ctx, op.Key, int64(op.N))
			p.Expire(ctx, op.Key, op.TTL)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, op := range ops {
		op.Result = uint64(cmds[i].Val())
	}
	return nil
}

// processCPU returns the user and system time this process has used
// (the callers, the store and go-redis; the benchmark's own loop included).
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	d, err := posix.CPUTime()
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// redisUsage returns the commands Redis has processed (INFO stats
// total_commands_processed, which counts a script's commands as well as
// the script call) and the CPU time it has used (INFO cpu, user + system).
func redisUsage(b *testing.B, c *redis.Client) (int64, time.Duration) {
	b.Helper()
	info, err := c.Info(context.Background(), "stats", "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var cmds int64
	var cpu float64
	for line := range strings.SplitSeq(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "total_commands_processed":
			cmds, _ = strconv.ParseInt(v, 10, 64)
		case "used_cpu_user", "used_cpu_sys":
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f
		}
	}
	return cmds, time.Duration(cpu * float64(time.Second))
}
