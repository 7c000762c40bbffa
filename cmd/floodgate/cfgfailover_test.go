package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/proctest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// failoverDoc is a versioned policies document for the failover tests.
func failoverDoc(version string) string {
	return fmt.Sprintf("version: %q\npolicies:\n  - name: p\n    layers:\n      - {name: u, algorithm: fixed_window, limit: 5, window: 1m, dimension: user}\n", version)
}

// startFailover sends SENTINEL FAILOVER for s's primary to its first
// sentinel and returns at once, as an operator's redis-cli does.
func startFailover(t *testing.T, s *redistest.Sentinel) {
	t.Helper()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.SentinelAddrs[0]})
	defer sc.Close()
	if err := sc.Failover(context.Background(), s.MasterName).Err(); err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
}

// waitSentinelsName waits until a majority of s's sentinels name addr the
// primary, and returns when they first did (to the 20 ms poll).
func waitSentinelsName(t *testing.T, s *redistest.Sentinel, addr string) time.Time {
	t.Helper()
	clients := make([]*redis.SentinelClient, len(s.SentinelAddrs))
	for i, a := range s.SentinelAddrs {
		clients[i] = redis.NewSentinelClient(&redis.Options{Addr: a})
		defer clients[i].Close()
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		n := 0
		for _, c := range clients {
			if v, err := c.GetMasterAddrByName(context.Background(), s.MasterName).Result(); err == nil && len(v) == 2 && v[0]+":"+v[1] == addr {
				n++
			}
		}
		if 2*n > len(clients) {
			return time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the sentinels do not name %s the primary after 30s", addr)
	return time.Time{}
}

// waitDemoted waits until the server at addr is a replica with its link
// up: the failover is over, and what it held that its primary did not is
// gone.
func waitDemoted(t *testing.T, addr string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	deadline := time.Now().Add(40 * time.Second)
	for time.Now().Before(deadline) {
		info, err := c.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up") {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s was not demoted to a linked replica within 40s", addr)
}

// TestConfigPushDuringFailoverIsConfirmedOrFails: a config push made a
// moment after SENTINEL FAILOVER either holds on the new primary once
// the failover is over, or exits non-zero without printing "published".
// An outside walk (cfgfail) saw 3 of 3 such pushes print published
// version "42" and exit 0, both instances apply it, and 7 to 10 s later
// the new primary hold 41 and the instances roll back: the push had gone
// to the old primary, whose write the promoted replica never got.
func TestConfigPushDuringFailoverIsConfirmedOrFails(t *testing.T) {
	s := redistest.StartSentinel(t)
	prefix := fmt.Sprintf("cfgfo%d", time.Now().UnixNano())
	url := "redis-sentinel://" + strings.Join(s.SentinelAddrs, ",") + "/0?master=" + s.MasterName
	dir := t.TempDir()
	write := func(version string) string {
		file := filepath.Join(dir, "cfg"+version+".yaml")
		if err := os.WriteFile(file, []byte(failoverDoc(version)), 0o600); err != nil {
			t.Fatal(err)
		}
		return file
	}
	if code, out, errOut := cli("config", "push", write("41"), "--redis", url, "--prefix", prefix); code != 0 || !strings.Contains(out, `published version "41"`) {
		t.Fatalf("push of 41 before the failover: %d %s %s", code, out, errOut)
	}
	oldPrimary, newPrimary := s.Primary.Addr, s.Replica.Addr
	startFailover(t, s)
	time.Sleep(300 * time.Millisecond)
	code, out, errOut := cli("config", "push", write("42"), "--redis", url, "--prefix", prefix)
	t.Logf("push of 42 right after SENTINEL FAILOVER: exit %d\n%s%s", code, out, errOut)

	waitSentinelsName(t, s, newPrimary)
	waitDemoted(t, oldPrimary)
	c := redis.NewClient(&redis.Options{Addr: newPrimary})
	defer c.Close()
	doc, err := c.Get(context.Background(), prefix+":config").Result()
	if err != nil {
		t.Fatalf("reading the document on the new primary: %v", err)
	}
	held := `version: "42"`
	switch {
	case code == 0 && !strings.Contains(doc, held):
		t.Fatalf("push exited 0 (%s), but once the failover was over the new primary %s holds:\n%s", strings.TrimSpace(out), newPrimary, doc)
	case code == 0 && !strings.Contains(out, `published version "42"`):
		t.Fatalf("push exited 0 without saying it published: %s %s", out, errOut)
	case code != 0 && (strings.Contains(out+errOut, "published") || !strings.Contains(errOut, "run the push again")):
		t.Fatalf("push failed (%d) but says: %s %s; want no \"published\" and a \"run the push again\"", code, out, errOut)
	}
	if code != 0 && (strings.Contains(errOut, "use of closed network connection") || strings.Contains(errOut, ": EOF")) &&
		!strings.Contains(errOut, "the connection to the primary closed during the confirmation, as happens when a failover demotes it") {
		// The demotion closed the push's connection: the cause first
		// (an outside walk, rwfault, saw go-redis's error alone).
		t.Errorf("push failed on a closed connection without saying why first: %s", errOut)
	}
	if code != 0 {
		// Run again once the failover is over, it goes through.
		if code, out, errOut := cli("config", "push", write("42"), "--redis", url, "--prefix", prefix); code != 0 || !strings.Contains(out, `published version "42"`) {
			t.Fatalf("push of 42 again after the failover: %d %s %s", code, out, errOut)
		}
	}
}

// TestServeRereadsConfigOnPrimaryMove: an instance following Sentinel
// reads the configuration from the new primary as soon as it moves to
// it, and logs an older document found there as a push the failover
// lost. The old primary holds version 42, which the instance runs; the
// replica, promoted, holds 41 (written on it directly: what a push the
// old primary took in a failover's first moments leaves). An outside
// walk (cfgfail) saw instances run the lost 42 for 7 to 10 s after the
// switch, until their poll, and log the step back as "a forced rollback".
func TestServeRereadsConfigOnPrimaryMove(t *testing.T) {
	s := redistest.StartSentinel(t)
	prefix := fmt.Sprintf("cfgmv%d", time.Now().UnixNano())
	key := prefix + ":config"
	ctx := context.Background()
	primary := redis.NewClient(&redis.Options{Addr: s.Primary.Addr})
	defer primary.Close()
	replica := redis.NewClient(&redis.Options{Addr: s.Replica.Addr})
	defer replica.Close()
	if err := primary.Set(ctx, key, failoverDoc("42"), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := primary.Wait(ctx, 1, 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	svc := startService(t, "--prefix", prefix, "--redis-sentinel", strings.Join(s.SentinelAddrs, ","), "--redis-master", s.MasterName, "--config-from-redis")
	defer svc.stop(t)
	if rec, ok := svc.Logged("floodgate listening"); ok && rec["config_version"] != "42" {
		t.Logf("started with %v", rec)
	}
	if err := replica.ConfigSet(ctx, "replica-read-only", "no").Err(); err != nil {
		t.Fatal(err)
	}
	if err := replica.Set(ctx, key, failoverDoc("41"), 0).Err(); err != nil {
		t.Fatal(err)
	}
	newPrimary := s.Replica.Addr
	startFailover(t, s)
	switched := waitSentinelsName(t, s, newPrimary)
	const regressed = "configuration applied: the version is not newer than the previous one"
	var rec proctest.Record
	for rec == nil && time.Since(switched) < 15*time.Second {
		if r, ok := svc.Logged(regressed); ok && r["config_version"] == "41" {
			rec = r
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	seen := time.Since(switched)
	if rec == nil {
		t.Fatalf("the instance did not apply the new primary's version 41 within 15s of the switch:\n%s", svc.Logs())
	}
	if seen > 2*time.Second {
		t.Errorf("the instance applied the new primary's version 41 %v after the sentinels named it; want within 2s", seen)
	}
	if cause := rec["likely_cause"]; !strings.Contains(cause, "a push lost in a Redis failover") {
		t.Errorf("likely_cause %q; want it to name a push lost in a failover", cause)
	}
	t.Logf("applied %v after the switch: %v", seen.Round(time.Millisecond), rec)
}

// TestServeRereadsTiersOnPrimaryMove: an instance following Sentinel
// asks the new primary for an identity's tier at its first decision after
// moving to it, instead of using the tier it cached from the old one for
// up to 5 s. The old primary assigns u to pro; the replica, promoted,
// has u on free (written on it directly: what an assignment the old
// primary took in a failover's first moments leaves).
func TestServeRereadsTiersOnPrimaryMove(t *testing.T) {
	s := redistest.StartSentinel(t)
	prefix := fmt.Sprintf("tiermv%d", time.Now().UnixNano())
	key := prefix + ":tiers"
	ctx := context.Background()
	primary := redis.NewClient(&redis.Options{Addr: s.Primary.Addr})
	defer primary.Close()
	replica := redis.NewClient(&redis.Options{Addr: s.Replica.Addr})
	defer replica.Close()
	if err := primary.HSet(ctx, key, "user=u", "pro").Err(); err != nil {
		t.Fatal(err)
	}
	if err := primary.Wait(ctx, 1, 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "tiers.yaml")
	const doc = `version: "1"
tiers: [free, pro]
policies:
  - name: api
    tier_dimension: user
    layers:
      - {name: per-user, algorithm: fixed_window, limit: 1000, window: 1h, dimension: user, tiers: {pro: {limit: 2000}}}
`
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	svc := startService(t, "--prefix", prefix, "--redis-sentinel", strings.Join(s.SentinelAddrs, ","), "--redis-master", s.MasterName, "--config", cfg)
	defer svc.stop(t)
	req := map[string]any{"policy": "api", "identity": map[string]string{"user": "u"}}
	if code, cr := post(t, svc.url+"/v1/check", req); code != 200 || cr.Tier != "pro" {
		t.Fatalf("before the failover: %d, tier %q; want 200 and pro", code, cr.Tier)
	}
	if err := replica.ConfigSet(ctx, "replica-read-only", "no").Err(); err != nil {
		t.Fatal(err)
	}
	if err := replica.HSet(ctx, key, "user=u", "free").Err(); err != nil {
		t.Fatal(err)
	}
	newPrimary := s.Replica.Addr
	startFailover(t, s)
	switched := waitSentinelsName(t, s, newPrimary)
	for {
		code, cr := post(t, svc.url+"/v1/check", req)
		if code == 200 && cr.Tier == "free" {
			break
		}
		if time.Since(switched) > 15*time.Second {
			t.Fatalf("the instance still answers %d, tier %q 15s after the switch:\n%s", code, cr.Tier, svc.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	seen := time.Since(switched)
	if seen > 2*time.Second {
		t.Errorf("the instance used the new primary's tier %v after the sentinels named it; want within 2s", seen)
	}
	t.Logf("tier free %v after the switch", seen.Round(time.Millisecond))
}
