package concurrency

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// newRedisStore starts a private redis-server and returns a RedisStore on
// it and the client it uses, to look behind the store.
func newRedisStore(t *testing.T) (*RedisStore, *redis.Client) {
	t.Helper()
	c := redistest.Start(t).Client(t)
	s, err := NewRedisStore(c)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// TestRedisKeyTTL: the lease set always carries a TTL reaching its last
// lease's expiry, so a crashed holder's set disappears by itself.
func TestRedisKeyTTL(t *testing.T) {
	s, c := newRedisStore(t)
	ctx := context.Background()
	l := newLimiter(t, s, Policy{Name: "ttl", Limit: 3, LeaseTTL: 30 * time.Second}, "ttl")
	// Real instants, so that Redis's clock agrees with the caller's.
	now := time.Now()
	r, err := l.AcquireAt(ctx, now, "user:{1}")
	if err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	key := l.Key("user:{1}")
	if got := c.PTTL(ctx, key).Val(); got <= 29*time.Second || got > 30*time.Second {
		t.Fatalf("PTTL after acquire = %v, want about 30s", got)
	}
	// An instance whose clock is 20s behind takes a lease ending 10s from
	// now: the key must still outlive the first lease.
	r2, err := l.AcquireAt(ctx, now.Add(-20*time.Second), "user:{1}")
	if err != nil || !r2.Allowed {
		t.Fatal(r2, err)
	}
	if got := c.PTTL(ctx, key).Val(); got < 29*time.Second {
		t.Fatalf("PTTL after a lagging acquire = %v, shorter than the first lease", got)
	}
	if tag := algo.HashTag(key); strings.ContainsAny(tag, "{}:") {
		t.Fatalf("identity escaped its hash tag: %q", tag)
	}
	for _, lease := range []Lease{r.Lease, r2.Lease} {
		if ok, err := l.ReleaseAt(ctx, now.Add(-20*time.Second), lease); err != nil || !ok {
			t.Fatal(ok, err)
		}
	}
	if n := c.Exists(ctx, key).Val(); n != 0 {
		t.Fatalf("empty lease set still exists")
	}
}

// TestRedisScriptCacheFlushed: after SCRIPT FLUSH (a restart, a failover)
// EVALSHA fails with NOSCRIPT and the store falls back to EVAL, taking one
// lease per call.
func TestRedisScriptCacheFlushed(t *testing.T) {
	s, c := newRedisStore(t)
	ctx := context.Background()
	l := newLimiter(t, s, Policy{Name: "flush", Limit: 3}, "flush")
	if _, err := l.AcquireAt(ctx, t0, "u"); err != nil {
		t.Fatal(err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := l.AcquireAt(ctx, t0, "u"); err != nil || r.InFlight != 2 {
		t.Fatalf("after SCRIPT FLUSH: %+v, %v", r, err)
	}
	if r, err := l.AcquireAt(ctx, t0, "u"); err != nil || r.InFlight != 3 {
		t.Fatalf("third: %+v, %v", r, err)
	}
	stats := c.Info(ctx, "commandstats").Val()
	if !strings.Contains(stats, "cmdstat_evalsha:calls=3") || !strings.Contains(stats, "cmdstat_eval:calls=2") {
		t.Fatalf("want 3 EVALSHA (one NOSCRIPT) and 2 EVAL (first load, reload):\n%s", stats)
	}
}

// TestRedisScriptGuards runs the script with arguments the Go side never
// sends: it must refuse them (an error wrapping floodgate.ErrBadReply) and
// write nothing.
func TestRedisScriptGuards(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ctx := context.Background()
	for _, args := range [][]any{
		{"x", 1, 1, 1, "id", 1},
		{"a", "now", 1, 1, "id", 1},
		{"a", 1, 0, 1, "id", 1},
		{"a", 1, 1, 0, "id", 1},
		{"a", 1, 1, 1, "", 1},
		{"n", 1, 1, -5, "id", 1},
	} {
		_, err := leaseScript.Run(ctx, c, []string{"g:cc:{x}"}, args...)
		if !errors.Is(err, floodgate.ErrBadReply) || !strings.Contains(err.Error(), "invalid arguments") {
			t.Errorf("args %v: %v, want ErrBadReply for invalid arguments", args, err)
		}
	}
	if n := c.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("refused calls wrote %d keys", n)
	}
}

// TestRedisCluster takes leases for several identities on a real
// three-primary cluster: each identity's set lives in its own slot and the
// cap holds on every node.
func TestRedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	c := redistest.StartCluster(t).Client(t)
	s, err := NewRedisStore(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l := newLimiter(t, s, Policy{Name: "cl", Limit: 2}, "cl")
	for _, id := range []string{"alice", "bob", "carol", "dave", "erin"} {
		var leases []Lease
		for i := range 3 {
			r, err := l.AcquireAt(ctx, t0, id)
			if err != nil || r.Allowed != (i < 2) {
				t.Fatalf("%s acquire %d: %+v, %v", id, i, r, err)
			}
			leases = append(leases, r.Lease)
		}
		if ok, err := l.ReleaseAt(ctx, t0, leases[0]); err != nil || !ok {
			t.Fatalf("%s release: %v, %v", id, ok, err)
		}
		if _, err := l.RenewAt(ctx, t0, leases[1]); err != nil {
			t.Fatalf("%s renew: %v", id, err)
		}
	}
	redistest.AuditTTL(t, c, "*")
}

// TestRedisStalledAcquire: an acquire whose context ends while Redis holds
// it unanswered (the server stopped with SIGSTOP after the acquire was
// sent) may have taken a lease, so it fails with ErrIndeterminate, and
// once Redis runs again the lease is in the set. go-redis answers a plain
// command cut off this way with the bare context error of its retry loop
// (a client with ContextTimeoutEnabled, as serve's, and go-redis's
// default retries, after pauses), which the
// script's commands, marked NoRetry, never enter.
func TestRedisStalledAcquire(t *testing.T) {
	srv := redistest.Start(t)
	direct := srv.Client(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	s, err := NewRedisStore(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l := newLimiter(t, s, Policy{Name: "stalled", Limit: 3, LeaseTTL: time.Minute}, "stalled")
	// A first acquire loads the script and leaves a connection in the
	// pool, so the stalled acquire is written on it. Real instants, so
	// that Redis's clock agrees with the caller's.
	if r, err := l.AcquireAt(ctx, time.Now(), "user:{1}"); err != nil || !r.Allowed {
		t.Fatalf("first acquire: %+v, %v", r, err)
	}
	if err := posix.Kill(srv.Pid, posix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = posix.Kill(srv.Pid, posix.SIGCONT)
		}
	}
	t.Cleanup(resume)
	// Long enough for the acquire to be written on a loaded machine
	// (Redis is stopped: the deadline always ends the call).
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = l.AcquireAt(short, time.Now(), "user:{1}")
	cancel()
	resume()
	if !errors.Is(err, floodgate.ErrIndeterminate) || errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Fatalf("acquire cut off after it was sent: %v, want ErrIndeterminate", err)
	}
	if n, err := direct.ZCard(ctx, l.Key("user:{1}")).Result(); err != nil || n != 2 {
		t.Fatalf("leases after Redis resumed: %d, %v; want 2 (the cut-off acquire ran)", n, err)
	}
}
