package loadgen

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestPreflightHTTP: Preflight's one request fails the run before it
// starts for an HTTP 4xx but 408 and 429 (an unknown policy, a wrong
// path), saying what the service said, and lets it start for an answer
// allowed or denied and for errors a run may outlive (a 503). It is sent
// for an identity no run uses (pf-preflight-N, not pf-3: one past the
// run's last is another run's of the same prefix). An outside walk's run
// of a second against an unknown policy sent 9,952 requests, every one
// 400.
func TestPreflightHTTP(t *testing.T) {
	const problem = `{"type":"urn:floodgate:problem:unknown-policy","title":"Bad Request","status":400,"detail":"unknown policy \"nope\": the service's configuration lists its policies"}`
	for _, tc := range []struct {
		status    int
		body      string
		wantErr   bool
		wantType  string
		wantWords string
	}{
		{200, `{"allowed":true}`, false, "", ""},
		{429, `{"allowed":false}`, false, "", ""},
		{503, `{"detail":"store unavailable"}`, false, "", ""},
		{408, `slow`, false, "", ""},
		{400, problem, true, "urn:floodgate:problem:unknown-policy", `unknown policy "nope": the service's configuration lists its policies`},
		{404, "404 page not found\n", true, "", "404 page not found"},
		{403, `{"detail":"cross-site request refused"}`, true, "", "cross-site request refused"},
	} {
		var received atomic.Int64
		var mu sync.Mutex
		var bodies []string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			received.Add(1)
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			bodies = append(bodies, string(b))
			mu.Unlock()
			w.WriteHeader(tc.status)
			w.Write([]byte(tc.body))
		}))
		err := Preflight(context.Background(), Options{Target: srv.URL, Duration: time.Second, Identities: 3, IdentityPrefix: "pf-", Policy: "nope"})
		srv.Close()
		if n := received.Load(); n != 1 || !preflightBody.MatchString(bodies[0]) {
			t.Errorf("HTTP %d: %d requests received (%q); want one, for identity pf-preflight-N (no run's pf-0, pf-1...)", tc.status, n, bodies)
		}
		var pe *PreflightError
		if !tc.wantErr {
			if err != nil {
				t.Errorf("HTTP %d: %v; want nil (the run starts)", tc.status, err)
			}
			continue
		}
		if !errors.As(err, &pe) || pe.HTTPStatus != tc.status || pe.ProblemType != tc.wantType || pe.Detail != tc.wantWords || pe.Unreachable || pe.Mode != HTTP {
			t.Errorf("HTTP %d: %v (%+v); want a PreflightError of status %d, type %q, detail %q", tc.status, err, pe, tc.status, tc.wantType, tc.wantWords)
		}
	}
}

// preflightBody matches the body of Preflight's request with prefix pf-.
var preflightBody = regexp.MustCompile(`"user":"pf-preflight-[0-9]{1,9}"`)

// TestPreflightGRPC: over gRPC, with either client, INVALID_ARGUMENT (an
// unknown domain) fails the run before it starts, with its code and
// message; OK, OVER_LIMIT and UNAVAILABLE (a store down) let it start.
// The call is for identity PREFIXpreflight-N, as over HTTP.
func TestPreflightGRPC(t *testing.T) {
	for _, tc := range []struct {
		name    string
		f       func(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error)
		wantErr bool
	}{
		{"ok", func(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
			return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}, nil
		}, false},
		{"over-limit", func(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
			return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OVER_LIMIT}, nil
		}, false},
		{"unavailable", func(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
			return nil, status.Error(codes.Unavailable, "store down")
		}, false},
		{"unknown-domain", func(_ context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
			return nil, status.Errorf(codes.InvalidArgument, "envoyrls: invalid request: unknown domain %q", req.GetDomain())
		}, true},
	} {
		var received atomic.Int64
		var identity atomic.Value
		f := func(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
			identity.Store(req.GetDescriptors()[0].GetEntries()[0].GetValue())
			return tc.f(ctx, req)
		}
		_, target := grpcServer(t, rlsFunc{f: f}, &received)
		for _, c := range grpcClients {
			before := received.Load()
			err := Preflight(context.Background(), Options{Target: target, GRPCClient: c, Duration: time.Second, Domain: "api", IdentityPrefix: "pf-", Identities: 3})
			if n := received.Load() - before; n != 1 {
				t.Errorf("%s, %v client: %d calls; want 1", tc.name, c, n)
			}
			if id, _ := identity.Load().(string); !regexp.MustCompile(`^pf-preflight-[0-9]{1,9}$`).MatchString(id) {
				t.Errorf("%s, %v client: identity %q; want pf-preflight-N", tc.name, c, id)
			}
			var pe *PreflightError
			switch {
			case !tc.wantErr && err != nil:
				t.Errorf("%s, %v client: %v; want nil (the run starts)", tc.name, c, err)
			case tc.wantErr && (!errors.As(err, &pe) || pe.GRPCCode != codes.InvalidArgument || pe.Detail != `envoyrls: invalid request: unknown domain "api"` || pe.Mode != GRPC):
				t.Errorf("%s, %v client: %v (%+v); want a PreflightError of code InvalidArgument and the status message", tc.name, c, err, pe)
			}
		}
	}
}

// TestPreflightSharedPrefix: runs sharing --identity-prefix, each after
// its Preflight as floodgate loadtest does, share the identities' limits
// and nothing else: their requests' identities never include a pre-run
// request's, which is not PREFIX and a number, and together they are
// allowed the whole capacity of the identities they use. In an outside
// walk, run A (1 identity) sent its pre-run request to fleetq-1, which
// run B (2 identities) used: 1999 allowed of a capacity of 2000.
func TestPreflightSharedPrefix(t *testing.T) {
	s, target := startCheckServer(t)
	var allowed int64
	for _, o := range []Options{
		{Identities: 1, MaxRequests: 1},
		{Identities: 2, MaxRequests: 12},
	} {
		o.Target, o.Duration, o.IdentityPrefix = target, time.Minute, "fleetq-"
		if err := Preflight(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		rep, err := Run(context.Background(), o, nil)
		if err != nil {
			t.Fatal(err)
		}
		allowed += rep.Allowed
	}
	// slowBucket allows 3 per identity: fleetq-0 and fleetq-1.
	if want := 2 * slowBucket.Limit; allowed != want {
		t.Errorf("the runs were allowed %d together; want %d, the capacity of their 2 identities", allowed, want)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pre := regexp.MustCompile(`^fleetq-preflight-[0-9]{1,9}$`)
	var preflights int
	for id, n := range s.perIdentity {
		switch {
		case id == "fleetq-0" && n == 1+6, id == "fleetq-1" && n == 6:
		case pre.MatchString(id) && n == 1:
			preflights++
		default:
			t.Errorf("identity %q got %d requests; want fleetq-0 7 (1 + 6), fleetq-1 6, and fleetq-preflight-N 1 each", id, n)
		}
	}
	if preflights != 2 {
		t.Errorf("%d pre-run identities (%v); want 2", preflights, s.perIdentity)
	}
}

// TestPreflightUnreachable: nothing listening at the target (connection
// refused) fails the run before it starts, in every mode and with either
// gRPC client (grpc-go's answers UNAVAILABLE, as for a service down a
// while). An outside walk's run sent 15,500 requests a second to a
// closed port. A raw gRPC client pointed at an HTTP/1 server is told so.
func TestPreflightUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for _, o := range []Options{
		{Target: "http://" + addr},
		{Target: "http://" + addr, Mode: EnvoyJSON},
		{Target: "grpc://" + addr},
		{Target: "grpc://" + addr, GRPCClient: GRPCGo},
	} {
		o.Duration = time.Second
		err := Preflight(context.Background(), o)
		var pe *PreflightError
		if !errors.As(err, &pe) || !pe.Unreachable || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("%s (%v, %v client): %v; want a PreflightError, unreachable, connection refused", o.Target, o.Mode, o.GRPCClient, err)
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer srv.Close()
	err = Preflight(context.Background(), Options{Target: strings.Replace(srv.URL, "http://", "grpc://", 1), Duration: time.Second})
	var pe *PreflightError
	if !errors.As(err, &pe) || !pe.NotHTTP2 {
		t.Errorf("raw gRPC client at an HTTP/1 server: %v; want a PreflightError, not HTTP/2", err)
	}
}

// TestProgressLines: with ProgressLines, each progress line ends with a
// newline and none starts with a carriage return, for logs: a CI log of a
// run used to hold one line, rewritten with "\r" each second. Without
// it, the line is rewritten in place, as on a terminal.
func TestProgressLines(t *testing.T) {
	_, target := startCheckServer(t)
	for _, lines := range []bool{false, true} {
		var progress bytes.Buffer
		if _, err := Run(context.Background(), Options{Target: target, Rate: 200, Duration: 1200 * time.Millisecond, ProgressLines: lines}, &progress); err != nil {
			t.Fatal(err)
		}
		// One line a second (the ticker may lose the race with the end
		// on a busy machine) and one at the end.
		out := progress.String()
		n := strings.Count(out, "\n")
		if lines && (strings.Contains(out, "\r") || n < 1 || n > 2 || !strings.HasSuffix(out, "\n") || strings.Contains(out, "  \n") || !strings.HasPrefix(out, "   1.") && !strings.HasPrefix(out, "   0.")) {
			t.Errorf("ProgressLines: %q; want a line a second and one at the end, each ended by a newline, no carriage return", out)
		}
		if !lines && (strings.Count(out, "\r") < 1 || n != 1 || !strings.HasPrefix(out, "\r") || !strings.HasSuffix(out, "   \n")) {
			t.Errorf("without ProgressLines: %q; want one line rewritten after \\r, and a newline at the end", out)
		}
	}
}
