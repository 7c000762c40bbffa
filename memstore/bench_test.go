package memstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/memstore"
)

// benchPolicies returns one policy per algorithm, generous enough that
// every decision in a benchmark is admitted (the write path).
func benchPolicies(b *testing.B) []floodgate.Policy {
	b.Helper()
	var ps []floodgate.Policy
	for _, a := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingLog, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA} {
		p := floodgate.Policy{Name: "b-" + a.String(), Algorithm: a, Limit: 1 << 30, Window: time.Hour}
		if a == floodgate.SlidingLog {
			p.Limit = floodgate.MaxSlidingLogLimit
		}
		ps = append(ps, p)
	}
	q, err := floodgate.NewQuota("c-quota", 1<<30, floodgate.Calendar{Unit: floodgate.PeriodMonth})
	if err != nil {
		b.Fatal(err)
	}
	return append(ps, q)
}

// BenchmarkDecide measures Store.Decide on existing keys (10,000
// identities, prebuilt layers), with parallel callers: the store's own cost,
// which allocates nothing for every algorithm but the sliding log.
func BenchmarkDecide(b *testing.B) {
	for _, p := range benchPolicies(b) {
		b.Run(p.Algorithm.String(), func(b *testing.B) {
			st, err := memstore.New(memstore.Options{})
			if err != nil {
				b.Fatal(err)
			}
			const keys = 10_000
			now := time.Now().UnixMicro()
			layers := make([][1]floodgate.Layer, keys)
			for i := range layers {
				layers[i][0] = floodgate.Layer{Policy: p, Key: algo.KeyAt("bench", p, fmt.Sprint("user-", i), now), Cost: 1}
			}
			var seed atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				r := rand.New(rand.NewPCG(seed.Add(1), 7))
				var out [1]floodgate.Result
				for pb.Next() {
					if err := st.Decide(context.Background(), now, layers[r.IntN(keys)][:], out[:]); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkLimiter measures the whole library call, Limiter.AllowAt,
// which also validates the policy and builds the key string.
func BenchmarkLimiter(b *testing.B) {
	for _, p := range benchPolicies(b) {
		b.Run(p.Algorithm.String(), func(b *testing.B) {
			l, _ := newLimiter(b, memstore.Options{})
			ids := make([]string, 10_000)
			for i := range ids {
				ids[i] = fmt.Sprint("user-", i)
			}
			now := time.Now()
			var seed atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				r := rand.New(rand.NewPCG(seed.Add(1), 9))
				for pb.Next() {
					if _, err := l.AllowAt(context.Background(), now, p, ids[r.IntN(len(ids))], 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkLayered measures a three-layer decision (edge, per user,
// monthly quota) in one store call.
func BenchmarkLayered(b *testing.B) {
	l, _ := newLimiter(b, memstore.Options{})
	edge, _ := floodgate.NewFixedWindow("edge", 1<<40, time.Minute)
	user, _ := floodgate.NewSlidingWindow("user", 1<<30, time.Minute)
	month, _ := floodgate.NewQuota("month", 1<<40, floodgate.Calendar{Unit: floodgate.PeriodMonth})
	ids := make([]string, 10_000)
	for i := range ids {
		ids[i] = fmt.Sprint("user-", i)
	}
	now := time.Now()
	var seed atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewPCG(seed.Add(1), 11))
		for pb.Next() {
			id := ids[r.IntN(len(ids))]
			if _, err := l.AllowLayersAt(context.Background(), now, 1,
				floodgate.LayerSpec{Policy: edge, Identity: "all"},
				floodgate.LayerSpec{Policy: user, Identity: id},
				floodgate.LayerSpec{Policy: month, Identity: id}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
