package config_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// TestSentinelsAtMaxclientsAreNamed reproduces the sentinelsetup walk:
// with every sentinel at its maxclients limit, serve's readiness said
// "redis: all sentinels specified in configuration are unreachable:
// write: broken pipe\nwrite: broken pipe\nwrite: broken pipe (sentinel
// ...: write: broken pipe; ...)", no word of maxclients, and raw newlines
// in its JSON and in log lines. The Follower's clients, go-redis's own
// sentinel clients (through the Follower's dialer) and the dial's error
// now name maxclients, on one line.
func TestSentinelsAtMaxclientsAreNamed(t *testing.T) {
	s := redistest.StartSentinelArgs(t, "--maxclients", "12")
	client, follow, err := config.Redis{SentinelAddrs: s.SentinelAddrs, SentinelMaster: s.MasterName}.FollowingClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	for _, a := range s.SentinelAddrs {
		redistest.FillClients(t, a)
	}
	check := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error; want the sentinels at maxclients", what)
		}
		t.Logf("%s: %v", what, err)
		if msg := err.Error(); !strings.Contains(msg, "maxclients") || strings.Contains(msg, "\n") {
			t.Errorf("%s: %q; want maxclients named, on one line", what, msg)
		}
	}

	// Before Run, go-redis asks the sentinels with clients of its own.
	start := time.Now()
	ctx := context.Background()
	check("Ping before Run", client.Ping(ctx).Err())

	// Its failures and those of Run's own clients
	// (TestRunNamesMaxclients).
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); follow.Run(rctx, nil) }()
	t.Cleanup(func() { stop(); <-done })
	<-follow.Asked()
	nodes := follow.NodeErrors(start)
	if len(nodes) != len(s.SentinelAddrs) {
		t.Fatalf("NodeErrors: %v; want one for each of the %d sentinels", nodes, len(s.SentinelAddrs))
	}
	for _, e := range nodes {
		check("NodeErrors", e)
	}

	// What serve's /readyz answers.
	ready := server.RedisReadyWith(client, "", server.ReadyOptions{Nodes: follow})
	check("readiness", ready(ctx))
}
