package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/vectors"
	"github.com/redis/go-redis/v9"
)

// Compile-time checks: the clients the package documents satisfy Client.
var (
	_ Client = (*redis.Client)(nil) // also NewFailoverClient's
	_ Client = (*redis.ClusterClient)(nil)
	_ Client = (*redis.AutoPipeliner)(nil)
)

// TestSentinel runs the vectors through a Sentinel failover client and
// checks that the replica holds the same state, with a TTL, as the primary.
func TestSentinel(t *testing.T) {
	t.Parallel() // mostly waits for servers to form
	sn := redistest.StartSentinel(t)
	primary, replica := sn.Primary.Client(t), sn.Replica.Client(t)
	e := newEnvOn(t, sn.FailoverClient(t), []*redis.Client{primary}, Options{})
	vectors.Run(t, "sentinel-"+e.prefix, e.decider())

	ctx := context.Background()
	for _, p := range allAlgorithms(t, 10, time.Hour) {
		if _, err := e.one(ctx, vectors.T0.UnixMicro(), p, e.key(p, "replicated"), 3); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := primary.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d replicas, %v", n, err)
	}
	for _, p := range allAlgorithms(t, 10, time.Hour) {
		key := e.key(p, "replicated")
		want := snap(t, primary, key)
		got := snap(t, replica, key)
		if got.dump != want.dump || got.pttl < 0 || got.pttl > ttlBound(p) {
			t.Errorf("%s: replica holds %q (TTL %v), primary %q (TTL %v)", p.Algorithm, got.dump, got.pttl, want.dump, want.pttl)
		}
	}
}
