package doctor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestClusterDeadShard: a primary and its only replica frozen (SIGSTOP),
// slots 0-5460 left without a reachable owner. An outside walk got
// "a primary reports the cluster down or could not be read" and the
// generic redis-cli fix, with no node or slot named, even once the
// survivors reported cluster_state ok (cluster-require-full-coverage no);
// replication said "every primary has online replicas" of 2 read; the
// latency fix was the timeout's alone though most calls met CLUSTERDOWN;
// and the scan said it "read no key" while listing PTTL failures of keys
// it found. The cluster check now names the nodes, their roles and the
// slots, tells the cluster down from a primary not read, and each of the
// others says what it saw.
func TestClusterDeadShard(t *testing.T) {
	cl := redistest.StartCluster(t)
	replica := cl.AddReplica(t, 0)
	cl.AddReplica(t, 1)
	cl.AddReplica(t, 2)
	cc := cl.Client(t)
	cfg := publish(t, cc, "ds", testConfig)
	traffic(t, cc, "ds", cfg)
	for _, s := range []*redistest.Server{cl.Nodes[0], replica} {
		freeze(t, s)()
	}
	// Wait until the survivors flag both failed (a majority of the
	// primaries agrees after cluster-node-timeout, 5s).
	waitCluster(t, cl.Nodes[1].Client(t), func(nodes, info string) bool {
		n := 0
		for _, line := range strings.Split(nodes, "\n") {
			if (strings.Contains(line, cl.Addrs[0]+"@") || strings.Contains(line, replica.Addr+"@")) && strings.Contains(line, ",fail") {
				n++
			}
		}
		return n == 2 && strings.Contains(info, "cluster_state:fail")
	})
	opts := doctor.Options{Redis: config.Redis{ClusterAddrs: cl.Addrs[1:]}, Prefix: "ds", Scan: doctor.ScanOptions{MaxTime: 30 * time.Second}}

	rep := runDoctor(t, opts)
	// Each its own subtest, so that each is seen to fail on the old code.
	t.Run("cluster", func(t *testing.T) {
		c := want(t, rep, doctor.GroupRedis, "cluster", doctor.Fail, "the cluster is down (cluster_state fail on ",
			"5461 hash slots have no reachable owner: 0-5460 (primary "+cl.Addrs[0]+", fail; its only replica "+replica.Addr+", fail)",
			cl.Addrs[0]+" (primary, fail)", replica.Addr+" (replica, fail)")
		for _, w := range []string{"bring back the unreachable nodes", "CLUSTER FAILOVER TAKEOVER", "assign slots 0-5460 to another primary", "cluster-require-full-coverage no"} {
			if !strings.Contains(c.Fix, w) {
				t.Errorf("cluster fix %q does not say %q", c.Fix, w)
			}
		}
	})
	t.Run("replication", func(t *testing.T) {
		c := want(t, rep, doctor.GroupRedis, "replication", doctor.Warn, "every primary read has online replicas; not read: "+cl.Addrs[0])
		if strings.Contains(c.Summary, "every primary has") {
			t.Errorf("replication %q claims every primary", c.Summary)
		}
	})
	t.Run("latency", func(t *testing.T) {
		c := want(t, rep, doctor.GroupRedis, "latency", doctor.Fail, "CLUSTERDOWN")
		for _, w := range []string{"did not answer a probe call within 1s", "the cluster is down for the probe's slot"} {
			if !strings.Contains(c.Fix, w) {
				t.Errorf("latency fix %q does not say %q", c.Fix, w)
			}
		}
	})
	t.Run("scan", func(t *testing.T) {
		c := want(t, rep, doctor.GroupKeys, "scan", doctor.Fail, "1 of 3 primaries did not answer the scan ("+cl.Addrs[0], "could read none of them", " keys found, 0 read in ")
		if strings.Contains(c.Summary, "read no key") {
			t.Errorf("scan summary %q says it read no key: it found some", c.Summary)
		}
	})

	// The survivors serve their slots again.
	ctx := context.Background()
	for _, n := range cl.Nodes[1:] {
		if err := n.Client(t).ConfigSet(ctx, "cluster-require-full-coverage", "no").Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range cl.Nodes[1:] {
		waitCluster(t, n.Client(t), func(_, info string) bool { return strings.Contains(info, "cluster_state:ok") })
	}
	rep = runDoctor(t, opts)
	c := want(t, rep, doctor.GroupRedis, "cluster", doctor.Fail, "5461 hash slots have no reachable owner: 0-5460",
		"the primaries read report cluster_state ok and serve the other slots")
	if strings.Contains(c.Summary, "cluster is down") || strings.Contains(c.Fix, "cluster-require-full-coverage") {
		t.Errorf("cluster with full coverage off: %q, fix %q", c.Summary, c.Fix)
	}
}

// waitCluster polls node's CLUSTER NODES and CLUSTER INFO until ok
// accepts them, for at most 30s.
func waitCluster(t *testing.T, node *redis.Client, ok func(nodes, info string) bool) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		nodes, err1 := node.ClusterNodes(ctx).Result()
		info, err2 := node.ClusterInfo(ctx).Result()
		if err1 == nil && err2 == nil && ok(nodes, info) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster never reached the state wanted: %v %v\n%s\n%s", err1, err2, nodes, info)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
