package config

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestTierCacheSweepFreesAQuarter: a full tier cache holding one expired
// entry among live ones frees at least a quarter of its room when a new
// identity arrives, so the next pass over the whole cache is at least
// that many new identities away. Before, it dropped only the expired
// entry: with identities expiring as fast as new ones arrived (a stream
// of distinct users), every lookup scanned the whole cache under its
// lock.
func TestTierCacheSweepFreesAQuarter(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: remember does not read Redis
	t.Cleanup(func() { _ = client.Close() })
	const max = 100
	a, err := NewRedisAssignments(client, "fg:tiers", RedisAssignmentsOptions{MaxEntries: max, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i := range max - 1 {
		a.remember(fmt.Sprintf("user=live%d", i), cached{tier: "pro", ok: true, expires: now.Add(time.Hour)})
	}
	a.remember("user=old", cached{expires: now.Add(-time.Second)})
	if len(a.cache) != max {
		t.Fatalf("cache holds %d entries, want %d before the sweep", len(a.cache), max)
	}
	// The expired entry alone would make room for this one, and the next
	// new identity would scan the cache again.
	a.remember("user=new", cached{expires: now.Add(time.Hour)})
	if n := len(a.cache); n > max-max/4+1 {
		t.Fatalf("after a sweep the cache holds %d entries, want at most %d: the next new identity would sweep it again", n, max-max/4+1)
	}
	if _, _, found := a.LastKnown("user", "new"); !found {
		t.Fatal("the newest entry is not cached")
	}
}

// TestTiersKeyOfAnotherType: a tiers key that is not a hash fails the
// lookup with floodgate.ErrForeignValue, which the service's breaker does
// not count against Redis (it opened for every decision).
func TestTiersKeyOfAnotherType(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	if err := client.Set(ctx, "fgt:tiers", "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	a, err := NewRedisAssignments(client, "fgt:tiers", RedisAssignmentsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Tier(ctx, "user", "42"); !errors.Is(err, floodgate.ErrForeignValue) || !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Fatalf("Tier on a string key: %v, want ErrForeignValue and ErrStoreUnavailable", err)
	}
}
