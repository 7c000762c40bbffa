package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// TestServeDebugLogsEachFallbackDecision: at --log-level debug, serve
// logs one line per decision taken by a failure mode, from the HTTP API
// and the gRPC one, with its policy, layers, keys, mode, reason and Redis
// error, as docs/operations.md (Logs) says; at info, none. A
// new-operator walk found nothing but the WARN line held back to one per
// 10 s: no debug-level logging existed.
func TestServeDebugLogsEachFallbackDecision(t *testing.T) {
	rs := redistest.Start(t)
	rs.Kill()
	dir := t.TempDir()
	writeFileAtomic(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n")
	const httpChecks, grpcCalls = 3, 2
	for _, level := range []string{"debug", "info"} {
		t.Run(level, func(t *testing.T) {
			svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--log-level", level,
				"--grpc-addr", "127.0.0.1:0", "--envoy-config", dir)
			for range httpChecks {
				// login's on_redis_failure is closed: denied.
				c := checkOn(t, svc.url, "/v1/check", server.CheckRequest{Policy: "login", Identity: map[string]string{"account": "alice", "ip": "192.0.2.1"}})
				if c.status != 200 || !c.resp.Degraded || c.resp.FailureMode != "closed" {
					t.Fatalf("login check with Redis down: %d degraded %v mode %q; want 200, degraded, closed", c.status, c.resp.Degraded, c.resp.FailureMode)
				}
			}
			conn, err := grpc.NewClient(svc.addr(t, grpcListening), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			client := rlspb.NewRateLimitServiceClient(conn)
			for range grpcCalls {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, err := client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge",
					Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "bob"}}}}})
				cancel()
				if err != nil || !resp.GetDynamicMetadata().GetFields()["degraded"].GetBoolValue() {
					t.Fatalf("ShouldRateLimit with Redis down: %v, %v; want a degraded answer", resp, err)
				}
			}
			svc.stop(t) // every line written is read
			recs := logRecords(svc.Logs(), fallbackDebugMsg)
			if level == "info" {
				if len(recs) != 0 {
					t.Fatalf("%d %q lines at info, want none:\n%s", len(recs), fallbackDebugMsg, svc.Logs())
				}
				return
			}
			if len(recs) != httpChecks+grpcCalls {
				t.Fatalf("%d %q lines for %d HTTP and %d gRPC decisions taken by the fallback, want %d:\n%s",
					len(recs), fallbackDebugMsg, httpChecks, grpcCalls, httpChecks+grpcCalls, svc.Logs())
			}
			t.Logf("first line: %v; last: %v", recs[0], recs[len(recs)-1])
			reasons := map[string]bool{"timeout": true, "unavailable": true, "breaker_open": true}
			for i, rec := range recs {
				policy, mode := "login", "closed"
				if i >= httpChecks {
					policy, mode = "edge", "local"
				}
				layers, _ := rec["layers"].([]any)
				keys, _ := rec["keys"].([]any)
				if rec["level"] != "DEBUG" || rec["policy"] != policy || rec["mode"] != mode || !reasons[rec["reason"].(string)] ||
					rec["error"] == "" || rec["error"] == "none" || len(layers) == 0 || len(keys) != len(layers) ||
					!strings.HasPrefix(layers[0].(string), policy+".") {
					t.Errorf("line %d: %v; want DEBUG, policy %s, its layers and keys, mode %s, reason timeout, unavailable or breaker_open, the error", i+1, rec, policy, mode)
				}
			}
		})
	}
}

// TestLogEachFallbackCostsNothingBelowDebug: serve's OnDegraded builds
// and allocates nothing when debug is off, and at debug writes every
// decision, none held back.
func TestLogEachFallbackCostsNothingBelowDebug(t *testing.T) {
	p, err := floodgate.NewSlidingWindow("api.per-user", 100, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	d := fallback.Degraded{Layers: []floodgate.Layer{{Policy: p, Key: "fg:{api.per-user:u}", Cost: 1}},
		Mode: fallback.ModeLocal, Reason: fallback.ReasonUnavailable, Err: errors.New("dial tcp 127.0.0.1:1: connect: connection refused")}
	ctx := context.Background()

	var buf bytes.Buffer
	info := logEachFallback(slog.New(slog.NewJSONHandler(&buf, nil)))
	if n := testing.AllocsPerRun(100, func() { info(ctx, d) }); n != 0 {
		t.Errorf("a degraded decision at info allocates %v times, want 0", n)
	}
	if buf.Len() != 0 {
		t.Errorf("wrote at info: %s", buf.String())
	}

	debug := logEachFallback(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	for range 3 {
		debug(ctx, d)
	}
	recs := logRecords(buf.String(), fallbackDebugMsg)
	if len(recs) != 3 {
		t.Fatalf("%d lines for 3 decisions at debug, want 3:\n%s", len(recs), buf.String())
	}
	if r := recs[0]; r["policy"] != "api" || r["mode"] != "local" || r["reason"] != "unavailable" || r["error"] != d.Err.Error() {
		t.Errorf("line %v; want policy api, mode local, reason unavailable, error %q", r, d.Err)
	}
}

// TestServeDebugLineCarriesNoIdentity: serve's debug line for a decision
// taken by the fallback names the policy, its layers and their keys with
// the identity part written {…}, and no identity value, raw or as encoded
// in a key, appears anywhere in the log, from the HTTP API (a quota layer's
// key with its period tag included) or the gRPC one. A reviewer found the
// raw keys in it ("fg:api.per-user:sw:{ru1} fg:api.monthly:qt:{ru1}:m2026-12"):
// user IDs, addresses and API keys, where httplimit's lines write {…}.
func TestServeDebugLineCarriesNoIdentity(t *testing.T) {
	rs := redistest.Start(t)
	rs.Kill()
	dir := t.TempDir()
	writeFileAtomic(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n")
	const (
		user    = "Zq7userNotForTheLog"
		account = "Kw9accountNotForTheLog"
		ip      = "198.51.100.77"
		envoyID = "Jx4descriptorNotForTheLog"
		spaced  = "Vb2 not readable, hashed in its key" // encoded "h" + hex
	)
	identities := []string{user, account, ip, envoyID, spaced}
	svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--log-level", "debug",
		"--grpc-addr", "127.0.0.1:0", "--envoy-config", dir)
	checks := []server.CheckRequest{
		{Policy: "api", Identity: map[string]string{"user": user}},
		{Policy: "login", Identity: map[string]string{"account": account, "ip": ip}},
		{Policy: "api", Identity: map[string]string{"user": spaced}},
	}
	for _, req := range checks {
		if c := checkOn(t, svc.url, "/v1/check", req); c.status != 200 || !c.resp.Degraded {
			t.Fatalf("%s check with Redis down: %d degraded %v; want 200, degraded", req.Policy, c.status, c.resp.Degraded)
		}
	}
	conn, err := grpc.NewClient(svc.addr(t, grpcListening), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	resp, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: envoyID}}}}})
	cancel()
	if err != nil || !resp.GetDynamicMetadata().GetFields()["degraded"].GetBoolValue() {
		t.Fatalf("ShouldRateLimit with Redis down: %v, %v; want a degraded answer", resp, err)
	}
	svc.stop(t) // every line written is read

	logs := svc.Logs()
	var found []string
	for _, id := range identities {
		for _, s := range []string{id, floodgate.EncodeIdentity(id)} {
			if strings.Contains(logs, s) {
				found = append(found, fmt.Sprintf("%q (as %q)", id, s))
				break
			}
		}
	}
	if len(found) > 0 {
		t.Errorf("the log holds identities %s:\n%s", strings.Join(found, ", "), logs)
	}
	recs := logRecords(logs, fallbackDebugMsg)
	if len(recs) != len(checks)+1 {
		t.Fatalf("%d %q lines for %d decisions taken by the fallback, want %d:\n%s", len(recs), fallbackDebugMsg, len(checks)+1, len(checks)+1, logs)
	}
	t.Logf("first line: %v", recs[0])
	for i, rec := range recs {
		policy := "edge"
		if i < len(checks) {
			policy = checks[i].Policy
		}
		layers, _ := rec["layers"].([]any)
		keys, _ := rec["keys"].([]any)
		if rec["policy"] != policy || len(layers) == 0 || len(keys) != len(layers) {
			t.Errorf("line %d: %v; want policy %s, its layers and as many keys", i+1, rec, policy)
			continue
		}
		for j, l := range layers {
			name, _ := l.(string)
			key, _ := keys[j].(string)
			if !strings.HasPrefix(name, policy+".") || !strings.Contains(key, ":"+name+":") || !strings.Contains(key, "{…}") {
				t.Errorf("line %d, layer %d: name %q, key %q; want a layer of %s and its key with the identity written {…}", i+1, j+1, name, key, policy)
			}
		}
	}
	if keys, _ := recs[0]["keys"].([]any); len(keys) != 3 || !strings.Contains(fmt.Sprint(keys[2]), ":qt:{…}:m") {
		t.Errorf("api line's keys %v; want 3, the monthly quota's with its period tag after {…}", keys)
	}
}

// TestLogEachFallbackWritesNoIdentity: a foreign value's error names the
// decision's keys; the debug line writes them, and the keys, with the
// identity part {…} (the WARN lines name a foreign key in full, held back).
func TestLogEachFallbackWritesNoIdentity(t *testing.T) {
	p, err := floodgate.NewSlidingWindow("api.per-user", 100, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	const key = "fg:api.per-user:sw:{ruser42}"
	d := fallback.Degraded{Layers: []floodgate.Layer{{Policy: p, Key: key, Cost: 1}},
		Mode: fallback.ModeLocal, Reason: fallback.ReasonForeignValue, Err: errors.New("floodgate: key " + key + " holds a value floodgate did not write")}
	var buf bytes.Buffer
	logEachFallback(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))(context.Background(), d)
	recs := logRecords(buf.String(), fallbackDebugMsg)
	if len(recs) != 1 || strings.Contains(buf.String(), "user42") {
		t.Fatalf("want one line without user42:\n%s", buf.String())
	}
	const redacted = "fg:api.per-user:sw:{…}"
	if keys, _ := recs[0]["keys"].([]any); len(keys) != 1 || keys[0] != redacted ||
		recs[0]["error"] != "floodgate: key "+redacted+" holds a value floodgate did not write" {
		t.Errorf("line %v; want key and error naming %s", recs[0], redacted)
	}
}
