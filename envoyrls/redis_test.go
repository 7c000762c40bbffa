package envoyrls

import (
	"context"
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

func TestRedisDownIsUnavailable(t *testing.T) {
	r, srv := newRedisRig(t, apiConfig, Options{})
	wantStatus(t, "up", r.call(t, request("api", desc("user=kim"))).GetStatuses()[0], ok, 2, 3)
	srv.Kill()
	_, err := r.client.ShouldRateLimit(context.Background(), request("api", desc("user=kim")))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("redis down: %v, want Unavailable", err)
	}
	srv.Restart(t)
	// Redis persisted nothing, so the identity starts afresh.
	wantStatus(t, "back", r.call(t, request("api", desc("user=kim"))).GetStatuses()[0], ok, 2, 3)
}
