package fallback_test

import (
	"context"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// closedPort returns a 127.0.0.1 address nothing listens on: connecting
// to it is refused at once.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// decideOnDownRedis makes one decision through a fallback Store whose
// primary is a redisstore.Store on client, and returns its Outcome.
func decideOnDownRedis(t *testing.T, client *redis.Client) fallback.Outcome {
	t.Helper()
	t.Cleanup(func() { _ = client.Close() })
	primary, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	local, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fb, err := fallback.New(primary, local, fallback.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fb.Close)
	lim, err := floodgate.New(fb, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := floodgate.NewFixedWindow("api", 10, 60e9)
	if err != nil {
		t.Fatal(err)
	}
	ctx, o := fallback.NewOutcomeContext(context.Background())
	if _, err := lim.Allow(ctx, p, "user-1"); err != nil {
		t.Fatal(err)
	}
	return *o
}

// TestRecommendedClientOptionsSayUnavailable: with the client options the
// package documentation recommends (one dial attempt, one retry without a
// pause), a Redis refusing connections is reported as ReasonUnavailable,
// as Reason's documentation says of a refused connection; with
// go-redis's defaults (five dial attempts with backoff, three retries
// after pauses) the same decision used the whole 50 ms budget and was
// reported as ReasonTimeout, which the documentation did not say.
func TestRecommendedClientOptionsSayUnavailable(t *testing.T) {
	addr := closedPort(t)
	o := decideOnDownRedis(t, redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}))
	if !o.Degraded || o.Reason != fallback.ReasonTimeout {
		t.Errorf("go-redis's defaults on a refused connection: %+v; want degraded, reason timeout (what the documentation warns of)", o)
	}
	o = decideOnDownRedis(t, redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		DialerRetries:         1,
		MaxRetries:            1,
		MinRetryBackoff:       -1,
		MaxRetryBackoff:       -1,
	}))
	if !o.Degraded || o.Reason != fallback.ReasonUnavailable {
		t.Errorf("the recommended options on a refused connection: %+v; want degraded, reason unavailable", o)
	}
}
