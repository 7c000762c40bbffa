package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

func TestDoctorExitStatusAndJSON(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "yes", "--maxmemory", "64mb", "--maxmemory-policy", "noeviction")
	ctx := context.Background()
	args := []string{"doctor", "--redis", "redis://" + srv.Addr, "--prefix", "dc", "--json", "--latency-samples", "5"}

	var out, errOut bytes.Buffer
	if code := run(ctx, args, &out, &errOut); code != 0 {
		t.Fatalf("healthy: exit %d, stderr %s\n%s", code, errOut.String(), out.String())
	}
	// A key without TTL under the prefix makes the run fail.
	if err := srv.Client(t).Set(ctx, "dc:api.per-user:sw:{rx}", "1 1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run(ctx, args, &out, &errOut); code != 1 {
		t.Fatalf("key without TTL: exit %d, want 1\n%s", code, out.String())
	}
	var rep struct {
		Worst  string `json:"worst"`
		Checks []struct {
			Group, Name, Status string
		} `json:"checks"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out.String())
	}
	found := false
	for _, c := range rep.Checks {
		found = found || (c.Group == "Keys" && c.Name == "ttl" && c.Status == "fail")
	}
	if rep.Worst != "fail" || !found {
		t.Fatalf("JSON report: worst %q, Keys/ttl fail %v\n%s", rep.Worst, found, out.String())
	}

	// The text report has no escape codes when not on a terminal.
	out.Reset()
	run(ctx, []string{"doctor", "--redis", "redis://" + srv.Addr, "--prefix", "dc", "--latency-samples", "5"}, &out, &errOut)
	if strings.Contains(out.String(), "\x1b[") || !strings.Contains(out.String(), "[FAIL] ttl") {
		t.Fatalf("text report:\n%s", out.String())
	}
	if code := run(ctx, []string{"doctor"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "--redis") {
		t.Fatalf("no Redis: exit %d, stderr %q", code, errOut.String())
	}
}

// TestDoctorRedisPasswordFile audits a Redis that requires a password the
// way serve reaches it: --redis-password-file, with no password in the
// URL. Without the file doctor cannot reach it; the password never shows
// in the report.
func TestDoctorRedisPasswordFile(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "yes", "--maxmemory", "64mb", "--maxmemory-policy", "noeviction")
	ctx := context.Background()
	const pw = "doctor-redis-password-from-a-file"
	// redistest waits for an unauthenticated PING: require the password
	// once the server runs, and drop it before the server stops.
	if err := srv.Client(t).ConfigSet(ctx, "requirepass", pw).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: pw})
		defer c.Close()
		_ = c.ConfigSet(context.Background(), "requirepass", "").Err()
	})
	pwFile := filepath.Join(t.TempDir(), "redis-password")
	if err := os.WriteFile(pwFile, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"doctor", "--redis", "redis://" + srv.Addr, "--prefix", "dp", "--latency-samples", "5"}

	var out, errOut bytes.Buffer
	if code := run(ctx, base, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "NOAUTH") {
		t.Fatalf("without the password: exit %d, stderr %q, want 1 and NOAUTH", code, errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := run(ctx, append(base, "--redis-password-file", pwFile), &out, &errOut); code != 0 {
		t.Fatalf("with --redis-password-file: exit %d, stderr %s\n%s", code, errOut.String(), out.String())
	}
	if !strings.Contains(out.String(), "[PASS] server") {
		t.Fatalf("with --redis-password-file, no passing server check:\n%s", out.String())
	}
	if strings.Contains(out.String()+errOut.String(), pw) {
		t.Fatalf("the Redis password is in doctor's output:\n%s\n%s", out.String(), errOut.String())
	}
}

// TestDoctorStderrOnCluster runs the binary's doctor against a healthy
// Cluster and against a closed port: go-redis's own log lines used to
// reach stderr raw ("redis: 2026/12/03 ... osscluster.go:3074: getting
// command info: doctor: refusing a command that is not a read: COMMAND",
// nine times on a healthy 3-primary Cluster, and a "failed to dial" line
// per retry with Redis down), outside doctor's report. Now the Cluster
// client's COMMAND is a permitted read, and go-redis's lines go through a
// structured logger, each at most once.
func TestDoctorStderrOnCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	code, out := runCLI(t, "doctor", "--redis-cluster", strings.Join(c.Addrs, ","), "--prefix", "dcs", "--latency-samples", "5", "--rate-window", "-1s", "--color", "never")
	if code != 0 && code != 1 {
		t.Fatalf("doctor on a Cluster: exit %d\n%s", code, out)
	}
	if strings.Contains(out, "refusing") || strings.Contains(out, "osscluster.go") {
		t.Errorf("doctor on a healthy Cluster wrote go-redis noise:\n%s", out)
	}
	if !strings.Contains(out, "[PASS] cluster") {
		t.Errorf("no passing cluster check:\n%s", out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	code, out = runCLI(t, "doctor", "--redis", "redis://"+closed, "--timeout", "30s")
	if code != 1 || !strings.Contains(out, "cannot reach Redis") {
		t.Fatalf("doctor with Redis down: exit %d, want 1 and 'cannot reach Redis'\n%s", code, out)
	}
	if n := strings.Count(out, "failed to dial"); n > 1 {
		t.Errorf("doctor with Redis down wrote %d 'failed to dial' lines, want at most one:\n%s", n, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, "redis: ") {
			t.Errorf("unstructured go-redis line: %s", line)
		}
	}
}
