package config_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

func TestAssignments(t *testing.T) {
	ctx := context.Background()
	rs := redistest.Start(t)
	keys, _ := config.KeysFor(fmt.Sprintf("as%d", time.Now().UnixNano()))
	ra, err := config.NewRedisAssignments(rs.Client(t), keys.Tiers, config.RedisAssignmentsOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for name, a := range map[string]config.Assignments{"memory": &config.MemoryAssignments{}, "redis": ra} {
		t.Run(name, func(t *testing.T) {
			if _, ok, err := a.Tier(ctx, "api_key", "k1"); ok || err != nil {
				t.Fatalf("fresh: %v %v", ok, err)
			}
			if err := a.SetTier(ctx, "api_key", "k1", "enterprise"); err != nil {
				t.Fatal(err)
			}
			if tier, ok, err := a.Tier(ctx, "api_key", "k1"); tier != "enterprise" || !ok || err != nil {
				t.Fatalf("after set: %q %v %v", tier, ok, err)
			}
			// Dimensions keep identities apart.
			if _, ok, _ := a.Tier(ctx, "user", "k1"); ok {
				t.Fatal("user k1 got api_key k1's tier")
			}
			if err := a.SetTier(ctx, "api_key", "k1", ""); err != nil {
				t.Fatal(err)
			}
			if _, ok, _ := a.Tier(ctx, "api_key", "k1"); ok {
				t.Fatal("removed assignment still there")
			}
			for _, bad := range [][3]string{{"Bad", "v", "pro"}, {"user", "", "pro"}, {"user", strings.Repeat("x", 2000), "pro"}, {"user", "v", "Pro Tier"}} {
				if err := a.SetTier(ctx, bad[0], bad[1], bad[2]); err == nil {
					t.Errorf("SetTier%q accepted", bad)
				}
			}
		})
	}
	if n, _ := rs.Client(t).HLen(ctx, keys.Tiers).Result(); n != 0 {
		t.Fatalf("hash has %d fields after removal", n)
	}
}

// TestRedisAssignmentsCache: lookups are cached for the TTL, so another
// instance's change shows up after it; while Redis is down a lookup fails
// and LastKnown keeps the last answer, however old.
func TestRedisAssignmentsCache(t *testing.T) {
	ctx := context.Background()
	rs := redistest.Start(t)
	client := rs.Client(t)
	keys, _ := config.KeysFor(fmt.Sprintf("ac%d", time.Now().UnixNano()))
	a, err := config.NewRedisAssignments(client, keys.Tiers, config.RedisAssignmentsOptions{TTL: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := a.Tier(ctx, "user", "u"); ok {
		t.Fatal("fresh identity has a tier")
	}
	// Another instance assigns a tier.
	client.HSet(ctx, keys.Tiers, "user=u", "pro")
	if _, ok, _ := a.Tier(ctx, "user", "u"); ok {
		t.Fatal("negative lookup was not cached")
	}
	time.Sleep(250 * time.Millisecond)
	if tier, ok, _ := a.Tier(ctx, "user", "u"); !ok || tier != "pro" {
		t.Fatalf("after the TTL: %q %v", tier, ok)
	}
	rs.Kill()
	time.Sleep(250 * time.Millisecond)
	ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, _, err := a.Tier(ctx, "user", "u"); err == nil {
		t.Fatal("expired lookup with Redis down did not fail")
	}
	if tier, ok, found := a.LastKnown("user", "u"); !found || !ok || tier != "pro" {
		t.Fatalf("last known with Redis down: %q %v %v", tier, ok, found)
	}
	if _, _, found := a.LastKnown("user", "never-seen"); found {
		t.Fatal("last known tier of an identity never looked up")
	}
	if _, _, err := a.Tier(ctx, "user", "never-seen"); err == nil {
		t.Fatal("uncached lookup with Redis down did not fail")
	}
	if _, err := config.NewRedisAssignments(nil, "k", config.RedisAssignmentsOptions{}); err == nil {
		t.Fatal("nil client accepted")
	}
}

func TestRedisSettings(t *testing.T) {
	bad := []struct {
		r    config.Redis
		want string
	}{
		{config.Redis{}, "exactly one"},
		{config.Redis{URL: "redis://h:1", ClusterAddrs: []string{"h:2"}}, "exactly one"},
		{config.Redis{URL: "http://h:1"}, `scheme "http"`},
		// host:port, as redis-cli takes it: an outside walk got the URL
		// parser's "first path segment in URL cannot contain colon", or
		// the scheme "localhost".
		{config.Redis{URL: "127.0.0.1:6380"}, `"127.0.0.1:6380": no scheme: want redis://host:port/db (or rediss://), such as redis://127.0.0.1:6380/0`},
		{config.Redis{URL: "localhost:6380"}, `"localhost:6380": no scheme: want redis://host:port/db (or rediss://), such as redis://localhost:6380/0`},
		{config.Redis{URL: "[::1]:6380"}, `such as redis://[::1]:6380/0`},
		// An IPv6 address without brackets (ipv6 walk: no hint at all).
		{config.Redis{URL: "::1:6380"}, `"::1:6380": no scheme: want redis://host:port/db (or rediss://); put an IPv6 address in brackets: redis://[::1]:6380/0`},
		{config.Redis{URL: "localhost"}, `"localhost": no scheme: want redis://host:port/db (or rediss://)`},
		{config.Redis{URL: "u:secret@h:6380/0"}, `"...@h:6380/0": no scheme: want redis://host:port/db (or rediss://)`},
		{config.Redis{URL: "redis-sentinel://h:1,h:2/0"}, "needs ?master=NAME"},
		{config.Redis{URL: "redis-sentinel://h:1?master=m&x=1"}, `unknown URL parameter "x"`},
		{config.Redis{URL: "redis-cluster://h:1,h:2/3"}, "only database 0"},
		{config.Redis{URL: "redis-cluster://h:1,nope/0"}, `address "nope" is not host:port`},
		{config.Redis{URL: "redis-cluster://h:1,:2/0"}, `address ":2" is not host:port`},
		{config.Redis{URL: "redis-sentinel://:secret@h:1/x?master=m"}, `database "x"`},
		{config.Redis{SentinelAddrs: []string{"h:1"}}, "master name"},
		{config.Redis{ClusterAddrs: []string{"h:99999"}}, "invalid port"},
		{config.Redis{URL: "redis://:pw@h:1/0", PoolSize: -1}, "pool size -1 out of range 0..10000"},
		{config.Redis{URL: "redis://:pw@h:1/0", PoolSize: 100_000_000}, "pool size 100000000 out of range 0..10000"},
		{config.Redis{URL: "redis://:pw@h:1/0", CommandTimeout: -time.Second}, "command timeout -1s is negative"},
	}
	for _, tc := range bad {
		_, err := tc.r.Client()
		if !errors.Is(err, config.ErrRedisURL) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.r, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("error leaks the password: %v", err)
		}
	}
	if s := (config.Redis{URL: "redis://u:secret@h:1/0"}).String(); strings.Contains(s, "secret") {
		t.Errorf("String leaks the password: %s", s)
	}
}

func ping(t *testing.T, r config.Redis) redis.UniversalClient {
	t.Helper()
	c, err := r.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("%s: ping: %v", r, err)
	}
	return c
}

// TestRedisSettingsConnect connects through each URL form to real servers.
func TestRedisSettingsConnect(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		rs := redistest.Start(t)
		c := ping(t, config.Redis{URL: "redis://" + rs.Addr + "/3"})
		if db := c.(*redis.Client).Options().DB; db != 3 || !c.(*redis.Client).Options().ContextTimeoutEnabled {
			t.Fatalf("db %d, context timeouts %v", db, c.(*redis.Client).Options().ContextTimeoutEnabled)
		}
	})
	t.Run("sentinel", func(t *testing.T) {
		s := redistest.StartSentinel(t)
		c := ping(t, config.Redis{URL: "redis-sentinel://" + strings.Join(s.SentinelAddrs, ",") + "/0?master=" + s.MasterName})
		ctx := context.Background()
		if err := c.Set(ctx, "fg-settings-test", "1", time.Minute).Err(); err != nil {
			t.Fatalf("write through sentinel-found primary: %v", err)
		}
		ping(t, config.Redis{SentinelAddrs: s.SentinelAddrs, SentinelMaster: s.MasterName})
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t)
		c := ping(t, config.Redis{URL: "redis-cluster://" + strings.Join(cl.Addrs, ",")})
		if _, ok := c.(*redis.ClusterClient); !ok {
			t.Fatalf("cluster URL gave %T", c)
		}
		ping(t, config.Redis{ClusterAddrs: cl.Addrs[:1]})
	})
}

// TestRedisAssignmentsGuard: every Redis read goes through Guard, whose
// refusal is Tier's error; cached answers do not.
func TestRedisAssignmentsGuard(t *testing.T) {
	ctx := context.Background()
	rs := redistest.Start(t)
	keys, _ := config.KeysFor(fmt.Sprintf("ag%d", time.Now().UnixNano()))
	refuse := errors.New("breaker open")
	var calls int
	var closed bool
	a, err := config.NewRedisAssignments(rs.Client(t), keys.Tiers, config.RedisAssignmentsOptions{TTL: time.Hour,
		Guard: func(ctx context.Context, key string, fn func(context.Context) error) error {
			calls++
			if key != keys.Tiers {
				t.Errorf("guard key %q, want %q", key, keys.Tiers)
			}
			if closed {
				return refuse
			}
			return fn(ctx)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SetTier(ctx, "user", "u", "pro"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Tier(ctx, "user", "v"); err != nil || calls != 1 {
		t.Fatalf("lookup: %v, %d guarded calls", err, calls)
	}
	closed = true
	if tier, _, err := a.Tier(ctx, "user", "u"); err != nil || tier != "pro" || calls != 1 {
		t.Fatalf("cached lookup: %q %v, %d guarded calls", tier, err, calls)
	}
	if _, _, err := a.Tier(ctx, "user", "w"); !errors.Is(err, refuse) {
		t.Fatalf("refused lookup: %v, want the guard's error", err)
	}
}
