package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// clusterSize is the number of primaries StartCluster starts.
	clusterSize = 3
	// clusterSlots is the number of hash slots in a Redis Cluster.
	clusterSlots = 16384
	// clusterTimeout bounds cluster creation and the wait for a healthy state.
	clusterTimeout = 30 * time.Second
)

// Cluster is a 3-primary Redis Cluster started for a test: three
// redis-server --cluster-enabled yes processes on free ports (whose cluster
// bus ports, port+10000, were free too), joined with
// redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes.
// Every node is stopped in t.Cleanup.
type Cluster struct {
	// Nodes are the three primaries, in the order given to redis-cli, so
	// Nodes[0] serves slots 0-5460, Nodes[1] 5461-10922 and Nodes[2]
	// 10923-16383 as redis-cli assigned them.
	Nodes []*Server
	// Addrs are the nodes' addresses, in the same order as Nodes.
	Addrs []string
}

// StartCluster starts a 3-primary Redis Cluster and waits until CLUSTER INFO
// says cluster_state:ok on all nodes, every node knows all three, and every
// one of the 16384 slots is served. It fails the test (skips it, outside CI,
// when redis-server or redis-cli is missing) if the cluster does not form.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	return startCluster(t, nil)
}

// StartClusterTLS is StartCluster with each node also serving TLS (f's
// certificates) on its TLSAddr, the cluster bus over TLS too (tls-cluster
// yes, on the plain port + 10000), so that CLUSTER SLOTS asked over TLS
// names the nodes' TLS ports. Plain ports stay open for redistest's own
// checks.
func StartClusterTLS(t testing.TB, f TLSFiles) *Cluster {
	t.Helper()
	return startCluster(t, &f)
}

func startCluster(t testing.TB, f *TLSFiles) *Cluster {
	t.Helper()
	Require(t)
	cli := requireTool(t, "redis-cli")
	c := &Cluster{}
	for i := 0; i < clusterSize; i++ {
		args := []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
			// A primary's second replica stays its own: with migration
			// on (Redis's default), it moved to a primary without any
			// (an orphaned master) within seconds, and a test waiting
			// for two replicas of one primary never saw them.
			"--cluster-allow-replica-migration", "no",
		}
		if f != nil {
			args = append(args, "--tls-cluster", "yes", "--tls-replication", "yes")
		}
		s := newServer(t, args)
		s.tls = f
		s.bus = true
		s.boot(t)
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.SysProcAttr = sysProcAttr()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli %s: %v\n%s%s", strings.Join(args, " "), err, out, c.logTails())
	}
	if err := c.waitHealthy(ctx); err != nil {
		t.Fatalf("redistest: cluster %v did not become healthy: %v%s", c.Addrs, err, c.logTails())
	}
	return c
}

// waitHealthy polls every node until the whole cluster looks healthy from
// each of them, or ctx ends.
func (c *Cluster) waitHealthy(ctx context.Context) error {
	clients := make([]*redis.Client, len(c.Nodes))
	for i, n := range c.Nodes {
		clients[i] = adminClient(n.Addr)
		defer clients[i].Close()
	}
	return poll(ctx, 100*time.Millisecond, func(ctx context.Context) error {
		for i, cl := range clients {
			if err := nodeHealthy(ctx, cl, len(c.Nodes)); err != nil {
				return fmt.Errorf("node %s: %w", c.Addrs[i], err)
			}
		}
		return nil
	})
}

// nodeHealthy checks one node's CLUSTER INFO and CLUSTER SLOTS: state ok,
// all slots assigned and ok, all nodes known, and slots fully covered.
func nodeHealthy(ctx context.Context, cl *redis.Client, nodes int) error {
	info, err := cl.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": fmt.Sprint(clusterSlots),
		"cluster_slots_ok":       fmt.Sprint(clusterSlots),
		"cluster_known_nodes":    fmt.Sprint(nodes),
		"cluster_size":           fmt.Sprint(nodes),
	}
	for field, v := range want {
		if got := infoField(info, field); got != v {
			return fmt.Errorf("CLUSTER INFO %s is %q, want %q", field, got, v)
		}
	}
	//lint:ignore SA1019 CLUSTER SLOTS is deprecated but still served by Redis 7 and lists each range's primary first, which is all this needs.
	slots, err := cl.ClusterSlots(ctx).Result()
	if err != nil {
		return err
	}
	covered := 0
	for _, r := range slots {
		if len(r.Nodes) == 0 || r.Nodes[0].Addr == "" {
			return fmt.Errorf("CLUSTER SLOTS range %d-%d has no primary", r.Start, r.End)
		}
		covered += int(r.End - r.Start + 1)
	}
	if covered != clusterSlots {
		return fmt.Errorf("CLUSTER SLOTS covers %d slots, want %d", covered, clusterSlots)
	}
	return nil
}

// logTails gathers the log tails of all nodes for an error message.
func (c *Cluster) logTails() string {
	var b strings.Builder
	for _, n := range c.Nodes {
		n.mu.Lock()
		b.WriteString(n.logTail())
		n.mu.Unlock()
	}
	return b.String()
}

// Client returns a go-redis cluster client seeded with all node addresses,
// with ContextTimeoutEnabled set. It is closed in t.Cleanup, before the nodes
// are stopped.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 append([]string(nil), c.Addrs...),
		ContextTimeoutEnabled: true,
		PoolTimeout:           PoolTimeout,
	})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// AddReplica starts a cluster node that replicates Nodes[primary] (CLUSTER
// MEET, then CLUSTER REPLICATE) and waits until it is in sync and every
// node knows it. A replica takes over its primary's slots when the primary
// fails (after the cluster's node timeout, 5 s here). The replica is not
// added to Nodes or Addrs, which list the primaries the cluster started
// with.
func (c *Cluster) AddReplica(t testing.TB, primary int) *Server {
	t.Helper()
	s := c.startNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	pc, rc := adminClient(c.Addrs[primary]), adminClient(s.Addr)
	defer pc.Close()
	defer rc.Close()
	info, err := pc.ClusterInfo(ctx).Result()
	if err != nil {
		t.Fatalf("redistest: CLUSTER INFO of %s: %v", c.Addrs[primary], err)
	}
	known, _ := strconv.Atoi(infoField(info, "cluster_known_nodes")) // replicas added before included
	id, err := pc.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatalf("redistest: CLUSTER MYID of %s: %v", c.Addrs[primary], err)
	}
	if err := rc.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(c.Nodes[primary].Port)).Err(); err != nil {
		t.Fatalf("redistest: CLUSTER MEET from %s: %v", s.Addr, err)
	}
	// The replica must know the primary's ID before it can replicate it.
	err = poll(ctx, 100*time.Millisecond, func(ctx context.Context) error {
		return rc.ClusterReplicate(ctx, id).Err()
	})
	if err != nil {
		t.Fatalf("redistest: CLUSTER REPLICATE %s on %s: %v%s", id, s.Addr, err, s.logTail())
	}
	err = poll(ctx, 100*time.Millisecond, func(ctx context.Context) error {
		info, err := rc.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if got := infoField(info, "master_link_status"); got != "up" {
			return fmt.Errorf("master_link_status %q", got)
		}
		return allKnow(ctx, c.Addrs, known+1)
	})
	if err != nil {
		t.Fatalf("redistest: replica %s of %s not in sync: %v%s", s.Addr, c.Addrs[primary], err, s.logTail())
	}
	return s
}

// startNode starts a cluster node, alone, as StartCluster's nodes are
// configured.
func (c *Cluster) startNode(t testing.TB) *Server {
	t.Helper()
	s := newServer(t, []string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "5000",
		"--cluster-allow-replica-migration", "no", // see StartCluster
	})
	s.bus = true
	s.boot(t)
	return s
}

// allKnow reports an error unless every node of addrs knows n nodes
// (CLUSTER INFO's cluster_known_nodes).
func allKnow(ctx context.Context, addrs []string, n int) error {
	for _, a := range addrs {
		cl := adminClient(a)
		info, err := cl.ClusterInfo(ctx).Result()
		cl.Close()
		if err != nil {
			return err
		}
		if got := infoField(info, "cluster_known_nodes"); got != strconv.Itoa(n) {
			return fmt.Errorf("node %s knows %s nodes", a, got)
		}
	}
	return nil
}

// nodeAddrs returns the address of each node CLUSTER NODES lists, but
// those failed or without an address.
func nodeAddrs(nodes string) []string {
	var addrs []string
	for line := range strings.Lines(nodes) {
		f := strings.Fields(line)
		if len(f) < 3 || strings.Contains(f[2], "fail") || strings.Contains(f[2], "noaddr") {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		if host, port, err := net.SplitHostPort(addr); err == nil && host != "" && port != "0" {
			addrs = append(addrs, addr)
		}
	}
	return addrs
}

// AddPrimary starts a cluster node, joins it to the cluster (CLUSTER
// MEET) as a primary serving no slot, and waits until every primary knows
// it. Move slots to it with Reshard. It is not added to Nodes or Addrs.
func (c *Cluster) AddPrimary(t testing.TB) *Server {
	t.Helper()
	s := c.startNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	pc, nc := adminClient(c.Addrs[0]), adminClient(s.Addr)
	defer pc.Close()
	defer nc.Close()
	info, err := pc.ClusterInfo(ctx).Result()
	if err != nil {
		t.Fatalf("redistest: CLUSTER INFO of %s: %v", c.Addrs[0], err)
	}
	known, _ := strconv.Atoi(infoField(info, "cluster_known_nodes"))
	// Every node, those added earlier by AddPrimary included (not in
	// Addrs): a reshard from one of them that did not know the new node
	// yet failed with "ERR I don't know about node" (a CI run).
	nodes, err := pc.ClusterNodes(ctx).Result()
	if err != nil {
		t.Fatalf("redistest: CLUSTER NODES of %s: %v", c.Addrs[0], err)
	}
	addrs := append([]string{s.Addr}, nodeAddrs(nodes)...)
	if err := nc.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(c.Nodes[0].Port)).Err(); err != nil {
		t.Fatalf("redistest: CLUSTER MEET from %s: %v", s.Addr, err)
	}
	err = poll(ctx, 100*time.Millisecond, func(ctx context.Context) error {
		return allKnow(ctx, addrs, known+1)
	})
	if err != nil {
		t.Fatalf("redistest: primary %s not known to the cluster: %v%s", s.Addr, err, s.logTail())
	}
	return s
}

// NodeID returns the cluster node ID of s (CLUSTER MYID).
func NodeID(t testing.TB, s *Server) string {
	t.Helper()
	cl := adminClient(s.Addr)
	defer cl.Close()
	id, err := cl.ClusterMyID(context.Background()).Result()
	if err != nil {
		t.Fatalf("redistest: CLUSTER MYID of %s: %v", s.Addr, err)
	}
	return id
}

// Reshard moves n slots from node from to node to with redis-cli
// --cluster reshard (keys and all, as an operator does), asking through
// seed. redis-cli refuses to start while the nodes disagree about the
// configuration (just after a node joined, or a previous move): it is run
// again until it succeeds, for up to 30 s.
func Reshard(t testing.TB, seed string, from, to *Server, n int) {
	t.Helper()
	redisCLI(t, "--cluster", "reshard", seed, "--cluster-from", NodeID(t, from), "--cluster-to", NodeID(t, to),
		"--cluster-slots", strconv.Itoa(n), "--cluster-yes")
}

// DelNode removes s from the cluster with redis-cli --cluster del-node
// (every other node forgets it, and s is reset: CLUSTER RESET SOFT),
// leaving s running, as a one-node cluster serving no slot. s must serve
// no slot (Reshard them away first).
func DelNode(t testing.TB, seed string, s *Server) {
	t.Helper()
	redisCLI(t, "--cluster", "del-node", seed, NodeID(t, s))
}

// redisCLI runs redis-cli with args, again (every 500 ms, for up to
// clusterTimeout) while it fails before doing anything: its check of the
// cluster found the nodes disagreeing, which they do for a moment after a
// change.
func redisCLI(t testing.TB, args ...string) {
	t.Helper()
	cli := requireTool(t, "redis-cli")
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	for {
		cmd := exec.CommandContext(ctx, cli, args...)
		cmd.SysProcAttr = sysProcAttr()
		out, err := cmd.CombinedOutput()
		if err == nil {
			return
		}
		if ctx.Err() != nil || strings.Contains(string(out), "Moving slot") {
			t.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}
