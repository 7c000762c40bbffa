package quota

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// backend is one Store under test, with the means to reach behind it.
type backend struct {
	store Store
	// dropUsage deletes a period's usage but not its marker.
	dropUsage func(t *testing.T, key string)
	// client is the Redis client, nil for the memory store.
	client *redis.Client
}

// eachBackend runs f against a fresh MemoryStore and, when redis-server is
// installed, a RedisStore on a private server.
func eachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	t.Helper()
	t.Run("memory", func(t *testing.T) {
		m, err := NewMemoryStore(MemoryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f(t, backend{store: m, dropUsage: func(t *testing.T, key string) {
			t.Helper()
			sh := m.lock(key)
			defer sh.Unlock()
			if sl := sh.Get(key); sl == nil || sl.l == nil {
				t.Fatalf("no usage under %q", key)
			} else {
				sh.AddUnits(-sl.records())
				sl.l = nil
			}
		}})
	})
	t.Run("redis", func(t *testing.T) {
		s, c := newRedisStore(t)
		f(t, backend{store: s, client: c, dropUsage: func(t *testing.T, key string) {
			t.Helper()
			if n, err := c.Del(context.Background(), key).Result(); err != nil || n != 1 {
				t.Fatalf("DEL %s = %d, %v", key, n, err)
			}
		}})
		redistest.AuditTTL(t, c, "*") // no quota key ever lives without a TTL
	})
}

func newQuota(t testing.TB, store Store, p Policy, opts Options) *Quota {
	t.Helper()
	q, err := New(store, p, opts)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// usageKey returns the usage key of identity in the period containing at.
func usageKey(q *Quota, identity string, at time.Time) string {
	return newKeySet(q.keyBase(identity, q.PeriodAt(at))).usage
}

// view is the part of a Result the step tables compare.
type view struct {
	Allowed    bool
	Reason     Reason
	Used       int64
	Reserved   int64
	Remaining  int64
	Charged    int64
	Refunded   int64
	Replayed   bool
	Unmatched  bool
	Soft       bool
	Exhausted  bool
	Period     string
	RetryAfter time.Duration
	// Replaced and ReplacedLost are a restore's.
	Replaced     int64
	ReplacedLost bool
}

func viewOf(r Result) view {
	return view{
		Allowed: r.Allowed, Reason: r.Reason, Used: r.Used, Reserved: r.Reserved,
		Remaining: r.Remaining, Charged: r.Charged, Refunded: r.Refunded,
		Replayed: r.Replayed, Unmatched: r.Unmatched, Soft: r.Soft,
		Exhausted: r.Exhausted, Period: r.Period.Key, RetryAfter: r.RetryAfter,
		Replaced: r.Replaced, ReplacedLost: r.ReplacedLost,
	}
}
