package loadgen

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/floodgate-rl/floodgate/internal/posix"
)

// okRLS answers every ShouldRateLimit with OK and nothing else, so that
// a benchmark of the load generator spends as little as possible in the
// server.
type okRLS struct {
	rlspb.UnimplementedRateLimitServiceServer
}

func (okRLS) ShouldRateLimit(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}, nil
}

func registerOKRLS(gs *grpc.Server) { rlspb.RegisterRateLimitServiceServer(gs, okRLS{}) }

func startOKGRPC(b *testing.B) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer()
	registerOKRLS(gs)
	go func() { _ = gs.Serve(ln) }()
	b.Cleanup(gs.Stop)
	return "grpc://" + ln.Addr().String()
}

func startOKHTTP(b *testing.B, body string) string {
	b.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var buf [512]byte
		for {
			if _, err := r.Body.Read(buf[:]); err != nil {
				break
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}))
	b.Cleanup(srv.Close)
	return srv.URL
}

// benchRun runs b.N requests closed loop with 64 workers and reports, beside
// the usual ns/op and allocs/op (which include the in-process server's),
// the whole process's CPU time per request in µs.
func benchRun(b *testing.B, o Options) {
	o.Concurrency, o.Duration, o.Identities, o.MaxRequests = 64, time.Hour, 10_000, int64(b.N)
	b.ReportAllocs()
	before, _ := posix.CPUTime()
	b.ResetTimer()
	rep, err := Run(context.Background(), o, nil)
	b.StopTimer()
	after, _ := posix.CPUTime()
	if err != nil {
		b.Fatal(err)
	}
	if rep.Errors != 0 || rep.Sent != int64(b.N) {
		b.Fatalf("sent %d of %d, %d errors: %v", rep.Sent, b.N, rep.Errors, rep.ErrorSamples)
	}
	cpu := after - before
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
}

func BenchmarkRunGRPC(b *testing.B) {
	benchRun(b, Options{Target: startOKGRPC(b)})
}

func BenchmarkRunGRPCGo(b *testing.B) {
	benchRun(b, Options{Target: startOKGRPC(b), GRPCClient: GRPCGo})
}

func BenchmarkRunHTTP(b *testing.B) {
	benchRun(b, Options{Target: startOKHTTP(b, `{"allowed":true,"remaining":1}`)})
}

func BenchmarkRunEnvoyJSON(b *testing.B) {
	benchRun(b, Options{Target: startOKHTTP(b, `{"overallCode":"OK","statuses":[{"code":"OK"}]}`), Mode: EnvoyJSON})
}
