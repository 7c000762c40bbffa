package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/deadline"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// goneDirect is the shape of the gone-client tests of the paths that do not
// go through a batcher's queue (a sliding log decision, decided by a call of
// its own through the go-redis client, on one Redis and on a Cluster): with
// the node holding key paused for writes, live callers take every
// connection of the pool (poolSize) and wait for Redis, gone callers (their
// serve-like context is a shared deadline made from a request context)
// wait for a connection behind them, and hang up while they wait; Redis
// then resumes. Only the live callers' requests may be charged: a gone
// caller's call had not been sent, so it is not sent, and it reports its
// caller's error (store unavailable wrapping context.Canceled). Before,
// go-redis's pool wait saw only the shared deadline, which the client's
// departure does not end: every gone caller's request was sent once a
// connection came free and charged to the identity.
func goneDirect(t *testing.T, store *Store, layers []floodgate.Layer, pool func() *redis.PoolStats, node *redis.Client, poolSize int) {
	const gone = 6
	ctx := context.Background()
	decide := func(ctx context.Context) ([]floodgate.Result, error) {
		out := make([]floodgate.Result, len(layers))
		err := store.Decide(ctx, time.Now().UnixMicro(), layers, out)
		return out, err
	}
	if _, err := decide(ctx); err != nil { // loads the script
		t.Fatal(err)
	}
	unpause := redistest.PauseWrites(t, node)

	var wg sync.WaitGroup
	liveErrs := make(chan error, poolSize)
	for range poolSize {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			_, err := decide(cctx)
			liveErrs <- err
		})
	}
	if !waitBlocked(t, node, poolSize) {
		t.Fatal("the live callers' calls never reached the paused Redis")
	}

	ticks := deadline.New()
	goneDone := make(chan error, gone)
	hangUps := make([]context.CancelFunc, gone)
	for i := range gone {
		req, hangUp := context.WithCancel(ctx)
		hangUps[i] = hangUp
		wg.Go(func() {
			cctx, stop := ticks.WithTimeout(req, time.Now(), 30*time.Second)
			defer stop()
			_, err := decide(cctx)
			goneDone <- err
		})
	}
	if !waitPool(pool, func(s *redis.PoolStats) bool { return s.PendingRequests >= gone }) {
		t.Fatalf("the gone callers never waited for the pool: %+v", *pool())
	}
	for _, hangUp := range hangUps {
		hangUp()
	}
	// A gone caller whose call was not sent returns at once (a hang-up
	// reaches its call through context.AfterFunc): Redis resumes once they
	// all did, or (they never do on the old code) after 10 s.
	goneErrs := redistest.GoneErrors(t, goneDone, gone)
	unpause()
	wg.Wait()
	close(liveErrs)
	close(goneDone)
	for err := range goneDone {
		goneErrs = append(goneErrs, err)
	}
	for err := range liveErrs {
		if err != nil {
			t.Errorf("live caller: %v", err)
		}
	}
	for _, err := range goneErrs {
		if !errors.Is(err, context.Canceled) || !errors.Is(err, floodgate.ErrStoreUnavailable) {
			t.Errorf("gone caller: err %v, want store unavailable wrapping context.Canceled (nothing sent)", err)
		}
	}
	rs, err := decide(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		// The first decision, the live callers' and this one.
		if want := layers[i].Policy.Limit - int64(1+poolSize+1); r.Remaining != want {
			t.Errorf("%s: remaining %d after %d live and %d gone callers, want %d: %d requests of gone callers were charged",
				layers[i].Key, r.Remaining, poolSize, gone, want, want-r.Remaining)
		}
	}
}

// waitPool polls the pool's statistics until ok, for up to 10 s, and reports
// whether it was (go-redis has no signal for a caller waiting for a
// connection).
func waitPool(pool func() *redis.PoolStats, ok func(*redis.PoolStats) bool) bool {
	for end := time.Now().Add(10 * time.Second); !ok(pool()); {
		if time.Now().After(end) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// waitBlocked polls the INFO of admin's Redis, for up to 10 s, until it
// holds n clients blocked (by CLIENT PAUSE: their calls were sent), and
// reports whether it did.
func waitBlocked(t *testing.T, admin *redis.Client, n int) bool {
	t.Helper()
	want := fmt.Sprintf("blocked_clients:%d\r", n)
	for end := time.Now().Add(10 * time.Second); ; {
		info, err := admin.Info(context.Background(), "clients").Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, want) {
			return true
		}
		if time.Now().After(end) {
			t.Log(info)
			return false
		}
		time.Sleep(time.Millisecond)
	}
}

// slidingLog is the policy of the gone-client tests: not coalesced.
func slidingLog(t *testing.T) floodgate.Policy {
	p, err := floodgate.NewSlidingLog("gone", 100, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGoneCallerNotSentSlidingLog: goneDirect on one Redis.
func TestGoneCallerNotSentSlidingLog(t *testing.T) {
	srv := redistest.Start(t)
	const poolSize = 2
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, ReadTimeout: -1, PoolSize: poolSize, PoolTimeout: redistest.PoolTimeout})
	t.Cleanup(func() { _ = c.Close() })
	store, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := slidingLog(t)
	layers := []floodgate.Layer{{Policy: p, Key: floodgate.Key(uniquePrefix(t), p, "u"), Cost: 1}}
	goneDirect(t, store, layers, c.PoolStats, srv.Client(t), poolSize)
}

// TestGoneCallerNotSentCluster: goneDirect on a 3-primary Redis Cluster,
// with the key's primary paused and its pool taken.
func TestGoneCallerNotSentCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	const poolSize = 2
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Client(t).Options().Addrs, ContextTimeoutEnabled: true, ReadTimeout: -1, PoolSize: poolSize, PoolTimeout: redistest.PoolTimeout})
	t.Cleanup(func() { _ = cc.Close() })
	store, err := New(cc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := slidingLog(t)
	key := floodgate.Key(uniquePrefix(t), p, "u")
	node, err := cc.MasterForKey(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(&redis.Options{Addr: node.Options().Addr})
	t.Cleanup(func() { _ = admin.Close() })
	goneDirect(t, store, []floodgate.Layer{{Policy: p, Key: key, Cost: 1}}, node.PoolStats, admin, poolSize)
}

// TestGoneCallerNotSentSplit: goneDirect on a 3-primary Redis Cluster for
// a decision whose two sliding log layers lie on two primaries (split by
// slot, each part reserved by a call of its own: a sliding log's
// reservation does not go through a primary's queue), with one of them
// paused and its pool taken. A gone caller's part that waited there is not sent, and what its
// other part reserved is released.
func TestGoneCallerNotSentSplit(t *testing.T) {
	cl := redistest.StartCluster(t)
	const poolSize = 2
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Client(t).Options().Addrs, ContextTimeoutEnabled: true, ReadTimeout: -1, PoolSize: poolSize, PoolTimeout: redistest.PoolTimeout})
	t.Cleanup(func() { _ = cc.Close() })
	store, err := New(cc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	layers, unode, _ := splitLayers(t, cc)
	admin := redis.NewClient(&redis.Options{Addr: unode.Options().Addr})
	t.Cleanup(func() { _ = admin.Close() })
	goneDirect(t, store, layers, unode.PoolStats, admin, poolSize)
}

// splitLayers returns two sliding log layers, a user's and a global one,
// whose keys lie on two primaries of cc, and those primaries' clients.
func splitLayers(t *testing.T, cc *redis.ClusterClient) (layers []floodgate.Layer, unode, gnode *redis.Client) {
	t.Helper()
	ctx := context.Background()
	user, err := floodgate.NewSlidingLog("user", 100, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	global, err := floodgate.NewSlidingLog("global", 100, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	prefix := uniquePrefix(t)
	gk := floodgate.Key(prefix, global, "all")
	if gnode, err = cc.MasterForKey(ctx, gk); err != nil {
		t.Fatal(err)
	}
	var uk string
	for i := 0; unode == nil || unode == gnode; i++ {
		uk = floodgate.Key(prefix, user, fmt.Sprint("u", i))
		if unode, err = cc.MasterForKey(ctx, uk); err != nil {
			t.Fatal(err)
		}
	}
	return []floodgate.Layer{{Policy: user, Key: uk, Cost: 1}, {Policy: global, Key: gk, Cost: 1}}, unode, gnode
}
