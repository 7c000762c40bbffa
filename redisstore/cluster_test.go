package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/vectors"
	"github.com/redis/go-redis/v9"
)

// TestCluster runs the vectors, the concurrency proof and layered
// decisions against a real three-primary Redis Cluster, and checks Slot
// against CLUSTER KEYSLOT.
func TestCluster(t *testing.T) {
	t.Parallel() // mostly waits for servers to form
	cl := redistest.StartCluster(t)
	var nodes []*redis.Client
	for _, n := range cl.Nodes {
		nodes = append(nodes, n.Client(t))
	}
	e := newEnvOn(t, cl.Client(t), nodes, Options{})
	if !e.store.slots {
		t.Fatal("SlotCheckAuto did not detect the cluster client")
	}
	ctx := context.Background()

	t.Run("keyslot", func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for i := range 200 {
			key := fmt.Sprintf("k%d-%x", i, r.Uint64())
			switch i % 4 {
			case 1:
				key = floodgate.Key("fg", fixed10(t), key)
			case 2:
				key = "a{" + key + "}b{c}"
			case 3:
				key = "{}" + key
			}
			want, err := nodes[0].ClusterKeySlot(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if got := Slot(key); got != int(want) {
				t.Fatalf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", key, got, want)
			}
		}
	})

	t.Run("vectors", func(t *testing.T) {
		vectors.RunCases(t, append(vectors.All(), vectors.Calendar()...), "cluster-"+e.prefix, e.decider())
	})

	t.Run("concurrent", func(t *testing.T) {
		testConcurrent(t, e, 20)
	})

	t.Run("layers", func(t *testing.T) {
		user := mustPolicy(t, floodgate.Policy{Name: "user", Algorithm: floodgate.SlidingLog, Limit: 2, Window: time.Minute})
		acct := mustPolicy(t, floodgate.Policy{Name: "acct", Algorithm: floodgate.TokenBucket, Limit: 5, Window: time.Minute})
		now := vectors.T0.UnixMicro()
		// One identity's keys share a hash tag, hence a slot.
		same := []floodgate.Layer{{Policy: user, Key: e.key(user, "u1"), Cost: 1}, {Policy: acct, Key: e.key(acct, "u1"), Cost: 1}}
		for i, want := range []bool{true, true, false} {
			out, err := e.decide(ctx, now, same)
			if err != nil || out[0].Allowed != want {
				t.Fatalf("request %d: %+v, %v", i, out, err)
			}
		}
		if r, err := e.one(ctx, now, acct, e.key(acct, "u1"), 0); err != nil || r.Remaining != 3 {
			t.Fatalf("account layer after a denial: %+v, %v; want 3 remaining", r, err)
		}
		// Keys of different identities span slots: refused before sending.
		cross := []floodgate.Layer{{Policy: user, Key: e.key(user, "u1"), Cost: 1}, {Policy: acct, Key: e.key(acct, "u2"), Cost: 1}}
		if Slot(cross[0].Key) == Slot(cross[1].Key) {
			t.Fatal("test keys happen to share a slot")
		}
		_, err := e.decide(ctx, now, cross)
		if !errors.Is(err, floodgate.ErrInvalidLayers) {
			t.Fatalf("cross-slot decision: got %v, want ErrInvalidLayers", err)
		}
	})
}
