package loadgen

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/envoyrls"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// TestGRPCDegradedCounted drives Floodgate's envoyrls service over a
// fallback store whose Redis was killed: every answer is the fallback's
// and marked so, and both clients, open and closed loop, count each one
// in Report.Degraded, which the report prints. They used to report a
// perfect run.
func TestGRPCDegradedCounted(t *testing.T) {
	rs := redistest.Start(t)
	primary, err := redisstore.New(rs.Client(t), redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	local, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fb, err := fallback.New(primary, local, fallback.Options{DefaultMode: fallback.ModeLocal})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fb.Close)
	lim, err := floodgate.New(fb, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := envoyrls.ParseConfig([]byte("domain: lg\ndescriptors:\n  - key: user\n    rate_limit: {requests_per_unit: 1000, unit: hour}\n"), "lg.yaml")
	if err != nil {
		t.Fatal(err)
	}
	svc, err := envoyrls.NewService(lim, func() *envoyrls.Config { return cfg }, envoyrls.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var received atomic.Int64
	_, target := grpcServer(t, svc, &received)
	rs.Kill()
	for _, c := range grpcClients {
		for _, rate := range []float64{0, 400} {
			before := received.Load()
			rep, err := Run(context.Background(), Options{Target: target, Domain: "lg", GRPCClient: c, Rate: rate,
				Concurrency: 4, Duration: time.Minute, MaxRequests: 40, Identities: 3}, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkCounts(t, rep, received.Load()-before)
			if rep.Errors != 0 || rep.Allowed != 40 || rep.Degraded != 40 {
				t.Errorf("%v client, rate %v: %d allowed, %d degraded, %d errors; want 40 allowed, all degraded", c, rate, rep.Allowed, rep.Degraded, rep.Errors)
			}
			if want := "  degraded           40 (100.00% of the answers"; !strings.Contains(rep.String(), want) {
				t.Errorf("%v client: report lacks %q:\n%s", c, want, rep)
			}
		}
	}
}

// TestHTTPDegradedCounted: an HTTP answer is degraded when its body says
// "degraded": true or it carries X-Floodgate-Degraded, read by the raw
// worker and through an HTTPClient alike; with an expected deny ratio,
// the report warns that the comparison does not hold.
func TestHTTPDegradedCounted(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		switch n.Add(1) % 4 {
		case 0:
			w.Write([]byte(`{"allowed":true,"layers":[],"degraded":true,"failure_mode":"local","degraded_reason":"timeout"}`))
		case 1:
			w.Header().Set("X-Floodgate-Degraded", "closed; reason=breaker_open")
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(`{"allowed":false}`))
		default:
			w.Write([]byte(`{"allowed":true,"layers":[{"degraded":true}]}`)) // a layer's member is not the answer's
		}
	}))
	t.Cleanup(srv.Close)
	for _, client := range []*http.Client{nil, {}} {
		rep, err := Run(context.Background(), Options{Target: srv.URL, Concurrency: 2, Duration: time.Minute, MaxRequests: 40,
			HTTPClient: client, ExpectedDenyRatio: 0.25}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Errors != 0 || rep.Allowed != 30 || rep.Denied != 10 || rep.Degraded != 20 {
			t.Errorf("net/http client %v: %+v; want 30 allowed, 10 denied, 20 degraded", client != nil, rep)
		}
		if want := "warning: 20 answers were degraded"; !strings.Contains(rep.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
}
