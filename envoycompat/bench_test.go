package envoycompat

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// BenchmarkShouldRateLimit measures envoy-compat's handler on one
// descriptor that is never over its limit, over 10,000 identities: on the
// in-memory store, and on a private redis-server with parallel callers
// (where concurrent counter updates share script calls). Metrics are on,
// as in the binary.
func BenchmarkShouldRateLimit(b *testing.B) {
	const doc = "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1000000000}\n"
	reqs := make([]*rlspb.RateLimitRequest, 10_000)
	for i := range reqs {
		reqs[i] = &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u" + strconv.Itoa(i)}}}}}
	}
	service := func(b *testing.B, st Store) *Service {
		m, err := NewMetrics(prometheus.NewRegistry())
		if err != nil {
			b.Fatal(err)
		}
		svc, err := NewService(Options{Store: st, Metrics: m, NearLimitRatio: 0.8, CacheKeyPrefix: "bench" + strconv.FormatInt(time.Now().UnixNano(), 36) + "_"})
		if err != nil {
			b.Fatal(err)
		}
		cfg, err := loadStrings(b, false, doc)
		if err != nil {
			b.Fatal(err)
		}
		svc.SetConfig(cfg)
		return svc
	}
	run := func(b *testing.B, svc *Service) {
		b.ReportAllocs()
		b.SetParallelism(8)
		b.ResetTimer()
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			for pb.Next() {
				resp, err := svc.ShouldRateLimit(ctx, reqs[next.Add(1)%int64(len(reqs))])
				if err != nil || resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
					b.Errorf("%v %v", resp, err)
					return
				}
			}
		})
	}
	b.Run("memory", func(b *testing.B) { run(b, service(b, &MemoryStore{})) })
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b)
		run(b, service(b, &RedisStore{Client: srv.Client(b)}))
	})
}
