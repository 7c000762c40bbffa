package loadgen

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-rl/floodgate/envoyrls"
)

var grpcClients = []GRPCClient{RawGRPC, GRPCGo}

// grpcServer serves rls (and counts the requests it received) on a
// loopback port until the test ends; it returns the server and the
// target.
func grpcServer(t *testing.T, rls rlspb.RateLimitServiceServer, received *atomic.Int64, opts ...grpc.ServerOption) (*grpc.Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if received != nil {
		opts = append(opts, grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			received.Add(1)
			return h(ctx, req)
		}))
	}
	gs := grpc.NewServer(opts...)
	rlspb.RegisterRateLimitServiceServer(gs, rls)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(ln)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
	return gs, "grpc://" + ln.Addr().String()
}

// rlsFunc is a RateLimitService answering with its function.
type rlsFunc struct {
	rlspb.UnimplementedRateLimitServiceServer
	f func(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error)
}

func (s rlsFunc) ShouldRateLimit(ctx context.Context, r *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	return s.f(ctx, r)
}

// Both clients get the same answers from Floodgate's envoyrls service
// (3 per identity for the whole test, 7 identities, 300 requests).
func TestGRPCClientsAgree(t *testing.T) {
	cfg, err := envoyrls.ParseConfig([]byte(`
domain: lg
descriptors:
  - key: user
    rate_limit: {requests_per_unit: 3, window: 24h, algorithm: token_bucket}
`), "lg.yaml")
	if err != nil {
		t.Fatal(err)
	}
	svc, err := envoyrls.NewService(newLimiter(t), func() *envoyrls.Config { return cfg }, envoyrls.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var received atomic.Int64
	_, target := grpcServer(t, svc, &received)
	var reps []Report
	for _, c := range grpcClients {
		before := received.Load()
		rep, err := Run(context.Background(), Options{
			Target: target, Domain: "lg", GRPCClient: c, Concurrency: 20, Duration: time.Minute,
			MaxRequests: 300, Identities: 7, Expect: slowBucket,
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkCounts(t, rep, received.Load()-before)
		if rep.Errors != 0 || rep.Sent != 300 {
			t.Fatalf("%v client: %+v", c, rep)
		}
		if got, want := rep.Allowed, wantAllowed(300, 7); got != want {
			t.Errorf("%v client: allowed %d, want %d", c, got, want)
		}
		for _, want := range []string{"(grpc, " + c.String() + " client)", "  over_limit         ", "  over-limit ratio   "} {
			if !strings.Contains(rep.String(), want) {
				t.Errorf("report lacks %q:\n%s", want, rep)
			}
		}
		// The HTTP API's labels, "denied (429)" and "429 ratio": a bare
		// "429" also turns up in a port (42969) or a rate (4297.2 req/s).
		if body := rep.String(); strings.Contains(body, "(429)") || strings.Contains(body, "429 ratio") {
			t.Errorf("a gRPC report speaks of 429s:\n%s", rep)
		}
		reps = append(reps, rep)
	}
	if reps[0].Allowed != reps[1].Allowed || reps[0].Denied != reps[1].Denied {
		t.Errorf("raw client: %d allowed, %d denied; grpc-go: %d, %d", reps[0].Allowed, reps[0].Denied, reps[1].Allowed, reps[1].Denied)
	}
}

// A gRPC error status, or an answer neither OK nor OVER_LIMIT, is an
// error, with the same message from both clients.
func TestGRPCErrorsAreCounted(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error)
		want string
	}{
		{"status", func(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
			return nil, status.Error(codes.ResourceExhausted, "quota 100% gone, \"é\"\nbye")
		}, "rpc error: code = ResourceExhausted desc = quota 100% gone, \"é\"\nbye"},
		{"unknown", func(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
			return &rlspb.RateLimitResponse{}, nil
		}, "overall_code UNKNOWN"},
	} {
		var received atomic.Int64
		_, target := grpcServer(t, rlsFunc{f: tc.f}, &received)
		for _, c := range grpcClients {
			before := received.Load()
			rep, err := Run(context.Background(), Options{Target: target, GRPCClient: c, Concurrency: 4, Duration: time.Minute, MaxRequests: 40}, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkCounts(t, rep, received.Load()-before)
			if rep.Errors != 40 || len(rep.ErrorSamples) != 1 || rep.ErrorSamples[0].Message != tc.want {
				t.Errorf("%s, %v client: %d errors of %d, samples %v; want every one %q", tc.name, c, rep.Errors, rep.Sent, rep.ErrorSamples, tc.want)
			}
		}
	}
}

// A server stopping mid-run (listener and connections closed) fails the
// requests in flight and those after; the run ends. The workers back off
// after the failures (up to 1s each time), so the run ends at its
// Duration, well short of MaxRequests.
func TestGRPCServerStops(t *testing.T) {
	for _, graceful := range []bool{false, true} {
		for _, c := range grpcClients {
			var received atomic.Int64
			var once sync.Once
			var gs *grpc.Server
			stopped := make(chan struct{})
			gs, target := grpcServer(t, rlsFunc{f: func(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
				if received.Add(1) == 100 {
					once.Do(func() {
						go func() {
							defer close(stopped)
							if graceful {
								gs.GracefulStop() // GOAWAY, then the streams taken are answered
							} else {
								gs.Stop()
							}
						}()
					})
				}
				return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}, nil
			}}, nil)
			rep, err := Run(context.Background(), Options{Target: target, GRPCClient: c, Concurrency: 32, Duration: 2 * time.Second, MaxRequests: 2000}, nil)
			if err != nil {
				t.Fatal(err)
			}
			<-stopped
			t.Logf("graceful %v, %v client: %d allowed, %d errors: %v", graceful, c, rep.Allowed, rep.Errors, rep.ErrorSamples)
			if rep.Sent > 2000 || rep.Errors > 32*12 || rep.Allowed < 50 || rep.Errors == 0 || rep.Allowed > received.Load() {
				t.Errorf("graceful %v, %v client: %d received, report %+v", graceful, c, received.Load(), rep)
			}
			if graceful && rep.Allowed != received.Load() {
				t.Errorf("GracefulStop, %v client: %d received, %d answered", c, received.Load(), rep.Allowed)
			}
		}
	}
}

// With the server's SETTINGS_MAX_CONCURRENT_STREAMS at 2, 16 workers per
// connection wait for streams in turn; none is refused.
func TestGRPCMaxConcurrentStreams(t *testing.T) {
	var inFlight, most atomic.Int64
	_, target := grpcServer(t, rlsFunc{f: func(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}, nil
	}}, nil, grpc.MaxConcurrentStreams(2))
	rep, err := Run(context.Background(), Options{Target: target, Concurrency: 32, Connections: 2, Duration: time.Minute, MaxRequests: 1000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Errors != 0 || rep.Allowed != 1000 {
		t.Errorf("report %+v", rep)
	}
	if m := most.Load(); m > 4 {
		t.Errorf("%d requests in the server at once, over 2 per connection", m)
	}
}

// A connection whose stream IDs run out takes no new streams; the next
// request opens a new one.
func TestRawGRPCNewConnectionAfterLastStreamID(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns connCounter
	gs := grpc.NewServer(grpc.StatsHandler(&conns))
	registerOKRLS(gs)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	o := Options{Target: "grpc://" + ln.Addr().String(), Concurrency: 4, Connections: 1, Duration: time.Minute, MaxRequests: 100}
	o.lastStreamID = 9 // streams 1, 3, 5, 7 and 9
	rep, err := Run(context.Background(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Errors != 0 || rep.Allowed != 100 {
		t.Errorf("report %+v", rep)
	}
	if n := conns.n.Load(); n != 20 {
		t.Errorf("%d connections for 100 requests, 5 streams each; want 20", n)
	}
}

// A request unanswered within Timeout is canceled with RST_STREAM: the
// server's handler sees its context end, the request counts once as an
// error, and the worker goes on. Mid-chain (closed loop: the connection's
// reader started the request when the previous answer came), the reader
// re-armed the timeout for it; without that the run would wait for it
// until the test's deadline.
func TestRawGRPCTimeoutCancelsTheStream(t *testing.T) {
	for _, tt := range []struct {
		name          string
		hang, total   int64 // which request goes unanswered, of how many
		timeout       time.Duration
		code          rlspb.RateLimitResponse_Code
		allowed, deny int64
	}{
		{"first request", 1, 4, 50 * time.Millisecond, rlspb.RateLimitResponse_OVER_LIMIT, 0, 3},
		{"mid chain", 3, 6, 200 * time.Millisecond, rlspb.RateLimitResponse_OK, 5, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var n atomic.Int64
			canceled := make(chan struct{})
			_, target := grpcServer(t, rlsFunc{f: func(ctx context.Context, _ *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
				if n.Add(1) == tt.hang {
					<-ctx.Done()
					close(canceled)
					return nil, ctx.Err()
				}
				return &rlspb.RateLimitResponse{OverallCode: tt.code}, nil
			}}, nil)
			rep, err := Run(context.Background(), Options{Target: target, Concurrency: 1, Duration: time.Minute, MaxRequests: tt.total, Timeout: tt.timeout}, nil)
			if err != nil {
				t.Fatal(err)
			}
			<-canceled
			want := "no answer within " + tt.timeout.String()
			if rep.Errors != 1 || rep.Allowed != tt.allowed || rep.Denied != tt.deny || rep.Sent != tt.total || n.Load() != tt.total ||
				len(rep.ErrorSamples) != 1 || !strings.Contains(rep.ErrorSamples[0].Message, want) {
				t.Errorf("report %+v, server saw %d", rep, n.Load())
			}
		})
	}
}

// The raw client's request message is what proto.Marshal makes of the
// same RateLimitRequest, for identities short and long and any cost.
func TestRawGRPCRequestMessage(t *testing.T) {
	for _, cost := range []int64{1, 7, 1 << 31} {
		o := Options{Target: "grpc://127.0.0.1:1", Duration: time.Second, Domain: "edge", IdentityKey: "remote_address", Cost: cost}
		o, err := o.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		s, err := newRawGRPCSender(o, "127.0.0.1:1", newIdentities(o), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, size := range []int{1, 20, 127, 128, 300, 20000} {
			identity := strings.Repeat("x", size)
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(&rlspb.RateLimitRequest{
				Domain: "edge",
				Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{
					{Key: "remote_address", Value: identity},
				}}},
				HitsAddend: map[bool]uint32{true: 0, false: uint32(cost)}[cost == 1],
			})
			if err != nil {
				t.Fatal(err)
			}
			got := s.appendRequest([]byte("junk"), identity)
			if !bytes.Equal(got[:4], []byte("junk")) || got[4] != 0 || !bytes.Equal(got[9:], want) ||
				int(got[5])<<24|int(got[6])<<16|int(got[7])<<8|int(got[8]) != len(want) {
				t.Errorf("cost %d, identity of %d bytes: % x, want 00 <%d> % x", cost, size, got[4:], len(want), want)
			}
		}
	}
}

// readResponse reads field 1 among the others and the degraded header
// among response_headers_to_add, and refuses what is not one whole gRPC
// message.
func TestReadResponse(t *testing.T) {
	frame := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte{0, byte(len(b) >> 24), byte(len(b) >> 16), byte(len(b) >> 8), byte(len(b))}, b...)
	}
	full := frame(&rlspb.RateLimitResponse{
		OverallCode: rlspb.RateLimitResponse_OVER_LIMIT,
		Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{
			Code: rlspb.RateLimitResponse_OVER_LIMIT, CurrentLimit: &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: 3, Unit: rlspb.RateLimitResponse_RateLimit_HOUR},
		}},
		ResponseHeadersToAdd: []*corepb.HeaderValue{{Key: "X-RateLimit-Limit", Value: "3"}},
		RawBody:              []byte("body"),
	})
	degraded := frame(&rlspb.RateLimitResponse{
		OverallCode: rlspb.RateLimitResponse_OK,
		ResponseHeadersToAdd: []*corepb.HeaderValue{{Key: "X-RateLimit-Limit", Value: "3"},
			{Key: "x-floodgate-degraded", Value: "local; reason=breaker_open"}},
	})
	for _, tc := range []struct {
		name     string
		data     []byte
		want     int32
		degraded bool
		err      string
	}{
		{"full", full, 2, false, ""},
		{"empty message", frame(&rlspb.RateLimitResponse{}), 0, false, ""},
		{"ok", frame(&rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}), 1, false, ""},
		{"degraded", degraded, 1, true, ""},
		{"header value only", frame(&rlspb.RateLimitResponse{ResponseHeadersToAdd: []*corepb.HeaderValue{{Key: "X", Value: DegradedHeader}}}), 0, false, ""},
		{"short", full[:3], 0, false, "not a gRPC message"},
		{"truncated", full[:len(full)-1], 0, false, "announced"},
		{"compressed", append([]byte{1}, full[1:]...), 0, false, "compressed"},
		{"malformed", []byte{0, 0, 0, 0, 2, 0x08, 0x80}, 0, false, "malformed"},
	} {
		got, deg, err := readResponse(tc.data)
		if got != tc.want || deg != tc.degraded || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %d, %v, %v; want %d, %v, %q", tc.name, got, deg, err, tc.want, tc.degraded, tc.err)
		}
	}
}

// net/http's HTTP/2 server (cleartext) running grpc-go's handler grants
// each stream a receive window of 7 bytes and 3 streams at once: the
// raw client's DATA goes out 7 bytes at a time as WINDOW_UPDATEs come.
func TestRawGRPCSmallSendWindow(t *testing.T) {
	gs := grpc.NewServer()
	registerOKRLS(gs)
	var received atomic.Int64
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			received.Add(1)
			gs.ServeHTTP(w, r)
		}),
		HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: 7, MaxConcurrentStreams: 3},
	}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetUnencryptedHTTP2(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); gs.Stop() })
	for _, c := range grpcClients {
		before := received.Load()
		rep, err := Run(context.Background(), Options{
			Target: "grpc://" + ln.Addr().String(), GRPCClient: c, IdentityPrefix: strings.Repeat("long-", 40),
			Concurrency: 16, Duration: time.Minute, MaxRequests: 300,
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkCounts(t, rep, received.Load()-before)
		if rep.Errors != 0 || rep.Allowed != 300 {
			t.Errorf("%v client: %+v", c, rep)
		}
	}
}

// A server closing connections by age (GOAWAY, then the streams it took
// are answered) costs no request: the clients move to new connections.
func TestGRPCConnectionAge(t *testing.T) {
	var received atomic.Int64
	_, target := grpcServer(t, okRLS{}, &received, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: 20 * time.Millisecond, MaxConnectionAgeGrace: time.Minute}))
	for _, c := range grpcClients {
		before := received.Load()
		rep, err := Run(context.Background(), Options{Target: target, GRPCClient: c, Concurrency: 32, Duration: time.Minute, MaxRequests: 3000}, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkCounts(t, rep, received.Load()-before)
		if rep.Errors != 0 || rep.Allowed != 3000 {
			t.Errorf("%v client: %+v", c, rep)
		}
	}
}

// Canceling Run's context mid-run cancels the streams in flight; Run
// returns the partial report.
func TestRawGRPCCanceledMidRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var n atomic.Int64
	_, target := grpcServer(t, rlsFunc{f: func(rctx context.Context, _ *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
		if n.Add(1) == 20 {
			cancel()
		}
		<-rctx.Done() // never answers: the client's RST_STREAM ends it
		return nil, rctx.Err()
	}}, nil)
	rep, err := Run(ctx, Options{Target: target, Concurrency: 32, Duration: time.Minute}, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if rep.Allowed != 0 || rep.Errors != rep.Sent {
		t.Errorf("report %+v", rep)
	}
}

// countingListener counts the bytes its connections read.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.n}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// The raw client's headers go through each connection's HPACK encoder:
// after a connection's first request they are table indexes, as Envoy's
// and grpc-go's clients send them, so the server reads about 65 bytes per
// request instead of about 170 (every field a literal); every request
// still carries every header. A server whose decoder keeps a table of
// 1 byte (net/http's HTTP/2 server, SETTINGS_HEADER_TABLE_SIZE 1) gets
// literals: the encoder follows the server's limit (indexes into a table
// the server does not keep would fail every request).
func TestRawGRPCHeadersIndexed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		table   int   // the server's decoder table size; 0: grpc-go's server
		perReqs int64 // most bytes per request the server may read
	}{
		{"grpc-go server", 0, 80},
		{"server keeping no table", 1, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var read, bad atomic.Int64
			gs := grpc.NewServer()
			rlspb.RegisterRateLimitServiceServer(gs, rlsFunc{f: func(ctx context.Context, _ *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
				md, _ := metadata.FromIncomingContext(ctx)
				if ua := md.Get("user-agent"); len(ua) != 1 || !strings.HasPrefix(ua[0], "floodgate-loadgen") {
					bad.Add(1)
				}
				return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}, nil
			}})
			cl := countingListener{ln, &read}
			if tc.table == 0 {
				done := make(chan struct{})
				go func() { defer close(done); _ = gs.Serve(cl) }()
				defer func() { gs.Stop(); <-done }()
			} else {
				srv := &http.Server{Handler: gs, HTTP2: &http.HTTP2Config{MaxDecoderHeaderTableSize: tc.table}}
				srv.Protocols = new(http.Protocols)
				srv.Protocols.SetUnencryptedHTTP2(true)
				go func() { _ = srv.Serve(cl) }()
				defer func() { srv.Close(); gs.Stop() }()
			}
			const n = 2000
			rep, err := Run(context.Background(), Options{Target: "grpc://" + ln.Addr().String(), Concurrency: 4, Connections: 1, Duration: time.Minute, MaxRequests: n}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Errors != 0 || rep.Allowed != n || bad.Load() != 0 {
				t.Fatalf("report %+v, %d requests with headers missing", rep, bad.Load())
			}
			if per := read.Load() / n; per > tc.perReqs {
				t.Errorf("the server read %d bytes per request, want at most %d", per, tc.perReqs)
			} else {
				t.Logf("the server read %d bytes per request", per)
			}
		})
	}
}

// With more workers on a connection than the server allows streams, a
// stream that ends goes to a worker waiting for one before the worker
// whose request it carried starts its next: every worker gets its turn
// and none waits until the timeout. (The raw client used to hand the
// stream to the finishing worker's next request, so that with 2 streams
// and 8 workers, 6 waited until their timeouts, over and over.)
func TestRawGRPCStreamsTakenInTurn(t *testing.T) {
	var inFlight, most atomic.Int64
	_, target := grpcServer(t, rlsFunc{f: func(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}, nil
	}}, nil, grpc.MaxConcurrentStreams(2))
	const timeout = time.Second
	rep, err := Run(context.Background(), Options{Target: target, Concurrency: 8, Connections: 1, Duration: 2 * timeout, Timeout: timeout}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Errors != 0 || rep.Allowed == 0 {
		t.Errorf("report %+v", rep)
	}
	if m := most.Load(); m > 2 {
		t.Errorf("%d requests in the server at once, over 2", m)
	}
}

// zeroStreamsServer speaks HTTP/2 but allows no streams
// (SETTINGS_MAX_CONCURRENT_STREAMS 0) and counts the HEADERS it gets; it
// returns the target.
func zeroStreamsServer(t *testing.T, headers *atomic.Int64) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { nc.Close() })
			wg.Go(func() {
				preface := make([]byte, len(http2.ClientPreface))
				if _, err := io.ReadFull(nc, preface); err != nil {
					return
				}
				fr := http2.NewFramer(nc, nc)
				if fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 0}) != nil {
					return
				}
				for {
					f, err := fr.ReadFrame()
					if err != nil {
						return
					}
					switch f := f.(type) {
					case *http2.SettingsFrame:
						if !f.IsAck() && fr.WriteSettingsAck() != nil {
							return
						}
					case *http2.HeadersFrame:
						headers.Add(1)
					}
				}
			})
		}
	})
	return "grpc://" + ln.Addr().String()
}

// A request that never got a stream was not sent, and its error says so
// rather than that the server did not answer.
func TestRawGRPCNoStreamIsNotSent(t *testing.T) {
	var headers atomic.Int64
	target := zeroStreamsServer(t, &headers)
	rep, err := Run(context.Background(), Options{Target: target, Concurrency: 2, Connections: 1, Duration: time.Minute, MaxRequests: 4, Timeout: 100 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Errors != 4 || len(rep.ErrorSamples) != 1 || !strings.Contains(rep.ErrorSamples[0].Message, "for a stream slot") ||
		!strings.Contains(rep.ErrorSamples[0].Message, "not sent") || headers.Load() != 0 {
		t.Errorf("report %+v, server saw %d requests", rep, headers.Load())
	}
}

// TestGRPCDeadlineSent: with GRPCDeadline, both clients send it as the
// request's deadline, and the service sees it (a handler waiting past it
// answers DEADLINE_EXCEEDED, counted as an error); without it, none is
// sent. --timeout alone never told the service how long the load
// generator waits, so fault tests that meant to act as Envoy (20 ms)
// saw a service spend its whole budget on each call (faults3).
func TestGRPCDeadlineSent(t *testing.T) {
	var withDeadline, without atomic.Int64
	var longest atomic.Int64
	_, target := grpcServer(t, rlsFunc{f: func(ctx context.Context, _ *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
		d, ok := ctx.Deadline()
		if !ok {
			without.Add(1)
			return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}, nil
		}
		withDeadline.Add(1)
		if left := int64(time.Until(d)); left > longest.Load() {
			longest.Store(left)
		}
		<-ctx.Done() // the deadline passes: DEADLINE_EXCEEDED
		return nil, ctx.Err()
	}}, nil)
	for _, c := range grpcClients {
		withDeadline.Store(0)
		without.Store(0)
		rep, err := Run(context.Background(), Options{Target: target, Domain: "lg", GRPCClient: c, Concurrency: 2, Duration: time.Minute, MaxRequests: 10}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if without.Load() != 10 || withDeadline.Load() != 0 || rep.Errors != 0 {
			t.Errorf("%v client without GRPCDeadline: %d requests with a deadline, %d without, %d errors; want none with one", c, withDeadline.Load(), without.Load(), rep.Errors)
		}
		without.Store(0)
		longest.Store(0)
		const deadline = 30 * time.Millisecond
		rep, err = Run(context.Background(), Options{Target: target, Domain: "lg", GRPCClient: c, Concurrency: 2, Duration: time.Minute, MaxRequests: 10, GRPCDeadline: deadline}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if withDeadline.Load() != 10 || without.Load() != 0 {
			t.Errorf("%v client with GRPCDeadline: %d requests with a deadline, %d without; want all with one", c, withDeadline.Load(), without.Load())
		}
		if got := time.Duration(longest.Load()); got > deadline {
			t.Errorf("%v client: the service saw %v left of a %v deadline", c, got, deadline)
		}
		if rep.Errors != 10 || !strings.Contains(rep.String(), "DeadlineExceeded") {
			t.Errorf("%v client: %d errors, want 10 (DEADLINE_EXCEEDED):\n%s", c, rep.Errors, rep)
		}
	}
	if _, err := Run(context.Background(), Options{Target: "http://127.0.0.1:1", GRPCDeadline: time.Second}, nil); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("GRPCDeadline on an HTTP target: %v, want ErrInvalidOptions", err)
	}
}

func TestGRPCTimeoutHeader(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{20 * time.Millisecond, "20000000n"},
		{99_999_999 * time.Nanosecond, "99999999n"},
		{100 * time.Millisecond, "100000u"},
		{time.Minute, "60000000u"},
		{2 * time.Minute, "120000m"},
		{1500 * time.Microsecond, "1500000n"},
		{time.Duration(1<<63 - 1), "2562048H"},
	} {
		if got := grpcTimeout(c.d); got != c.want {
			t.Errorf("grpcTimeout(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}
