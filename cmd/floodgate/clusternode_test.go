package main

import (
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestServeWarnsOfClusterNodeAsSingleRedis: serve given one node of a
// Redis Cluster with --redis (as a single Redis) started without a word,
// then had most decisions answered MOVED, its log saying only that the
// circuit breaker opened (an outside login-guard walk). It now logs at
// start that the address is a Cluster node and to use --redis-cluster;
// given the Cluster as one, it says nothing of the kind.
func TestServeWarnsOfClusterNodeAsSingleRedis(t *testing.T) {
	c := redistest.StartCluster(t)
	const warning = "the Redis of --redis is a node of a Redis Cluster, given as a single Redis"
	svc := startService(t, "--redis", "redis://"+c.Addrs[0], "--prefix", "cn")
	// Logged before the listening line Start waited for.
	logs := svc.Logs()
	if !strings.Contains(logs, warning) || !strings.Contains(logs, `"addr":"`+c.Addrs[0]+`"`) || !strings.Contains(logs, "--redis-cluster host:port") {
		t.Fatalf("no warning naming %s and --redis-cluster:\n%s", c.Addrs[0], svc.Logs())
	}
	svc = startService(t, "--redis", "redis-cluster://"+strings.Join(c.Addrs, ","), "--prefix", "cn")
	if strings.Contains(svc.Logs(), warning) {
		t.Fatalf("the Cluster given as one warned that it was given as a single Redis:\n%s", svc.Logs())
	}
}
