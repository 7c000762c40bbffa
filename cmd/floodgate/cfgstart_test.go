package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// TestServeStartsWithoutUsableRedisConfig: serve --config-from-redis whose
// Redis document cannot be used at start (the key missing, an invalid
// document, Redis down) used to exit 1, so that every restart, scale-up
// or rolling deploy crash-looped until someone fixed Redis. It now runs:
// alive, not ready (/readyz 503 naming the key and the problem), the HTTP
// API (net/http and fasthttp) answering 503 no-configuration with
// Retry-After, nothing decided, the failure logged once and counted; the
// gRPC API, whose descriptors come from --envoy-config and not from the
// document, decides on, its health NOT_SERVING as the instance is not
// ready. A valid document pushed then applies within a few seconds (by
// pub/sub, or by the read every second while no configuration is active;
// not by the 10 s poll), and the instance becomes ready.
func TestServeStartsWithoutUsableRedisConfig(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte("domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		engine string
		// before runs before serve starts, and returns the text
		// /readyz's error and the log must name.
		before func(t *testing.T, rs *redistest.Server, prefix string) string
		// fix runs once serve is up without a configuration, before the
		// push.
		fix           func(t *testing.T, rs *redistest.Server)
		unreadableLog bool
	}{
		{name: "key missing", engine: "net/http", unreadableLog: true,
			before: func(*testing.T, *redistest.Server, string) string { return "no configuration stored in Redis" }},
		{name: "invalid document", engine: "fasthttp",
			before: func(t *testing.T, rs *redistest.Server, prefix string) string {
				if err := rs.Client(t).Set(context.Background(), prefix+":config", "version: \"1\"\npolicies: []\n", 0).Err(); err != nil {
					t.Fatal(err)
				}
				return "policies is empty"
			}},
		{name: "redis down", engine: "net/http", unreadableLog: true,
			before: func(t *testing.T, rs *redistest.Server, _ string) string {
				rs.Stop()
				return "connect: connection refused"
			},
			fix: func(t *testing.T, rs *redistest.Server) { rs.Restart(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := redistest.Start(t)
			prefix := fmt.Sprintf("cfgstart%d", time.Now().UnixNano())
			key := prefix + ":config"
			url := "redis://" + rs.Addr + "/0"
			reason := tc.before(t, rs, prefix)
			svc := startService(t, "--redis", url, "--config-from-redis", "--prefix", prefix, "--http-server", tc.engine,
				"--grpc-addr", "127.0.0.1:0", "--envoy-config", dir)
			if code := get(t, svc.url+"/healthz"); code != http.StatusOK {
				t.Fatalf("GET /healthz: %d, want 200", code)
			}
			// The reason may first be the read made at start, then the
			// watcher's: wait for the watcher's log line.
			msg := "configuration rejected; no configuration is active: decisions answer 503 no-configuration until the source holds a valid one"
			if tc.unreadableLog {
				msg = "configuration source unreadable; no configuration is active: decisions answer 503 no-configuration until the source holds a valid one"
			}
			waitUntil(t, "the failure's log line", func() bool { _, ok := svc.Logged(msg); return ok })
			for _, path := range []string{"/readyz", "/readyz?degraded=ok"} {
				code, body := httpGet(t, svc.url+path)
				var ready struct{ Status, Error string }
				_ = json.Unmarshal([]byte(body), &ready)
				if code != http.StatusServiceUnavailable || ready.Status != "no-configuration" || !strings.Contains(ready.Error, "redis:"+key) || !strings.Contains(ready.Error, reason) {
					t.Fatalf("GET %s: %d %s; want 503 no-configuration naming %q and %q", path, code, body, "redis:"+key, reason)
				}
			}
			for _, c := range []struct{ path, body string }{
				{"/v1/check", `{"policy":"api","identity":{"user":"a"}}`},
				{"/v1/peek", `{"policy":"api","identity":{"user":"a"}}`},
				{"/v1/check/batch", `{"requests":[{"policy":"api","identity":{"user":"a"}}]}`},
				{"/v1/quota/check", `{"quota":"tokens","identity":{"api_key":"k"},"cost":1}`},
				{"/v1/concurrency/acquire", `{"limiter":"jobs","identity":{"user":"a"}}`},
			} {
				code, h, body := postFull(t, svc.url+c.path, c.body)
				var p server.Problem
				_ = json.Unmarshal([]byte(body), &p)
				if code != http.StatusServiceUnavailable || p.Type != server.ProblemTypePrefix+"no-configuration" || h.Get("Retry-After") == "" || !strings.Contains(p.Detail, reason) {
					t.Fatalf("POST %s: %d Retry-After %q %s; want 503 no-configuration with Retry-After, saying %q", c.path, code, h.Get("Retry-After"), body, reason)
				}
			}
			if n := strings.Count(svc.Logs(), msg); n != 1 {
				t.Errorf("%q logged %d times, want once:\n%s", msg, n, svc.Logs())
			}
			if v := metricValue(t, svc.url, `floodgate_http_rejected_total{problem="no-configuration"}`); v < 5 {
				t.Errorf("floodgate_http_rejected_total{problem=\"no-configuration\"} = %v, want at least 5", v)
			}
			if tc.unreadableLog {
				if v := metricValue(t, svc.url, `floodgate_config_reload_total{result="error",source="policies"}`); v < 1 {
					t.Errorf("reload errors = %v, want at least 1", v)
				}
				if v := metricValue(t, svc.url, `floodgate_config_source_unreadable{source="policies"}`); v != 1 {
					t.Errorf("floodgate_config_source_unreadable = %v, want 1 (RateLimitConfigUnreadable)", v)
				}
			} else if v := metricValue(t, svc.url, `floodgate_config_source_rejected{source="policies"}`); v != 1 {
				t.Errorf("floodgate_config_source_rejected = %v, want 1 (RateLimitConfigRejected)", v)
			}
			if v := metricValue(t, svc.url, `floodgate_config_last_reload_success_timestamp_seconds{source="policies"}`); v != 0 {
				t.Errorf("last reload success = %v, want 0: nothing was applied", v)
			}

			gc, err := grpc.NewClient(svc.addr(t, grpcListening), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer gc.Close()
			health := func() healthpb.HealthCheckResponse_ServingStatus {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				r, err := healthpb.NewHealthClient(gc).Check(ctx, &healthpb.HealthCheckRequest{})
				if err != nil {
					t.Fatal(err)
				}
				return r.Status
			}
			if st := health(); st != healthpb.HealthCheckResponse_NOT_SERVING {
				t.Errorf("gRPC health %v, want NOT_SERVING while no configuration is loaded", st)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rl := rlspb.NewRateLimitServiceClient(gc)
			req := &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
				{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: tc.name}}}}}
			if r, err := rl.ShouldRateLimit(ctx, req); err != nil || r.OverallCode != rlspb.RateLimitResponse_OK {
				t.Fatalf("gRPC ShouldRateLimit under --envoy-config's descriptors: %v %v; want OK", r, err)
			}

			if tc.fix != nil {
				tc.fix(t, rs)
			}
			doc := strings.Replace(e2eConfig, `version: "1"`, `version: "2"`, 1)
			if _, err := config.Publish(ctx, rs.Client(t), config.Keys{Config: key, Channel: prefix + ":config:changed", Tiers: prefix + ":tiers"}, []byte(doc)); err != nil {
				t.Fatal(err)
			}
			pushed := time.Now()
			for get(t, svc.url+"/readyz") != http.StatusOK {
				if time.Since(pushed) > 5*time.Second {
					_, body := httpGet(t, svc.url+"/readyz")
					t.Fatalf("not ready 5 s after the push (pub/sub or the read every second while none is active applies it; the usual poll is every 10 s): %s", body)
				}
				time.Sleep(25 * time.Millisecond)
			}
			if code, r := post(t, svc.url+"/v1/check", server.CheckRequest{Policy: "fifty", Identity: map[string]string{"user": "a"}}); code != http.StatusOK || !r.Allowed || r.Limit != 50 {
				t.Fatalf("check after the push: %d %+v; want 200, allowed, limit 50", code, r)
			}
			if _, ok := svc.Logged("configuration applied"); !ok {
				t.Errorf("no \"configuration applied\" in the log:\n%s", svc.Logs())
			}
			waitUntil(t, "gRPC health SERVING", func() bool { return health() == healthpb.HealthCheckResponse_SERVING })
			svc.stop(t)
		})
	}
}

// postFull posts body as JSON and returns the status, headers and body.
func postFull(t *testing.T, url, body string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(raw)
}
