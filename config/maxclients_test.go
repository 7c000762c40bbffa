package config_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// fillMaxclients sets s's maxclients to 1 through a connection it holds
// open, so that every new connection is refused ("-ERR max number of
// clients reached", then closed), and restores it before s is stopped.
func fillMaxclients(t *testing.T, s *redistest.Server) {
	t.Helper()
	admin := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 1, MinIdleConns: 1, ContextTimeoutEnabled: true})
	ctx := context.Background()
	if err := admin.ConfigSet(ctx, "maxclients", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := admin.ConfigSet(ctx, "maxclients", "10000").Err(); err != nil {
			t.Errorf("restoring maxclients: %v", err)
		}
		_ = admin.Close()
	})
}

// TestMaxclientsIsUnavailable reproduces the maxclients walk: with Redis
// at its maxclients limit, a decision on a new connection failed with
// "floodgate: outcome indeterminate: redis: write: broken pipe" (serve:
// reason indeterminate). go-redis took the refusal for the reply to its
// HELLO and wrote the script to the closed connection. The clients config
// builds now check each new connection (connsetup.Check): the decision
// fails as not sent, floodgate.ErrStoreUnavailable, naming maxclients.
func TestMaxclientsIsUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) (config.Redis, []*redistest.Server)
	}{
		{"single", func(t *testing.T) (config.Redis, []*redistest.Server) {
			s := redistest.Start(t)
			return config.Redis{URL: "redis://" + s.Addr + "/0"}, []*redistest.Server{s}
		}},
		{"sentinel", func(t *testing.T) (config.Redis, []*redistest.Server) {
			s := redistest.StartSentinel(t)
			return config.Redis{SentinelAddrs: s.SentinelAddrs, SentinelMaster: s.MasterName}, []*redistest.Server{s.Primary}
		}},
		{"cluster", func(t *testing.T) (config.Redis, []*redistest.Server) {
			c := redistest.StartCluster(t)
			return config.Redis{ClusterAddrs: c.Addrs}, c.Nodes
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, full := tc.start(t)
			client, err := cfg.Client()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = client.Close() })
			for _, s := range full {
				fillMaxclients(t, s)
			}
			primary, err := redisstore.New(client, redisstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			lim, err := floodgate.New(primary, floodgate.Options{Prefix: "maxclients"})
			if err != nil {
				t.Fatal(err)
			}
			p := floodgate.Must(floodgate.NewFixedWindow("api", 10, time.Minute))
			_, err = lim.Allow(context.Background(), p, "k")
			if !errors.Is(err, floodgate.ErrStoreUnavailable) || errors.Is(err, floodgate.ErrIndeterminate) {
				t.Fatalf("Allow: %v; want floodgate.ErrStoreUnavailable (the connection was refused before the script was sent)", err)
			}
			t.Logf("Allow: %v", err)
			if !strings.Contains(err.Error(), "during its setup") || !strings.Contains(err.Error(), "maxclients") {
				t.Errorf("Allow: %v; want the setup failure and maxclients named", err)
			}

			local, err := memstore.New(memstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			fb, err := fallback.New(primary, local, fallback.Options{Budget: 10 * time.Second, Instances: 1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(fb.Close)
			flim, err := floodgate.New(fb, floodgate.Options{Prefix: "maxclients"})
			if err != nil {
				t.Fatal(err)
			}
			ctx, out := fallback.NewOutcomeContext(context.Background())
			if _, err := flim.Allow(ctx, p, "k"); err != nil {
				t.Fatal(err)
			}
			if !out.Degraded || out.Reason != fallback.ReasonUnavailable {
				t.Fatalf("outcome degraded=%v reason=%v err=%v; want degraded, reason unavailable", out.Degraded, out.Reason, out.Err)
			}
		})
	}
}
