package envoycompat

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestRedisStoreSentinelUnknownMaster: with sentinels that do not know the
// master name, Get (the health probe) fails rather than finding the key
// absent, and Incr fails as the store unavailable, not as a bad reply.
// go-redis wraps redis.Nil in that failure, and both read it as a nil
// reply (an outside walk: /healthcheck 200 while every decision failed
// with "bad store reply: luascript: a nil reply").
func TestRedisStoreSentinelUnknownMaster(t *testing.T) {
	s := redistest.StartSentinel(t)
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "wrongname", SentinelAddrs: s.SentinelAddrs, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	st := &RedisStore{Client: c, Timeout: 5 * time.Second}
	ctx := context.Background()
	if v, err := st.Get(ctx, []*Op{{Key: "unknown_master_probe"}}); err == nil {
		t.Errorf("Get: %v, nil error; want the store failing", v)
	}
	err := st.Incr(ctx, []*Op{{Key: "unknown_master_k", N: 1, TTL: time.Minute}})
	if !errors.Is(err, floodgate.ErrStoreUnavailable) || errors.Is(err, floodgate.ErrBadReply) {
		t.Errorf("Incr: %v; want ErrStoreUnavailable, not ErrBadReply", err)
	}
}

// TestRedisStoreClusterPartlyCounted: on a Cluster with one primary down,
// an Incr of two counters, one on the live primary, updates that one and
// fails as indeterminate: "store unavailable" read as nothing counted.
func TestRedisStoreClusterPartlyCounted(t *testing.T) {
	cl := redistest.StartCluster(t)
	cc := cl.Client(t)
	ctx := context.Background()
	keyOn := func(node int) string {
		for i := range 1000 {
			k := "partly_" + string(rune('a'+i%26)) + string(rune('a'+i/26%26))
			if m, err := cc.MasterForKey(ctx, k); err == nil && m.Options().Addr == cl.Addrs[node] {
				return k
			}
		}
		t.Fatalf("no key on primary %d", node)
		return ""
	}
	live, dead := keyOn(0), keyOn(1)
	cl.Nodes[1].Kill()
	st := &RedisStore{Client: cc, Timeout: 2 * time.Second}
	err := st.Incr(ctx, []*Op{{Key: live, N: 1, TTL: time.Minute}, {Key: dead, N: 1, TTL: time.Minute}})
	if !errors.Is(err, floodgate.ErrIndeterminate) || errors.Is(err, floodgate.ErrStoreUnavailable) ||
		!strings.Contains(err.Error(), "1 of the request's 2 counters were updated, the others failed") {
		t.Errorf("Incr: %v; want ErrIndeterminate saying 1 of 2 counters were updated", err)
	}
	if got := cc.Get(ctx, live).Val(); got != "1" {
		t.Errorf("the live node's counter: %q, want 1", got)
	}
}
