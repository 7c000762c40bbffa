package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memstore"
)

// TestSplitRefusalBesideGoneCallerCounted: on a real Cluster, a split
// decision one of whose parts Redis refused (its primary out of memory)
// while another was dropped unsent because its caller went (its primary
// paused, its pool's only connection taken) opens a fallback's breaker,
// as the refusal does for a caller that stays: the split's error named
// the first failed part, the dropped one, whose context.Canceled made it
// the caller's doing, and the refusal went uncounted (review17, 3 of 3).
func TestSplitRefusalBesideGoneCallerCounted(t *testing.T) {
	cl := redistest.StartCluster(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Client(t).Options().Addrs, ContextTimeoutEnabled: true, ReadTimeout: -1, PoolSize: 1, PoolTimeout: redistest.PoolTimeout})
	t.Cleanup(func() { _ = cc.Close() })
	rs, err := New(cc, Options{Split: SplitConcurrent})
	if err != nil {
		t.Fatal(err)
	}
	newFallback := func() *fallback.Store {
		local, err := memstore.New(memstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		fs, err := fallback.New(rs, local, fallback.Options{Budget: 10 * time.Second, Breaker: fallback.BreakerOptions{FailureThreshold: 1}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(fs.Close)
		return fs
	}
	ctx := context.Background()
	layers, unode, gnode := splitLayers(t, cc)
	adminU := redis.NewClient(&redis.Options{Addr: unode.Options().Addr})
	adminG := redis.NewClient(&redis.Options{Addr: gnode.Options().Addr})
	t.Cleanup(func() { _ = adminU.Close(); _ = adminG.Close() })
	// Part 0, the user's: its primary paused, its pool taken (dropped
	// when the caller goes). Part 1, the global one: its primary out of
	// memory (refused).
	if err := rs.Decide(ctx, time.Now().UnixMicro(), layers, make([]floodgate.Result, 2)); err != nil {
		t.Fatal(err)
	}
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "1"}} {
		if err := adminG.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	stays := newFallback()
	_ = stays.Decide(ctx, time.Now().UnixMicro(), layers, make([]floodgate.Result, 2))
	if st := stays.BreakerState(); st != fallback.BreakerOpen {
		t.Fatalf("breaker %v for a caller that stays, the global part refused: want open; the case is not reproduced", st)
	}

	goes := newFallback()
	if err := adminU.Do(ctx, "CLIENT", "PAUSE", 60000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	unpaused := false
	unpause := func() {
		if !unpaused {
			unpaused = true
			adminU.Do(ctx, "CLIENT", "UNPAUSE")
		}
	}
	defer unpause()
	live := make(chan error, 1)
	go func() { live <- rs.Decide(ctx, time.Now().UnixMicro(), layers[:1], make([]floodgate.Result, 1)) }()
	if !waitBlocked(t, adminU, 1) {
		t.Fatal("the live caller never blocked on the paused primary")
	}
	ooms := func() string {
		for _, line := range strings.Split(adminG.Info(ctx, "errorstats").Val(), "\n") {
			if strings.HasPrefix(line, "errorstat_OOM:") {
				return strings.TrimSpace(line)
			}
		}
		return ""
	}
	before := ooms()
	req, hangUp := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- goes.Decide(req, time.Now().UnixMicro(), layers, make([]floodgate.Result, 2)) }()
	if !waitPool(unode.PoolStats, func(s *redis.PoolStats) bool { return s.PendingRequests >= 1 }) {
		t.Fatal("the gone caller's user part never waited for the pool")
	}
	for deadline := time.Now().Add(10 * time.Second); ooms() == before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the global part was never refused")
		}
	}
	hangUp()
	errs := redistest.GoneErrors(t, done, 1)
	unpause()
	if err := <-live; err != nil {
		t.Errorf("live caller: %v", err)
	}
	if st := goes.BreakerState(); st != fallback.BreakerOpen {
		t.Errorf("breaker %v for a caller that went, the global part refused (err %v): want open, as for one that stays", st, errs)
	}
}
