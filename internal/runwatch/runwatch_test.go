package runwatch

import (
	"context"
	"errors"
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
	if got[0].From.RunID != "a" || got[0].To.RunID != "b" || got[0].Node != "" {
		t.Fatalf("first change %+v, want a to b at node \"\"", got[0])
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
	if w.Changes() != 1 {
		t.Fatalf("%d changes after a restart, want 1", w.Changes())
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
	if len(got) != 1 || got[0].Node != replica.Addr || got[0].From.RunID == got[0].To.RunID {
		t.Fatalf("changes %+v, want one, to %s", got, replica.Addr)
	}
}
