package runwatch

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestParsePersistence: INFO persistence's aof_enabled and
// rdb_last_load_keys_loaded, for the process named, and nothing known
// from a reply of another process or without the fields.
func TestParsePersistence(t *testing.T) {
	const srv = "# Server\r\nrun_id:abc\r\nuptime_in_seconds:3\r\n# Persistence\r\n"
	for _, tc := range []struct {
		name, info, runID string
		want              Persistence
	}{
		{"RDB loaded", srv + "rdb_last_load_keys_loaded:42\r\naof_enabled:0\r\n", "abc", Persistence{Known: true, LoadedKeys: 42}},
		{"nothing loaded", srv + "rdb_last_load_keys_loaded:0\r\naof_enabled:0\r\n", "abc", Persistence{Known: true}},
		{"AOF", srv + "rdb_last_load_keys_loaded:0\r\naof_enabled:1\r\n", "abc", Persistence{Known: true, AOF: true}},
		// The keys of its RDB preamble: the line's loaded_keys said 0 (a walk).
		{"AOF with keys", srv + "rdb_last_load_keys_loaded:2\r\naof_enabled:1\r\n", "abc", Persistence{Known: true, AOF: true, LoadedKeys: 2}},
		{"AOF, no keys field", srv + "aof_enabled:1\r\n", "abc", Persistence{Known: true, AOF: true}},
		{"another process", srv + "rdb_last_load_keys_loaded:0\r\naof_enabled:0\r\n", "xyz", Persistence{}},
		{"no keys field (before 7.0)", srv + "aof_enabled:0\r\n", "abc", Persistence{}},
		{"no aof field", srv + "rdb_last_load_keys_loaded:3\r\n", "abc", Persistence{}},
		{"bad keys", srv + "rdb_last_load_keys_loaded:-3\r\naof_enabled:0\r\n", "abc", Persistence{}},
		{"bad aof", srv + "rdb_last_load_keys_loaded:3\r\naof_enabled:yes\r\n", "abc", Persistence{}},
		{"empty", "", "abc", Persistence{}},
	} {
		if got := parsePersistence(tc.info, tc.runID); got != tc.want {
			t.Errorf("%s: parsePersistence = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestCheckRestartFromRDBWithReplica: a real primary with a replica
// attached, saved (SAVE) and restarted on its port from that snapshot,
// shows the replication ID it wrote into it as master_replid2; it was
// counted as a failover, and logged as one (a walk, 3 of 3 runs). It is
// a restart, whose Persistence says it loaded its keys; restarted again
// with no snapshot, it loaded nothing.
func TestCheckRestartFromRDBWithReplica(t *testing.T) {
	rs := redistest.Start(t)
	redistest.StartReplica(t, rs)
	c := rs.Client(t)
	ctx := context.Background()
	var got []Change
	var mu sync.Mutex
	w := New(func(ch Change) { mu.Lock(); got = append(got, ch); mu.Unlock() })
	if err := w.Check(ctx, c); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"k1", "k2", "k3"} {
		if err := c.Set(ctx, k, "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	rs.Restart(t)
	repl, err := c.Info(ctx, "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !promoted(repl) {
		t.Fatalf("the primary restarted from its snapshot shows no master_replid2, the case is not reproduced:\n%s", repl)
	}
	if err := w.Check(ctx, c); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(got) != 1 || got[0].Kind != KindRestart {
		mu.Unlock()
		t.Fatalf("changes %+v after a restart from an RDB snapshot, want one restart", got)
	}
	if p := got[0].Persistence; !p.Known || p.AOF || p.LoadedKeys != 3 {
		mu.Unlock()
		t.Fatalf("persistence %+v after loading 3 keys from the snapshot, want 3 keys loaded, no AOF", p)
	}
	mu.Unlock()

	rs.Stop()
	if err := os.Remove(filepath.Join(rs.Dir, "dump.rdb")); err != nil {
		t.Fatal(err)
	}
	rs.Restart(t)
	if err := w.Check(ctx, c); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[1].Kind != KindRestart || got[1].Persistence != (Persistence{Known: true}) {
		t.Fatalf("changes %+v, want a second restart that loaded nothing", got)
	}
}
