package runwatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, info string
		want       Server
		err        bool
	}{
		{"redis", "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\ntcp_port:6380\r\nuptime_in_seconds:42\r\n", Server{RunID: "abc123", Uptime: 42 * time.Second}, false},
		{"no run_id", "uptime_in_seconds:7\n", Server{Uptime: 7 * time.Second}, false},
		{"neither", "# Server\r\nredis_version:7.0.15\r\n", Server{}, true},
		{"empty", "", Server{}, true},
		{"bad uptime", "run_id:x\nuptime_in_seconds:-1\n", Server{}, true},
		{"huge uptime", "run_id:x\nuptime_in_seconds:99999999999999999\n", Server{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.info)
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("Parse = %+v, %v; want %+v, error %v", got, err, tc.want, tc.err)
			}
		})
	}
	if _, err := Parse("x:y"); !errors.Is(err, ErrNoIdentity) {
		t.Fatalf("Parse without identity: %v, want ErrNoIdentity", err)
	}
}

// TestObserve: steps of servers seen at nodes, and whether each is a
// change.
func TestObserve(t *testing.T) {
	var got []Change
	w := New(func(c Change) { got = append(got, c) })
	for _, step := range []struct {
		name   string
		node   string
		s      Server
		change bool
	}{
		{"first sight", "", Server{RunID: "a", Uptime: 10 * time.Second}, false},
		{"same process", "", Server{RunID: "a", Uptime: 12 * time.Second}, false},
		{"restarted", "", Server{RunID: "b", Uptime: time.Second}, true},
		{"failover to an older server", "", Server{RunID: "c", Uptime: time.Hour}, true},
		{"another node, first sight", "n2:1", Server{RunID: "a"}, false},
		{"no run_id, first sight", "n3:1", Server{Uptime: 50 * time.Second}, false},
		{"no run_id, uptime on", "n3:1", Server{Uptime: 52 * time.Second}, false},
		{"no run_id, uptime backwards", "n3:1", Server{Uptime: 2 * time.Second}, true},
	} {
		if c := w.Observe(step.node, step.s); c != step.change {
			t.Fatalf("%s: Observe = %v, want %v", step.name, c, step.change)
		}
	}
	if w.Changes() != 3 || len(got) != 3 {
		t.Fatalf("Changes() = %d, %d reported; want 3", w.Changes(), len(got))
	}
	if got[0].From.RunID != "a" || got[0].To.RunID != "b" || got[0].Node != "" || got[0].Kind != KindRestart {
		t.Fatalf("first change %+v, want a restart from a to b at node \"\"", got[0])
	}
}

// TestSingleKind: a single Redis's or a Sentinel group's change is a
// failover when the new server was promoted from replica (at the same
// address: and up before the previous check), a replacement when it is
// at another known address, a restart otherwise: every change was a
// restart, a Sentinel failover included, whose counters carried over (a
// walk); then a primary restarted from an RDB snapshot taken with a
// replica attached, whose master_replid2 is set, was a failover (a walk,
// single Redis and Sentinel, 3 of 3 runs).
func TestSingleKind(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to string
		a        arrived
		want     Kind
	}{
		{"single Redis restarted", "", "", arrived{}, KindRestart},
		{"single Redis restarted from an RDB saved with a replica", "", "", arrived{promoted: true}, KindRestart},
		{"single Redis, a fresh server up since before behind its address", "", "", arrived{upBefore: true}, KindRestart},
		{"single Redis, a replica promoted behind its address", "", "", arrived{promoted: true, upBefore: true}, KindFailover},
		{"Sentinel primary restarted", "a:1", "a:1", arrived{}, KindRestart},
		{"Sentinel primary restarted from an RDB saved with a replica", "a:1", "a:1", arrived{promoted: true}, KindRestart},
		{"Sentinel, a replica promoted behind the same address", "a:1", "a:1", arrived{promoted: true, upBefore: true}, KindFailover},
		{"Sentinel, same address, up before, not promoted", "a:1", "a:1", arrived{upBefore: true}, KindRestart},
		{"Sentinel failover", "a:1", "b:1", arrived{promoted: true}, KindFailover},
		{"Sentinel failover to a replica up long", "a:1", "b:1", arrived{promoted: true, upBefore: true}, KindFailover},
		{"Sentinel failover back to a primary not yet demoted", "b:1", "a:1", arrived{seenThere: true, upBefore: true}, KindFailover},
		{"Sentinel primary replaced by a fresh server", "a:1", "c:1", arrived{}, KindReplaced},
		{"Sentinel primary replaced by a server up long, not a replica", "a:1", "c:1", arrived{upBefore: true}, KindReplaced},
		{"Sentinel, address not known before", "", "b:1", arrived{}, KindRestart},
		{"Sentinel, address not known before, promoted", "", "b:1", arrived{promoted: true}, KindFailover},
		{"Sentinel, address not known now", "a:1", "", arrived{}, KindRestart},
		// A promoted replica whose history is not the old primary's
		// (resync2: reported as a failover though every counter was gone).
		{"Sentinel failover to a replica of another server's history", "a:1", "b:1", arrived{promoted: true, otherHistory: true}, KindResync},
		{"Sentinel failover back to a primary seen there, another history", "b:1", "a:1", arrived{promoted: true, otherHistory: true, seenThere: true}, KindFailover},
		{"single Redis, a replica of another server's history promoted behind its address", "", "", arrived{promoted: true, otherHistory: true, upBefore: true}, KindResync},
		{"single Redis restarted from an RDB saved with a replica, another history", "", "", arrived{promoted: true, otherHistory: true}, KindRestart},
	} {
		if got := singleKind(tc.from, tc.to, tc.a); got != tc.want {
			t.Errorf("%s: singleKind(%q, %q, %+v) = %v, want %v", tc.name, tc.from, tc.to, tc.a, got, tc.want)
		}
	}
}

// TestUpBefore: a process is up before a check only when its uptime
// exceeds the time since by more than a second.
func TestUpBefore(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		uptime, since time.Duration
		want          bool
	}{
		{0, 2 * time.Second, false},
		{3 * time.Second, 2 * time.Second, false},
		{3 * time.Second, 2*time.Second - time.Millisecond, true},
		{time.Hour, 2 * time.Second, true},
		{time.Hour, 2 * time.Hour, false},
	} {
		if got := upBefore(Server{RunID: "x", Uptime: tc.uptime}, t0, t0.Add(tc.since)); got != tc.want {
			t.Errorf("upBefore(uptime %v, %v since) = %v, want %v", tc.uptime, tc.since, got, tc.want)
		}
	}
}

// TestObserveSentinel: steps of a Sentinel group's primaries, by
// address, and the kind of each change; addresses unseen for
// forgetAfter are forgotten.
func TestObserveSentinel(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	a1, b1, a2, c1 := Server{RunID: "a1"}, Server{RunID: "b1"}, Server{RunID: "a2"}, Server{RunID: "c1"}
	a3 := Server{RunID: "a3", Uptime: time.Second}
	a4 := Server{RunID: "a4", Uptime: time.Hour}
	var got []Change
	w := New(func(c Change) { got = append(got, c) })
	for i, st := range []struct {
		name     string
		addr     string
		s        Server
		promoted bool
		at       time.Duration
		want     Kind // -1: no change
	}{
		{"A, first sight", "A", a1, false, 0, -1},
		{"B promoted", "B", b1, true, time.Second, KindFailover},
		{"back to A, never demoted", "A", a1, false, 2 * time.Second, KindFailover},
		{"A restarted", "A", a2, false, 3 * time.Second, KindRestart},
		{"A restarted from an RDB saved with a replica", "A", a3, true, 4 * time.Second, KindRestart},
		{"a replica up long promoted behind A", "A", a4, true, 5 * time.Second, KindFailover},
		{"C, fresh, not a replica", "C", c1, false, 6 * time.Second, KindReplaced},
		{"back to A, forgotten since", "A", a4, false, 6*time.Second + forgetAfter + time.Second, KindReplaced},
	} {
		n := len(got)
		var repl Replication
		if st.promoted {
			repl.ID2 = "9f1c2e"
		}
		w.observe("", st.addr, st.s, repl, t0.Add(st.at))
		switch {
		case st.want < 0 && len(got) != n:
			t.Fatalf("step %d, %s: change %+v, want none", i, st.name, got[n])
		case st.want >= 0 && (len(got) != n+1 || got[n].Kind != st.want || got[n].Addr != st.addr):
			t.Fatalf("step %d, %s: changes %+v, want a %v at %s", i, st.name, got[n:], st.want, st.addr)
		}
	}
	if len(w.primaries) != 1 {
		t.Fatalf("%d addresses remembered after the others were unseen for %v, want 1", len(w.primaries), forgetAfter)
	}
}

// TestKindString: the kinds' names are the metric's label values.
func TestKindString(t *testing.T) {
	var got []string
	for _, k := range Kinds() {
		got = append(got, k.String())
	}
	if want := []string{"restart", "failover", "replaced", "resync"}; !slices.Equal(got, want) || Kind(7).String() != "unknown" {
		t.Fatalf("kinds %v (Kind(7) %q), want %v and unknown", got, Kind(7).String(), want)
	}
	w := New(nil)
	if w.ChangesOf(Kind(-1)) != 0 || w.ChangesOf(Kind(7)) != 0 {
		t.Fatal("ChangesOf a value that is no Kind is not 0")
	}
}

// TestCheckRestart: a real redis-server restarted on the same port is
// another run_id.
func TestCheckRestart(t *testing.T) {
	rs := redistest.Start(t)
	c := rs.Client(t)
	ctx := context.Background()
	w := New(nil)
	if err := w.Check(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := w.Check(ctx, c); err != nil || w.Changes() != 0 {
		t.Fatalf("second check of the same server: %v, %d changes; want none", err, w.Changes())
	}
	rs.Restart(t)
	if err := w.Check(ctx, c); err != nil {
		t.Fatal(err)
	}
	if w.Changes() != 1 || w.ChangesOf(KindRestart) != 1 {
		t.Fatalf("%d changes (%d restarts) after a restart, want 1 restart", w.Changes(), w.ChangesOf(KindRestart))
	}
}

// TestCheckSentinel: behind a real Sentinel group, a SENTINEL FAILOVER
// is a change of kind failover at the promoted replica's address (INFO
// replication's master_replid2), and so is a failover back to the first
// primary; that primary restarted on its port is a restart. Every
// change was counted as a restart, and the failover's line said limits
// start over though its counters carried over (a walk: 60 admitted
// before, 40 after, limit 100).
func TestCheckSentinel(t *testing.T) {
	s := redistest.StartSentinel(t)
	c := s.FailoverClient(t)
	var got []Change
	var mu sync.Mutex
	w := New(func(ch Change) { mu.Lock(); got = append(got, ch); mu.Unlock() })
	ctx := context.Background()
	primary := func() string { return s.Primary.Addr }
	if err := w.CheckPrimary(ctx, c, primary); err != nil {
		t.Fatal(err)
	}
	// wantLast waits for the n-th change and fails t unless it is of
	// kind k at the current primary.
	wantLast := func(n int, k Kind) {
		t.Helper()
		waitFor(t, fmt.Sprintf("change %d seen", n), func() bool { _ = w.CheckPrimary(ctx, c, primary); return w.Changes() >= int64(n) })
		mu.Lock()
		defer mu.Unlock()
		if len(got) != n || got[n-1].Kind != k || got[n-1].Addr != s.Primary.Addr || got[n-1].Node != "" {
			t.Fatalf("changes %+v, want a %v to %s last", got, k, s.Primary.Addr)
		}
	}
	s.Failover(t)
	wantLast(1, KindFailover)
	// Back to the first primary, the one started without --replicaof
	// (a restart of the other one comes back as a replica).
	s.Failover(t)
	wantLast(2, KindFailover)

	// The sentinels frozen for longer than their tilt trigger (2 s), so
	// that they do not fail the restarting primary over: they enter TILT
	// mode when thawed.
	thaw := s.FreezeSentinels(t)
	frozen := time.Now()
	s.Primary.Restart(t)
	time.Sleep(time.Until(frozen.Add(2500 * time.Millisecond)))
	thaw()
	wantLast(3, KindRestart)
	if w.ChangesOf(KindFailover) != 2 || w.ChangesOf(KindRestart) != 1 || w.ChangesOf(KindReplaced) != 0 {
		t.Fatalf("changes by kind %d %d %d, want 1 restart, 2 failovers", w.ChangesOf(KindRestart), w.ChangesOf(KindFailover), w.ChangesOf(KindReplaced))
	}
}

// TestCheckCluster: each primary of a Cluster is observed by its
// address.
func TestCheckCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := cl.Client(t)
	w := New(nil)
	if err := w.Check(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	n, shards := len(w.nodes), len(w.shards)
	_, single := w.nodes[""]
	w.mu.Unlock()
	if n < 3 || shards < 3 || single {
		t.Fatalf("%d nodes observed (single node: %v), want each of the Cluster's primaries by address", n, single)
	}
}

// TestCheckClusterFailover: a replica promoted in its primary's place
// (CLUSTER FAILOVER, at another address) is a change, reported with the
// new primary's address; the Watch keyed primaries by address, so a
// Cluster failover went uncounted though the docs said it was (a review).
func TestCheckClusterFailover(t *testing.T) {
	cl := redistest.StartCluster(t)
	replica := cl.AddReplica(t, 0)
	c := cl.Client(t)
	var got []Change
	var mu sync.Mutex
	w := New(func(ch Change) { mu.Lock(); got = append(got, ch); mu.Unlock() })
	ctx := context.Background()
	if err := w.Check(ctx, c); err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer rc.Close()
	if err := rc.ClusterFailover(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.ReloadState(ctx)
		_ = w.Check(ctx, c)
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica's promotion was never reported")
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].Node != replica.Addr || got[0].From.RunID == got[0].To.RunID || got[0].Kind != KindFailover {
		t.Fatalf("changes %+v, want one failover, to %s", got, replica.Addr)
	}
}
