package envoyrls

import (
	"context"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// newRedisRig serves yaml from a private redis-server through redisstore.
func newRedisRig(t *testing.T, yaml string, opts Options) (*rig, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	st, err := redisstore.New(srv.Client(t), redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return newRig(t, st, yaml, opts), srv
}

func TestRedisConcurrentExactlyLimit(t *testing.T) {
	r, _ := newRedisRig(t, concurrentConfig, Options{})
	concurrentExactly(t, r, 100)
}

func TestRedisAllOrNothingAndShadow(t *testing.T) {
	r, _ := newRedisRig(t, apiConfig, Options{})
	allOrNothing(t, r)
	shadowNeverDenies(t, r)
	wantStatus(t, "statuses", r.call(t, request("api", desc("route=/search", "method=POST"))).GetStatuses()[0], ok, 99, 100)
}

// TestRedisDownIsUnavailable: a request whose store fails is answered
// UNAVAILABLE, with a message that says what failed but not the store's
// error (it names the Redis address), and Options.OnError gets that error
// once, for the service's metrics and log.
func TestRedisDownIsUnavailable(t *testing.T) {
	var failed []error
	var mu sync.Mutex
	r, srv := newRedisRig(t, apiConfig, Options{OnError: func(_ context.Context, err error) {
		mu.Lock()
		defer mu.Unlock()
		failed = append(failed, err)
	}})
	wantStatus(t, "up", r.call(t, request("api", desc("user=kim"))).GetStatuses()[0], ok, 2, 3)
	srv.Kill()
	_, err := r.client.ShouldRateLimit(context.Background(), request("api", desc("user=kim")))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("redis down: %v, want Unavailable", err)
	}
	_, port, _ := strings.Cut(srv.Addr, ":")
	msg := status.Convert(err).Message()
	if strings.Contains(msg, ":"+port) || !strings.Contains(msg, "the rate limit store") {
		t.Errorf("redis down: message %q, want one about the rate limit store that does not name its address %s", msg, srv.Addr)
	}
	mu.Lock()
	if len(failed) != 1 || failed[0] == nil || strings.Contains(msg, failed[0].Error()) {
		t.Errorf("redis down: OnError got %v, want the store's error once, and not in the message %q", failed, msg)
	}
	mu.Unlock()
	srv.Restart(t)
	// Redis persisted nothing, so the identity starts afresh.
	wantStatus(t, "back", r.call(t, request("api", desc("user=kim"))).GetStatuses()[0], ok, 2, 3)
}
