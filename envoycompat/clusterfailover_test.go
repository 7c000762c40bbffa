package envoycompat

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestRedisStoreClusterPrimaryKilled: after kill -9 of a Cluster primary,
// a RedisStore's counters on that primary's slots are counted again soon
// after its replica takes over. go-redis alone reloads the slot map once a
// minute, and an outside walk saw envoy-compat fail those requests for
// 38-40 s after the promotion; a failed call now reloads it.
func TestRedisStoreClusterPrimaryKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("a Cluster failover takes seconds")
	}
	cl := redistest.StartCluster(t)
	r := cl.AddReplica(t, 0)
	redistest.WaitReplicaOnline(t, cl.Addrs[0], r)
	cc := cl.Client(t)
	ctx := context.Background()
	key := ""
	for i := range 1000 {
		k := "fault_k_" + string(rune('a'+i%26)) + string(rune('a'+i/26%26))
		if m, err := cc.MasterForKey(ctx, k); err == nil && m.Options().Addr == cl.Addrs[0] {
			key = k
			break
		}
	}
	if key == "" {
		t.Fatal("no key on the first primary")
	}
	st := &RedisStore{Client: cc, Timeout: time.Second}
	incr := func() error {
		return st.Incr(ctx, []*Op{{Key: key, N: 1, TTL: time.Minute}})
	}
	if err := incr(); err != nil {
		t.Fatal(err)
	}
	cl.Nodes[0].Kill()
	promoted := waitRoleMaster(t, r.Addr)
	deadline := promoted.Add(20 * time.Second)
	for {
		err := incr()
		if err == nil {
			t.Logf("counted again %v after the replica's promotion", time.Since(promoted))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing 20 s after the replica's promotion: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitRoleMaster waits until the server at addr answers ROLE master.
func waitRoleMaster(t *testing.T, addr string) time.Time {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if role, err := c.Do(context.Background(), "ROLE").Slice(); err == nil && len(role) > 0 && role[0] == "master" {
			return time.Now()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s was not promoted", addr)
	return time.Time{}
}
