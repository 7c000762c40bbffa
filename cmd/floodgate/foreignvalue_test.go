package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// TestServeForeignValueHasItsOwnReason is the mixed walk's repro: a
// token bucket key set to a value floodgate did not write (what a version
// mix, a rollback or a stray SET leaves) is decided by the local
// fallback, with degraded_reason foreign_value and counted in
// rate_limit_fallback_total{reason="foreign_value"} (both said
// "unavailable", Redis being down, and the runbook sent the operator to
// Redis's health), and a warning names the key (only a debug line did).
func TestServeForeignValueHasItsOwnReason(t *testing.T) {
	rs := redistest.Start(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "cfg.yaml")
	const cfg = "version: \"1\"\npolicies:\n  - name: tb\n    layers: [{name: l, algorithm: token_bucket, limit: 10, window: 1h, dimension: user}]\n"
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("fv%d", time.Now().UnixNano())
	svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--config", cfgPath, "--prefix", prefix, "--fallback-budget", "5s")
	key := prefix + ":tb.l:tb:{rgarb9}"
	if err := rs.Client(t).Set(context.Background(), key, "notastate", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r := checkOn(t, svc.url, "/v1/check", server.CheckRequest{Policy: "tb", Identity: map[string]string{"user": "garb9"}})
	if r.status != 200 || !r.resp.Degraded || r.resp.DegradedReason != "foreign_value" || r.degraded != "local; reason=foreign_value" {
		t.Fatalf("check on a foreign value: %d degraded %v reason %q header %q; want 200, local, foreign_value", r.status, r.resp.Degraded, r.resp.DegradedReason, r.degraded)
	}
	if n := metricValue(t, svc.url, `rate_limit_fallback_total{mode="local",reason="foreign_value"}`); n != 1 {
		t.Errorf(`rate_limit_fallback_total{mode="local",reason="foreign_value"} = %v, want 1`, n)
	}
	if n := metricValue(t, svc.url, `rate_limit_fallback_total{mode="local",reason="unavailable"}`); n != 0 {
		t.Errorf(`rate_limit_fallback_total{mode="local",reason="unavailable"} = %v, want 0`, n)
	}
	const msg = "a Redis key holds a value floodgate did not write: delete it, or find the instance writing another state format (a build of another version, a rollback; docs/operations.md, state formats)"
	rec, ok := svc.Logged(msg)
	if !ok || rec["level"] != "WARN" || !strings.Contains(rec["error"], key) {
		t.Errorf("warning %q: %v; want it at WARN naming %s; log:\n%s", msg, rec, key, svc.Logs())
	}
}
