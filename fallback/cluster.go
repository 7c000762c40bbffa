package fallback

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

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

// ClusterPartitions returns an Options.Partitions for Redis Cluster: the
// addresses of the primaries in the slot map, as ClusterPartition names
// them, after reloading the map (one CLUSTER SLOTS per call).
func ClusterPartitions(cc *redis.ClusterClient) func(ctx context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		var mu sync.Mutex
		var out []string
		err := cc.ForEachMaster(ctx, func(_ context.Context, n *redis.Client) error {
			mu.Lock()
			out = append(out, n.Options().Addr)
			mu.Unlock()
			return nil
		})
		if err != nil {
			return nil, err
		}
		return out, nil
	}
}

// RedisProbe returns an Options.Probe for a go-redis client. It writes a
// key (SET with a 10s expiry), so that a Redis that answers PING but
// refuses writes (out of memory under maxmemory noeviction, a replica after
// a failover, paused writes, a Cluster node answering CLUSTERDOWN) is not
// taken for healthy; and it writes it from a script, sent as the
// decisions' are (EVALSHA, then EVAL when the server has not got it), so
// that a Redis user allowed SET but not EVALSHA, whose every decision is
// refused with NOPERM, is not taken for healthy either (a plain SET passed
// every probe there, and the breaker opened and closed about twice a
// second). For DefaultPartition the key is key itself, through
// c. For a Redis Cluster partition (see ClusterPartition) it is key plus a
// hash tag, key:{N}, whose slot that primary serves in cc's slot map, sent
// to that primary's own connection (no redirection to another node); a
// primary no longer in the cluster's map is reported gone
// (ErrPartitionGone): no key maps to it any more. (It used to PING the primary: a primary refusing
// writes then passed every probe, and its breaker opened and closed twice
// a second for as long as the fault lasted.) A redirection (ASK while the
// key's slot migrates away during a resharding, MOVED once it has) is not
// a refusal: the probe tries the primary's next slot, up to
// probeRedirectTries of them, and reports it healthy if every one
// redirects. A failed probe of a partition reloads cc's slot map (in the
// background), so that a primary replaced by its replica is found gone
// from the map by the next probe, rather than after whatever else
// reloads it.
func RedisProbe(c redis.UniversalClient, key string) func(ctx context.Context, partition string) error {
	var tags sync.Map // partition -> int, the hash tag to try first for it
	return func(ctx context.Context, partition string) error {
		cc, ok := c.(*redis.ClusterClient)
		if !ok || partition == DefaultPartition {
			err := probeScript.Run(ctx, c, []string{key}).Err()
			if err != nil && ok {
				// As below: the key's primary may have been replaced
				// by its replica, which a stale slot map does not know.
				cc.ReloadState(ctx)
			}
			return err
		}
		for range probeRedirectTries {
			node, k, tag, err := clusterProbeKey(ctx, cc, &tags, key, partition)
			if err != nil {
				cc.ReloadState(ctx)
				return err
			}
			if node == nil {
				return fmt.Errorf("%w: %s is no primary in the cluster's slot map", ErrPartitionGone, partition)
			}
			err = probeScript.Run(ctx, node, []string{k}).Err()
			if err != nil && !redirected(err) {
				// The slot map may be out of date: the primary
				// failed and a replica took its slots. Nothing else
				// reloads it while this partition's breaker is open
				// (no decision reaches the cluster client), so the
				// probe does; the next probe finds the partition
				// gone from the map, healthy, and the decisions go to
				// the new primary.
				cc.ReloadState(ctx)
				return err
			}
			if err == nil {
				return nil
			}
			// k's slot is leaving the primary, or has left it:
			// search on from the next tag, in another slot.
			tags.Store(partition, (tag+1)%probeTagLimit)
		}
		return nil
	}
}

// probeRedirectTries bounds the slots RedisProbe tries on a primary that
// redirects its probe key: a resharding migrates one slot at a time, so
// the next one tried is almost always settled.
const probeRedirectTries = 3

// redirected reports whether err is a Cluster redirection, ASK or MOVED.
// probeScript is RedisProbe's write: the SET a plain command would do,
// with the 10 s expiry, run as a script.
var probeScript = redis.NewScript(`return redis.call('SET', KEYS[1], '1', 'EX', 10)`)

func redirected(err error) bool {
	if _, ok := redis.IsAskError(err); ok {
		return true
	}
	_, ok := redis.IsMovedError(err)
	return ok
}

// probeTagLimit bounds the hash tags tried for a primary's probe key: with
// its slots anywhere in the 16384, one in a few thousand tags finds even a
// primary serving a single slot.
const probeTagLimit = 200_000

// clusterProbeKey returns the client of primary addr and a key, base:{N},
// in a slot it serves according to cc's slot map, and N, starting from the
// tag stored in tags for addr (the one found last time); a nil client (and
// no error) when no primary of the map has that address or none of the
// tags tried lands on it.
func clusterProbeKey(ctx context.Context, cc *redis.ClusterClient, tags *sync.Map, base, addr string) (*redis.Client, string, int, error) {
	start := 0
	if v, ok := tags.Load(addr); ok {
		start = v.(int)
	}
	for i := 0; i < probeTagLimit; i++ {
		n := (start + i) % probeTagLimit
		k := base + ":{" + strconv.Itoa(n) + "}"
		node, err := cc.MasterForKey(ctx, k)
		if err != nil {
			return nil, "", 0, err
		}
		if node.Options().Addr == addr {
			tags.Store(addr, n)
			return node, k, n, nil
		}
		if i == 0 {
			if served, err := servedBy(ctx, cc, addr); err != nil || !served {
				return nil, "", 0, err
			}
		}
	}
	return nil, "", 0, nil
}

// servedBy reports whether addr is a primary in cc's slot map (which
// ForEachMaster reloads first).
func servedBy(ctx context.Context, cc *redis.ClusterClient, addr string) (bool, error) {
	var found atomic.Bool
	err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		if n.Options().Addr == addr {
			found.Store(true)
		}
		return nil
	})
	if found.Load() {
		return true, nil
	}
	return false, err
}
