package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// delNodeConfig has a single-layer policy and a three-layer one whose
// global layer is the tight one, so that every denial of a split
// decision releases the user's part (per-user and monthly, in the user's
// slot).
const delNodeConfig = `version: "1"
policies:
  - name: one
    on_redis_failure: closed
    layers:
      - {name: per-user, algorithm: fixed_window, limit: 40, window: 1h, dimension: user}
  - name: three
    on_redis_failure: closed
    layers:
      - {name: edge, algorithm: fixed_window, limit: 30, window: 1h, dimension: global}
      - {name: per-user, algorithm: fixed_window, limit: 1000, window: 1h, dimension: user}
      - {name: monthly, algorithm: quota, limit: 1000, period: month, dimension: user}
`

// TestServeClusterDelNodeLeftRunning: a primary whose slots were all
// resharded away and that was removed with redis-cli --cluster del-node,
// but left running, answers CLUSTER SLOTS with an empty map (del-node
// resets it). go-redis reloaded its slot map from it for up to a minute
// (it picks a known node at random): an outside walk saw /readyz alternate
// 200 and 503 "no primary in the slot map" for 35-60 s, degraded answers,
// CLUSTERDOWN from the removed node, and split decisions that kept the
// per-user and monthly charges of denied requests (their releases
// failed). Now the slot map is never replaced by one covering fewer slots
// than another node's: every /readyz is 200, every decision central, and
// the counts exact.
func TestServeClusterDelNodeLeftRunning(t *testing.T) {
	c := redistest.StartCluster(t)
	n4 := c.AddPrimary(t)
	redistest.Reshard(t, c.Addrs[0], c.Nodes[0], n4, 100)

	cfg := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(cfg, []byte(delNodeConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	svc := startService(t, "--redis", "redis-cluster://"+strings.Join(c.Addrs, ","), "--config", cfg,
		"--decision-timeout", "2s", "--prefix", fmt.Sprintf("dn%d", time.Now().UnixNano()))
	readyz := func() (int, string) {
		t.Helper()
		resp, err := http.Get(svc.url + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	admin := c.Client(t)
	ctx := context.Background()
	primary := func(tag string) string {
		t.Helper()
		m, err := admin.MasterForKey(ctx, tag)
		if err != nil {
			t.Fatal(err)
		}
		return m.Options().Addr
	}
	// serve knows the fourth primary: a decision on it, and its breaker
	// listed.
	onN4 := ""
	for i := 0; onN4 == "" && i < 10000; i++ {
		if u := fmt.Sprint("w", i); primary("{r"+u+"}") == n4.Addr {
			onN4 = u
		}
	}
	waitCentral(t, svc.url, server.CheckRequest{Policy: "one", Identity: map[string]string{"user": onN4}})
	waitUntil(t, "the fourth primary in /readyz", func() bool {
		code, body := readyz()
		return code == 200 && strings.Contains(body, n4.Addr)
	})

	redistest.Reshard(t, c.Addrs[1], n4, c.Nodes[1], 100)
	redistest.DelNode(t, c.Addrs[1], n4)
	// n4 runs on, a one-node cluster with no slot.
	//lint:ignore SA1019 CLUSTER SLOTS is what go-redis reloads its map from.
	if got, err := n4.Client(t).ClusterSlots(context.Background()).Result(); err != nil || len(got) != 0 {
		t.Fatalf("the removed node's CLUSTER SLOTS: %v, %v; want an empty map", got, err)
	}

	// A user whose slot's primary is not the global layer's, so that the
	// three-layer decisions are split over two primaries.
	admin = c.Client(t) // the original seeds only: the map after the move
	user := ""
	for i := 0; user == "" && i < 1000; i++ {
		if u := fmt.Sprint("u", i); primary("{r"+u+"}") != primary("{rglobal}") {
			user = u
		}
	}
	one := server.CheckRequest{Policy: "one", Identity: map[string]string{"user": user}}
	three := server.CheckRequest{Policy: "three", Identity: map[string]string{"user": user}}
	var allowedOne, allowedThree int
	for i := range 60 {
		if code, body := readyz(); code != 200 {
			t.Fatalf("round %d: /readyz %d %s", i, code, body)
		}
		for _, req := range []server.CheckRequest{one, three} {
			r := checkOn(t, svc.url, "/v1/check", req)
			if r.status != 200 || r.resp.Degraded || r.degraded != "" {
				t.Fatalf("round %d, policy %s: status %d, degraded %q (%s)\n%s", i, req.Policy, r.status, r.degraded, r.resp.DegradedReason, svc.Logs())
			}
			if r.resp.Allowed && req.Policy == "one" {
				allowedOne++
			} else if r.resp.Allowed {
				allowedThree++
			}
		}
	}
	if allowedOne != 40 || allowedThree != 30 {
		t.Fatalf("admitted %d of 60 on the one-layer policy (limit 40) and %d on the three-layer one (global limit 30)", allowedOne, allowedThree)
	}
	// Every denial released the user's part: per-user and monthly were
	// charged only for the 30 admitted.
	r := checkOn(t, svc.url, "/v1/check", three)
	if r.status != 200 || r.resp.Degraded || r.resp.Allowed {
		t.Fatalf("the last check: status %d, degraded %v, allowed %v", r.status, r.resp.Degraded, r.resp.Allowed)
	}
	for _, l := range r.resp.Layers {
		if l.Name != "edge" && l.Remaining != 1000-30 {
			t.Errorf("layer %s: remaining %d, want %d (charged only for the admitted)", l.Name, l.Remaining, 1000-30)
		}
	}
	if v := metricValue(t, svc.url, "floodgate_split_release_failures_total"); v != 0 {
		t.Errorf("floodgate_split_release_failures_total %v, want 0", v)
	}
}
