package envoycompat

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/status"

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

// TestStalledRedisAnswersUnknown: a request whose Redis work ends at its
// REDIS_TIMEOUT (Redis stalled) is answered with gRPC code Unknown, as
// every store error and as theirs; grpc-go turned the deadline inside the
// error into DeadlineExceeded (an outside walk: 117 of 120).
func TestStalledRedisAnswersUnknown(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	// As envoy-compat's client: the context's deadline ends a command.
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	r := newRig(t, &RedisStore{Client: c, Timeout: 200 * time.Millisecond}, Options{}, integrationConfig)
	r.call(t, req(t, "another", 1, "key2=up"))
	unpause := pause(t, admin)
	defer unpause()
	// Several at once: the first ones' script calls in flight, the
	// others waiting for them (their error wraps the deadline).
	errs := make([]error, 6)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = r.client.ShouldRateLimit(context.Background(), req(t, "another", 1, fmt.Sprintf("key2=stalled%d", i)))
		})
	}
	wg.Wait()
	for i, err := range errs {
		if status.Code(err) != codes.Unknown {
			t.Errorf("request %d with Redis stalled: %v (code %v), want code Unknown", i, err, status.Code(err))
		}
	}
}

// TestRedisOutOfMemoryErrorKept: with Redis full under noeviction, POST
// /json answered 400 and gRPC failed, with the log line "INCRBY refused
// ... (the key holds a value that is not a counter, the sum would
// overflow, or the server refuses writes)": incr.lua's pcall dropped
// Redis's error. Redis's "OOM command not allowed" now reaches the error
// answered and the log line, which name the request's counter; the codes
// stay theirs (Unknown, 400).
func TestRedisOutOfMemoryErrorKept(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "256mb", "--maxmemory-policy", "noeviction")
	admin := srv.Client(t)
	logs := &syncbuf.Buffer{}
	r := newRig(t, &RedisStore{Client: srv.Client(t)}, Options{
		Log: slog.New(slog.NewTextHandler(logs, nil)), LogEvery: time.Hour,
	}, integrationConfig)
	r.call(t, req(t, "another", 1, "key2=before"))
	ctx := t.Context()
	// maxmemory below what the server already uses.
	if err := admin.ConfigSet(ctx, "maxmemory", "100000").Err(); err != nil {
		t.Fatal(err)
	}
	const oom = "OOM command not allowed"
	_, err := r.client.ShouldRateLimit(ctx, req(t, "another", 1, "key2=full"))
	if status.Code(err) != codes.Unknown || !strings.Contains(err.Error(), oom) || !strings.Contains(err.Error(), "key2_full") {
		t.Fatalf("ShouldRateLimit on a full Redis: %v (code %v), want code Unknown with %q and the counter", err, status.Code(err), oom)
	}
	if !strings.Contains(logs.String(), oom) {
		t.Fatalf("the store error logged does not carry Redis's %q:\n%s", oom, logs.String())
	}
	hs := httptest.NewServer(r.svc.HTTPHandler(NewHealth(health.NewServer(), false)))
	t.Cleanup(hs.Close)
	if code, _, out := postJSON(t, hs.URL+"/json", []byte(`{"domain":"another","descriptors":[{"entries":[{"key":"key2","value":"full"}]}]}`)); code != http.StatusBadRequest {
		t.Fatalf("POST /json on a full Redis: %d %s, want 400", code, out)
	}
}

// TestWrongTypeCounterAnswersUnknown: a request whose counter key holds a
// list fails with gRPC code Unknown and 400 on /json, as every store error
// and as theirs (their INCRBY fails WRONGTYPE), with "INCRBY refused for"
// the key, as beside other requests' counters (TestRedisStoreRefusedCounter).
func TestWrongTypeCounterAnswersUnknown(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	r := newRig(t, &RedisStore{Client: srv.Client(t)}, Options{}, integrationConfig)
	r.call(t, req(t, "another", 1, "key2=wrongtype"))
	ctx := t.Context()
	keys, err := admin.Keys(ctx, "*key2_wrongtype*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("counter keys of key2=wrongtype: %q, %v; want one", keys, err)
	}
	if err := admin.Del(ctx, keys[0]).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.RPush(ctx, keys[0], "x").Err(); err != nil {
		t.Fatal(err)
	}
	_, err = r.client.ShouldRateLimit(ctx, req(t, "another", 1, "key2=wrongtype"))
	if status.Code(err) != codes.Unknown || !strings.Contains(err.Error(), "INCRBY refused for") || !strings.Contains(err.Error(), keys[0]) {
		t.Fatalf("ShouldRateLimit on a list key: %v (code %v), want code Unknown, INCRBY refused for %s", err, status.Code(err), keys[0])
	}
	hs := httptest.NewServer(r.svc.HTTPHandler(NewHealth(health.NewServer(), false)))
	t.Cleanup(hs.Close)
	if code, _, out := postJSON(t, hs.URL+"/json", []byte(`{"domain":"another","descriptors":[{"entries":[{"key":"key2","value":"wrongtype"}]}]}`)); code != http.StatusBadRequest {
		t.Fatalf("POST /json on a list key: %d %s, want 400", code, out)
	}
}
