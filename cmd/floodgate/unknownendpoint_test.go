package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// noEndpointSays is what serve and envoy-compat say of a Redis Cluster
// whose nodes announce no endpoint.
const noEndpointSays = "the cluster announces no endpoint (cluster-preferred-endpoint-type unknown-endpoint): set it to ip or hostname"

// TestClusterUnknownEndpointSaysSo: on a Redis Cluster whose nodes run
// cluster-preferred-endpoint-type unknown-endpoint, serve --redis-cluster
// and envoy-compat (REDIS_TYPE=cluster) were degraded with "redis: nil"
// alone (a walk; /readyz said "redis cluster: redis: nil"); they now say
// what the cluster announces and what to set, in /readyz and the log.
func TestClusterUnknownEndpointSaysSo(t *testing.T) {
	c := redistest.StartCluster(t)
	for _, n := range c.Nodes {
		if err := n.Client(t).ConfigSet(context.Background(), "cluster-preferred-endpoint-type", "unknown-endpoint").Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("serve", func(t *testing.T) {
		svc := startService(t, "--redis-cluster", strings.Join(c.Addrs, ","), "--prefix", fmt.Sprintf("ue%d", time.Now().UnixNano()))
		var body string
		waitUntil(t, "/readyz naming the missing endpoint", func() bool {
			_, body = readyz(t, svc.url)
			return strings.Contains(body, noEndpointSays)
		})
		if strings.Contains(body, "redis: nil") {
			t.Errorf("/readyz still says redis: nil: %s", body)
		}
		waitUntil(t, "the log naming the missing endpoint", func() bool { return strings.Contains(svc.Logs(), noEndpointSays) })
	})
	t.Run("envoy-compat", func(t *testing.T) {
		p := startCompat(t, "REDIS_TYPE=cluster", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+strings.Join(c.Addrs, ","), "RUNTIME_ROOT="+t.TempDir())
		waitFor(t, "the log naming the missing endpoint", func() bool { return strings.Contains(p.Logs(), noEndpointSays) })
		if strings.Contains(p.Logs(), "redis: nil") {
			t.Errorf("the log still says redis: nil:\n%s", p.Logs())
		}
	})
}
