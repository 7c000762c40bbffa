package denycache

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// TestFailureModeDenialNotCached puts the cache in front of a
// fallback.Store around a real Redis and kills Redis: the policy's
// fallback.ModeClosed denies, and that denial used to be cached (for the
// breaker's retry hint, 1 s), so the cache went on denying after Redis
// was back (a reviewer counted 20 requests answered from it). A failure
// mode's decision is not the identity's limit: it is passed on, never
// cached, and the first decision after Redis is back reaches it. The
// clock stands still, so that an entry, once cached, would answer.
func TestFailureModeDenialNotCached(t *testing.T) {
	rs := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: rs.Addr, ContextTimeoutEnabled: true,
		DialerRetries: 1, MaxRetries: -1, MinRetryBackoff: -1, MaxRetryBackoff: -1})
	t.Cleanup(func() { client.Close() })
	primary, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	local := newMem(t)
	// The breaker stays closed (every call goes to Redis), and a budget
	// Redis misses only when it is down: a killed Redis refuses at once.
	fb, err := fallback.New(primary, local, fallback.Options{
		Budget: 5 * time.Second, DefaultMode: fallback.ModeClosed,
		Breaker: fallback.BreakerOptions{FailureThreshold: 1_000_000, FailureRate: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fb.Close)
	dc, err := New(fb, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if dc.Unwrap() != fb {
		t.Fatalf("Unwrap = %v, want the fallback store", dc.Unwrap())
	}
	lim, err := floodgate.New(dc, floodgate.Options{Prefix: "dcfb", Clock: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	p := mustPolicy(t, floodgate.Policy{Name: "login", Algorithm: floodgate.FixedWindow, Limit: 5, Window: time.Minute})
	ctx := context.Background()

	if d, err := lim.Allow(ctx, p, "u1"); err != nil || !d.Allowed {
		t.Fatalf("with Redis up: %+v, %v", d, err)
	}

	rs.Kill()
	for i := range 3 {
		fctx, o := fallback.NewOutcomeContext(ctx)
		d, err := lim.Allow(fctx, p, "u1")
		if err != nil || d.Allowed || !o.Degraded || o.Mode != fallback.ModeClosed {
			t.Fatalf("request %d with Redis down: %+v, %v, outcome %+v; want a closed denial", i, d, err, *o)
		}
	}
	if n := dc.Len(); n != 0 {
		t.Errorf("%d denials cached from the failure mode", n)
	}

	rs.Restart(t)
	for i := range 3 {
		fctx, o := fallback.NewOutcomeContext(ctx)
		d, err := lim.Allow(fctx, p, "u1")
		if err != nil || !d.Allowed || o.Degraded {
			t.Fatalf("request %d with Redis back: %+v, %v, outcome %+v; want Redis's admission (saved %d)", i, d, err, *o, dc.Saved())
		}
	}
	if n := dc.Saved(); n != 0 {
		t.Errorf("%d decisions answered from the cache", n)
	}

	// A real denial of Redis's is still cached.
	for range 2 {
		_, _ = lim.Allow(ctx, p, "u1")
	}
	if d, err := lim.Allow(ctx, p, "u1"); err != nil || d.Allowed {
		t.Fatalf("past the limit: %+v, %v", d, err)
	}
	if d, err := lim.Allow(ctx, p, "u1"); err != nil || d.Allowed || dc.Saved() != 1 {
		t.Fatalf("past the limit again: %+v, %v, saved %d; want a denial from the cache", d, err, dc.Saved())
	}
}
