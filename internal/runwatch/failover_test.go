package runwatch

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestObserveFailoverHistory: a promoted replica whose master_replid2 is
// the old primary's master_replid at the previous check is a failover;
// one whose master_replid2 is another history's replicated another
// server: a resync, with both replication IDs, at another address and,
// for a replica up before behind a single Redis's address, at the same.
// A previous check that read no replication IDs leaves a failover, and so
// does one that saw the old primary demoted by FAILOVER TO the new one
// (sharing its IDs), which was taken for a resync (review14).
func TestObserveFailoverHistory(t *testing.T) {
	const zeros = "0000000000000000000000000000000000000000"
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var got []Change
	w := New(func(c Change) { got = append(got, c) })
	long := time.Hour
	for i, st := range []struct {
		name string
		node string
		addr string
		s    Server
		repl Replication
		want Kind // -1: no change
	}{
		{"A, first sight", "", "A", Server{RunID: "a", Uptime: long}, Replication{Role: "master", ID: "ra", ID2: zeros}, -1},
		{"B promoted, A's history", "", "B", Server{RunID: "b", Uptime: long}, Replication{Role: "master", ID: "rb", ID2: "ra"}, KindFailover},
		{"C promoted, another history", "", "C", Server{RunID: "c", Uptime: long}, Replication{Role: "master", ID: "rc", ID2: "rx"}, KindResync},
		{"single Redis, first sight", "single", "", Server{RunID: "s", Uptime: long}, Replication{Role: "master", ID: "rs", ID2: zeros}, -1},
		{"single Redis, a replica of another history promoted behind it", "single", "", Server{RunID: "t", Uptime: long}, Replication{Role: "master", ID: "rt", ID2: "ry"}, KindResync},
		{"single Redis, a replica of its history promoted behind it", "single", "", Server{RunID: "u", Uptime: long}, Replication{Role: "master", ID: "ru", ID2: "rt"}, KindFailover},
		{"single Redis, unknown IDs", "single", "", Server{RunID: "v", Uptime: long}, Replication{}, KindRestart},
		{"single Redis, promoted after a check with no IDs", "single", "", Server{RunID: "w", Uptime: long}, Replication{Role: "master", ID: "rw", ID2: "rz"}, KindFailover},
		{"single Redis, demoted by FAILOVER TO its replica, seen as the replica", "single", "", Server{RunID: "w", Uptime: long}, Replication{Role: "slave", ID: "rv", ID2: "rw"}, -1},
		{"single Redis, that replica promoted behind it: the same IDs", "single", "", Server{RunID: "x", Uptime: long}, Replication{Role: "master", ID: "rv", ID2: "rw"}, KindFailover},
	} {
		n := len(got)
		w.observe(st.node, st.addr, st.s, st.repl, t0.Add(time.Duration(i)*time.Second))
		switch {
		case st.want < 0 && len(got) != n:
			t.Fatalf("step %d, %s: change %+v, want none", i, st.name, got[n])
		case st.want >= 0 && (len(got) != n+1 || got[n].Kind != st.want):
			t.Fatalf("step %d, %s: changes %+v, want a %v", i, st.name, got[n:], st.want)
		}
	}
	if c := got[1]; c.FromRepl.ID != "rb" || c.ToRepl.ID2 != "rx" || c.ToRepl.ID != "rc" {
		t.Fatalf("resync by failover %+v, want from replication ID rb (B's) to rc, rx", c)
	}
	if c := got[0]; c.FromRepl != (Replication{}) || c.ToRepl != (Replication{}) {
		t.Fatalf("failover %+v carries replication IDs, want none", c)
	}
}

// TestCheckSentinelFailoverToResynced: behind a real Sentinel group, the
// primary made a replica of another server (REPLICAOF), its replica
// following it by chained replication and fully synced from that server,
// then the replica promoted (SENTINEL FAILOVER; the walk waited ~25 s
// for the sentinels to see the primary report itself a replica) is a
// resync at the new primary's address: every key is the other server's.
// An outside walk (resync2, 2 of 2) saw it reported as a failover, "only
// the last moments lost", and remaining go from 89 back to 99.
func TestCheckSentinelFailoverToResynced(t *testing.T) {
	s := redistest.StartSentinel(t)
	x := redistest.Start(t)
	c := s.FailoverClient(t)
	cp, cr, cx := s.Primary.Client(t), s.Replica.Client(t), x.Client(t)
	ctx := context.Background()
	for _, k := range []string{"k1", "k2", "k3"} {
		if err := cp.Set(ctx, k, "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cx.Set(ctx, "x", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var got []Change
	var mu sync.Mutex
	w := New(func(ch Change) { mu.Lock(); got = append(got, ch); mu.Unlock() })
	primary := func() string { return s.Primary.Addr }
	if err := w.CheckPrimary(ctx, c, primary); err != nil {
		t.Fatal(err)
	}
	before := replicationInfo(t, cp)

	replicaOf(t, cp, x.Addr)
	// The other server draws a new master_replid when the primary, its
	// first replica, attaches: its ID is read once the data is there.
	waitFor(t, "the replica synced with the other server's data by chained replication", func() bool {
		n, err := cr.DBSize(ctx).Result()
		return err == nil && n == 1 && cr.Exists(ctx, "x").Val() == 1
	})
	xid := replicationInfo(t, cx).ID
	if r := replicationInfo(t, cr); r.ID != xid {
		t.Fatalf("the replica's replication %+v, want the other server's ID %s; the case is not reproduced", r, xid)
	}
	s.Failover(t)
	waitFor(t, "the change seen", func() bool { _ = w.CheckPrimary(ctx, c, primary); return w.Changes() >= 1 })
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].Kind != KindResync || got[0].Addr != s.Primary.Addr || got[0].From.RunID == got[0].To.RunID ||
		got[0].FromRepl.ID != before.ID || got[0].ToRepl.ID2 != xid {
		t.Fatalf("changes %+v, want one resync to %s from replication ID %s, the new primary's master_replid2 %s (the other server's)", got, s.Primary.Addr, before.ID, xid)
	}
}

// TestCheckSentinelKilledPrimary: behind a real Sentinel group, the
// primary killed (SIGKILL) and its replica promoted by the sentinels is
// a failover: the promoted replica's master_replid2 is the old
// primary's master_replid at the previous check.
func TestCheckSentinelKilledPrimary(t *testing.T) {
	s := redistest.StartSentinel(t)
	c := s.FailoverClient(t)
	ctx := context.Background()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.SentinelAddrs[0]})
	t.Cleanup(func() { _ = sc.Close() })
	named := func() string {
		addr, err := sc.GetMasterAddrByName(ctx, s.MasterName).Result()
		if err != nil || len(addr) != 2 {
			return ""
		}
		return net.JoinHostPort(addr[0], addr[1])
	}
	w := New(nil)
	if err := w.CheckPrimary(ctx, c, named); err != nil {
		t.Fatal(err)
	}
	s.Primary.Kill()
	waitFor(t, "the sentinels' failover to the replica", func() bool { return named() == s.Replica.Addr })
	waitFor(t, "the change seen", func() bool { _ = w.CheckPrimary(ctx, c, named); return w.Changes() >= 1 })
	if w.Changes() != 1 || w.ChangesOf(KindFailover) != 1 {
		t.Fatalf("%d changes (%d failovers, %d resyncs) after the primary was killed and its replica promoted, want 1 failover",
			w.Changes(), w.ChangesOf(KindFailover), w.ChangesOf(KindResync))
	}
}

// TestCheckCoordinatedFailoverDemotedChecked: a coordinated FAILOVER TO
// the replica, with a check of the old primary once it is the new one's
// replica (it then shares the new primary's replication IDs), then a
// check of the new primary at its address, is a failover: the same
// history. Taking the new primary's master_replid2 alone for the history
// reported it as a resync, every counter gone, while the data had all
// been kept (review14, 4 of 4).
func TestCheckCoordinatedFailoverDemotedChecked(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ca, cb := a.Client(t), b.Client(t)
	ctx := context.Background()
	if err := ca.Set(ctx, "k", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var got []Change
	w := New(func(ch Change) { got = append(got, ch) })
	replicaOf(t, cb, a.Addr)
	waitSynced(t, cb)
	waitFor(t, "the replica caught up", func() bool { n, err := cb.DBSize(ctx).Result(); return err == nil && n == 1 })
	if err := w.CheckPrimary(ctx, ca, func() string { return a.Addr }); err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Do(ctx, "FAILOVER", "TO", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the old primary a replica of the new one", func() bool {
		return replicationInfo(t, ca).Role == "slave" && replicationInfo(t, cb).Role == "master"
	})
	waitSynced(t, ca)
	demoted, promoted := replicationInfo(t, ca), replicationInfo(t, cb)
	if demoted.ID != promoted.ID {
		t.Fatalf("the demoted primary's replication %+v, the new primary's %+v: want the same master_replid; the case is not reproduced", demoted, promoted)
	}
	if err := w.CheckPrimary(ctx, ca, func() string { return a.Addr }); err != nil {
		t.Fatal(err)
	}
	if err := w.CheckPrimary(ctx, cb, func() string { return b.Addr }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Kind != KindFailover || got[0].Addr != b.Addr {
		t.Fatalf("changes %+v, want one failover to %s", got, b.Addr)
	}
	if cb.Get(ctx, "k").Val() != "1" {
		t.Fatal("the new primary lost the key: not the case meant")
	}
}
