package main

import (
	"fmt"
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
