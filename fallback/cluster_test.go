package fallback_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/redisstore"
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
	c, cc, ctx := startCluster(t)
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
	if err := probe(ctx, "127.0.0.1:1"); !errors.Is(err, fallback.ErrPartitionGone) {
		t.Errorf("probe of an address no longer in the cluster's map: %v, want ErrPartitionGone (no key maps to it)", err)
	}
}

// TestRedisProbeClusterSlotMigrating: a primary whose probe key's slot is
// migrating away (a resharding) answers the key's SET with ASK, which is
// not a refusal: the probe tries the primary's next slot. Before, the
// probe failed for as long as that slot migrated; as every instance's
// readiness (server.RedisReady) writes the same key, every instance was
// reported unready at once. A primary refusing writes is still reported
// so when its probe slot migrates.
func TestRedisProbeClusterSlotMigrating(t *testing.T) {
	c, cc, ctx := startCluster(t)
	const base = "fgtest:probe"
	probe := fallback.RedisProbe(cc, base)
	if err := probe(ctx, c.Addrs[0]); err != nil {
		t.Fatalf("probe of healthy primary %s: %v", c.Addrs[0], err)
	}
	// The probe's key on node 0: the first tag whose slot node 0 serves.
	var key string
	for n := 0; key == ""; n++ {
		k := fmt.Sprintf("%s:{%d}", base, n)
		m, err := cc.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr == c.Addrs[0] {
			key = k
		}
	}
	src := redis.NewClient(&redis.Options{Addr: c.Addrs[0]})
	defer src.Close()
	dst := redis.NewClient(&redis.Options{Addr: c.Addrs[1]})
	defer dst.Close()
	slot, err := src.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	srcID, err := src.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	dstID, err := dst.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := src.Set(ctx, key, "1", time.Second).Err(); err == nil || !strings.HasPrefix(err.Error(), "ASK ") {
		t.Fatalf("SET %s on %s with slot %d migrating: %v, want ASK: the fault is not set up", key, c.Addrs[0], slot, err)
	}
	if err := probe(ctx, c.Addrs[0]); err != nil {
		t.Errorf("probe of primary %s while slot %d of its probe key migrates: %v (a redirection, not a refusal)", c.Addrs[0], slot, err)
	}
	if err := src.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	// A new probe starts at the migrating slot again.
	if err := fallback.RedisProbe(cc, base)(ctx, c.Addrs[0]); err == nil {
		t.Errorf("probe of primary %s refusing writes (OOM) while slot %d migrates reported it healthy", c.Addrs[0], slot)
	}
}

// startCluster starts a Redis Cluster and returns it, a client whose slot
// map is loaded, and a context bounding the test's calls (30 s).
func startCluster(t *testing.T) (*redistest.Cluster, *redis.ClusterClient, context.Context) {
	t.Helper()
	c := redistest.StartCluster(t)
	cc := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if err := cc.Ping(ctx).Err(); err != nil { // loads the slot map
		t.Fatal(err)
	}
	return c, cc, ctx
}

// TestRedisProbeClusterFailover: a primary killed and replaced by its
// replica. Its partition's probe must report it gone from the slot map
// (ErrPartitionGone: its breaker closes and is dropped) once the replica
// has taken its slots, with nothing else using
// the cluster client meanwhile, as while its breaker is open no decision
// reaches the client. Before, the probe kept writing to the dead address
// from the cached slot map until something else (serve's /readyz) reloaded
// it: 16–32 s of fallback after the replica had taken over.
func TestRedisProbeClusterFailover(t *testing.T) {
	c, cc, ctx := startCluster(t)
	replica := c.AddReplica(t, 0)
	probe := fallback.RedisProbe(cc, "fgtest:probe")
	if err := probe(ctx, c.Addrs[0]); err != nil {
		t.Fatalf("probe of healthy primary %s: %v", c.Addrs[0], err)
	}
	c.Nodes[0].Kill()

	rc := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer rc.Close()
	promoted := time.Now().Add(30 * time.Second)
	for {
		info, err := rc.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "role:master") {
			break
		}
		if time.Now().After(promoted) {
			t.Fatalf("replica %s not promoted 30 s after its primary was killed", replica.Addr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Probe as the breaker does (every 200 ms here), and nothing else.
	deadline := time.Now().Add(5 * time.Second)
	var err error
	for {
		pctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = probe(pctx, c.Addrs[0])
		cancel()
		if errors.Is(err, fallback.ErrPartitionGone) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("probe of the failed-over primary %s still failing 5 s after its replica took over: %v", c.Addrs[0], err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The slot map the decisions' partitions are read from has moved on:
	// the dead primary's slots are the replica's.
	onReplica := 0
	for n := range 300 {
		node, err := cc.MasterForKey(context.Background(), "k{"+strconv.Itoa(n)+"}")
		if err != nil {
			t.Fatal(err)
		}
		switch node.Options().Addr {
		case c.Addrs[0]:
			t.Fatalf("key k{%d} still maps to the dead primary %s", n, c.Addrs[0])
		case replica.Addr:
			onReplica++
		}
	}
	if onReplica == 0 {
		t.Fatalf("no key of 300 maps to the promoted replica %s", replica.Addr)
	}
}

// TestDemotedPrimaryIsSwept: a primary demoted by a coordinated failover
// (CLUSTER FAILOVER on its replica: no failure anywhere, so its breaker
// never opens and no probe runs) leaves BreakerStates within a sweep of
// Options.Partitions, and the new primary's breaker comes with its first
// decision. Before, the demoted primary stayed listed, closed, for good
// (an outside walk saw two of them for minutes in /readyz).
func TestDemotedPrimaryIsSwept(t *testing.T) {
	c, cc, ctx := startCluster(t)
	replica := c.AddReplica(t, 0)
	local, _ := memstore.New(memstore.Options{})
	primary, err := redisstore.New(cc, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	obs := &forgetter{}
	st, err := fallback.New(primary, local, fallback.Options{
		Observer:       obs,
		Partition:      fallback.ClusterPartition(cc),
		Partitions:     fallback.ClusterPartitions(cc),
		PartitionSweep: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	lim, err := floodgate.New(st, floodgate.Options{Prefix: "fgsweep"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := floodgate.NewFixedWindow("api", 1000, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	decideAll := func() {
		t.Helper()
		for i := range 60 {
			var o fallback.Outcome
			if _, err := lim.Allow(fallback.NewContext(ctx, &o), p, "u"+strconv.Itoa(i)); err != nil || o.Degraded {
				t.Fatalf("decision %d: %v %+v", i, err, o)
			}
		}
	}
	decideAll()
	if _, ok := st.BreakerStates()[c.Addrs[0]]; !ok {
		t.Fatalf("no breaker for primary %s after 60 identities: %v", c.Addrs[0], st.BreakerStates())
	}
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer rc.Close()
	if err := rc.ClusterFailover(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		states := st.BreakerStates()
		if _, ok := states[c.Addrs[0]]; !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demoted primary %s still listed 20 s after CLUSTER FAILOVER: %v", c.Addrs[0], states)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		var o fallback.Outcome
		_, err := lim.Allow(fallback.NewContext(ctx, &o), p, "u0")
		if err == nil && !o.Degraded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("decisions not central after the failover: %v %+v", err, o)
		}
		time.Sleep(50 * time.Millisecond)
	}
	decideAll()
	states := st.BreakerStates()
	if _, ok := states[replica.Addr]; !ok {
		t.Fatalf("no breaker for the new primary %s: %v", replica.Addr, states)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if !slices.Contains(obs.forgotten, c.Addrs[0]) {
		t.Fatalf("the observer forgot %v, want %s among them", obs.forgotten, c.Addrs[0])
	}
}

// TestRedisProbeNeedsScripts: the probe writes through a script, as the
// decisions do, so a Redis user allowed SET but not EVALSHA (every
// decision refused with NOPERM) fails it. With a plain SET the probe
// passed, the breaker closed after every three probes and opened again
// after ten refused decisions (an outside walk of serve saw ten open and
// ten close lines in six seconds, and /readyz, which writes the same way,
// flapping between 200 and 503).
func TestRedisProbeNeedsScripts(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	admin := srv.Client(t)
	for _, rule := range [][]any{
		{"ACL", "SETUSER", "noscripts", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval"},
		{"ACL", "SETUSER", "noevalsha", "on", ">pw", "~*", "&*", "+@all", "-evalsha"},
		{"ACL", "SETUSER", "scripts", "on", ">pw", "~*", "&*", "+@all"},
	} {
		if err := admin.Do(ctx, rule...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for user, healthy := range map[string]bool{"noscripts": false, "noevalsha": false, "scripts": true} {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: user, Password: "pw"})
		if err := c.Set(ctx, "fgtest:x", "1", time.Minute).Err(); err != nil {
			t.Fatalf("%s: SET: %v (the user must be allowed SET)", user, err)
		}
		err := fallback.RedisProbe(c, "fgtest:probe")(ctx, fallback.DefaultPartition)
		switch {
		case healthy && err != nil:
			t.Errorf("%s: probe: %v, want healthy", user, err)
		case !healthy && (err == nil || !strings.Contains(err.Error(), "NOPERM")):
			t.Errorf("%s: probe: %v, want its NOPERM refusal", user, err)
		}
		c.Close()
	}
	if ttl := admin.TTL(ctx, "fgtest:probe").Val(); ttl <= 0 || ttl > 10*time.Second {
		t.Errorf("probe key's TTL %v, want its 10 s expiry", ttl)
	}
}
