package clusterslots

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestGuardCheck: an empty map is never taken; a smaller one only when
// three answers in a row say so; an equal or larger one at once.
func TestGuardCheck(t *testing.T) {
	g := &Guard{}
	steps := []struct {
		n    int
		take bool
	}{
		{0, false}, {Slots, true}, {0, false}, {Slots - 100, false}, {Slots, true},
		{Slots - 100, false}, {Slots - 100, false}, {Slots - 100, true},
		{Slots - 200, false}, {Slots - 100, true}, {Slots, true}, {0, false},
	}
	for i, s := range steps {
		err := g.Check(s.n)
		if took := err == nil; took != s.take {
			t.Fatalf("step %d: Check(%d) = %v, want taken %v", i, s.n, err, s.take)
		}
		if err != nil && !errors.Is(err, ErrRefused) {
			t.Fatalf("step %d: error %v does not wrap ErrRefused", i, err)
		}
	}
}

// masters lists the primaries in cc's slot map, after the reload that
// ForEachMaster does first.
func masters(ctx context.Context, cc *redis.ClusterClient) []string {
	var mu sync.Mutex
	var out []string
	_ = cc.ForEachMaster(ctx, func(_ context.Context, n *redis.Client) error {
		mu.Lock()
		out = append(out, n.Options().Addr)
		mu.Unlock()
		return nil
	})
	return out
}

// TestDelNodeLeftRunning: a fourth primary, given slots, then emptied by
// redis-cli --cluster reshard and removed by --cluster del-node, runs on
// as a one-node cluster with no slot. A plain go-redis client that knew it
// reloads its map from it now and then (an empty map: no primary listed);
// NewClusterClient's client never does, and keeps the three primaries.
func TestDelNodeLeftRunning(t *testing.T) {
	c := redistest.StartCluster(t)
	n4 := c.AddPrimary(t)
	redistest.Reshard(t, c.Addrs[0], c.Nodes[0], n4, 100)
	ctx := context.Background()
	plain := c.Client(t)
	guarded := NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, ContextTimeoutEnabled: true, PoolTimeout: redistest.PoolTimeout})
	t.Cleanup(func() { _ = guarded.Close() })
	for name, cc := range map[string]*redis.ClusterClient{"plain": plain, "guarded": guarded} {
		if got := masters(ctx, cc); len(got) != 4 {
			t.Fatalf("%s client: primaries %v, want 4", name, got)
		}
	}
	redistest.Reshard(t, c.Addrs[1], n4, c.Nodes[1], 100)
	redistest.DelNode(t, c.Addrs[1], n4)

	plainEmpty := 0
	for i := range 60 {
		if got := masters(ctx, guarded); len(got) != 3 {
			t.Fatalf("reload %d: the guarded client's primaries are %v, want the 3 left", i, got)
		}
		if len(masters(ctx, plain)) == 0 {
			plainEmpty++
		}
	}
	// The plain client picks among 4 known nodes at random: in 60
	// reloads, it takes the removed node's empty map all but surely
	// (missing it every time: (3/4)^60, about 3e-8). This shows the test
	// reproduces what the guard prevents.
	if plainEmpty == 0 {
		t.Fatal("the plain client never took the removed node's empty map: the test no longer reproduces the fault")
	}
	t.Logf("plain go-redis client: %d of 60 reloads took the removed node's empty map", plainEmpty)
}

// TestUnguardedPassesTheAnswer: under Unguarded, a node's CLUSTER SLOTS
// answer reaches the caller as the node gave it, even one the guard
// refuses (floodgate doctor reports each node's map): here that of a node
// removed from its cluster, serving no slot, asked through a guard that
// took a full map.
func TestUnguardedPassesTheAnswer(t *testing.T) {
	c := redistest.StartCluster(t)
	lone := c.AddPrimary(t)
	redistest.DelNode(t, c.Addrs[0], lone) // a one-node cluster with no slot
	ctx := context.Background()
	g := &Guard{}
	if err := g.Check(Slots); err != nil {
		t.Fatal(err)
	}
	lc := redis.NewClient(&redis.Options{Addr: lone.Addr})
	t.Cleanup(func() { _ = lc.Close() })
	lc.AddHook(g)
	//lint:ignore SA1019 CLUSTER SLOTS is what the guard watches.
	if _, err := lc.ClusterSlots(ctx).Result(); !errors.Is(err, ErrRefused) {
		t.Fatalf("guarded: %v, want ErrRefused", err)
	}
	//lint:ignore SA1019 as above.
	got, err := lc.ClusterSlots(Unguarded(ctx)).Result()
	if err != nil || len(got) != 0 {
		t.Fatalf("unguarded: %v, %v; want the empty map", got, err)
	}
}

// unknownEndpoint makes every node of c announce no endpoint in CLUSTER
// SLOTS (a NULL where its address goes) and MOVED (":port").
func unknownEndpoint(t *testing.T, c *redistest.Cluster) {
	t.Helper()
	for _, n := range c.Nodes {
		if err := n.Client(t).ConfigSet(context.Background(), "cluster-preferred-endpoint-type", "unknown-endpoint").Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUnknownEndpoint: on a cluster whose nodes announce no endpoint, a
// NewClusterClient client fails with ErrNoEndpoint (go-redis's own parser
// said only "redis: nil"), and so does a node's CLUSTER SLOTS under
// Unguarded (doctor's); the node's connection stays usable after it.
func TestUnknownEndpoint(t *testing.T) {
	c := redistest.StartCluster(t)
	unknownEndpoint(t, c)
	ctx := context.Background()
	cc := NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, ContextTimeoutEnabled: true, PoolTimeout: redistest.PoolTimeout})
	t.Cleanup(func() { _ = cc.Close() })
	err := cc.Set(ctx, "k", "v", 0).Err()
	if !errors.Is(err, ErrNoEndpoint) {
		t.Fatalf("SET through the cluster client: %v, want ErrNoEndpoint", err)
	}
	if _, err := Primaries(ctx, cc); !errors.Is(err, ErrNoEndpoint) {
		t.Fatalf("Primaries: %v, want ErrNoEndpoint", err)
	}
	lc := redis.NewClient(&redis.Options{Addr: c.Addrs[0], PoolSize: 1})
	t.Cleanup(func() { _ = lc.Close() })
	lc.AddHook(&Guard{})
	for range 2 {
		//lint:ignore SA1019 CLUSTER SLOTS is what the guard reads.
		if _, err := lc.ClusterSlots(Unguarded(ctx)).Result(); !errors.Is(err, ErrNoEndpoint) {
			t.Fatalf("a node's CLUSTER SLOTS: %v, want ErrNoEndpoint", err)
		}
		if got, err := lc.Ping(ctx).Result(); err != nil || got != "PONG" {
			t.Fatalf("PING on the same connection after it: %q, %v", got, err)
		}
	}
}

// TestParseSlotsMatchesGoRedis: on a cluster announcing IPs, the guard's
// reading of CLUSTER SLOTS gives what go-redis's parser gives.
func TestParseSlotsMatchesGoRedis(t *testing.T) {
	c := redistest.StartCluster(t)
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		plain := redis.NewClient(&redis.Options{Addr: c.Addrs[0], Protocol: proto})
		guarded := redis.NewClient(&redis.Options{Addr: c.Addrs[0], Protocol: proto})
		t.Cleanup(func() { _ = plain.Close(); _ = guarded.Close() })
		guarded.AddHook(&Guard{})
		//lint:ignore SA1019 CLUSTER SLOTS is what the guard reads.
		want, err := plain.ClusterSlots(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		//lint:ignore SA1019 as above.
		got, err := guarded.ClusterSlots(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("RESP%d: guarded %v, go-redis %v", proto, got, want)
		}
	}
}
