package fallback_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestRedisProbeClusterPrimaryRefusingWrites checks the background probe of
// a Redis Cluster partition on a real three-primary cluster: a primary that
// answers PING but refuses writes (out of memory under noeviction here; a
// CLUSTERDOWN node or a demoted primary answer the same way) must not be
// reported healthy, or its breaker closes after every three probes, opens
// again after the next ten decisions fail, and flaps like that for as long
// as the fault lasts (seen with serve: open and closed twice a second, so
// RateLimitBreakerOpen, which needs two minutes open, never fired). The
// probe used to PING the primary.
func TestRedisProbeClusterPrimaryRefusingWrites(t *testing.T) {
	c := redistest.StartCluster(t)
	cc := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cc.Ping(ctx).Err(); err != nil { // loads the slot map
		t.Fatal(err)
	}
	probe := fallback.RedisProbe(cc, "fgtest:probe")

	for _, addr := range c.Addrs {
		if err := probe(ctx, addr); err != nil {
			t.Fatalf("probe of healthy primary %s: %v", addr, err)
		}
	}
	if err := probe(ctx, fallback.DefaultPartition); err != nil {
		t.Fatalf("probe of the default partition on a healthy cluster: %v", err)
	}

	sick := redis.NewClient(&redis.Options{Addr: c.Addrs[1]})
	defer sick.Close()
	if err := sick.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := sick.Set(ctx, "{x}", "1", time.Second).Err(); err == nil {
		t.Fatal("a write was accepted by the primary at maxmemory 1: the fault is not set up")
	}
	if err := sick.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING of the primary refusing writes: %v (the fault must leave PING working)", err)
	}
	if err := probe(ctx, c.Addrs[1]); err == nil {
		t.Errorf("probe of primary %s refusing writes (OOM) reported it healthy", c.Addrs[1])
	}
	for _, addr := range []string{c.Addrs[0], c.Addrs[2]} {
		if err := probe(ctx, addr); err != nil {
			t.Errorf("probe of healthy primary %s while another refuses writes: %v", addr, err)
		}
	}

	if err := sick.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := probe(ctx, c.Addrs[1]); err != nil {
		t.Errorf("probe of primary %s after its memory was freed: %v", c.Addrs[1], err)
	}
	if err := probe(ctx, "127.0.0.1:1"); err != nil {
		t.Errorf("probe of an address no longer in the cluster's map: %v (no key maps to it: healthy)", err)
	}
}
