package envoycompat

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestGoneCallerNotCountedCluster: on a Redis Cluster each counter is a
// script call of its own (incrEach), sent through the cluster client,
// which waits for a free connection of the node's pool under the call's
// context. With the counter's primary paused for writes, live callers
// take every connection of its pool (2), callers whose client then goes
// wait behind them, and Redis resumes: only the live callers are counted,
// and the gone callers get store unavailable wrapping context.Canceled
// (nothing sent), as from the queue on one Redis. Before, the store's
// timeout (a shared deadline, which does not end with the caller's
// context) was all go-redis saw: every gone caller's update was sent once
// a connection came free, and counted.
func TestGoneCallerNotCountedCluster(t *testing.T) {
	const (
		poolSize = 2
		gone     = 6
	)
	cl := redistest.StartCluster(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Client(t).Options().Addrs, ContextTimeoutEnabled: true, ReadTimeout: -1, PoolSize: poolSize, PoolTimeout: redistest.PoolTimeout})
	t.Cleanup(func() { _ = cc.Close() })
	s := &RedisStore{Client: cc, Timeout: 30 * time.Second}
	ctx := context.Background()
	key := "gone_" + t.Name()
	node, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(&redis.Options{Addr: node.Options().Addr})
	t.Cleanup(func() { _ = admin.Close() })
	incr := func(ctx context.Context) error {
		return s.Incr(ctx, []*Op{{Key: key, N: 1, TTL: time.Hour}})
	}
	if err := incr(ctx); err != nil { // loads the script
		t.Fatal(err)
	}
	unpause := redistest.PauseWrites(t, admin)
	// waitPool polls the pool's statistics (go-redis has no signal for a
	// caller waiting for a connection).
	waitPool := func(ok func(*redis.PoolStats) bool) bool {
		for end := time.Now().Add(10 * time.Second); !ok(node.PoolStats()); {
			if time.Now().After(end) {
				return false
			}
			time.Sleep(time.Millisecond)
		}
		return true
	}

	var wg sync.WaitGroup
	liveErrs := make(chan error, poolSize)
	for range poolSize {
		wg.Go(func() { liveErrs <- incr(ctx) })
	}
	if !waitBlocked(t, admin, poolSize) {
		t.Fatal("the live callers' calls never reached the paused primary")
	}
	goneDone := make(chan error, gone)
	hangUps := make([]context.CancelFunc, gone)
	for i := range gone {
		req, hangUp := context.WithCancel(ctx)
		hangUps[i] = hangUp
		wg.Go(func() { goneDone <- incr(req) })
	}
	if !waitPool(func(st *redis.PoolStats) bool { return st.PendingRequests >= gone }) {
		t.Fatalf("the gone callers never waited for the pool: %+v", *node.PoolStats())
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
	n, err := cc.Get(ctx, key).Int()
	if err != nil {
		t.Fatal(err)
	}
	if want := 1 + poolSize; n != want {
		t.Errorf("counter %d after the first update, %d live and %d gone callers, want %d: %d updates of gone callers were counted", n, poolSize, gone, want, n-want)
	}
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
