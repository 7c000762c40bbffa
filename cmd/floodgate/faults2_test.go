package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// readyz returns /readyz's status and body.
func readyz(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestServeFailureModePerPolicyAndLiveInstances reproduces F4: during a
// Redis outage the built-in login policy used to be decided by local
// counting (one --fallback for every policy), and each instance admitted
// the full limit (--instances 1). Now login is on_redis_failure: closed,
// and the two live instances, seen through their heartbeats, each admit
// half of a local policy's limit.
func TestServeFailureModePerPolicyAndLiveInstances(t *testing.T) {
	rs := redistest.Start(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "floodgate.yaml")
	cfg := e2eConfig + `  - name: login
    on_redis_failure: closed
    layers:
      - {name: per-account, algorithm: sliding_log, limit: 5, window: 15m, dimension: account}
`
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("modes%d", time.Now().UnixNano())
	args := []string{"--redis", "redis://" + rs.Addr + "/0", "--config", cfgPath, "--prefix", prefix}
	a := startService(t, args...)
	b := startService(t, args...)
	waitUntil(t, "both instances counting two live instances", func() bool {
		return metricValue(t, a.url, "floodgate_instances_live") == 2 && metricValue(t, b.url, "floodgate_instances_live") == 2
	})
	login := server.CheckRequest{Policy: "login", Identity: map[string]string{"account": "alice"}}
	waitCentral(t, a.url, login)
	rs.Kill()
	c := checkOn(t, a.url, "/v1/check", login)
	if c.status != 200 || c.resp.Allowed || c.resp.FailureMode != "closed" || !strings.HasPrefix(c.degraded, "closed;") {
		t.Fatalf("login with Redis down: %d %+v header %q; want denied by the closed failure mode", c.status, c.resp, c.degraded)
	}
	admitted := 0
	for i := range 60 {
		c := checkOn(t, a.url, "/v1/check", server.CheckRequest{Policy: "fifty", Identity: map[string]string{"user": "bob"}})
		if c.status != 200 || c.resp.FailureMode != "local" {
			t.Fatalf("check %d with Redis down: %d %+v", i, c.status, c.resp)
		}
		if c.resp.Limit != 25 {
			t.Fatalf("local limit %d with 2 live instances, want 50/2 = 25", c.resp.Limit)
		}
		if c.resp.Allowed {
			admitted++
		}
	}
	if admitted != 25 {
		t.Fatalf("instance admitted %d of 60 in local mode, want 25", admitted)
	}
}

// TestServeFallbackFactorWidens: --fallback-factor widens the local
// fallback's limits (SPEC: "fails open to a local in-memory limiter with a
// configurable, wider limit"); serve had no way to, only --instances to
// narrow them.
func TestServeFallbackFactorWidens(t *testing.T) {
	rs := redistest.Start(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "floodgate.yaml")
	if err := os.WriteFile(cfgPath, []byte(e2eConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--config", cfgPath,
		"--prefix", fmt.Sprintf("factor%d", time.Now().UnixNano()), "--fallback-factor", "2.5")
	bob := server.CheckRequest{Policy: "fifty", Identity: map[string]string{"user": "bob"}}
	waitCentral(t, svc.url, bob)
	rs.Kill()
	c := checkOn(t, svc.url, "/v1/check", bob)
	if c.status != 200 || c.resp.FailureMode != "local" || c.resp.Limit != 125 {
		t.Fatalf("fifty with Redis down and --fallback-factor 2.5: %d %+v; want the local limit 50 × 2.5 = 125", c.status, c.resp)
	}
}

// TestServeReadyzTellsTheTruth reproduces F5: /readyz was one PING and
// stayed 200 with cluster_state:fail and every breaker open. Now it asks
// every primary of the cluster and reports the breakers.
func TestServeReadyzTellsTheTruth(t *testing.T) {
	c := redistest.StartCluster(t)
	svc := startService(t, "--redis", "redis-cluster://"+strings.Join(c.Addrs, ","), "--prefix", fmt.Sprintf("ready%d", time.Now().UnixNano()))
	if code, body := readyz(t, svc.url); code != 200 {
		t.Fatalf("healthy cluster: readyz %d %s", code, body)
	}
	c.Nodes[0].Kill()
	// cluster-node-timeout is 5s: the other primaries then say
	// cluster_state:fail.
	waitUntil(t, "readyz 503 naming cluster_state", func() bool {
		code, body := readyz(t, svc.url)
		return code == 503 && strings.Contains(body, "cluster_state:fail")
	})
	code, body := readyz(t, svc.url)
	var r struct {
		Status   string
		Breakers map[string]string
	}
	_ = json.Unmarshal([]byte(body), &r)
	if code != 503 || r.Status != "degraded" || r.Breakers == nil {
		t.Fatalf("readyz with a primary lost: %d %s", code, body)
	}
}

// TestServeFleetCountIgnoresInstanceClocks: an instance whose clock runs
// 10 s ahead, undisciplined (--clock-sync=false), counts and is counted
// like the others: the beats are scored by Redis's TIME. Scored by the
// instance's clock, each of its beats dropped the other instance from the
// set as silent for longer than the TTL (outside walk: counts of 1 and 2
// among three instances, 73 admitted during an outage against 44). The
// divisor the fallback uses is exported as floodgate_fallback_instances.
func TestServeFleetCountIgnoresInstanceClocks(t *testing.T) {
	rs := redistest.Start(t)
	prefix := fmt.Sprintf("fleetclock%d", time.Now().UnixNano())
	args := []string{"--redis", "redis://" + rs.Addr + "/0", "--prefix", prefix}
	a := startService(t, args...)
	b := startService(t, append(args, "--clock-offset", "10s", "--clock-sync=false", "--instances", "3")...)
	waitUntil(t, "both instances counting two live instances", func() bool {
		return metricValue(t, a.url, "floodgate_instances_live") == 2 && metricValue(t, b.url, "floodgate_instances_live") == 2
	})
	// Three more beats: the count stays 2 on both.
	time.Sleep(3 * heartbeatInterval)
	for _, svc := range []*service{a, b} {
		if n := metricValue(t, svc.url, "floodgate_instances_live"); n != 2 {
			t.Errorf("%s: floodgate_instances_live %v after three beats, want 2", svc.url, n)
		}
	}
	if n := metricValue(t, a.url, "floodgate_fallback_instances"); n != 2 {
		t.Errorf("floodgate_fallback_instances %v with 2 live, want 2", n)
	}
	if n := metricValue(t, b.url, "floodgate_fallback_instances"); n != 3 {
		t.Errorf("floodgate_fallback_instances %v with 2 live and --instances 3, want 3", n)
	}
}

// TestServeReadyzNamesItsHeartbeat: /readyz reports the id the instance
// heartbeats into <prefix>:instances under, so that floodgate doctor can
// tell which instances are in the set (a walk's instance under another
// prefix was only counted: "3 heartbeats for 4 instances given").
func TestServeReadyzNamesItsHeartbeat(t *testing.T) {
	rs := redistest.Start(t)
	prefix := fmt.Sprintf("hbid%d", time.Now().UnixNano())
	svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--prefix", prefix)
	code, body := readyz(t, svc.url)
	var r struct {
		HeartbeatID string `json:"heartbeat_id"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || code != 200 || r.HeartbeatID == "" {
		t.Fatalf("readyz %d %s: want a heartbeat_id (%v)", code, body, err)
	}
	waitUntil(t, "its heartbeat in "+prefix+":instances", func() bool {
		_, err := rs.Client(t).ZScore(t.Context(), prefix+":instances", r.HeartbeatID).Result()
		return err == nil
	})
}

// TestServeFleetCountHeldAfterRedisReturns: after Redis has been away,
// the instance count held before is kept for one TTL of beats, since a
// Redis back empty is refilled by the instances' beats one by one. Here
// the other instance is gone for good, so the count comes down to 1, but
// only after the hold; it fell at the first beat before, and an outside
// walk whose Redis failed again within those seconds saw three instances
// each admit by counts of 1, 2 and 3 (55 against a limit of 30).
func TestServeFleetCountHeldAfterRedisReturns(t *testing.T) {
	rs := redistest.Start(t)
	prefix := fmt.Sprintf("fleethold%d", time.Now().UnixNano())
	args := []string{"--redis", "redis://" + rs.Addr + "/0", "--prefix", prefix}
	a := startService(t, args...)
	b := startService(t, args...)
	waitUntil(t, "two live instances", func() bool { return metricValue(t, a.url, "floodgate_instances_live") == 2 })
	rs.Kill()
	if err := b.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * heartbeatInterval) // a beat or two fail
	rs.Restart(t)
	waitUntil(t, "a beat after Redis returned", func() bool { return metricValue(t, a.url, "floodgate_instances_live") == 1 })
	if n := metricValue(t, a.url, "floodgate_fallback_instances"); n != 2 {
		t.Fatalf("floodgate_fallback_instances %v at the first beat after Redis returned, want the 2 held", n)
	}
	waitUntil(t, "the count down to 1 after the hold", func() bool { return metricValue(t, a.url, "floodgate_fallback_instances") == 1 })
}

// TestServeFleetCountHeldAfterTheSetIsLost: a Redis that loses the
// instance set between two beats (restarted at once by a supervisor; here
// the set deleted) fails no beat, yet the instances re-register one at a
// time: the count held before is kept for one TTL of beats all the same.
// An outside re-walk restarting Redis that fast saw the hold skipped and
// 54 admitted during the next outage against a limit of 30.
func TestServeFleetCountHeldAfterTheSetIsLost(t *testing.T) {
	rs := redistest.Start(t)
	prefix := fmt.Sprintf("fleetlost%d", time.Now().UnixNano())
	args := []string{"--redis", "redis://" + rs.Addr + "/0", "--prefix", prefix}
	a := startService(t, args...)
	b := startService(t, args...)
	waitUntil(t, "two live instances", func() bool { return metricValue(t, a.url, "floodgate_instances_live") == 2 })
	if err := b.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := rs.Client(t).Del(context.Background(), prefix+":instances").Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a beat after the set was lost", func() bool { return metricValue(t, a.url, "floodgate_instances_live") == 1 })
	if n := metricValue(t, a.url, "floodgate_fallback_instances"); n != 2 {
		t.Fatalf("floodgate_fallback_instances %v at the first beat after the set was lost, want the 2 held", n)
	}
	waitUntil(t, "the count down to 1 after the hold", func() bool { return metricValue(t, a.url, "floodgate_fallback_instances") == 1 })
}

// TestServeReadyzSentinelFailover: behind Sentinel, readiness asks the
// primary's ROLE and is 200 again once the client follows a failover; the
// move to the primary most sentinels name is logged (sentinelfollow,
// whose own test shows it beating the leader sentinel's late switch).
func TestServeReadyzSentinelFailover(t *testing.T) {
	s := redistest.StartSentinel(t)
	svc := startService(t, "--redis-sentinel", strings.Join(s.SentinelAddrs, ","), "--redis-master", s.MasterName,
		"--prefix", fmt.Sprintf("sent%d", time.Now().UnixNano()))
	if code, body := readyz(t, svc.url); code != 200 {
		t.Fatalf("readyz before failover: %d %s", code, body)
	}
	s.Failover(t)
	waitUntil(t, "readyz 200 and central decisions after the failover", func() bool {
		code, _ := readyz(t, svc.url)
		c := checkOn(t, svc.url, "/v1/check", server.CheckRequest{Policy: "api", Identity: map[string]string{"user": "u"}})
		return code == 200 && c.status == 200 && !c.resp.Degraded
	})
	waitUntil(t, "the move logged", func() bool {
		return strings.Contains(svc.Logs(), "the sentinels name a new Redis primary") && strings.Contains(svc.Logs(), s.Primary.Addr)
	})
}

// TestServeClockSkewTwoInstances: two instances whose clocks are 1 s apart
// (--clock-offset) share a fixed window of 2 s. Stamped with their own
// clocks (--clock-sync=false, as every instance did before) they sit in
// different windows near a boundary: the one on time fills its window and
// the one ahead opens the next, a second full limit. Disciplined to
// Redis's TIME (the default) they admit exactly the limit: 0 extra.
func TestServeClockSkewTwoInstances(t *testing.T) {
	rs := redistest.Start(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "floodgate.yaml")
	const limit = 5
	cfg := fmt.Sprintf("version: \"1\"\npolicies:\n  - name: edge\n    layers:\n      - {name: w, algorithm: fixed_window, limit: %d, window: 2s, dimension: user}\n", limit)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(sync bool) int {
		prefix := fmt.Sprintf("skew%d", time.Now().UnixNano())
		common := []string{"--redis", "redis://" + rs.Addr + "/0", "--config", cfgPath, "--prefix", prefix, fmt.Sprintf("--clock-sync=%v", sync),
			"--fallback-budget", "5s", "--decision-timeout", "10s"} // no fault here: never degrade on a busy machine
		a := startService(t, append(common, "--clock-offset", "1s")...)
		b := startService(t, common...)
		defer a.stop(t)
		defer b.stop(t)
		// Wait for the middle of a real window's second half: instance a
		// (1s ahead) is then in the next window, b in this one.
		for {
			ms := time.Now().UnixMilli() % 2000
			if ms >= 1200 && ms < 1300 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		// b (on time) fills the window first, then a (1s ahead) asks.
		admitted := 0
		ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
		defer cancel()
		for _, svc := range []*service{b, a} {
			for i := 0; i < 2*limit && ctx.Err() == nil; i++ {
				c := checkOn(t, svc.url, "/v1/check", server.CheckRequest{Policy: "edge", Identity: map[string]string{"user": "u"}})
				if c.status != 200 || c.resp.Degraded {
					t.Fatalf("check: %d %+v", c.status, c.resp)
				}
				if c.resp.Allowed {
					admitted++
				}
			}
		}
		if ctx.Err() != nil {
			t.Skip("machine too slow to send the checks within one window edge")
		}
		return admitted
	}
	unsynced := run(false)
	t.Logf("1s skew, local clocks: %d admitted for a limit of %d", unsynced, limit)
	synced := run(true)
	t.Logf("1s skew, disciplined to Redis TIME: %d admitted for a limit of %d", synced, limit)
	if synced != limit {
		t.Fatalf("with clock discipline %d admitted, want exactly %d (0 extra)", synced, limit)
	}
	if unsynced <= limit {
		t.Fatalf("without discipline %d admitted: the test no longer shows the fault it guards against", unsynced)
	}
}

// TestServeBreakerLogWithRedisDownAtStart: a serve started while Redis is
// down does not log "circuit breaker closed: deciding with Redis" (the
// breaker's state when it is made, which says nothing of Redis); it logs
// the breaker opening once checks fail, and closing again, with that
// line, once Redis is back.
func TestServeBreakerLogWithRedisDownAtStart(t *testing.T) {
	const closedMsg = "circuit breaker closed: deciding with Redis"
	rs := redistest.Start(t)
	rs.Kill()
	svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--prefix", fmt.Sprintf("brklog%d", time.Now().UnixNano()))
	check := func() {
		post(t, svc.url+"/v1/check", server.CheckRequest{Policy: "api", Identity: map[string]string{"user": "u"}})
	}
	waitUntil(t, "the breaker to open", func() bool {
		check()
		_, ok := svc.Logged("circuit breaker open: decisions taken by each policy's failure mode")
		return ok
	})
	if _, ok := svc.Logged(closedMsg); ok {
		t.Fatalf("%q logged with Redis down since the start:\n%s", closedMsg, svc.Logs())
	}
	rs.Restart(t)
	waitUntil(t, "the breaker to close once Redis is back", func() bool {
		check()
		_, ok := svc.Logged(closedMsg)
		return ok
	})
	svc.stop(t)
}
