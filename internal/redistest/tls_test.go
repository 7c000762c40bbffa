package redistest_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestTLSServers: every TLS topology answers a TLS client that trusts the
// test CA and presents the client certificate.
func TestTLSServers(t *testing.T) {
	f := redistest.GenerateTLS(t)
	f.AuthClients = true
	ctx := context.Background()
	t.Run("standalone", func(t *testing.T) {
		s := redistest.StartTLS(t, f)
		c := redis.NewClient(&redis.Options{Addr: s.TLSAddr, TLSConfig: f.ClientConfig(t)})
		defer c.Close()
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartClusterTLS(t, f)
		addrs := []string{cl.Nodes[0].TLSAddr}
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, TLSConfig: f.ClientConfig(t)})
		defer c.Close()
		shards, err := c.ClusterShards(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("shards over TLS: %+v", shards)
		for i := range 20 {
			if err := c.Set(ctx, "k"+string(rune('a'+i)), "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("sentinel", func(t *testing.T) {
		s := redistest.StartSentinelTLS(t, f)
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.SentinelTLSAddrs, TLSConfig: f.ClientConfig(t)})
		defer c.Close()
		if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	})
}
