package envoycompat

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
)

// TestRedisOutageLogsOncePerInterval: with Redis stopped every request
// fails, and each used to log its own "ShouldRateLimit: store error" line:
// an outage at a high request rate flooded the log. Now the first is
// logged and the next ones within LogEvery are only counted.
func TestRedisOutageLogsOncePerInterval(t *testing.T) {
	srv := redistest.Start(t)
	logs := &syncbuf.Buffer{}
	r := newRig(t, &RedisStore{Client: srv.Client(t)}, Options{
		Log: slog.New(slog.NewTextHandler(logs, nil)), LogEvery: time.Hour,
	}, integrationConfig)
	r.call(t, req(t, "another", 1, "key2=up")) // Redis up: answered, nothing logged
	srv.Stop()
	const n = 10
	for i := range n {
		if _, err := r.client.ShouldRateLimit(context.Background(), req(t, "another", 1, "key2=down")); err == nil {
			t.Fatalf("request %d with Redis stopped answered without error", i)
		}
	}
	got := strings.Count(logs.String(), "ShouldRateLimit: store error")
	if got != 1 {
		t.Fatalf("%d store error lines for %d failing requests, want 1:\n%s", got, n, logs.String())
	}
}
