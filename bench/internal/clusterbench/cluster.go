// Package clusterbench measures the limiters on a private three-primary
// Redis Cluster: go-redis/redis_rate on a *redis.ClusterClient against
// Floodgate's sliding window and three layers (with per-primary coalescing,
// the default, and without), at each concurrency, in interleaved rounds.
// Because the cluster, the harness and anything else share the machine's
// cores, it reports beside decisions/s the CPU time per decision of the
// harness process (the client, load generator included) and of the three
// redis-server processes, and ratios to redis_rate within each round.
package clusterbench

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/bench/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

// ErrCluster reports a cluster that could not be started.
var ErrCluster = errors.New("clusterbench: cannot start the cluster")

// Cluster is three redis-server processes joined as a Redis Cluster of
// three primaries. Stop it with Stop.
type Cluster struct {
	// Servers are the primaries.
	Servers []*redisproc.Server
	// Addrs are their addresses.
	Addrs []string
}

// StartCluster starts three cluster-enabled redis-servers (bin) on free
// ports, joins them with redis-cli (cli) --cluster create, and waits until
// every node reports cluster_state:ok with all 16384 slots served.
func StartCluster(ctx context.Context, bin, cli string) (*Cluster, error) {
	c := &Cluster{}
	for range 3 {
		s, err := startNode(ctx, bin)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Servers = append(c.Servers, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(cctx, cli, args...).CombinedOutput(); err != nil {
		c.Stop()
		return nil, fmt.Errorf("%w: %s %s: %w\n%s", ErrCluster, cli, strings.Join(args, " "), err, out)
	}
	if err := c.waitOK(cctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// startNode starts one cluster-enabled server whose bus port (port+10000)
// is free, trying a few ports.
func startNode(ctx context.Context, bin string) (*redisproc.Server, error) {
	var last error
	for range 5 {
		s, err := redisproc.Start(ctx, redisproc.Options{Bin: bin, ExtraArgs: []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000",
		}})
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCluster, err)
		}
		if busBound(s) {
			return s, nil
		}
		s.Stop()
		last = fmt.Errorf("%w: the cluster bus port of %s was taken", ErrCluster, s.Addr)
	}
	return nil, last
}

// busBound reports whether s answers CLUSTER MYID, i.e. it runs as a
// cluster node (a server whose bus port was taken exits at start).
func busBound(s *redisproc.Server) bool {
	c := s.Client(1)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.ClusterMyID(ctx).Err() == nil && !s.Exited()
}

// waitOK polls every node until each reports cluster_state:ok with every
// slot assigned and three known nodes.
func (c *Cluster) waitOK(ctx context.Context) error {
	var last error
	for {
		last = nil
		for _, s := range c.Servers {
			cl := s.Client(1)
			info, err := cl.ClusterInfo(ctx).Result()
			cl.Close()
			if err != nil {
				last = err
				break
			}
			if redisproc.InfoField(info, "cluster_state") != "ok" || redisproc.InfoField(info, "cluster_slots_ok") != "16384" ||
				redisproc.InfoField(info, "cluster_known_nodes") != "3" {
				last = fmt.Errorf("node %s: %q", s.Addr, strings.TrimSpace(info[:min(len(info), 80)]))
				break
			}
		}
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: not healthy: %w", ErrCluster, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Client returns a new cluster client (pool size per node poolSize, 0:
// go-redis's default) with ContextTimeoutEnabled. The caller closes it.
func (c *Cluster) Client(poolSize int) *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, PoolSize: poolSize, DisableIdentity: true, ContextTimeoutEnabled: true})
}

// CPUSeconds returns the sum of the nodes' used_cpu_user + used_cpu_sys.
func (c *Cluster) CPUSeconds(ctx context.Context) (float64, error) {
	var sum float64
	for _, s := range c.Servers {
		cl := s.Client(1)
		info, err := cl.Info(ctx, "cpu").Result()
		cl.Close()
		if err != nil {
			return 0, err
		}
		for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
			v, err := strconv.ParseFloat(redisproc.InfoField(info, f), 64)
			if err != nil {
				return 0, fmt.Errorf("clusterbench: INFO cpu %s of %s: %w", f, s.Addr, err)
			}
			sum += v
		}
	}
	return sum, nil
}

// Stop stops every server, by its own pid.
func (c *Cluster) Stop() {
	for _, s := range c.Servers {
		s.Stop()
	}
}
