package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

const unreadableGauge = "floodgate_config_source_unreadable"

// unreadableOf returns floodgate_config_source_unreadable{source} on the
// service's /metrics.
func unreadableOf(t *testing.T, svc *service, source string) float64 {
	t.Helper()
	return metricValue(t, svc.url, unreadableGauge+`{source="`+source+`"}`)
}

// TestServeConfigUnreadableGauge: floodgate_config_source_unreadable is 1
// from a failed read of a source until its next successful read, for the
// --config file and the --envoy-config file moved away and back. An
// outside walk found RateLimitConfigUnreadable, on
// increase(floodgate_config_reload_total{result="error"}[5m]), firing
// after the file was back (moved away 08:32:15, back 08:38:18, firing
// 08:42:26 until ~08:43:18); it now fires on this gauge, which the read
// after the fix puts back to 0.
func TestServeConfigUnreadableGauge(t *testing.T) {
	dir := t.TempDir()
	away := t.TempDir()
	policies := filepath.Join(dir, "floodgate.yaml")
	envoy := filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(policies, []byte("version: \"u1\"\npolicies:\n  - name: api\n    layers:\n      - {name: u, algorithm: fixed_window, limit: 5, window: 1m, dimension: user}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(envoy, []byte("domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	svc := startService(t, "--config", policies, "--grpc-addr", "127.0.0.1:0", "--envoy-config", envoy, "--reload-interval", "20ms")
	for _, tc := range []struct {
		source, path, unreadable, readable string
	}{
		{"policies", policies, "configuration source unreadable; keeping the last good configuration", "configuration source readable again"},
		{"envoy", envoy, "Envoy descriptor configuration unreadable; keeping the last good one", "Envoy descriptor configuration readable again"},
	} {
		t.Run(tc.source, func(t *testing.T) {
			if got := unreadableOf(t, svc, tc.source); got != 0 {
				t.Fatalf("at start: %s = %v, want 0", unreadableGauge, got)
			}
			moved := filepath.Join(away, filepath.Base(tc.path))
			if err := os.Rename(tc.path, moved); err != nil {
				t.Fatal(err)
			}
			// The gauge is set before the line is logged.
			waitUntil(t, "the moved file logged unreadable", func() bool { return strings.Contains(svc.Logs(), tc.unreadable) })
			if got := unreadableOf(t, svc, tc.source); got != 1 {
				t.Fatalf("file moved away: %s = %v, want 1", unreadableGauge, got)
			}
			if err := os.Rename(moved, tc.path); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, "the file back logged readable", func() bool { return strings.Contains(svc.Logs(), tc.readable) })
			if got := unreadableOf(t, svc, tc.source); got != 0 {
				t.Fatalf("file back: %s = %v, want 0", unreadableGauge, got)
			}
		})
	}
	svc.stop(t)
}

// TestServeRedisConfigUnreadableGauge: for a configuration in Redis
// (--config-from-redis), floodgate_config_source_unreadable{source=
// "policies"} is 1 from a start with the key missing until a pushed
// document is read, and 1 again from a read finding the key gone until
// the read finding it back.
func TestServeRedisConfigUnreadableGauge(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	prefix := fmt.Sprintf("unread%d", time.Now().UnixNano())
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte(e2eConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	url := "redis://" + rs.Addr + "/0"
	svc := startService(t, "--redis", url, "--config-from-redis", "--prefix", prefix, "--fallback", "off")
	if got := unreadableOf(t, svc, "policies"); got != 1 {
		t.Fatalf("started with the key missing: %s = %v, want 1", unreadableGauge, got)
	}
	if code, _, errOut := cli("config", "push", file, "--redis", url, "--prefix", prefix); code != 0 {
		t.Fatalf("push: %d %s", code, errOut)
	}
	waitUntil(t, "the pushed document applied", func() bool { return strings.Contains(svc.Logs(), `"configuration applied"`) })
	if got := unreadableOf(t, svc, "policies"); got != 0 {
		t.Fatalf("document pushed and applied: %s = %v, want 0", unreadableGauge, got)
	}

	ctx := context.Background()
	key, moved := prefix+":config", prefix+":moved"
	if err := client.Rename(ctx, key, moved).Err(); err != nil {
		t.Fatal(err)
	}
	if err := svc.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the missing key logged unreadable", func() bool {
		return strings.Contains(svc.Logs(), "configuration source unreadable; keeping the last good configuration")
	})
	if got := unreadableOf(t, svc, "policies"); got != 1 {
		t.Fatalf("key gone: %s = %v, want 1", unreadableGauge, got)
	}
	// The read applying the push may have logged the source readable
	// again already (after the failed reads of the start).
	const readable = "configuration source readable again"
	before := strings.Count(svc.Logs(), readable)
	if err := client.Rename(ctx, moved, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := svc.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the key back logged readable", func() bool { return strings.Count(svc.Logs(), readable) > before })
	if got := unreadableOf(t, svc, "policies"); got != 0 {
		t.Fatalf("key back: %s = %v, want 0", unreadableGauge, got)
	}
	svc.stop(t)
}
