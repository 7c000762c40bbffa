package runwatch

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestResynced: the same process's replication IDs tell a resync (its
// history replaced by another server's) from a history continued.
func TestResynced(t *testing.T) {
	const zeros = "0000000000000000000000000000000000000000"
	x := Replication{Role: "master", ID: "x", ID2: zeros}
	for _, tc := range []struct {
		name      string
		prev, now Replication
		want      bool
	}{
		{"unchanged", x, x, false},
		{"full sync seen as a replica", x, Replication{Role: "slave", ID: "y", ID2: zeros}, true},
		{"full sync, then promoted", x, Replication{Role: "master", ID: "z", ID2: "y"}, true},
		{"demoted, promoted before any sync", x, Replication{Role: "master", ID: "z", ID2: "x"}, false},
		{"partial resync with a primary promoted since, seen as a replica", x, Replication{Role: "slave", ID: "y", ID2: "x"}, false},
		{"a primary's first replica: a new backlog, a new ID, master_replid2 cleared", x, Replication{Role: "master", ID: "x2", ID2: zeros}, false},
		{"demoted, not synced yet", x, Replication{Role: "slave", ID: "x", ID2: zeros}, false},
		{"replication IDs not known before", Replication{}, Replication{ID: "y", ID2: zeros}, false},
		{"replication IDs not known now", x, Replication{}, false},
	} {
		if got := resynced(tc.prev, tc.now); got != tc.want {
			t.Errorf("%s: resynced(%+v, %+v) = %v, want %v", tc.name, tc.prev, tc.now, got, tc.want)
		}
	}
}

// TestParseReplication reads role and replication IDs from INFO
// replication.
func TestParseReplication(t *testing.T) {
	got := ParseReplication("# Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\nmaster_replid:abc\r\nmaster_replid2:def\r\nsecond_repl_offset:-1\r\n")
	if want := (Replication{Role: "slave", ID: "abc", ID2: "def"}); got != want {
		t.Fatalf("ParseReplication = %+v, want %+v", got, want)
	}
	if got := ParseReplication(""); got != (Replication{}) {
		t.Fatalf("ParseReplication of nothing = %+v, want zero", got)
	}
}

// TestCheckResync: a single Redis made a replica of another (empty)
// server, fully synced and promoted back (REPLICAOF host port, then
// REPLICAOF NO ONE), is the same process with every key gone: a change
// of kind resync, reported once. An outside walk saw serve's counters
// start over (remaining 89, then 99) with the same run_id and nothing
// logged or counted. Made a replica again and checked while a replica,
// the full sync is seen then, and the promotion after it is no second
// change.
func TestCheckResync(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ca, cb := a.Client(t), b.Client(t)
	ctx := context.Background()
	var got []Change
	var mu sync.Mutex
	w := New(func(c Change) { mu.Lock(); got = append(got, c); mu.Unlock() })
	changes := func() []Change { mu.Lock(); defer mu.Unlock(); return append([]Change(nil), got...) }
	for _, k := range []string{"k1", "k2", "k3"} {
		if err := ca.Set(ctx, k, "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	check(t, w, ca)
	before := replicationInfo(t, ca)

	replicaOf(t, ca, b.Addr)
	waitSynced(t, ca)
	promote(t, ca)
	if n, err := ca.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("after the full sync from an empty server: %d keys, %v; want 0, the case is not reproduced", n, err)
	}
	check(t, w, ca)
	c := changes()
	if len(c) != 1 || c[0].Kind != KindResync || c[0].From.RunID != c[0].To.RunID || c[0].FromRepl.ID != before.ID || c[0].ToRepl.ID2 == before.ID {
		t.Fatalf("changes %+v after a full sync from another server, want one resync of the same run_id from replication ID %s", c, before.ID)
	}
	check(t, w, ca)
	if n := len(changes()); n != 1 || w.ChangesOf(KindResync) != 1 || w.Changes() != 1 {
		t.Fatalf("%d changes (%d resyncs) after a check with nothing new, want the one resync", n, w.ChangesOf(KindResync))
	}

	// Checked while a replica, its full sync done.
	if err := cb.Set(ctx, "b", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	replicaOf(t, ca, b.Addr)
	waitSynced(t, ca)
	check(t, w, ca)
	if c := changes(); len(c) != 2 || c[1].Kind != KindResync || c[1].ToRepl.Role != "slave" {
		t.Fatalf("changes %+v after a full sync seen as a replica, want a second resync", c)
	}
	promote(t, ca)
	check(t, w, ca)
	if n := w.Changes(); n != 2 || w.ChangesOf(KindResync) != 2 {
		t.Fatalf("%d changes after the promotion that followed the resync seen, want 2 (no new one)", n)
	}
}

// TestCheckDemotedNotSynced: a primary made a replica of a server that
// never answers (so no sync happens) and promoted back keeps its data:
// no change, while a replica nor after (the walk's case where REPLICAOF
// NO ONE came before the sync finished and nothing was lost).
func TestCheckDemotedNotSynced(t *testing.T) {
	a := redistest.Start(t)
	ca := a.Client(t)
	ctx := context.Background()
	mute := redistest.Mute(t)
	w := New(nil)
	if err := ca.Set(ctx, "k", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	check(t, w, ca)
	replicaOf(t, ca, mute)
	if r := replicationInfo(t, ca); r.Role != "slave" {
		t.Fatalf("role %q after REPLICAOF, want slave", r.Role)
	}
	check(t, w, ca)
	promote(t, ca)
	check(t, w, ca)
	if n, err := ca.DBSize(ctx).Result(); err != nil || n != 1 {
		t.Fatalf("%d keys, %v after a demotion with no sync, want 1", n, err)
	}
	if w.Changes() != 0 {
		t.Fatalf("%d changes after a demotion and promotion with no sync, want none", w.Changes())
	}
}

// TestCheckFailoverAndBackChecked: a primary given its first replica
// (a new replication backlog: a new master_replid, master_replid2
// cleared), the replica promoted, the primary made its replica (a
// partial resync: the same history continued) and promoted back, with a
// check between each step, is no change: the data was never another
// server's. The first replica alone was taken for a resync by a rule
// that did not ask for a replica or a master_replid2.
func TestCheckFailoverAndBackChecked(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ca, cb := a.Client(t), b.Client(t)
	ctx := context.Background()
	w := New(nil)
	if err := ca.Set(ctx, "k", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	check(t, w, ca)
	replicaOf(t, cb, a.Addr)
	waitSynced(t, cb)
	waitFor(t, "the replica caught up", func() bool { n, err := cb.DBSize(ctx).Result(); return err == nil && n == 1 })
	old := replicationInfo(t, ca)
	promote(t, cb)
	check(t, w, ca)
	replicaOf(t, ca, b.Addr)
	waitSynced(t, ca)
	if r := replicationInfo(t, ca); r.ID2 != old.ID {
		t.Fatalf("the old primary's replication after REPLICAOF its promoted replica: %+v, want master_replid2 %s (a partial resync); the case is not reproduced", r, old.ID)
	}
	check(t, w, ca)
	promote(t, ca)
	check(t, w, ca)
	if w.Changes() != 0 {
		t.Fatalf("%d changes after a failover and back with the history continued, want none", w.Changes())
	}
}

// check runs w.Check on c and fails t on an error.
func check(t *testing.T, w *Watch, c *redis.Client) {
	t.Helper()
	if err := w.Check(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

// replicationInfo returns c's INFO replication, parsed.
func replicationInfo(t *testing.T, c *redis.Client) Replication {
	t.Helper()
	reply, err := c.Info(context.Background(), "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	return ParseReplication(reply)
}

// replicaOf makes c's server a replica of the server at addr.
func replicaOf(t *testing.T, c *redis.Client, addr string) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ReplicaOf(context.Background(), host, port).Err(); err != nil {
		t.Fatal(err)
	}
}

// promote makes c's server a primary (REPLICAOF NO ONE).
func promote(t *testing.T, c *redis.Client) {
	t.Helper()
	if err := c.ReplicaOf(context.Background(), "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
}

// waitSynced waits until c's server, a replica, has its link to its
// primary up: its sync done.
func waitSynced(t *testing.T, c *redis.Client) {
	t.Helper()
	waitFor(t, "the replica's link up", func() bool {
		reply, err := c.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(reply, "master_link_status:up")
	})
}
