package envoyrls

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// benchYAML is the limit of the service benchmarks: one descriptor per
// request, every decision allowed (as in docs/benchmarks.md's service
// runs).
const benchYAML = `
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1000000000, algorithm: sliding_window}
`

// benchIdentities is the number of distinct identities the benchmarks
// cycle through.
const benchIdentities = 10_000

// benchRequests returns one request per identity, built once.
func benchRequests() []*rlspb.RateLimitRequest {
	reqs := make([]*rlspb.RateLimitRequest, benchIdentities)
	for i := range reqs {
		reqs[i] = request("api", desc("user=u"+strconv.Itoa(i)))
	}
	return reqs
}

func benchService(b *testing.B, opts Options) *Service {
	b.Helper()
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	lim, err := floodgate.New(st, floodgate.Options{Prefix: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	cfg := mustConfig(b, benchYAML)
	svc, err := NewService(lim, func() *Config { return cfg }, opts)
	if err != nil {
		b.Fatal(err)
	}
	return svc
}

// BenchmarkShouldRateLimit measures the service path of one decision on
// the in-memory store: "handler" calls ShouldRateLimit directly (the
// service's own cost: matching, the decision, the response), "grpc" goes
// through a real gRPC server and client on a loopback listener, with
// parallel callers (allocations there count the client's too).
func BenchmarkShouldRateLimit(b *testing.B) {
	reqs := benchRequests()
	b.Run("handler", func(b *testing.B) {
		svc := benchService(b, Options{})
		ctx := context.Background()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			resp, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)])
			if err != nil || resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
				b.Fatalf("%v %v", resp, err)
			}
			i++
		}
	})
	for _, workers := range []uint32{0, 64} {
		b.Run("grpc/workers="+strconv.Itoa(int(workers)), func(b *testing.B) {
			svc := benchService(b, Options{})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := grpc.NewServer(grpc.NumStreamWorkers(workers))
			svc.Register(srv)
			go func() { _ = srv.Serve(ln) }()
			b.Cleanup(srv.Stop)
			conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { conn.Close() })
			client := rlspb.NewRateLimitServiceClient(conn)
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(8) // 8 callers per CPU
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				for pb.Next() {
					resp, err := client.ShouldRateLimit(ctx, reqs[next.Add(1)%int64(len(reqs))])
					if err != nil || resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
						b.Errorf("%v %v", resp, err)
						return
					}
				}
			})
		})
	}
}
