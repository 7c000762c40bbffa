package envoycompat

import (
	"context"
	"slices"
	"strconv"
	"strings"
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

// TestProbeClusterAllDownInAddressOrder: with every Cluster primary down,
// Probe's error names them in address order, the same at each probe, so
// that envoy-compat logs the outage once. They were named in the order
// their failures came back, and an outside re-walk saw the warning
// "backend not reachable" repeated every 1-2 s as that order changed.
func TestProbeClusterAllDownInAddressOrder(t *testing.T) {
	cl := redistest.StartCluster(t)
	st := &RedisStore{Client: cl.Client(t), Timeout: time.Second}
	ctx := context.Background()
	if _, err := st.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range cl.Nodes {
		n.Kill()
	}
	addrs := slices.Clone(cl.Addrs)
	slices.Sort(addrs)
	first := ""
	for i := range 8 {
		_, err := st.Probe(ctx)
		if err == nil {
			t.Fatal("Probe with every primary down: no error")
		}
		at := -1
		for _, a := range addrs {
			j := strings.Index(err.Error(), "primary "+a+":")
			if j < at {
				t.Fatalf("probe %d: %v: primaries not in address order %v", i, err, addrs)
			}
			at = j
		}
		if i == 0 {
			first = err.Error()
		} else if err.Error() != first {
			t.Fatalf("probe %d: %v, differs from the first probe's %v", i, err, first)
		}
	}
}

// TestProbeClusterListsPrimariesRarely: Probe lists the Cluster
// primaries again only every probeRelist (or after a failing probe): ten
// probes send at most one CLUSTER SLOTS in all. Each probe used to
// reload the slot map, about one CLUSTER SLOTS a second per instance
// with REDIS_HEALTH_CHECK_ACTIVE_CONNECTION.
func TestProbeClusterListsPrimariesRarely(t *testing.T) {
	cl := redistest.StartCluster(t)
	st := &RedisStore{Client: cl.Client(t), Timeout: time.Second}
	ctx := context.Background()
	if _, err := st.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	stat := func(addr, section, field string) int {
		t.Helper()
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		info, err := c.Info(ctx, section).Result()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(info, "\r\n") {
			if rest, ok := strings.CutPrefix(line, field+":"); ok {
				v, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
				v = strings.TrimPrefix(v, "count=")
				n, err := strconv.Atoi(v)
				if err != nil {
					t.Fatalf("%s %s: %q", addr, field, line)
				}
				return n
			}
		}
		return 0
	}
	counts := func() (moved, slots int) {
		for _, a := range cl.Addrs {
			moved += stat(a, "errorstats", "errorstat_MOVED")
			slots += stat(a, "commandstats", "cmdstat_cluster|slots")
		}
		return moved, slots
	}
	moved0, slots0 := counts()
	for range 10 {
		down, err := st.Probe(ctx)
		if err != nil || len(down) > 0 {
			t.Fatalf("Probe: down %v, %v", down, err)
		}
	}
	moved, slots := counts()
	// The probe key's slot is one primary's: the others redirect it.
	if want := moved0 + 10*(len(cl.Addrs)-1); moved != want {
		t.Errorf("errorstat_MOVED went from %d to %d over ten probes, want %d", moved0, moved, want)
	}
	if slots-slots0 > 1 {
		t.Errorf("%d CLUSTER SLOTS over ten probes, want at most 1", slots-slots0)
	}
}
