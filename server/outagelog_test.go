package server_test

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/server"
)

// lockedBuffer is a log sink the handlers of concurrent requests may
// write to.
type lockedBuffer struct{ syncbuf.Buffer }

// lines returns the logged records whose msg is msg.
func (l *lockedBuffer) lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// TestStoreOutageLogsOncePerInterval: with Redis stopped, every quota,
// concurrency and check request fails (503), and each used to log its own
// "decision failed" line at error level: an outage at a high request rate
// flooded the log. Now the first failure is logged and the next ones of
// the same reason, within WarnEvery, are only counted ("suppressed" on
// the next line written).
func TestStoreOutageLogsOncePerInterval(t *testing.T) {
	st, rs := redisStore(t)
	client := rs.Client(t)
	qs, cs := redisQuotaLeases(t, client)
	logs := &lockedBuffer{}
	e := start(t, limits, st, func(o *server.Options) {
		o.QuotaStore, o.ConcurrencyStore = qs, cs
		o.DecisionTimeout = 2 * time.Second
		o.WarnEvery = time.Hour
		o.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
	rs.Stop()
	const n = 10
	for i := 0; i < n; i++ {
		u := id("user", "u")
		for _, c := range []struct {
			path string
			body any
		}{
			{"/v1/quota/reserve", server.QuotaReserveRequest{Quota: "hundred", Identity: u, RequestID: "r", Estimate: ptr(1)}},
			{"/v1/quota/check", server.QuotaCheckRequest{Quota: "hundred", Identity: u}},
			{"/v1/concurrency/acquire", server.AcquireRequest{Limiter: "five", Identity: u}},
			{"/v1/check", server.CheckRequest{Policy: "api", Identity: u}},
		} {
			if r := e.post(c.path, c.body); r.status != 503 {
				t.Fatalf("%s with Redis stopped: status %d %s, want 503", c.path, r.status, r.body)
			}
		}
	}
	failed := logs.lines(t, "decision failed")
	if len(failed) == 0 {
		t.Fatal("no \"decision failed\" line: the first failure must be logged")
	}
	// One line per reason at most (the interval is an hour).
	seen := map[any]bool{}
	for _, rec := range failed {
		if rec["level"] != "ERROR" {
			t.Errorf("decision failed logged at %v, want ERROR", rec["level"])
		}
		if seen[rec["reason"]] {
			t.Errorf("%d \"decision failed\" lines for %d failing requests (reason %v logged twice): %v", len(failed), 4*n, rec["reason"], failed)
			break
		}
		seen[rec["reason"]] = true
	}
}
