package runwatch

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestObservePrimary: steps of Cluster primaries seen at addresses,
// serving slot sets, at instants 2 s apart, and whether each is a
// change. A slot set moved whole to a primary that was one already, or
// that was up before the previous check, is a resharding; the replica
// listed for it, a primary whose old owner now replicates it, or a
// server started since is a failover or a replacement (a review: a
// resharding to an empty primary was counted as a restart).
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
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"reshard to an empty primary", []step{
			mk("A serves 0-99", "A", place{slots: "slots 0-99"}, a1, false),
			mk("D (empty before, up an hour) serves 0-99", "D", place{slots: "slots 0-99"}, d1, false),
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
			mkKind("R serves 0-99, A its replica", "R", place{slots: "slots 0-99", replicas: []string{"A"}}, r1, KindFailover),
		}},
		{"failover back to a primary seen before", []step{
			mk("A serves 0-99", "A", place{slots: "slots 0-99"}, a1, false),
			mkKind("R serves 0-99, A its replica", "R", place{slots: "slots 0-99", replicas: []string{"A"}}, r1, KindFailover),
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
			mkKind("R serves 0-99, A its replica", "R", place{slots: "slots 0-99", replicas: []string{"A"}}, r1, KindFailover),
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
	n4, n5 := cl.AddPrimary(t), cl.AddPrimary(t)
	redistest.Reshard(t, cl.Addrs[0], cl.Nodes[0], n4, 100)
	c := cl.Client(t)
	var got []Change
	var mu sync.Mutex
	w := New(func(ch Change) { mu.Lock(); got = append(got, ch); mu.Unlock() })
	ctx := context.Background()
	// n5, empty, has been up longer than the checks are apart, as a
	// primary joined before a resharding is.
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
	waitFor(t, "n5 seen serving slots 0-99", func() bool { return servedBy(n5.Addr) })
	if w.Changes() != 0 {
		t.Fatalf("%d changes after a resharding (%+v), want none", w.Changes(), got)
	}

	cl.Nodes[1].Restart(t)
	waitFor(t, "the restart counted", func() bool { _ = w.Check(ctx, c); return w.Changes() > 0 })
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].Node != cl.Addrs[1] || got[0].From.RunID == got[0].To.RunID || got[0].Kind != KindRestart {
		t.Fatalf("changes %+v, want one restart, at %s", got, cl.Addrs[1])
	}
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
		if got := promoted(tc.info); got != tc.want {
			t.Errorf("promoted(%q) = %v, want %v", tc.info, got, tc.want)
		}
	}
}
