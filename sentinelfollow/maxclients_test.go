package sentinelfollow_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/sentinelfollow"
)

// TestRunNamesMaxclients: with every sentinel at its maxclients limit
// (which closes each new connection as it accepts it), the failures of
// Run's questions that NodeErrors gives (and readiness quotes) said
// "write: broken pipe" (the sentinelsetup walk); Run's clients carry
// connsetup's hook now, and name maxclients.
func TestRunNamesMaxclients(t *testing.T) {
	s := redistest.StartSentinelArgs(t, "--maxclients", "12")
	for _, a := range s.SentinelAddrs {
		redistest.FillClients(t, a)
	}
	o := &redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs, ContextTimeoutEnabled: true}
	f := sentinelfollow.New(o)
	start := time.Now()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx, nil) }()
	t.Cleanup(func() { stop(); <-done })
	<-f.Asked()
	errs := f.NodeErrors(start)
	if len(errs) != len(s.SentinelAddrs) {
		t.Fatalf("NodeErrors: %v; want one for each of the %d sentinels", errs, len(s.SentinelAddrs))
	}
	for _, err := range errs {
		if msg := err.Error(); !strings.Contains(msg, "maxclients") {
			t.Errorf("NodeErrors: %q; want maxclients named", msg)
		}
	}
}
