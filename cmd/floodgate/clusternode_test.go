package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// TestServeLogsClusterNodeAsSingleRedis: serve given one node of a Redis
// Cluster with --redis (as a single Redis) had most decisions answered
// MOVED and taken by the fallback, its log saying only that the circuit
// breaker opened (an outside login-guard walk). Such a decision is now
// logged as an error that says the address is a Cluster node and to use
// --redis-cluster; given the Cluster as one, nothing of the kind is.
func TestServeLogsClusterNodeAsSingleRedis(t *testing.T) {
	c := redistest.StartCluster(t)
	const logged = "a Redis Cluster node refused a call (MOVED, ASK or CROSSSLOT)"
	decide := func(svc *service) (degraded int) {
		for i := range 20 {
			r := checkOn(t, svc.url, "/v1/check", server.CheckRequest{Policy: "api", Identity: map[string]string{"user": "u" + strconv.Itoa(i)}})
			if r.status != 200 {
				t.Fatalf("check %d: status %d", i, r.status)
			}
			if r.resp.Degraded {
				degraded++
			}
		}
		return degraded
	}
	svc := startService(t, "--redis", "redis://"+c.Addrs[0], "--prefix", "cn")
	if n := decide(svc); n == 0 {
		t.Fatal("no decision of 20 was degraded on a Cluster node given as a single Redis: the test no longer provokes MOVED")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(svc.Logs(), logged) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log:\n%s", logged, svc.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(svc.Logs(), "--redis-cluster host:port") {
		t.Fatalf("the log does not say to use --redis-cluster:\n%s", svc.Logs())
	}
	svc = startService(t, "--redis", "redis-cluster://"+strings.Join(c.Addrs, ","), "--prefix", "cn")
	if n := decide(svc); n != 0 {
		t.Fatalf("%d of 20 decisions degraded on the Cluster given as one", n)
	}
	if strings.Contains(svc.Logs(), logged) {
		t.Fatalf("the Cluster given as one logged a redirect:\n%s", svc.Logs())
	}
}
