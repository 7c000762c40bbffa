package loadgen

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/stats"

	"github.com/floodgate-rl/floodgate/envoycompat"
)

// startEnvoyJSON serves envoy-compat's POST /json (the same handler as
// `floodgate envoy-compat`) with domain "lg": 3 per user per hour, in
// memory, counting the requests it received.
func startEnvoyJSON(t *testing.T) (*atomic.Int64, string) {
	t.Helper()
	svc, err := envoycompat.NewService(envoycompat.Options{Store: &envoycompat.MemoryStore{}, NearLimitRatio: 0.8})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := envoycompat.Load([]envoycompat.File{{Name: "config.lg.yaml", Data: []byte(`
domain: lg
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3}
`)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	svc.SetConfig(cfg)
	h := svc.HTTPHandler(envoycompat.NewHealth(health.NewServer(), false))
	var received atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		received.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return &received, srv.URL
}

func TestEnvoyJSONClosedLoop(t *testing.T) {
	received, url := startEnvoyJSON(t)
	rep, err := Run(context.Background(), Options{
		Target: url, Mode: EnvoyJSON, Domain: "lg", Concurrency: 5, Duration: 5 * time.Second,
		MaxRequests: 90, Identities: 4, IdentityPrefix: `odd"\id-`,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, rep, received.Load())
	if rep.Errors != 0 || rep.Sent != 90 || rep.Mode != EnvoyJSON {
		t.Fatalf("report %+v", rep)
	}
	if got, want := rep.Allowed, wantAllowed(rep.Sent, 4); got != want {
		t.Errorf("allowed %d, want %d", got, want)
	}

	// A domain without limits is allowed, as Envoy's services answer.
	rep, err = Run(context.Background(), Options{
		Target: url, Mode: EnvoyJSON, Domain: "nope", Concurrency: 2, Duration: 5 * time.Second, MaxRequests: 6,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Errors != 0 || rep.Allowed != 6 {
		t.Errorf("unknown domain: %+v", rep)
	}
}

func TestEnvoyJSONAnswers(t *testing.T) {
	tests := []struct {
		status            int
		body              string
		allowed, degraded bool
		err               string
	}{
		{200, `{"overallCode":"OK","statuses":[{"code":"OK"}]}`, true, false, ""},
		{200, `{"statuses":[{"code":"OK"}], "overallCode": "OK"}`, true, false, ""}, // protojson may add spaces
		{429, `{"overallCode":"OVER_LIMIT"}`, false, false, ""},
		{200, `{"statuses":[{"code":"OK","overallCode":"OK"}]}`, false, false, "without"}, // nested, not the answer's
		{200, `not json`, false, false, "without"},
		{500, `boom`, false, false, "HTTP 500: boom"},
		// Degraded, as floodgate serve marks its gRPC answers.
		{200, `{"overallCode":"OK","responseHeadersToAdd":[{"key":"X-RateLimit-Limit","value":"5"},{"key":"x-floodgate-degraded","value":"local; reason=timeout"}]}`, true, true, ""},
		{429, `{"overallCode":"OVER_LIMIT","dynamicMetadata":{"failure_mode":"closed","degraded":true}}`, false, true, ""},
		{200, `{"overallCode":"OK","responseHeadersToAdd":[{"key":"X-RateLimit-Limit","value":"X-Floodgate-Degraded"}],"dynamicMetadata":{"degraded":false}}`, true, false, ""},
	}
	for _, tt := range tests {
		v, err := envoyJSONAnswer(tt.status, []byte(tt.body))
		if v.allowed != tt.allowed || v.degraded != tt.degraded || (tt.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%d %s: %+v, %v; want allowed %v, degraded %v, error containing %q", tt.status, tt.body, v, err, tt.allowed, tt.degraded, tt.err)
		}
	}
}

// checkAnswer reads "allowed" and "degraded" wherever they stand among
// the answer's own members.
func TestCheckAnswer(t *testing.T) {
	tests := []struct {
		status            int
		body              string
		allowed, degraded bool
		err               string
	}{
		{200, `{"allowed":true,"layers":[{"degraded":true}]}`, true, false, ""},
		{200, `{"allowed":false,"reason":"limited"}`, false, false, ""},
		{200, `{"allowed":true,"layers":[],"degraded":true,"failure_mode":"local","degraded_reason":"timeout"}`, true, true, ""},
		{429, `{"allowed":false,"degraded":true,"failure_mode":"closed"}`, false, true, ""},
		{429, ``, false, false, ""},
		{200, `{"degraded":true}`, false, false, "without a boolean"},
		{503, `{"status":503}`, false, false, "HTTP 503"},
	}
	for _, tt := range tests {
		v, err := checkAnswer(tt.status, []byte(tt.body))
		if v.allowed != tt.allowed || v.degraded != tt.degraded || (tt.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%d %s: %+v, %v; want allowed %v, degraded %v, error containing %q", tt.status, tt.body, v, err, tt.allowed, tt.degraded, tt.err)
		}
	}
}

func TestTopLevelValue(t *testing.T) {
	tests := []struct{ doc, key, want string }{
		{`{"allowed":true}`, "allowed", "true"},
		{` { "a" : {"allowed":false} , "allowed" : false } `, "allowed", "false"},
		{`{"a":"x\"allowed\":true","allowed":1}`, "allowed", "1"},
		{`{"a":[1,{"b":"]"}],"c":"d"}`, "c", `"d"`},
		{`{"a":[1,2}`, "c", ""},
		{`{"a":"unterminated}`, "a", ""},
		{`{"a":}`, "a", ""},
		{`{"a":1`, "a", ""},
		{`[{"a":1}]`, "a", ""},
		{``, "a", ""},
		{`{}`, "a", ""},
	}
	for _, tt := range tests {
		if got := string(topLevelValue([]byte(tt.doc), tt.key)); got != tt.want {
			t.Errorf("topLevelValue(%s, %q) = %q, want %q", tt.doc, tt.key, got, tt.want)
		}
	}
}

func TestParseMode(t *testing.T) {
	for _, m := range []Mode{HTTP, GRPC, EnvoyJSON} {
		got, err := ParseMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m, got, err)
		}
	}
	if m, err := ParseMode(""); err != nil || m != 0 {
		t.Errorf(`ParseMode("") = %v, %v`, m, err)
	}
	if _, err := ParseMode("json"); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf(`ParseMode("json") = %v`, err)
	}
	_, err := Run(context.Background(), Options{Target: "grpc://x:1", Mode: EnvoyJSON, Duration: time.Second}, nil)
	if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "envoy-json") {
		t.Errorf("envoy-json over grpc://: %v", err)
	}
}

// connCounter counts the connections a gRPC server accepted.
type connCounter struct{ n atomic.Int64 }

func (c *connCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (c *connCounter) HandleRPC(context.Context, stats.RPCStats)                       {}
func (c *connCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (c *connCounter) HandleConn(_ context.Context, s stats.ConnStats) {
	if _, ok := s.(*stats.ConnBegin); ok {
		c.n.Add(1)
	}
}

func TestGRPCConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns connCounter
	gs := grpc.NewServer(grpc.StatsHandler(&conns))
	registerOKRLS(gs)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	target := "grpc://" + ln.Addr().String()

	for _, tt := range []struct{ workers, conns, want int }{{8, 3, 3}, {40, 0, 3}, {1, 0, 1}} {
		before := conns.n.Load()
		rep, err := Run(context.Background(), Options{Target: target, Concurrency: tt.workers, Connections: tt.conns, Duration: 5 * time.Second, MaxRequests: 200}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Errors != 0 || rep.Allowed != 200 {
			t.Errorf("%d workers: %+v", tt.workers, rep)
		}
		if got := conns.n.Load() - before; got != int64(tt.want) {
			t.Errorf("%d workers, Connections %d: %d connections, want %d", tt.workers, tt.conns, got, tt.want)
		}
	}
	_, err = Run(context.Background(), Options{Target: target, Concurrency: 2, Connections: 3, Duration: time.Second}, nil)
	if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "connections 3") {
		t.Errorf("more connections than workers: %v", err)
	}
}

// A request the server never answers is abandoned after Timeout and
// counted as an error; the worker goes on with a new context.
func TestTimeout(t *testing.T) {
	release := make(chan struct{})
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		w.Write([]byte(`{"allowed":true}`))
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	rep, err := Run(context.Background(), Options{Target: srv.URL, Concurrency: 1, Duration: 5 * time.Second, MaxRequests: 4, Timeout: 50 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Errors != 1 || rep.Allowed != 3 || len(rep.ErrorSamples) != 1 || !strings.Contains(rep.ErrorSamples[0].Message, "no answer within 50ms") {
		t.Errorf("report %+v", rep)
	}
}
