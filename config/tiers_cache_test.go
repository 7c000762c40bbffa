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
		a.remember(fmt.Sprintf("user=live%d", i), cached{tier: "pro", ok: true, expires: now.Add(time.Hour)}, 0)
	}
	a.remember("user=old", cached{expires: now.Add(-time.Second)}, 0)
	if len(a.cache) != max {
		t.Fatalf("cache holds %d entries, want %d before the sweep", len(a.cache), max)
	}
	// The expired entry alone would make room for this one, and the next
	// new identity would scan the cache again.
	a.remember("user=new", cached{expires: now.Add(time.Hour)}, 0)
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

// TestTierReadAcrossExpireAllIsStale: an answer whose read was in flight
// when ExpireAll ran (serve calls it when the sentinels name a new
// primary; the read may have gone to the primary left) is cached stale,
// so the next lookup asks Redis again. It was cached for the whole TTL,
// keeping the old primary's tier for up to 5 s after the move (review).
func TestTierReadAcrossExpireAllIsStale(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	if err := client.HSet(ctx, "fgx:tiers", "user=u", "pro").Err(); err != nil {
		t.Fatal(err)
	}
	var a *RedisAssignments
	moveDuringRead := true
	guard := func(ctx context.Context, _ string, fn func(ctx context.Context) error) error {
		err := fn(ctx)
		if moveDuringRead {
			moveDuringRead = false
			a.ExpireAll() // the move, after the read's reply and before it is cached
		}
		return err
	}
	var err error
	if a, err = NewRedisAssignments(client, "fgx:tiers", RedisAssignmentsOptions{Guard: guard, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if tier, ok, err := a.Tier(ctx, "user", "u"); err != nil || !ok || tier != "pro" {
		t.Fatalf("first lookup: %q %v %v, want pro", tier, ok, err)
	}
	if err := client.HSet(ctx, "fgx:tiers", "user=u", "free").Err(); err != nil {
		t.Fatal(err)
	}
	if tier, ok, err := a.Tier(ctx, "user", "u"); err != nil || !ok || tier != "free" {
		t.Fatalf("lookup after a read across ExpireAll: %q %v %v, want free (read again from Redis)", tier, ok, err)
	}
	if tier, ok, found := a.LastKnown("user", "u"); !found || !ok || tier != "free" {
		t.Fatalf("LastKnown: %q %v %v, want free", tier, ok, found)
	}
}
