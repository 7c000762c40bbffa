package config

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/replicawait"
)

// TestSetTierWaitsForReplicas: with a replicawait.Client as Writer, an
// assignment (or its removal) is answered only once the replica has it;
// with the replica stopped, the primary stores it and SetTier's error
// wraps replicawait.ErrNotReplicated, and this instance uses the new
// tier, as the primary has it. A plain HSET was answered at once, and a
// Sentinel failover then lost it (cfgfail walk).
func TestSetTierWaitsForReplicas(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.StartReplica(t, primary)
	pc, rc := primary.Client(t), replica.Client(t)
	w, err := replicawait.New(pc, replicawait.Options{Replicas: 1, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewRedisAssignments(pc, "fg:tiers", RedisAssignmentsOptions{Writer: w, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := a.SetTier(ctx, "user", "42", "enterprise"); err != nil {
		t.Fatalf("SetTier with the replica up: %v", err)
	}
	if got, err := rc.HGet(ctx, "fg:tiers", "user=42").Result(); err != nil || got != "enterprise" {
		t.Fatalf("the replica's assignment once answered: %q, %v; want enterprise", got, err)
	}

	if err := posix.Kill(replica.Pid, posix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = posix.Kill(replica.Pid, posix.SIGCONT) }()
	for _, tier := range []string{"pro", ""} {
		err := a.SetTier(ctx, "user", "42", tier)
		if !errors.Is(err, replicawait.ErrNotReplicated) || !errors.Is(err, floodgate.ErrIndeterminate) {
			t.Fatalf("SetTier(%q) with the replica stopped: %v; want ErrNotReplicated", tier, err)
		}
		if got, _ := pc.HGet(ctx, "fg:tiers", "user=42").Result(); got != tier {
			t.Fatalf("the primary's assignment after SetTier(%q): %q (stored there)", tier, got)
		}
		if got, ok, err := a.Tier(ctx, "user", "42"); err != nil || got != tier || ok != (tier != "") {
			t.Fatalf("Tier after SetTier(%q) not replicated: %q, %v, %v; want the primary's", tier, got, ok, err)
		}
	}
}
