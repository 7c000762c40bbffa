package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// TestServeClusterCoalesce: serve on a real three-primary Redis Cluster,
// with per-primary coalescing (the default) and with
// --redis-coalesce=false, decides the built-in three-layer api policy (a
// global edge layer beside two per-user layers, so in two slots) for 130
// concurrent requests of one user: exactly the per-user limit of 100 is
// admitted, all or nothing, whichever way the decisions travel.
func TestServeClusterCoalesce(t *testing.T) {
	c := redistest.StartCluster(t)
	for _, flag := range []string{"--redis-coalesce=true", "--redis-coalesce=false"} {
		t.Run(flag, func(t *testing.T) {
			svc := startService(t, "--redis", "redis-cluster://"+strings.Join(c.Addrs, ","), flag,
				"--fallback", "off", "--decision-timeout", "5s", "--prefix", fmt.Sprintf("co%d", time.Now().UnixNano()))
			waitCentral(t, svc.url, server.CheckRequest{Policy: "api", Identity: map[string]string{"user": "warm"}})
			req := server.CheckRequest{Policy: "api", Identity: map[string]string{"user": "burst"}}
			clearOfMinuteEdge()
			var allowed, failed atomic.Int64
			var wg sync.WaitGroup
			for range 130 {
				wg.Go(func() {
					r := checkOn(t, svc.url, "/v1/check", req)
					switch {
					case r.status != 200 || r.resp.Degraded:
						failed.Add(1)
					case r.resp.Allowed:
						allowed.Add(1)
					}
				})
			}
			wg.Wait()
			if n := failed.Load(); n > 0 {
				t.Fatalf("%d of 130 checks failed or were degraded", n)
			}
			if got := allowed.Load(); got != 100 {
				t.Fatalf("%d of 130 admitted, want exactly the per-user limit of 100", got)
			}
		})
	}
}

// TestServeClusterQuotaOnePrimaryDown: on a Redis Cluster with one
// primary down (and the others serving: cluster-require-full-coverage
// no), quota operations of identities on the healthy primaries keep
// working. They went through one breaker for the whole cluster, so the
// failures of the dead primary's identities opened it and every quota and
// lease call answered 503 (21–43 s in an outside walk of a failover); they
// now go through the breaker of the identity's primary, as decisions do.
func TestServeClusterQuotaOnePrimaryDown(t *testing.T) {
	c := redistest.StartCluster(t)
	ctx := context.Background()
	for _, n := range c.Nodes {
		if err := n.Client(t).ConfigSet(ctx, "cluster-require-full-coverage", "no").Err(); err != nil {
			t.Fatal(err)
		}
	}
	prefix := fmt.Sprintf("qd%d", time.Now().UnixNano())
	svc := startService(t, "--redis", "redis-cluster://"+strings.Join(c.Addrs, ","), "--prefix", prefix)
	postRaw := func(url, body string) (int, string) {
		t.Helper()
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	status := func(key string) int {
		t.Helper()
		code, _ := postRaw(svc.url+"/v1/quota/status", fmt.Sprintf(`{"quota":"llm-tokens","identity":{"api_key":%q}}`, key))
		return code
	}
	reserve := func(key string) int {
		t.Helper()
		code, _ := postRaw(svc.url+"/v1/quota/reserve", fmt.Sprintf(`{"quota":"llm-tokens","identity":{"api_key":%q},"request_id":"r1","estimate":10}`, key))
		return code
	}
	// Give 30 identities a quota key, then find which primary holds each.
	for i := range 30 {
		if code := reserve(fmt.Sprint("k", i)); code != 200 {
			t.Fatalf("reserve for k%d: status %d", i, code)
		}
	}
	nodeOf := map[string]int{}
	for i, n := range c.Nodes {
		keys, err := n.Client(t).Keys(ctx, prefix+":llm-tokens:q:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			for j := range 30 {
				if strings.Contains(k, fmt.Sprintf("{rk%d}", j)) {
					nodeOf[fmt.Sprint("k", j)] = i
				}
			}
		}
	}
	var onDead, onLive string
	for key, n := range nodeOf {
		switch {
		case n == 2 && onDead == "":
			onDead = key
		case n == 0 && onLive == "":
			onLive = key
		}
	}
	if onDead == "" || onLive == "" {
		t.Fatalf("no identity on node 2 or node 0: %v", nodeOf)
	}
	c.Nodes[2].Kill()
	// The dead primary's identity fails until its breaker opens.
	for range 20 {
		if code := status(onDead); code == 200 {
			t.Fatalf("quota status of %s, on the killed primary: 200", onDead)
		}
	}
	for i := range 5 {
		if code := status(onLive); code != 200 {
			t.Fatalf("quota status %d of %s, on a healthy primary, with another primary down: status %d, want 200", i, onLive, code)
		}
	}
}

// TestServeClusterLayeredOnePrimaryDown: with one primary dead, the
// built-in api policy's decisions (a global edge layer on one primary, the
// per-user layers on the user's) of users on the dead primary fail there
// and open that primary's breaker only; users whose layers all live on
// healthy primaries stay central. The failures were blamed on the first
// layer's partition, the edge's healthy primary: its breaker opened and
// every user's decisions went to the fallback (an outside walk admitted
// 100 centrally and 100 locally per user in one minute).
func TestServeClusterLayeredOnePrimaryDown(t *testing.T) {
	c := redistest.StartCluster(t)
	ctx := context.Background()
	for _, n := range c.Nodes {
		if err := n.Client(t).ConfigSet(ctx, "cluster-require-full-coverage", "no").Err(); err != nil {
			t.Fatal(err)
		}
	}
	admin := c.Client(t)
	nodeOf := func(tag string) int {
		t.Helper()
		m, err := admin.MasterForKey(ctx, tag)
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range c.Addrs {
			if a == m.Options().Addr {
				return i
			}
		}
		t.Fatalf("no node for %s", tag)
		return -1
	}
	edge := nodeOf("{rglobal}")
	dead := (edge + 1) % 3
	live := (edge + 2) % 3
	var userDead, userLive string
	for i := 0; (userDead == "" || userLive == "") && i < 1000; i++ {
		u := fmt.Sprint("u", i)
		switch nodeOf("{r" + u + "}") {
		case dead:
			if userDead == "" {
				userDead = u
			}
		case live:
			if userLive == "" {
				userLive = u
			}
		}
	}
	svc := startService(t, "--redis", "redis-cluster://"+strings.Join(c.Addrs, ","), "--prefix", fmt.Sprintf("ld%d", time.Now().UnixNano()))
	check := func(user string) (degraded string) {
		t.Helper()
		resp, err := http.Post(svc.url+"/v1/check", "application/json", strings.NewReader(`{"policy":"api","identity":{"user":"`+user+`"}}`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("check for %s: status %d", user, resp.StatusCode)
		}
		return resp.Header.Get("X-Floodgate-Degraded")
	}
	if d := check(userLive); d != "" {
		t.Fatalf("before the kill: %s degraded (%s)", userLive, d)
	}
	c.Nodes[dead].Kill()
	for range 30 {
		check(userDead) // fails on the dead primary, then its breaker is open
	}
	if d := check(userDead); !strings.Contains(d, "breaker_open") {
		t.Fatalf("%s, on the dead primary, after 30 failures: degraded %q, want breaker_open", userDead, d)
	}
	for i := range 20 {
		if d := check(userLive); d != "" {
			t.Fatalf("check %d of %s (layers on the healthy primaries %s and %s): degraded %q, want central", i, userLive, c.Addrs[edge], c.Addrs[live], d)
		}
	}
}

// clearOfMinuteEdge waits, when the next minute is less than 3 seconds
// away, until it has begun. A burst that straddles a minute's edge is
// judged by the sliding window counter's estimate, the last window's count
// weighted by what is left of it and rounded down, which lets one more
// through than "exactly the limit" (a CI run saw 101 of 130 for a burst
// across 07:54:00).
func clearOfMinuteEdge() {
	now := time.Now()
	if next := now.Truncate(time.Minute).Add(time.Minute); next.Sub(now) < 3*time.Second {
		time.Sleep(next.Sub(now) + 100*time.Millisecond)
	}
}
