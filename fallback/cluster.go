package fallback

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterPartition returns an Options.Partition for Redis Cluster: it names
// each key by the address of the primary serving its slot, as cc's cached
// cluster state says, so that each primary gets its own breaker. A key
// whose primary cannot be found gets DefaultPartition.
//
// For keys on healthy primaries to keep central counting while another
// primary is down, the cluster must serve partial slot coverage
// (cluster-require-full-coverage no); otherwise every node answers
// CLUSTERDOWN once the dead primary is marked failed.
func ClusterPartition(cc *redis.ClusterClient) func(ctx context.Context, key string) string {
	return func(ctx context.Context, key string) string {
		c, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return DefaultPartition
		}
		return c.Options().Addr
	}
}

// RedisProbe returns an Options.Probe for a go-redis client. For
// DefaultPartition it writes key (SET with a 10s expiry), so that a Redis
// that answers PING but refuses writes (out of memory under maxmemory
// noeviction, a replica after a failover, paused writes) is not taken for
// healthy. For a Redis Cluster partition (see ClusterPartition) it PINGs
// the primary of that address; a primary no longer in the cluster's map
// is reported healthy, as no key maps to it any more.
func RedisProbe(c redis.UniversalClient, key string) func(ctx context.Context, partition string) error {
	return func(ctx context.Context, partition string) error {
		cc, ok := c.(*redis.ClusterClient)
		if !ok || partition == DefaultPartition {
			return c.Set(ctx, key, "1", 10*time.Second).Err()
		}
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			if n.Options().Addr != partition {
				return nil
			}
			return n.Ping(ctx).Err()
		})
	}
}
