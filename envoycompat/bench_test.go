package envoycompat

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/health"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

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

// BenchmarkJSONCodec decodes a usual POST /json body and encodes a usual
// answer, with the fast path and with protojson, which the fast path
// replaces for such bodies.
func BenchmarkJSONCodec(b *testing.B) {
	body := []byte(`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u12345"}]}],"hitsAddend":1}`)
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{
		Code:               rlspb.RateLimitResponse_OK,
		CurrentLimit:       &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: 1_000_000_000, Unit: rlspb.RateLimitResponse_RateLimit_MINUTE},
		LimitRemaining:     999_999_999,
		DurationUntilReset: &durationpb.Duration{Seconds: 48},
	}}}
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		var out []byte
		for b.Loop() {
			if _, ok := decodeRequestFast(body); !ok {
				b.Fatal("fast path refuses the body")
			}
			var ok bool
			if out, ok = appendResponse(out[:0], resp); !ok {
				b.Fatal("fast path refuses the answer")
			}
		}
	})
	b.Run("protojson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := protojson.Unmarshal(body, new(rlspb.RateLimitRequest)); err != nil {
				b.Fatal(err)
			}
			if _, err := protojson.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkServeJSON serves POST /json on the in-memory store, from the
// request to the recorded answer (net/http's connection handling aside).
func BenchmarkServeJSON(b *testing.B) {
	svc, err := NewService(Options{Store: &MemoryStore{}, NearLimitRatio: 0.8})
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := loadStrings(b, false, "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1000000000}\n")
	if err != nil {
		b.Fatal(err)
	}
	svc.SetConfig(cfg)
	h := svc.HTTPHandler(NewHealth(health.NewServer(), false))
	bodies := make([][]byte, 1000)
	for i := range bodies {
		bodies[i] = []byte(`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u` + strconv.Itoa(i) + `"}]}],"hitsAddend":1}`)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/json", bytes.NewReader(bodies[i%len(bodies)])))
		if w.Code != http.StatusOK {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
		i++
	}
}
