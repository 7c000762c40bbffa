package runwatch

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestObservePrimary: steps of Cluster primaries seen at addresses,
// serving slot sets, at instants 2 s apart, and whether each is a
// change. A slot set moved whole to a primary that served slots at the
// previous check (promoted long ago or not), that was one already, or
// that was up before the previous check, is a resharding, its old owner
// listed as its replica or not (replica migration); a replica promoted,
// the replica listed for it, or a server started since is a failover or
// a replacement (reviews: a resharding to an empty primary was counted
// as a restart, then as a failover once replica migration listed the
// old owner as the new owner's replica).
func TestObservePrimary(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	a1, b1, d1 := Server{RunID: "a1", Uptime: time.Hour}, Server{RunID: "b1", Uptime: time.Hour}, Server{RunID: "d1", Uptime: time.Hour}
	r1, fresh := Server{RunID: "r1", Uptime: time.Hour}, Server{RunID: "f1", Uptime: time.Second}
	type step struct {
		name   string
		addr   string
		p      place
		s      Server
		change bool
		// kind is the change's, when change.
		kind Kind
		// promoted: the server says it was a replica (master_replid2).
		promoted bool
	}
	mk := func(name, addr string, p place, s Server, change bool) step {
		return step{name: name, addr: addr, p: p, s: s, change: change}
	}
	// mkKind is mk for a step that is a change of kind k.
	mkKind := func(name, addr string, p place, s Server, k Kind) step {
		return step{name: name, addr: addr, p: p, s: s, change: true, kind: k}
	}
	// promote is st with its server promoted from replica.
	promote := func(st step) step { st.promoted = true; return st }
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"reshard to an empty primary", []step{
			mk("A serves 0-99", "A", place{slots: "slots 0-99"}, a1, false),
			mk("D (empty before, up an hour) serves 0-99", "D", place{slots: "slots 0-99"}, d1, false),
		}},
		{"reshard to an empty primary, the old owner now its replica", []step{
			mk("A serves 0-99", "A", place{slots: "slots 0-99"}, a1, false),
			mk("D (empty before, up an hour) serves 0-99, A its replica", "D", place{slots: "slots 0-99", replicas: []string{"A"}}, d1, false),
		}},
		{"reshard to a primary promoted long ago, serving slots at the previous check", []step{
			mk("A serves 0-99", "A", place{slots: "slots 0-99"}, a1, false),
			mk("B serves 100-200", "B", place{slots: "slots 100-200"}, b1, false),
			promote(mk("B, promoted long ago, serves 0-99", "B", place{slots: "slots 0-99"}, b1, false)),
		}},
		{"failover back to a primary seen before, not listed", []step{
			mk("A serves 0-99", "A", place{slots: "slots 0-99"}, a1, false),
			promote(mkKind("R, promoted, serves 0-99", "R", place{slots: "slots 0-99"}, r1, KindFailover)),
			mk("A, a replica, seen serving nothing", "A", place{}, a1, false),
			promote(mkKind("A, promoted, serves 0-99 again", "A", place{slots: "slots 0-99"}, a1, KindFailover)),
		}},
		{"reshard to a primary seen before", []step{
			mk("A serves 0-99", "A", place{slots: "slots 0-99"}, a1, false),
			mk("B serves 100-200", "B", place{slots: "slots 100-200"}, b1, false),
			mk("B serves 0-99 (fresh uptime, same process)", "B", place{slots: "slots 0-99"}, Server{RunID: "b1", Uptime: time.Second}, false),
		}},
		{"restart at the same address", []step{
			mk("A serves 0-99", "A", place{slots: "slots 0-99"}, a1, false),
			mkKind("A restarted", "A", place{slots: "slots 0-99"}, fresh, KindRestart),
		}},
		{"restart while its slots changed", []step{
			mk("A serves 0-99", "A", place{slots: "slots 0-99"}, a1, false),
			mkKind("A restarted, serves 0-50", "A", place{slots: "slots 0-50"}, fresh, KindRestart),
		}},
		{"restart at an address seen before, moved slots", []step{
			mk("A serves 0-99", "A", place{slots: "slots 0-99"}, a1, false),
			mk("B serves 100-200", "B", place{slots: "slots 100-200"}, b1, false),
			mkKind("B restarted, serves 0-99", "B", place{slots: "slots 0-99"}, Server{RunID: "b2", Uptime: time.Hour}, KindRestart),
		}},
		{"failover to the listed replica", []step{
			mk("A serves 0-99, R its replica", "A", place{slots: "slots 0-99", replicas: []string{"R"}}, a1, false),
			mkKind("R serves 0-99", "R", place{slots: "slots 0-99"}, r1, KindFailover),
		}},
		{"failover, the old primary now its replica", []step{
			mk("A serves 0-99", "A", place{slots: "slots 0-99"}, a1, false),
			promote(mkKind("R, promoted, serves 0-99, A its replica", "R", place{slots: "slots 0-99", replicas: []string{"A"}}, r1, KindFailover)),
		}},
		{"failover back to a primary seen before", []step{
			mk("A serves 0-99", "A", place{slots: "slots 0-99"}, a1, false),
			promote(mkKind("R, promoted, serves 0-99, A its replica", "R", place{slots: "slots 0-99", replicas: []string{"A"}}, r1, KindFailover)),
			mkKind("A serves 0-99 again, R its replica", "A", place{slots: "slots 0-99", replicas: []string{"R"}}, a1, KindFailover),
		}},
		{"failover to a replica not yet listed", []step{
			mk("A serves 0-99", "A", place{slots: "slots 0-99"}, a1, false),
			{name: "R, promoted, serves 0-99", addr: "R", p: place{slots: "slots 0-99"}, s: r1, change: true, kind: KindFailover, promoted: true},
		}},
		{"replaced by a server started since", []step{
			mk("A serves 0-99", "A", place{slots: "slots 0-99"}, a1, false),
			mkKind("N, up 1 s, serves 0-99", "N", place{slots: "slots 0-99"}, fresh, KindReplaced),
		}},
		{"node restarted as replica, then promoted at its address", []step{
			mk("A serves 0-99", "A", place{slots: "slots 0-99"}, a1, false),
			promote(mkKind("R, promoted, serves 0-99, A its replica", "R", place{slots: "slots 0-99", replicas: []string{"A"}}, r1, KindFailover)),
			{name: "A, restarted and promoted, serves 0-99", addr: "A", p: place{slots: "slots 0-99"}, s: fresh, change: true, kind: KindFailover, promoted: true},
		}},
		{"no slots known", []step{
			mk("A, slots unknown", "A", place{}, a1, false),
			mk("A, same process", "A", place{}, a1, false),
			mkKind("A restarted", "A", place{}, fresh, KindRestart),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := New(nil)
			for i, st := range tc.steps {
				c, got := w.observePrimary(t0.Add(time.Duration(i)*2*time.Second), st.addr, st.p, st.s, st.promoted)
				if got != st.change {
					t.Fatalf("%s: change %v (%+v), want %v", st.name, got, c, st.change)
				}
				if got && (c.Node != st.addr || c.Addr != st.addr || c.To != st.s || c.From == c.To || c.Kind != st.kind) {
					t.Fatalf("%s: change %+v, want a %v to %+v at %s", st.name, c, st.kind, st.s, st.addr)
				}
			}
		})
	}
}

// TestPrune: slot sets no primary serves any more are forgotten at once,
// addresses once no check has seen them for forgetAfter.
func TestPrune(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	w := New(nil)
	w.observePrimary(t0, "A", place{slots: "slots 0-99"}, Server{RunID: "a"}, false)
	w.observePrimary(t0, "B", place{slots: "slots 100-200"}, Server{RunID: "b"}, false)
	later := t0.Add(forgetAfter / 2)
	lay := layout{"B": {slots: "slots 0-200"}}
	w.observePrimary(later, "B", lay["B"], Server{RunID: "b"}, false)
	w.prune(later, lay)
	if _, ok := w.shards["slots 0-99"]; ok || len(w.shards) != 1 || len(w.nodes) != 2 {
		t.Fatalf("after a resharding: shards %v, nodes %v; want only B's slots 0-200, both addresses", w.shards, w.nodes)
	}
	end := t0.Add(forgetAfter + time.Second)
	w.observePrimary(end, "B", lay["B"], Server{RunID: "b"}, false)
	w.prune(end, lay)
	if _, ok := w.nodes["A"]; ok || len(w.nodes) != 1 {
		t.Fatalf("nodes %v after A was unseen for longer than %v, want B only", w.nodes, forgetAfter)
	}
}

// TestCheckClusterReshard: a real Cluster whose slots 0-99 are served by
// a fourth primary, then resharded whole (redis-cli --cluster reshard,
// MIGRATE) to a fifth that served none, is no change, though the fifth
// serves exactly the slot set with another run_id: the Watch counted
// it as a restart (a review). A primary restarted on its port still is.
func TestCheckClusterReshard(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := cl.Client(t)
	w, got := recordingWatch()
	reshardWhole(t, cl, c, w, nil, nil)
	if w.Changes() != 0 {
		t.Fatalf("%d changes after a resharding (%+v), want none", w.Changes(), got())
	}

	ctx := context.Background()
	cl.Nodes[1].Restart(t)
	waitFor(t, "the restart counted", func() bool { _ = w.Check(ctx, c); return w.Changes() > 0 })
	if ch := got(); len(ch) != 1 || ch[0].Node != cl.Addrs[1] || ch[0].From.RunID == ch[0].To.RunID || ch[0].Kind != KindRestart {
		t.Fatalf("changes %+v, want one restart, at %s", ch, cl.Addrs[1])
	}
}

// TestCheckClusterReshardReplicaMigration: TestCheckClusterReshard's
// resharding with replica migration on, Redis's default
// (cluster-allow-replica-migration yes): the fourth primary, its last
// slot gone, becomes the fifth's replica, and CLUSTER SLOTS lists it so.
// The Watch took the old owner listed as the new owner's replica for a
// failover (a review, 3 of 3 runs: floodgate_redis_restarts_total
// {kind="failover"} +1, RateLimitRedisFailedOver fired); it is no change.
// The check after the resharding waits for that listing, so that the
// test does not depend on how fast the replica syncs.
func TestCheckClusterReshardReplicaMigration(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := cl.Client(t)
	w, got := recordingWatch()
	reshardWhole(t, cl, c, w, func(n4, n5 *redistest.Server) {
		for _, n := range append(slices.Clone(cl.Nodes), n4, n5) {
			nc := n.Client(t)
			for _, kv := range [][2]string{{"cluster-allow-replica-migration", "yes"}, {"repl-diskless-sync-delay", "0"}} {
				if err := nc.ConfigSet(context.Background(), kv[0], kv[1]).Err(); err != nil {
					t.Fatalf("CONFIG SET %s %s on %s: %v", kv[0], kv[1], n.Addr, err)
				}
			}
		}
	}, func(n4, n5 *redistest.Server) {
		nodes := append(slices.Clone(cl.Nodes), n5)
		waitFor(t, "every node listing n4 as n5's replica", func() bool { return listedReplica(nodes, n5.Addr, n4.Addr) })
	})
	if w.Changes() != 0 {
		t.Fatalf("%d changes after a resharding, the old owner migrated as the new owner's replica (%+v), want none", w.Changes(), got())
	}
}

// recordingWatch returns a Watch and a function returning the changes it
// reported so far.
func recordingWatch() (*Watch, func() []Change) {
	var mu sync.Mutex
	var got []Change
	w := New(func(ch Change) { mu.Lock(); got = append(got, ch); mu.Unlock() })
	return w, func() []Change { mu.Lock(); defer mu.Unlock(); return slices.Clone(got) }
}

// reshardWhole adds two primaries to cl, n4 and n5, calls setup(n4, n5)
// (nil: none), reshards slots 0-99 to n4 and checks with w until it has
// seen n4 serve them, waits for n5 to have been up 2 s (as a primary
// joined before a resharding has: longer than checks are apart), then
// reshards all of n4's slots to n5, calls settled(n4, n5) (nil: none)
// and checks until w has seen n5 serve them.
func reshardWhole(t *testing.T, cl *redistest.Cluster, c *redis.ClusterClient, w *Watch, setup, settled func(n4, n5 *redistest.Server)) {
	t.Helper()
	n4, n5 := cl.AddPrimary(t), cl.AddPrimary(t)
	if setup != nil {
		setup(n4, n5)
	}
	redistest.Reshard(t, cl.Addrs[0], cl.Nodes[0], n4, 100)
	ctx := context.Background()
	n5c := n5.Client(t)
	waitFor(t, "n5 up 2 s", func() bool {
		info, err := n5c.Info(ctx, "server").Result()
		s, perr := Parse(info)
		return err == nil && perr == nil && s.Uptime >= 2*time.Second
	})
	key := "" // a key of slots 0-99
	for i := 0; key == ""; i++ {
		if slot, err := c.ClusterKeySlot(ctx, fmt.Sprint("k", i)).Result(); err != nil {
			t.Fatal(err)
		} else if slot < 100 {
			key = fmt.Sprint("k", i)
		}
	}
	// servedBy checks once the Cluster client's map has addr serving
	// slots 0-99.
	servedBy := func(addr string) bool {
		c.ReloadState(ctx)
		m, err := c.MasterForKey(ctx, key)
		return err == nil && m.Options().Addr == addr && w.Check(ctx, c) == nil
	}
	waitFor(t, "n4 seen serving slots 0-99", func() bool { return servedBy(n4.Addr) })
	redistest.Reshard(t, cl.Addrs[1], n4, n5, 100)
	if settled != nil {
		settled(n4, n5)
	}
	waitFor(t, "n5 seen serving slots 0-99", func() bool { return servedBy(n5.Addr) })
}

// listedReplica reports whether the CLUSTER SLOTS of every node of nodes
// lists replica as a replica of primary.
func listedReplica(nodes []*redistest.Server, primary, replica string) bool {
	for _, n := range nodes {
		nc := redis.NewClient(&redis.Options{Addr: n.Addr})
		//lint:ignore SA1019 the Watch reads CLUSTER SLOTS, so does this
		slots, err := nc.ClusterSlots(context.Background()).Result()
		_ = nc.Close()
		if err != nil || !slices.Contains(layoutOf(slots)[primary].replicas, replica) {
			return false
		}
	}
	return true
}

// waitFor polls cond every 100 ms until it holds, failing the test after
// 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30 s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPromoted: INFO replication's master_replid2 tells a primary
// promoted from replica.
func TestPromoted(t *testing.T) {
	for _, tc := range []struct {
		info string
		want bool
	}{
		{"# Replication\r\nrole:master\r\nmaster_replid:abc\r\nmaster_replid2:0000000000000000000000000000000000000000\r\nsecond_repl_offset:-1\r\n", false},
		{"# Replication\r\nrole:master\r\nmaster_replid:abc\r\nmaster_replid2:9f1c2e0000000000000000000000000000000000\r\nsecond_repl_offset:15\r\n", true},
		{"", false},
	} {
		if got := ParseReplication(tc.info).promoted(); got != tc.want {
			t.Errorf("ParseReplication(%q).promoted() = %v, want %v", tc.info, got, tc.want)
		}
	}
}
