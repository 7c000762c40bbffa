package main

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestServeGRPCDegradedHeader: with Redis killed, serve's gRPC answers
// decided by the fallback carry x-floodgate-degraded in
// response_headers_to_add (and dynamic_metadata); while Redis decides they
// carry neither. Each degraded gRPC answer is counted in /metrics'
// floodgate_degraded_responses_total, as the HTTP API's are.
func TestServeGRPCDegradedHeader(t *testing.T) {
	rs := redistest.Start(t)
	dir := t.TempDir()
	writeFileAtomic(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n")
	svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--prefix", fmt.Sprintf("grpcdeg%d", time.Now().UnixNano()),
		"--grpc-addr", "127.0.0.1:0", "--envoy-config", dir)
	grpcAddr := svc.addr(t, grpcListening)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlspb.NewRateLimitServiceClient(conn)
	call := func() (degraded string, resp *rlspb.RateLimitResponse) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "a"}}}}})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		for _, h := range resp.GetResponseHeadersToAdd() {
			if strings.EqualFold(h.GetKey(), "x-floodgate-degraded") {
				return h.GetValue(), resp
			}
		}
		return "", resp
	}
	// The very first decisions (script loading on a loaded machine) may
	// miss the budget: wait for one that Redis took.
	waitUntil(t, "a central gRPC decision", func() bool {
		d, resp := call()
		return d == "" && resp.GetDynamicMetadata() == nil
	})
	const counter = `floodgate_degraded_responses_total{mode="local"}`
	before := metricValue(t, svc.url, counter)
	rs.Kill()
	d, resp := call()
	if !strings.HasPrefix(d, "local; reason=") || resp.GetOverallCode() != rlspb.RateLimitResponse_OK ||
		!resp.GetDynamicMetadata().GetFields()["degraded"].GetBoolValue() {
		t.Fatalf("Redis killed: x-floodgate-degraded %q, %v; want \"local; reason=...\", OK, dynamic_metadata degraded", d, resp)
	}
	t.Logf("Redis killed: x-floodgate-degraded: %s", d)
	if after := metricValue(t, svc.url, counter); after != before+1 {
		t.Fatalf("%s went from %v to %v over one degraded gRPC answer, want +1", counter, before, after)
	}
}

// TestServeGRPCUsesServiceClock checks that gRPC decisions are stamped with
// the service's clock (the one --clock-sync disciplines), not the raw
// local one: with --clock-offset 1h and no sync, the window a decision
// writes starts an hour from now.
func TestServeGRPCUsesServiceClock(t *testing.T) {
	rs := redistest.Start(t)
	dir := t.TempDir()
	writeFileAtomic(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1000, algorithm: sliding_window}\n")
	prefix := fmt.Sprintf("grpcclock%d", time.Now().UnixNano())
	svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--prefix", prefix, "--clock-sync=false", "--clock-offset", "1h",
		"--fallback-budget", "5s", "--grpc-addr", "127.0.0.1:0", "--envoy-config", dir)
	defer svc.stop(t)
	grpcAddr := svc.addr(t, grpcListening)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before := time.Now()
	if _, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "a"}}}}}); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rdb.Close()
	keys, err := rdb.Keys(ctx, prefix+":edge.*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %v, %v; want the decision's one", keys, err)
	}
	val, err := rdb.Get(ctx, keys[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	// A sliding window's state starts with its window's start, in Unix
	// microseconds: in binary (the default state format) after its tag
	// byte 3, as a little-endian double (then its counts and the window's
	// length).
	var start int64
	if len(val) == 33 && val[0] == 3 {
		var bits uint64
		for i := 8; i >= 1; i-- {
			bits = bits<<8 | uint64(val[i])
		}
		start = int64(math.Float64frombits(bits))
	} else if start, err = strconv.ParseInt(strings.Fields(val + " ")[0], 10, 64); err != nil {
		t.Fatalf("state %q: %v", val, err)
	}
	want := before.Add(time.Hour).Truncate(time.Minute)
	if got := time.UnixMicro(start); got.Before(want.Add(-time.Minute)) || got.After(want.Add(time.Minute)) {
		t.Fatalf("window starts at %v, want about %v (the service's clock, an hour ahead)", got, want)
	}
}

// TestServeGRPCAnswersBeforeCallerDeadlineWhenRedisStalls: a gRPC caller
// whose deadline is shorter than the fallback budget (Envoy's filter
// calls with 20 ms; --fallback-budget is 50 ms) gets the fallback's
// answer before its deadline when Redis stalls (SIGSTOP: connections open,
// nothing answers), and the breaker opens. Scaled here to a 200 ms
// deadline and a 1 s budget so that a loaded machine has room. Before,
// the Redis call ended only at the caller's deadline, too late to answer;
// and the client's cancellation (RST_STREAM), arriving before the
// server's own timer, made the failure nobody's fault: the breaker stayed
// closed and every call timed out for as long as Redis stalled (50 of 53
// calls with Envoy's 20 ms over a 1.5 s stall).
func TestServeGRPCAnswersBeforeCallerDeadlineWhenRedisStalls(t *testing.T) {
	rs := redistest.Start(t)
	dir := t.TempDir()
	writeFileAtomic(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n")
	svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--prefix", fmt.Sprintf("grpcstall%d", time.Now().UnixNano()),
		"--fallback-budget", "1s", "--grpc-addr", "127.0.0.1:0", "--envoy-config", dir)
	conn, err := grpc.NewClient(svc.addr(t, grpcListening), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlspb.NewRateLimitServiceClient(conn)
	const deadline = 200 * time.Millisecond
	call := func(user string, d time.Duration) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		resp, err := client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}}}}})
		for _, h := range resp.GetResponseHeadersToAdd() {
			if strings.EqualFold(h.GetKey(), "x-floodgate-degraded") {
				return h.GetValue(), err
			}
		}
		return "", err
	}
	waitUntil(t, "a central gRPC decision", func() bool {
		d, err := call("warm", 10*time.Second)
		return err == nil && d == ""
	})
	if err := posix.Kill(rs.Pid, posix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resume := func() { _ = posix.Kill(rs.Pid, posix.SIGCONT) }
	t.Cleanup(resume)
	const calls = 20
	answered := 0
	for i := range calls {
		d, err := call(fmt.Sprint("u", i), deadline)
		if err == nil {
			if !strings.HasPrefix(d, "local; reason=") {
				t.Fatalf("call %d with Redis stalled: answered, x-floodgate-degraded %q; want a local decision", i, d)
			}
			answered++
		}
	}
	state := metricValue(t, svc.url, `rate_limit_breaker_state{partition="primary"}`)
	t.Logf("Redis stalled: %d of %d calls with a %v deadline answered; breaker state %v", answered, calls, deadline, state)
	if answered < calls/2 {
		t.Fatalf("%d of %d calls with a %v deadline answered while Redis stalled (--fallback-budget 1s); want the fallback to answer them before their deadline", answered, calls, deadline)
	}
	if state != 2 {
		t.Fatalf("breaker state %v after %d calls on a stalled Redis, want 2 (open)", state, calls)
	}
	resume()
	waitUntil(t, "a central gRPC decision after Redis resumed", func() bool {
		d, err := call("after", 10*time.Second)
		return err == nil && d == ""
	})
}

// TestServeGRPCDecisionTimeout: --decision-timeout bounds a gRPC request's
// store calls as it bounds an HTTP check's. With Redis stalled (SIGSTOP)
// and a budget and Redis timeout far longer than --decision-timeout, a
// gRPC call whose own deadline is longer still is answered soon after
// --decision-timeout: by the fallback (it has four fifths of it), or,
// with --fallback off, UNAVAILABLE, the service's time having run out,
// not the caller's. Before, the gRPC API ignored --decision-timeout: the
// call waited for the caller's deadline, the budget or the Redis timeout
// (8 s here, or DEADLINE_EXCEEDED at the caller's 10 s with --fallback
// off; by hand, 2.05 s per call with the defaults and --fallback off,
// where the HTTP check answered 503 after its 1 s).
func TestServeGRPCDecisionTimeout(t *testing.T) {
	const (
		callerDeadline = 10 * time.Second
		bound          = 4 * time.Second // half of what the old code took, 4 to 13 times what it should
	)
	// --decision-timeout 0 is the HTTP API's default, 1 s: so it is the
	// gRPC API's (it took 0 as no bound: DEADLINE_EXCEEDED at the caller's
	// 10 s).
	for _, tc := range []struct {
		fallback        string
		decisionTimeout string
		wantCode        codes.Code
	}{{"local", "300ms", codes.OK}, {"off", "300ms", codes.Unavailable}, {"off", "0", codes.Unavailable}} {
		decisionTimeout := tc.decisionTimeout
		t.Run("fallback-"+tc.fallback+"-timeout-"+decisionTimeout, func(t *testing.T) {
			rs := redistest.Start(t)
			dir := t.TempDir()
			writeFileAtomic(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n")
			args := []string{"--redis", "redis://" + rs.Addr + "/0", "--prefix", fmt.Sprintf("grpctimeout%d", time.Now().UnixNano()),
				"--fallback", tc.fallback, "--redis-timeout", "20s", "--decision-timeout", decisionTimeout,
				"--grpc-addr", "127.0.0.1:0", "--envoy-config", dir}
			if tc.fallback != "off" { // serve refuses a budget it would not use
				args = append(args, "--fallback-budget", "10s")
			}
			svc := startService(t, args...)
			conn, err := grpc.NewClient(svc.addr(t, grpcListening), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			client := rlspb.NewRateLimitServiceClient(conn)
			call := func(user string) (degraded string, took time.Duration, err error) {
				ctx, cancel := context.WithTimeout(context.Background(), callerDeadline)
				defer cancel()
				start := time.Now()
				resp, err := client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge",
					Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}}}}})
				took = time.Since(start)
				for _, h := range resp.GetResponseHeadersToAdd() {
					if strings.EqualFold(h.GetKey(), "x-floodgate-degraded") {
						degraded = h.GetValue()
					}
				}
				return degraded, took, err
			}
			waitUntil(t, "a central gRPC decision", func() bool {
				d, _, err := call("warm")
				return err == nil && d == ""
			})
			stallRedis(t, rs)
			d, took, err := call("stalled")
			t.Logf("--fallback %s, Redis stalled: answered after %v (--decision-timeout %v, caller's deadline %v): degraded %q, error %v",
				tc.fallback, took, decisionTimeout, callerDeadline, d, err)
			if code := status.Code(err); code != tc.wantCode {
				t.Fatalf("--fallback %s, Redis stalled: code %v (%v), want %v", tc.fallback, code, err, tc.wantCode)
			}
			if tc.wantCode == codes.OK && !strings.HasPrefix(d, "local; reason=") {
				t.Fatalf("--fallback local, Redis stalled: x-floodgate-degraded %q, want a local decision", d)
			}
			if took > bound {
				t.Fatalf("--fallback %s, Redis stalled: answered after %v; want it bounded by --decision-timeout %v (at most %v here)", tc.fallback, took, decisionTimeout, bound)
			}
		})
	}
}

// TestServeEnvoyDomainKeepsItsOwnFailureMode: an Envoy domain named like a
// policy of --config does not take that policy's on_redis_failure. The
// store names an Envoy descriptor "domain.key-<hash>", and the failure
// mode was looked up by the part before the first dot, so domain "edge"
// took HTTP policy "edge"'s closed mode (every Envoy request OVER_LIMIT
// while Redis was down); an open policy would have let the domain through
// unlimited. Envoy descriptors take --fallback (local by default).
func TestServeEnvoyDomainKeepsItsOwnFailureMode(t *testing.T) {
	rs := redistest.Start(t)
	dir := t.TempDir()
	writeFileAtomic(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n")
	cfg := filepath.Join(t.TempDir(), "floodgate.yaml")
	writeFileAtomic(t, cfg, "version: \"1\"\npolicies:\n  - name: edge\n    on_redis_failure: closed\n    layers:\n      - {name: per-user, algorithm: fixed_window, limit: 1000, window: 1m, dimension: user}\n")
	svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--prefix", fmt.Sprintf("edgemode%d", time.Now().UnixNano()),
		"--config", cfg, "--grpc-addr", "127.0.0.1:0", "--envoy-config", dir)
	conn, err := grpc.NewClient(svc.addr(t, grpcListening), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlspb.NewRateLimitServiceClient(conn)
	rs.Kill()
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "a"}}}}})
		cancel()
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		var degraded string
		for _, h := range resp.GetResponseHeadersToAdd() {
			if strings.EqualFold(h.GetKey(), "x-floodgate-degraded") {
				degraded = h.GetValue()
			}
		}
		if resp.GetOverallCode() != rlspb.RateLimitResponse_OK || !strings.HasPrefix(degraded, "local; reason=") {
			t.Fatalf("Envoy domain edge with Redis down: %v, x-floodgate-degraded %q; want OK by the local fallback (--fallback), not policy edge's closed mode", resp.GetOverallCode(), degraded)
		}
	}
	// The HTTP policy keeps its own mode.
	code, r := post(t, svc.url+"/v1/check", map[string]any{"policy": "edge", "identity": map[string]string{"user": "a"}})
	if code != 200 || r.Allowed {
		t.Fatalf("HTTP policy edge (on_redis_failure: closed) with Redis down: status %d, allowed %v; want a denial", code, r.Allowed)
	}
}
