package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/envoyrls"
	"github.com/floodgate-rl/floodgate/memstore"
)

// slowBucket admits 3 requests per identity and refills one per 8 hours:
// nothing refills during a test, so the number allowed is exact.
var slowBucket = floodgate.Policy{Name: "lgtest", Algorithm: floodgate.TokenBucket, Limit: 3, Window: 24 * time.Hour}

func newLimiter(t *testing.T) *floodgate.Limiter {
	t.Helper()
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.New(st, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// checkServer is a minimal stand-in for the service's POST /v1/check,
// deciding with a real limiter, counting what it answered.
type checkServer struct {
	lim              *floodgate.Limiter
	received         atomic.Int64
	allowed          atomic.Int64
	mu               sync.Mutex
	perIdentity      map[string]int
	policy, identity string
}

func (s *checkServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.received.Add(1)
	if r.Method != http.MethodPost || r.URL.Path != "/v1/check" || r.URL.Query().Get("enforce") != "1" {
		http.Error(w, "unexpected request "+r.Method+" "+r.URL.String(), http.StatusBadRequest)
		return
	}
	var body struct {
		Policy   string            `json:"policy"`
		Identity map[string]string `json:"identity"`
		Cost     int64             `json:"cost"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Policy != s.policy || body.Cost != 1 {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	id := body.Identity[s.identity]
	s.mu.Lock()
	s.perIdentity[id]++
	s.mu.Unlock()
	res, err := s.lim.Allow(r.Context(), slowBucket, id)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	if !res.Allowed {
		w.WriteHeader(http.StatusTooManyRequests)
		w.Write([]byte(`{"allowed":false}`))
		return
	}
	s.allowed.Add(1)
	w.Write([]byte(`{"allowed":true,"remaining":1}`))
}

func startCheckServer(t *testing.T) (*checkServer, string) {
	t.Helper()
	s := &checkServer{lim: newLimiter(t), perIdentity: map[string]int{}, policy: "api", identity: "user"}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv.URL
}

// wantAllowed is what slowBucket admits when n requests are spread round
// robin over ids identities.
func wantAllowed(n int64, ids int) int64 {
	var total int64
	for i := range int64(ids) {
		count := n / int64(ids)
		if i < n%int64(ids) {
			count++
		}
		total += min(count, slowBucket.Limit)
	}
	return total
}

func checkCounts(t *testing.T, rep Report, received int64) {
	t.Helper()
	if rep.Sent != rep.Allowed+rep.Denied+rep.Errors {
		t.Errorf("sent %d != allowed %d + denied %d + errors %d", rep.Sent, rep.Allowed, rep.Denied, rep.Errors)
	}
	if rep.Sent != received {
		t.Errorf("report says %d sent, server received %d", rep.Sent, received)
	}
	if rep.Latency.P50 > rep.Latency.P99 || rep.Latency.P99 > rep.Latency.P999 || rep.Latency.P999 > rep.Latency.Max || rep.Latency.Min > rep.Latency.P50 {
		t.Errorf("latencies out of order: %+v", rep.Latency)
	}
}

func TestHTTPClosedLoop(t *testing.T) {
	srv, url := startCheckServer(t)
	var progress bytes.Buffer
	rep, err := Run(context.Background(), Options{
		Target: url, Concurrency: 8, Duration: time.Second, MaxRequests: 200, Identities: 7, Expect: slowBucket,
	}, &progress)
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, rep, srv.received.Load())
	if rep.Errors != 0 || rep.Sent == 0 || rep.Sent > 200 {
		t.Fatalf("report %+v", rep)
	}
	if got, want := rep.Allowed, srv.allowed.Load(); got != want {
		t.Errorf("allowed %d, server allowed %d", got, want)
	}
	if got, want := rep.Allowed, wantAllowed(rep.Sent, 7); got != want {
		t.Errorf("allowed %d, want %d for %d requests over 7 identities", got, want, rep.Sent)
	}
	if !rep.HasExpected || rep.ExpectedDenyRatio != rep.DenyRatio {
		t.Errorf("deny ratio %v, expected %v (has %v): the model and the server apply the same policy", rep.DenyRatio, rep.ExpectedDenyRatio, rep.HasExpected)
	}
	srv.mu.Lock()
	if len(srv.perIdentity) != 7 {
		t.Errorf("%d identities seen, want 7", len(srv.perIdentity))
	}
	srv.mu.Unlock()
	out := progress.String()
	if !strings.HasPrefix(out, "\r") || !strings.HasSuffix(out, "\n") || !strings.Contains(out, " done ") {
		t.Errorf("progress output %q", out)
	}
	s := rep.String()
	for _, want := range []string{"closed loop, 8 workers, 7 identities", "denied (429)", "expected", "p99"} {
		if !strings.Contains(s, want) {
			t.Errorf("report table lacks %q:\n%s", want, s)
		}
	}
}

func TestHTTPOpenLoop(t *testing.T) {
	srv, url := startCheckServer(t)
	rep, err := Run(context.Background(), Options{
		Target: url, Rate: 300, Concurrency: 4, Duration: time.Second, MaxRequests: 150, Identities: 3,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, rep, srv.received.Load())
	if rep.Errors != 0 || rep.Sent == 0 || rep.Sent > 150 {
		t.Fatalf("report %+v", rep)
	}
	if got, want := rep.Allowed, wantAllowed(rep.Sent, 3); got != want {
		t.Errorf("allowed %d, want %d", got, want)
	}
	if rep.HasExpected {
		t.Errorf("no expectation was given, report has %v", rep.ExpectedDenyRatio)
	}
	if !strings.Contains(rep.String(), "open loop, 300.0 req/s target") {
		t.Errorf("report:\n%s", rep)
	}
}

func TestGRPCClosedLoop(t *testing.T) {
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var received atomic.Int64
	gs := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		received.Add(1)
		return h(ctx, req)
	}))
	svc.Register(gs)
	done := make(chan error, 1)
	go func() { done <- gs.Serve(ln) }()
	t.Cleanup(func() {
		gs.Stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})

	rep, err := Run(context.Background(), Options{
		Target: "grpc://" + ln.Addr().String(), Domain: "lg", Concurrency: 6, Duration: time.Second,
		MaxRequests: 120, Identities: 5, Expect: slowBucket,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, rep, received.Load())
	if rep.Errors != 0 || rep.Sent == 0 || rep.Sent > 120 {
		t.Fatalf("report %+v", rep)
	}
	if got, want := rep.Allowed, wantAllowed(rep.Sent, 5); got != want {
		t.Errorf("allowed %d, want %d", got, want)
	}
	if rep.ExpectedDenyRatio != rep.DenyRatio {
		t.Errorf("deny ratio %v, expected %v", rep.DenyRatio, rep.ExpectedDenyRatio)
	}

	// An unknown domain is refused by the service: every request is an
	// error, with the service's message among the samples.
	rep, err = Run(context.Background(), Options{
		Target: "grpc://" + ln.Addr().String(), Domain: "nope", Concurrency: 2, Duration: time.Second, MaxRequests: 10,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Errors != rep.Sent || rep.Sent == 0 || len(rep.ErrorSamples) != 1 || !strings.Contains(rep.ErrorSamples[0].Message, `unknown domain "nope"`) {
		t.Errorf("unknown domain: %+v", rep)
	}
}

func TestHTTPErrorsAreCounted(t *testing.T) {
	var received atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := received.Add(1)
		switch n % 3 {
		case 0:
			http.Error(w, "store unavailable", http.StatusServiceUnavailable)
		case 1:
			w.Write([]byte(`{"allowed":true}`))
		default:
			w.Write([]byte(`not json`))
		}
	}))
	t.Cleanup(srv.Close)
	rep, err := Run(context.Background(), Options{Target: srv.URL, Concurrency: 1, Duration: time.Second, MaxRequests: 30}, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, rep, received.Load())
	if rep.Allowed != (rep.Sent+2)/3 || rep.Errors != rep.Sent-rep.Allowed || len(rep.ErrorSamples) != 2 {
		t.Errorf("report %+v", rep)
	}
	if !strings.Contains(rep.String(), "HTTP 503: store unavailable") {
		t.Errorf("report lacks the error sample:\n%s", rep)
	}
}

func TestCanceledContextReturnsPartialReport(t *testing.T) {
	srv, url := startCheckServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep, err := Run(ctx, Options{Target: url, Duration: time.Second}, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if rep.Allowed+rep.Denied > srv.received.Load() {
		t.Errorf("report %+v", rep)
	}
}

func TestOptionsValidation(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"no target", Options{Duration: time.Second}, "target"},
		{"bad scheme", Options{Target: "ftp://x:1", Duration: time.Second}, `scheme "ftp"`},
		{"mode mismatch", Options{Target: "http://x:1", Mode: GRPC, Duration: time.Second}, "mode grpc needs a grpc:// or grpcs:// target"},
		{"mode mismatch, http", Options{Target: "grpc://x:1", Mode: HTTP, Duration: time.Second}, "mode http needs an http:// or https:// target"},
		{"unknown scheme", Options{Target: "ftp://x:1", Duration: time.Second}, `unknown scheme "ftp" (want http, https, grpc or grpcs)`},
		{"path", Options{Target: "http://x:1/v1/check", Duration: time.Second}, "want http://host:port"},
		{"no duration", Options{Target: "http://x:1"}, "duration 0s"},
		{"negative rate", Options{Target: "http://x:1", Duration: time.Second, Rate: -1}, "rate -1"},
		{"huge concurrency", Options{Target: "http://x:1", Duration: time.Second, Concurrency: MaxConcurrency + 1}, "concurrency"},
		{"identities", Options{Target: "http://x:1", Duration: time.Second, Identities: -2}, "identities -2"},
		{"cost", Options{Target: "http://x:1", Duration: time.Second, Cost: -1}, "cost -1"},
		{"cost over HTTP", Options{Target: "http://x:1", Duration: time.Second, Cost: floodgate.MaxCost + 1}, "cost 1099511627777 out of range 1..1099511627776 (the HTTP API's largest cost)"},
		{"cost over gRPC", Options{Target: "grpc://x:1", Duration: time.Second, Cost: 1 << 32}, "cost 4294967296 out of range 1..4294967295 (Envoy's hits_addend is a uint32)"},
		{"cost over Envoy JSON", Options{Target: "http://x:1", Mode: EnvoyJSON, Duration: time.Second, Cost: 1 << 32}, "cost 4294967296 out of range 1..4294967295"},
		{"expect", Options{Target: "http://x:1", Duration: time.Second, Expect: floodgate.Policy{Algorithm: floodgate.FixedWindow, Limit: 0, Window: time.Second}}, "expect"},
		{"ratio", Options{Target: "http://x:1", Duration: time.Second, ExpectedDenyRatio: 1.5}, "expected deny ratio 1.5"},
		{"max requests", Options{Target: "http://x:1", Duration: time.Second, MaxRequests: -1}, "max requests -1"},
		// An outside walk: no port, or one out of range, ran at a million
		// "requests" a second of dial errors; user information was
		// accepted and not sent.
		{"no port", Options{Target: "http://127.0.0.1", Duration: time.Second}, `target "http://127.0.0.1": no port: want http://127.0.0.1:PORT`},
		{"no port, grpc", Options{Target: "grpc://localhost/", Duration: time.Second}, "no port: want grpc://localhost:PORT"},
		{"port out of range", Options{Target: "http://127.0.0.1:99999", Duration: time.Second}, "port 99999 out of range 1..65535"},
		{"port 0", Options{Target: "grpc://127.0.0.1:0", Duration: time.Second}, "port 0 out of range 1..65535"},
		{"user information", Options{Target: "http://user:secret@127.0.0.1:1", Duration: time.Second}, `target "http://user:xxxxx@127.0.0.1:1": user information in the URL is not used`},
		{"expect and ratio", Options{Target: "http://x:1", Duration: time.Second, Expect: slowBucket, HasExpectedDenyRatio: true}, "exclude each other"},
	}
	for _, tt := range tests {
		_, err := Run(context.Background(), tt.opts, nil)
		if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an ErrInvalidOptions saying %q", tt.name, err, tt.want)
		}
	}
}

// TestOpenLoopStopsAtTheEnd: against a server that never answers, an
// open-loop run sends one request per worker and nothing after its
// duration: the arrivals queued behind the stuck workers are dropped, not
// sent once the workers' requests time out. It used to send them after
// the end.
func TestOpenLoopStopsAtTheEnd(t *testing.T) {
	var received atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		received.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	rep, err := Run(context.Background(), Options{Target: srv.URL, Rate: 200, Concurrency: 2, Duration: 300 * time.Millisecond, Timeout: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // time for a late request to arrive
	if got := received.Load(); got != 2 || rep.Sent != 2 || rep.Errors != 2 {
		t.Fatalf("server received %d requests, report %+v; want the 2 the workers sent before the end, both errors", got, rep)
	}
	if rep.Dropped < 50 {
		t.Errorf("dropped %d; want the arrivals of 300ms at 200/s less the 2 sent", rep.Dropped)
	}
}

// TestHTTPCostBeyondUint32: over the HTTP API a cost may exceed Envoy's
// 32-bit hits_addend, up to the API's own largest; it used to be
// refused above 2^32-1 whatever the transport.
func TestHTTPCostBeyondUint32(t *testing.T) {
	var bodies atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Cost int64 }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Cost != floodgate.MaxCost {
			http.Error(w, "unexpected cost", http.StatusBadRequest)
			return
		}
		bodies.Add(1)
		w.Write([]byte(`{"allowed":true}`))
	}))
	t.Cleanup(srv.Close)
	rep, err := Run(context.Background(), Options{Target: srv.URL, Concurrency: 1, Duration: time.Minute, MaxRequests: 3, Cost: floodgate.MaxCost}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Allowed != 3 || bodies.Load() != 3 {
		t.Fatalf("report %+v, %d bodies with cost %d; want 3 allowed", rep, bodies.Load(), int64(floodgate.MaxCost))
	}
}
