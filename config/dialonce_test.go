package config_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// TestDeadRedisIsUnavailableNotTimeout reproduces the library walk's LOW
// finding: serve's Redis clients kept go-redis's dial retries (five dials
// with backoff, about 400 ms against a refused connection), so with Redis
// down every decision outlasted serve's 50 ms budget and was reported
// degraded with reason timeout, not unavailable. A client built from the
// configuration now dials once per attempt: the refused connection fails
// the call within the budget, reason unavailable.
func TestDeadRedisIsUnavailableNotTimeout(t *testing.T) {
	rs := redistest.Start(t)
	rs.Kill()
	client, err := config.Redis{URL: "redis://" + rs.Addr + "/0"}.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	primary, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	local, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fb, err := fallback.New(primary, local, fallback.Options{Budget: 50 * time.Millisecond, Instances: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fb.Close)
	lim, err := floodgate.New(fb, floodgate.Options{Prefix: "dial-once"})
	if err != nil {
		t.Fatal(err)
	}
	p := floodgate.Must(floodgate.NewFixedWindow("api", 10, time.Minute))
	ctx, out := fallback.NewOutcomeContext(context.Background())
	if _, err := lim.Allow(ctx, p, "k"); err != nil {
		t.Fatal(err)
	}
	if !out.Degraded || out.Reason != fallback.ReasonUnavailable {
		t.Fatalf("outcome degraded=%v reason=%v err=%v; want degraded, reason unavailable (the connection was refused)", out.Degraded, out.Reason, out.Err)
	}
}
