package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
)

type lockedWriter struct{ syncbuf.Buffer }

func (w *lockedWriter) count(s string) int {
	return strings.Count(w.String(), s)
}

// TestRedisLoggerKeepsFailoverNotices: go-redis says "sentinel: new
// master" when its failover client first finds the primary and again on
// each failover. The logger rate-limited go-redis's lines per format, so a
// failover within the interval of the start (or of another failover) was
// never logged. Run on a real Sentinel set-up and a real failover, with an
// interval of an hour: both notices must be logged, while a repeated
// ordinary line still is not. The start's is at Info, not Warn: a walk
// found every normal start behind Sentinel logging a warning.
func TestRedisLoggerKeepsFailoverNotices(t *testing.T) {
	s := redistest.StartSentinel(t)
	out := &lockedWriter{}
	rl := newRedisLogger(slog.New(slog.NewTextHandler(out, nil)), time.Hour)
	redis.SetLogger(rl)
	t.Cleanup(func() { redis.SetLogger(newRedisLogger(slog.New(slog.DiscardHandler), time.Hour)) })

	c := s.FailoverClient(t)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n := out.count("sentinel: new master"); n != 1 {
		t.Fatalf("%d \"new master\" lines after the first connection, want 1:\n%s", n, out.String())
	}
	s.Failover(t)
	primary := s.Primary.Client(t)
	waitUntil(t, "the client writing to the new primary", func() bool {
		return c.Set(ctx, "k", "2", 0).Err() == nil && primary.Get(ctx, "k").Val() == "2"
	})
	// The client may write to the new primary before its sentinel
	// subscription has reported the switch: wait for the notice, bounded.
	deadline := time.Now().Add(15 * time.Second)
	for out.count("sentinel: new master") < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := out.count("sentinel: new master"); n != 2 {
		t.Fatalf("%d \"new master\" lines after a failover, want 2 (the failover notice was held back):\n%s", n, out.String())
	}
	if !strings.Contains(out.String(), s.Primary.Addr) {
		t.Errorf("the failover notice does not name the new primary %s:\n%s", s.Primary.Addr, out.String())
	}
	// The first master found is logged at Info (every start behind
	// Sentinel warned of it), the failover's at Warn.
	var levels []string
	for line := range strings.Lines(out.String()) {
		if strings.Contains(line, "sentinel: new master") {
			levels = append(levels, strings.Fields(line)[1])
		}
	}
	if got, want := strings.Join(levels, " "), "level=INFO level=WARN"; got != want {
		t.Errorf("\"new master\" lines at %s, want %s (the start at Info, the failover at Warn):\n%s", got, want, out.String())
	}

	// Other lines are still rate-limited by format.
	rl.Printf(ctx, "redis: connection pool: failed to dial after %d attempts: %v", 5, "refused")
	rl.Printf(ctx, "redis: connection pool: failed to dial after %d attempts: %v", 5, "refused")
	if n := out.count("failed to dial"); n != 1 {
		t.Errorf("%d lines for a repeated dial failure within the interval, want 1", n)
	}
}

// TestRedisLoggerHealthyStepsAreInfo: go-redis's report of the sentinel it
// picked is logged at Info, not Warn (every healthy start warned); a dial
// failure stays a warning.
func TestRedisLoggerHealthyStepsAreInfo(t *testing.T) {
	out := &lockedWriter{}
	rl := newRedisLogger(slog.New(slog.NewTextHandler(out, nil)), time.Hour)
	ctx := context.Background()
	rl.Printf(ctx, "sentinel: selected addr=%s masterAddr=%s", "127.0.0.1:26379", "127.0.0.1:6379")
	rl.Printf(ctx, "redis: connection pool: failed to dial after %d attempts: %v", 5, "refused")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "level=INFO") || !strings.Contains(lines[1], "level=WARN") {
		t.Fatalf("want the selected sentinel at INFO and the dial failure at WARN, got:\n%s", out.String())
	}
}

// TestUnreachableRedisNoClientLog: demo incident --redis and config push
// with Redis unreachable end with their error alone, not after a line of
// go-redis's own ("redis client ... failed to dial"), as doctor does (an
// outside walk saw a WARN line before the error).
func TestUnreachableRedisNoClientLog(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte(e2eConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"demo", "incident", "--redis", "redis://127.0.0.1:1/0"},
		{"config", "push", file, "--redis", "redis://127.0.0.1:1/0"},
	} {
		code, _, errOut := cli(args...)
		if code != 1 || !strings.Contains(errOut, "connection refused") || strings.Contains(errOut, "redis client") ||
			strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q; want 1 and one line: the error", args, code, errOut)
		}
	}
}
