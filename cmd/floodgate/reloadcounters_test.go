package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// TestServeReloadCountersAcrossLimitAndWindowChanges pins what
// docs/configuration.md says a reload does to the counters of a file-
// configured serve on Redis: a new limit applies to the counts already
// made, while a new window for fixed_window and sliding_window starts the
// identity's count afresh when the new window's current period begins at
// another time (the count belongs to the old period's boundaries).
func TestServeReloadCountersAcrossLimitAndWindowChanges(t *testing.T) {
	rs := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	write := func(version string, limit int, window time.Duration) {
		t.Helper()
		doc := fmt.Sprintf("version: %q\npolicies:\n", version)
		for _, a := range []string{"fixed_window", "sliding_window"} {
			doc += fmt.Sprintf("  - name: %s\n    layers:\n      - {name: u, algorithm: %s, limit: %d, window: %s, dimension: user}\n", a, a, limit, window)
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	// 24h windows begin at midnight UTC; the test runs far from it, or
	// the count would start afresh with the day.
	now := time.Now().UTC()
	if now.Add(2*time.Minute).Day() != now.Day() {
		t.Skip("too close to midnight UTC, when 24h windows start afresh")
	}
	// A window whose current period, and the one before it, do not begin
	// at midnight (the sliding window would weigh in the previous one).
	midnight := now.Unix() - now.Unix()%86400
	var other time.Duration
	for _, w := range []time.Duration{25 * time.Hour, 23 * time.Hour, 22 * time.Hour} {
		ws := int64(w.Seconds())
		if start := now.Unix() - now.Unix()%ws; start != midnight && start-ws != midnight {
			other = w
			break
		}
	}
	write("1", 5, 24*time.Hour)
	// Every decision on Redis: a busy machine (CI, -race) can take a
	// call past the default 50 ms budget, and a decision of the local
	// fallback is not counted in Redis (a CI run saw remaining 5 for 4).
	svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--config", path, "--reload-interval", "50ms",
		"--prefix", fmt.Sprintf("rl%d", now.UnixNano()), "--fallback-budget", "5s", "--decision-timeout", "10s")
	defer svc.stop(t)

	remaining := func(policy string) int64 {
		t.Helper()
		code, r := post(t, svc.url+"/v1/check", server.CheckRequest{Policy: policy, Identity: map[string]string{"user": "u"}})
		if code != 200 || !r.Allowed || r.Degraded {
			t.Fatalf("%s: status %d, allowed %v, degraded %v (%s): want allowed by Redis", policy, code, r.Allowed, r.Degraded, r.DegradedReason)
		}
		return r.Remaining
	}
	limitIs := func(policy string, n int64) func() bool {
		return func() bool {
			code, r := post(t, svc.url+"/v1/peek", map[string]any{"policy": policy, "identity": map[string]string{"user": "nobody"}})
			return code == 200 && r.Limit == n
		}
	}
	for _, p := range []string{"fixed_window", "sliding_window"} {
		for range 3 {
			remaining(p)
		}
	}
	write("2", 8, 24*time.Hour)
	waitUntil(t, "limit 8", limitIs("sliding_window", 8))
	for _, p := range []string{"fixed_window", "sliding_window"} {
		if got := remaining(p); got != 4 {
			t.Fatalf("%s after the limit went from 5 to 8 with 3 counted: remaining %d, want 4 (the counts kept)", p, got)
		}
	}
	write("3", 9, other)
	waitUntil(t, "limit 9", limitIs("sliding_window", 9))
	for _, p := range []string{"fixed_window", "sliding_window"} {
		if got := remaining(p); got != 8 {
			t.Fatalf("%s after the window went from 24h to %v: remaining %d, want 8 (a fresh count, as documented)", p, other, got)
		}
	}
}
