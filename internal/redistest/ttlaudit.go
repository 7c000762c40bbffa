package redistest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// auditTimeout bounds one AuditTTL call.
const auditTimeout = 30 * time.Second

// AuditTTL checks the rule that no key lives without a TTL: it SCANs every
// key matching the glob pattern match on the server behind c (on every
// primary, when c is a *redis.ClusterClient) and reports, with t.Errorf,
// each key whose PTTL is -1 (no expiry). A key that expires between the
// SCAN and its PTTL (-2) is fine. Any other error reading the keys is
// reported too. It returns the number of keys it looked at.
//
// Tests call it after each concurrency test, with the test's own key prefix
// as the pattern (e.g. prefix + "*"), so that keys other tests write on the
// same server are left out; it only reads.
func AuditTTL(t testing.TB, c redis.UniversalClient, match string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), auditTimeout)
	defer cancel()
	var mu sync.Mutex
	seen := 0
	scan := func(ctx context.Context, n *redis.Client) error {
		iter := n.Scan(ctx, 0, match, 1000).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			ttl, err := n.PTTL(ctx, key).Result()
			mu.Lock()
			seen++
			mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("redistest: PTTL %q on %s: %v", key, n.Options().Addr, err)
			case ttl == -1:
				t.Errorf("redistest: key %q on %s has no TTL (PTTL -1): it would live forever", key, n.Options().Addr)
			}
		}
		return iter.Err()
	}
	var err error
	switch cl := c.(type) {
	case *redis.ClusterClient:
		err = cl.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, cl)
	default:
		t.Fatalf("redistest: AuditTTL needs a *redis.Client or *redis.ClusterClient, got %T", c)
	}
	if err != nil {
		t.Errorf("redistest: SCAN %q: %v", match, err)
	}
	t.Logf("redistest: TTL audit looked at %d keys matching %q", seen, match)
	return seen
}
