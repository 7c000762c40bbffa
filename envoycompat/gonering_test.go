package envoycompat

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
)

// TestGoneCallerPartlyCountedRing: on a Ring (each counter a script call
// of its own, incrEach) a request with a counter on each shard, whose
// client goes once its first shard's counter is updated and while its
// second waits for that shard's only pool connection (held by a live
// caller, the shard paused for writes), fails with context.Canceled in
// its error: it is neither a redis_error nor a "store error" line, as
// docs/envoy.md says of a gone client. The partial-update error was
// built with %v and dropped context.Canceled (review16): the request was
// counted as redis_error and logged at ERROR. A part failing for Redis's
// own reasons (OOM) is still both.
func TestGoneCallerPartlyCountedRing(t *testing.T) {
	r := newGoneRing(t)
	svc, m, logs, adminA, adminB, onA, onB, poolB := r.svc, r.m, r.logs, r.adminA, r.adminB, r.onA, r.onB, r.poolB
	ctx := context.Background()
	keys := adminA.Keys(ctx, "d_k_"+strings.TrimPrefix(onA, "k=")+"_*").Val()
	if len(keys) != 1 {
		t.Fatalf("keys of %s on shard a: %q, want one", onA, keys)
	}
	keyA := keys[0]

	hangUp, gone, live, unpause := r.holdB(t)
	waitUntil(t, "the request's counter on shard a is updated and its other waits for shard b's pool", func() bool {
		return adminA.Get(ctx, keyA).Val() == "2" && poolB.PoolStats().PendingRequests >= 1
	})
	hangUp()
	goneErr := <-gone
	unpause()
	if err := <-live; err != nil {
		t.Errorf("live caller: %v", err)
	}
	if !errors.Is(goneErr, context.Canceled) {
		t.Errorf("gone caller: err %v, want it to wrap context.Canceled", goneErr)
	}
	if !errors.Is(goneErr, floodgate.ErrIndeterminate) {
		t.Errorf("gone caller: err %v, want ErrIndeterminate (one counter was updated)", goneErr)
	}
	if n := testutil.ToFloat64(m.redisError); n != 0 {
		t.Errorf("redis_error counted %v for a client that went, want 0", n)
	}
	if strings.Contains(logs.String(), "store error") {
		t.Errorf("a client that went was logged as a store error:\n%s", logs.String())
	}

	// Shard b refusing writes (OOM), the request's counter on a updated:
	// a Redis failure, counted and logged.
	if err := adminB.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := adminB.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := svc.shouldRateLimit(ctx, "", req(t, "d", 1, onA, onB))
	if !errors.Is(err, floodgate.ErrIndeterminate) || errors.Is(err, context.Canceled) {
		t.Errorf("shard b out of memory: err %v, want ErrIndeterminate, not context.Canceled", err)
	}
	if n := testutil.ToFloat64(m.redisError); n != 1 {
		t.Errorf("redis_error counted %v for a request shard b refused, want 1", n)
	}
	if !strings.Contains(logs.String(), "ShouldRateLimit: store error") {
		t.Errorf("a request shard b refused was not logged as a store error:\n%s", logs.String())
	}
}

// goneRing is a Ring of two servers, a and b, whose shards each have a
// pool of one connection, with a Service on it (hangupConfig), and a
// value of key k whose counter lies on each shard, each counted once.
type goneRing struct {
	svc            *Service
	m              *Metrics
	logs           *syncbuf.Buffer
	adminA, adminB *redis.Client
	onA, onB       string        // "k=v<n>" with its counter on shard a, b
	poolB          *redis.Client // the Ring's client of shard b
}

// holdB pauses shard b for writes and holds its one pool connection with
// a live caller's request (on onB), then sends a request with a counter
// on each shard under a context hangUp cancels; gone and live receive the
// two requests' errors, once unpause has lifted the pause for the live
// one.
func (r *goneRing) holdB(t *testing.T) (hangUp context.CancelFunc, gone, live <-chan error, unpause func()) {
	t.Helper()
	ctx := context.Background()
	unpause = redistest.PauseWrites(t, r.adminB)
	liveErr := make(chan error, 1)
	go func() {
		_, err := r.svc.shouldRateLimit(ctx, "", req(t, "d", 1, r.onB))
		liveErr <- err
	}()
	if !waitBlocked(t, r.adminB, 1) {
		t.Fatal("the live caller's call never reached the paused shard")
	}
	goneCtx, hangUp := context.WithCancel(ctx)
	t.Cleanup(hangUp)
	goneErr := make(chan error, 1)
	go func() {
		_, err := r.svc.shouldRateLimit(goneCtx, "", req(t, "d", 1, r.onA, r.onB))
		goneErr <- err
	}()
	return hangUp, goneErr, liveErr, unpause
}

// newGoneRing starts the servers and the Ring of a goneRing.
func newGoneRing(t *testing.T) *goneRing {
	t.Helper()
	srvA, srvB := redistest.Start(t), redistest.Start(t)
	ring := redis.NewRing(&redis.RingOptions{
		Addrs:                 map[string]string{"a": srvA.Addr, "b": srvB.Addr},
		PoolSize:              1,
		ContextTimeoutEnabled: true,
		ReadTimeout:           -1,
		PoolTimeout:           redistest.PoolTimeout,
	})
	t.Cleanup(func() { _ = ring.Close() })
	r := &goneRing{adminA: srvA.Client(t), adminB: srvB.Client(t)}
	r.svc, r.m, r.logs = goneMixedService(t, &RedisStore{Client: ring, Timeout: time.Minute}, hangupConfig)
	ctx := context.Background()
	for i := 0; r.onA == "" || r.onB == ""; i++ {
		if i == 100 {
			t.Fatalf("no counters on both shards after %d values", i)
		}
		v := fmt.Sprint("k=v", i)
		before := r.adminA.DBSize(ctx).Val()
		if _, err := r.svc.shouldRateLimit(ctx, "", req(t, "d", 1, v)); err != nil {
			t.Fatal(err)
		}
		switch after := r.adminA.DBSize(ctx).Val(); {
		case after > before && r.onA == "":
			r.onA = v
		case after == before && r.onB == "":
			r.onB = v
		}
	}
	_ = ring.ForEachShard(ctx, func(_ context.Context, c *redis.Client) error {
		if c.Options().Addr == srvB.Addr {
			r.poolB = c
		}
		return nil
	})
	if r.poolB == nil {
		t.Fatal("no Ring shard for server b")
	}
	return r
}
