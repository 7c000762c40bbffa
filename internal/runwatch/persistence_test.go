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
		// Still loading: the keys so far, and how far it got.
		{"loading", srv + "loading:1\r\nasync_loading:0\r\nrdb_last_load_keys_loaded:7\r\naof_enabled:0\r\nloading_loaded_perc:12.50\r\n", "abc", Persistence{Known: true, Loading: true, LoadedKeys: 7, LoadedPercent: 12.5}},
		{"loading, none yet", srv + "loading:1\r\nrdb_last_load_keys_loaded:0\r\naof_enabled:0\r\nloading_loaded_perc:0.00\r\n", "abc", Persistence{Known: true, Loading: true}},
		{"async loading", srv + "loading:0\r\nasync_loading:1\r\nrdb_last_load_keys_loaded:5\r\naof_enabled:0\r\nloading_loaded_perc:40.00\r\n", "abc", Persistence{Known: true, Loading: true, LoadedKeys: 5, LoadedPercent: 40}},
		{"loading AOF", srv + "loading:1\r\nrdb_last_load_keys_loaded:0\r\naof_enabled:1\r\nloading_loaded_perc:3.00\r\n", "abc", Persistence{Known: true, Loading: true, AOF: true, LoadedPercent: 3}},
		{"loading, no percentage", srv + "loading:1\r\nrdb_last_load_keys_loaded:9\r\naof_enabled:0\r\n", "abc", Persistence{Known: true, Loading: true, LoadedKeys: 9, LoadedPercent: -1}},
		{"loading, bad percentage", srv + "loading:1\r\nrdb_last_load_keys_loaded:9\r\naof_enabled:0\r\nloading_loaded_perc:250\r\n", "abc", Persistence{Known: true, Loading: true, LoadedKeys: 9, LoadedPercent: -1}},
		{"done loading", srv + "loading:0\r\nasync_loading:0\r\nrdb_last_load_keys_loaded:9\r\naof_enabled:0\r\n", "abc", Persistence{Known: true, LoadedKeys: 9}},
	} {
		if got := parsePersistence(tc.info, tc.runID); got != tc.want {
			t.Errorf("%s: parsePersistence = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestParsePersistenceWhileLoading: an INFO server+persistence reply
// from a real Redis 7.0.15 restarted with a 3,000,000-key dump.rdb,
// taken 0.05 s after its start while it loaded it (review4,
// testdata/info_loading.txt: loading:1, 59,484 keys so far, 1.98%). It
// was read as Known with 59,484 keys loaded, and serve's restart line
// said so (caught earlier, "it loaded nothing: limits start over"); it
// is a process still loading, its keys those loaded so far.
func TestParsePersistenceWhileLoading(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "info_loading.txt"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse(string(b))
	if err != nil {
		t.Fatal(err)
	}
	got := parsePersistence(string(b), s.RunID)
	want := Persistence{Known: true, Loading: true, LoadedKeys: 59484, LoadedPercent: 1.98}
	if got != want {
		t.Fatalf("parsePersistence of a reply with loading:1 = %+v, want %+v", got, want)
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
	if !ParseReplication(repl).promoted() {
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

// TestCheckRestartWhileLoading: a real redis-server restarted from a
// 20,000-key snapshot, checked while it still loads it (INFO
// persistence loading:1), is a restart still loading, its keys those
// loaded so far; a Watch that saw the same process before and checks
// once it is done loading sees the restart with all the keys loaded.
// Only unit tests of INFO replies covered it (review4).
func TestCheckRestartWhileLoading(t *testing.T) {
	rs := redistest.Start(t, "--enable-debug-command", "local")
	c := rs.Client(t)
	ctx := context.Background()
	var early, late []Change
	var mu sync.Mutex
	wEarly := New(func(ch Change) { mu.Lock(); early = append(early, ch); mu.Unlock() })
	wLate := New(func(ch Change) { mu.Lock(); late = append(late, ch); mu.Unlock() })
	for _, w := range []*Watch{wEarly, wLate} {
		if err := w.Check(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	const keys = redistest.MinLoadingKeys
	if err := c.Do(ctx, "DEBUG", "POPULATE", keys, "loading").Err(); err != nil {
		t.Fatal(err)
	}
	loading := rs.RestartLoading(t)
	if err := wEarly.Check(ctx, c); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(early) != 1 || early[0].Kind != KindRestart {
		mu.Unlock()
		t.Fatalf("changes %+v checked while loading, want one restart", early)
	}
	p := early[0].Persistence
	mu.Unlock()
	if !p.Known || !p.Loading || p.AOF || p.LoadedKeys < 0 || p.LoadedKeys >= keys || p.LoadedPercent < 0 || p.LoadedPercent >= 100 {
		t.Fatalf("persistence %+v checked while loading %d keys, want Known, Loading, the keys so far and a percentage below 100", p, keys)
	}

	loading.Finish(t)
	if err := wLate.Check(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := wEarly.Check(ctx, c); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(late) != 1 || late[0].Kind != KindRestart || late[0].To.RunID != early[0].To.RunID {
		t.Fatalf("changes %+v checked once loaded, want the restart seen while loading (%+v)", late, early)
	}
	if want := (Persistence{Known: true, LoadedKeys: keys}); late[0].Persistence != want {
		t.Fatalf("persistence %+v checked once loaded, want %+v", late[0].Persistence, want)
	}
	if len(early) != 1 {
		t.Fatalf("changes %+v: the restart seen while loading was reported again once loaded", early)
	}
}
