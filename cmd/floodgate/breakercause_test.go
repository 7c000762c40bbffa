package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// TestServeBreakerLogNamesItsCause: serve's "circuit breaker open" line
// carries the error that opened the breaker, a probe failing for another
// reason while it stays open is logged, and /readyz's probe timing out
// adds the error reply the same Redis gave its breaker's probes just
// before. An outside walk through Redis restarts found the cause
// (LOADING, NOAUTH) in none of the breaker's lines, and /readyz
// alternating between LOADING and a bare "i/o timeout". Here Redis runs
// out of memory (maxmemory 1: OOM), then pauses writes (the probes time
// out), then recovers.
func TestServeBreakerLogNamesItsCause(t *testing.T) {
	const (
		openMsg   = "circuit breaker open: decisions taken by each policy's failure mode"
		probeMsg  = "circuit breaker open: Redis fails its health probe for another reason"
		closedMsg = "circuit breaker closed: deciding with Redis"
	)
	rs := redistest.Start(t)
	admin := rs.Client(t)
	ctx := context.Background()
	// The breaker opens on Redis's OOM replies, not on a call past its
	// budget: under load the default 50 ms ended one, and the breaker
	// opened on its i/o timeout. With writes paused the probes (bounded by
	// the budget and --redis-timeout) still time out, after 1 s.
	svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--prefix", fmt.Sprintf("brkcause%d", time.Now().UnixNano()),
		"--fallback-budget", "1s", "--decision-timeout", "10s")
	check := func() {
		post(t, svc.url+"/v1/check", server.CheckRequest{Policy: "api", Identity: map[string]string{"user": "u"}})
	}
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "1"}} {
		if err := admin.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = admin.ConfigSet(ctx, "maxmemory", "0").Err() })
	var open map[string]string
	waitUntil(t, "the breaker to open", func() bool {
		check()
		rec, ok := svc.Logged(openMsg)
		open = rec
		return ok
	})
	if !strings.Contains(open["error"], "OOM command not allowed") {
		t.Fatalf("%q logged with error %q, want Redis's OOM:\n%s", openMsg, open["error"], svc.Logs())
	}
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "60000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Do(ctx, "CLIENT", "UNPAUSE").Err() })
	var probe map[string]string
	waitUntil(t, "a probe's timeout logged", func() bool {
		rec, ok := svc.Logged(probeMsg)
		probe = rec
		return ok
	})
	if e := probe["error"]; probe["before"] != "OOM" || !strings.Contains(e, "timeout") && !strings.Contains(e, "deadline exceeded") {
		t.Fatalf("%q logged with error %q, before %q; want a timeout, before OOM:\n%s", probeMsg, probe["error"], probe["before"], svc.Logs())
	}
	if _, body := readyz(t, svc.url); !strings.Contains(body, "(its last error reply, ") || !strings.Contains(body, "ago: OOM command not allowed") {
		t.Fatalf("/readyz with writes paused after OOM: %s; want the timeout, then the OOM reply", body)
	}
	if err := admin.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the breaker to close", func() bool {
		_, ok := svc.Logged(closedMsg)
		return ok
	})
	if n := strings.Count(svc.Logs(), probeMsg); n > 3 {
		t.Fatalf("%d probe lines for one change of reason:\n%s", n, svc.Logs())
	}
	svc.stop(t)
}
