package main

import (
	"context"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/envoycompat"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestEnvoyCompatClusterHealthAnyPrimary: on a 3-primary Redis Cluster
// serving partial coverage (cluster-require-full-coverage no), an
// envoy-compat started while the primary of the old probe key's slot
// (7639) is down becomes healthy, and logs that primary by address; with
// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION, another primary going down keeps
// it healthy and is logged by address too, and only the last primary
// going down turns /healthcheck 500. The probe was a GET of that one key:
// started with its primary down, /healthcheck answered 500 for good while
// the other primaries decided; with another primary down it stayed 200
// and nothing said so.
func TestEnvoyCompatClusterHealthAnyPrimary(t *testing.T) {
	c := redistest.StartCluster(t)
	ctx := context.Background()
	for _, n := range c.Nodes {
		if err := n.Client(t).ConfigSet(ctx, "cluster-require-full-coverage", "no").Err(); err != nil {
			t.Fatal(err)
		}
	}
	slot, err := c.Nodes[0].Client(t).ClusterKeySlot(ctx, envoycompat.ProbeKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	if slot < 5461 || slot > 10922 {
		t.Fatalf("the probe key's slot %d is not Nodes[1]'s (5461-10922)", slot)
	}
	c.Nodes[1].Kill()
	p := startCompat(t, "REDIS_TYPE=cluster", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+strings.Join(c.Addrs, ","),
		"RUNTIME_ROOT="+t.TempDir(), "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true")
	health := func() int { code, _ := httpGet(t, "http://"+p.http+"/healthcheck"); return code }
	waitFor(t, "healthcheck 200 with the probe key's primary down", func() bool { return health() == 200 })
	downLogged := func(addr string) bool {
		for _, line := range strings.Split(p.Logs(), "\n") {
			if strings.Contains(line, "redis cluster primaries not answering") && strings.Contains(line, addr) {
				return true
			}
		}
		return false
	}
	waitFor(t, "the dead primary "+c.Addrs[1]+" logged", func() bool { return downLogged(c.Addrs[1]) })

	c.Nodes[0].Kill()
	waitFor(t, "the second dead primary "+c.Addrs[0]+" logged", func() bool { return downLogged(c.Addrs[0]) })
	if code := health(); code != 200 {
		t.Fatalf("healthcheck %d with one primary of three answering, want 200\n%s", code, p.Logs())
	}

	c.Nodes[2].Kill()
	waitFor(t, "healthcheck 500 with every primary down", func() bool { return health() == 500 })
	if !strings.Contains(p.Logs(), "no primary answered") {
		t.Errorf("the failure does not say that no primary answered:\n%s", p.Logs())
	}
}
