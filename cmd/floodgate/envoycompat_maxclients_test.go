package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/envoycompat"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestEnvoyCompatMaxclientsIsUnavailable: with Redis at its maxclients
// limit, envoy-compat's counters failed "floodgate: outcome
// indeterminate: redis: write: broken pipe" (the maxclients walk): the
// connection Redis closed during its setup was taken for one lost after
// the script was sent. It is now floodgate.ErrStoreUnavailable, saying so.
func TestEnvoyCompatMaxclientsIsUnavailable(t *testing.T) {
	s := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 1, ContextTimeoutEnabled: true})
	ctx := context.Background()
	if err := admin.ConfigSet(ctx, "maxclients", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.ConfigSet(ctx, "maxclients", "10000").Err()
		_ = admin.Close()
	})
	st, closeAll, err := compatStore(ctx, envoycompat.Settings{Redis: envoycompat.RedisSettings{
		SocketType: "tcp", Type: "single", URL: s.Addr, PoolSize: 2, Timeout: 5 * time.Second,
	}}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeAll)
	err = st.Incr(ctx, []*envoycompat.Op{{Key: "maxclients:k", N: 1, TTL: time.Minute}})
	if !errors.Is(err, floodgate.ErrStoreUnavailable) || !strings.Contains(err.Error(), "during its setup") {
		t.Fatalf("Incr: %v; want floodgate.ErrStoreUnavailable naming the setup failure", err)
	}
}
