package fallback

import (
	"context"

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
