package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// stallRedis stops rs (SIGSTOP: connections open, nothing answers) until
// the test ends.
func stallRedis(t *testing.T, rs *redistest.Server) {
	t.Helper()
	if err := posix.Kill(rs.Pid, posix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = posix.Kill(rs.Pid, posix.SIGCONT) })
}

// TestServeStalledRedisIsWaitedForOncePerRequest: with Redis stalled
// (SIGSTOP), a request of several decisions waits for Redis once and
// counts one Redis failure: the first call times out after
// --fallback-budget, and every later decision of the request (and tier
// lookup) is taken by its failure mode at once, reason timeout. Before,
// each waited a budget of its own and counted a failure of its own: a
// batch of 8 checks took 8 budgets and 8 failures (or fewer once they
// opened the breaker), and so did an Envoy request of 8 descriptors with
// --envoy-count-each-descriptor.
func TestServeStalledRedisIsWaitedForOncePerRequest(t *testing.T) {
	const (
		budget = 300 * time.Millisecond
		n      = 8
	)
	const errorsTotal = "rate_limit_redis_errors_total"
	t.Run("batch", func(t *testing.T) {
		rs := redistest.Start(t)
		svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--prefix", fmt.Sprintf("batchstall%d", time.Now().UnixNano()),
			"--fallback-budget", budget.String(), "--decision-timeout", "10s")
		waitCentral(t, svc.url, server.CheckRequest{Policy: "api", Identity: map[string]string{"user": "warm"}})
		stallRedis(t, rs)
		// Checks of login (not tiered, closed) and api (tiered, local)
		// for identities never seen, whose tier lookups would each wait
		// too. In the first batch a login decision's call times out
		// first, in the second an api check's tier lookup.
		for round, first := range []string{"login", "api"} {
			items := make([]server.CheckRequest, n)
			for i := range items {
				policy := first
				if i%2 == 1 {
					policy = map[string]string{"login": "api", "api": "login"}[first]
				}
				items[i] = server.CheckRequest{Policy: "api", Identity: map[string]string{"user": fmt.Sprint("stalled-", round, "-", i)}}
				if policy == "login" {
					items[i] = server.CheckRequest{Policy: "login", Identity: map[string]string{"account": fmt.Sprint("a", round, "-", i), "ip": "192.0.2.1"}}
				}
			}
			before := metricValue(t, svc.url, errorsTotal)
			c := checkOn(t, svc.url, "/v1/check/batch", server.BatchRequest{Requests: items})
			failed := metricValue(t, svc.url, errorsTotal) - before
			if c.status != 200 || len(c.batch.Results) != n {
				t.Fatalf("batch with Redis stalled: status %d, %d results", c.status, len(c.batch.Results))
			}
			reasons := make([]string, n)
			for i, r := range c.batch.Results {
				if r.CheckResponse == nil || !r.Degraded {
					t.Fatalf("batch item %d with Redis stalled: %+v %+v; want degraded", i, r.CheckResponse, r.Error)
				}
				reasons[i] = r.FailureMode + "/" + r.DegradedReason
				if want := items[i].Policy == "api"; r.Allowed != want {
					t.Errorf("batch item %d (%s): allowed %v, want %v (api local, login closed)", i, items[i].Policy, r.Allowed, want)
				}
			}
			t.Logf("a batch of %d checks, %s first, with Redis stalled: %v (--fallback-budget %v), %v Redis calls failed, %v", n, first, c.took, budget, failed, reasons)
			if failed != 1 {
				t.Fatalf("%v Redis calls failed for a batch of %d checks (%s first) with Redis stalled; want 1", failed, n, first)
			}
		}
	})
	t.Run("grpc-each-descriptor", func(t *testing.T) {
		rs := redistest.Start(t)
		dir := t.TempDir()
		writeFileAtomic(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n")
		svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--prefix", fmt.Sprintf("grpcstall%d", time.Now().UnixNano()),
			"--fallback-budget", budget.String(), "--grpc-addr", "127.0.0.1:0", "--envoy-config", dir, "--envoy-count-each-descriptor")
		conn, err := grpc.NewClient(svc.addr(t, grpcListening), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		client := rlspb.NewRateLimitServiceClient(conn)
		call := func(users ...string) (degraded string, err error) {
			req := &rlspb.RateLimitRequest{Domain: "edge"}
			for _, u := range users {
				req.Descriptors = append(req.Descriptors, &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: u}}})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := client.ShouldRateLimit(ctx, req)
			for _, h := range resp.GetResponseHeadersToAdd() {
				if strings.EqualFold(h.GetKey(), "x-floodgate-degraded") {
					degraded = h.GetValue()
				}
			}
			if err == nil && resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
				err = fmt.Errorf("overall code %v", resp.GetOverallCode())
			}
			return degraded, err
		}
		waitUntil(t, "a central gRPC decision", func() bool {
			d, err := call("warm")
			return err == nil && d == ""
		})
		stallRedis(t, rs)
		users := make([]string, n)
		for i := range users {
			users[i] = fmt.Sprint("stalled-", i)
		}
		before := metricValue(t, svc.url, errorsTotal)
		start := time.Now()
		d, err := call(users...)
		took := time.Since(start)
		failed := metricValue(t, svc.url, errorsTotal) - before
		t.Logf("an Envoy request of %d descriptors counted each with Redis stalled: %v (--fallback-budget %v), degraded %q, %v Redis calls failed", n, took, budget, d, failed)
		if err != nil || !strings.HasPrefix(d, "local; reason=") {
			t.Fatalf("with Redis stalled: degraded %q, error %v; want OK from the local fallback", d, err)
		}
		if failed != 1 {
			t.Fatalf("%v Redis calls failed for %d descriptors with Redis stalled; want 1", failed, n)
		}
	})
}
