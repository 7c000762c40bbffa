package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ctxT returns a context that ends after d or when the test ends.
func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestStartKillRestart(t *testing.T) {
	t.Parallel()
	s := Start(t, "--maxmemory", "10mb")
	if s.Port == sharedPort || s.Addr != fmt.Sprintf("127.0.0.1:%d", s.Port) {
		t.Fatalf("unexpected address %s (port %d)", s.Addr, s.Port)
	}
	c := s.Client(t)
	ctx := ctxT(t, 20*time.Second)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := c.ConfigGet(ctx, "maxmemory").Result(); err != nil || got["maxmemory"] != "10485760" {
		t.Fatalf("extra args not applied: CONFIG GET maxmemory = %v, %v", got, err)
	}
	if got, err := c.ConfigGet(ctx, "save").Result(); err != nil || got["save"] != "" {
		t.Fatalf("CONFIG GET save = %v, %v; want empty", got, err)
	}

	port, pid := s.Port, s.Pid
	s.Kill()
	pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	if err := c.Ping(pctx).Err(); err == nil {
		t.Fatalf("PING answered after Kill")
	}
	cancel()

	s.Restart(t)
	if s.Port != port || s.Pid == pid || s.Pid == 0 {
		t.Fatalf("after Restart: port %d (was %d), pid %d (was %d)", s.Port, port, s.Pid, pid)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k after Restart = %v, want redis.Nil (nothing is persisted)", err)
	}

	// Stop then Restart works too, and Stop is idempotent.
	s.Stop()
	s.Stop()
	if log, err := os.ReadFile(s.LogFile); err != nil || !strings.Contains(string(log), "User requested shutdown") {
		t.Fatalf("Stop did not shut the server down with SHUTDOWN (%v); log:\n%s", err, log)
	}
	s.Restart(t)
	if err := c.Set(ctx, "k2", "v2", 0).Err(); err != nil {
		t.Fatalf("SET after Stop+Restart: %v", err)
	}
}

func TestLaunchReportsTakenPort(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := newServer(t, nil)
	s.Port = l.Addr().(*net.TCPAddr).Port
	s.Addr = l.Addr().String()
	err = s.launch()
	var se *startError
	if !errors.As(err, &se) || !se.portTaken {
		t.Fatalf("launch on a taken port: %v; want a startError with portTaken", err)
	}
	if !strings.Contains(err.Error(), "tail of") {
		t.Fatalf("error does not quote the log: %v", err)
	}
}

// fatalRecorder is a testing.TB whose Fatalf records the message and ends
// the goroutine, like the real one does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestStartFailureQuotesLog(t *testing.T) {
	t.Parallel()
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(rec, "--no-such-directive", "1")
	}()
	<-done
	if !strings.Contains(rec.msg, "no-such-directive") || !strings.Contains(rec.msg, "tail of") {
		t.Fatalf("Fatalf message does not quote the server's complaint:\n%s", rec.msg)
	}
}

func TestStartRejectsManagedArgs(t *testing.T) {
	t.Parallel()
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(rec, "--port", "6379")
	}()
	<-done
	if !strings.Contains(rec.msg, "managed by redistest") {
		t.Fatalf("Start with --port did not fail as expected: %q", rec.msg)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	c := StartCluster(t)
	cc := c.Client(t)
	ctx := ctxT(t, 20*time.Second)

	//lint:ignore SA1019 CLUSTER SLOTS is deprecated but still served by Redis 7 and lists each range's primary first, which is all this needs.
	ranges, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatalf("CLUSTER SLOTS: %v", err)
	}
	owner := func(slot int64) string {
		s := int(slot)
		for _, r := range ranges {
			if s >= r.Start && s <= r.End {
				return r.Nodes[0].Addr
			}
		}
		t.Fatalf("slot %d is not served", slot)
		return ""
	}

	// redis-cli assigns the slot ranges in the order of the nodes given.
	for i, slot := range []int64{0, 5461, 10923} {
		if got := owner(slot); got != c.Nodes[i].Addr {
			t.Fatalf("slot %d served by %s, want Nodes[%d] %s", slot, got, i, c.Nodes[i].Addr)
		}
	}

	// One key per node, each with its own hash tag.
	keyOf := map[string]string{} // node addr -> key
	for i := 0; len(keyOf) < len(c.Nodes) && i < 1000; i++ {
		key := fmt.Sprintf("{tag%d}:k", i)
		slot, err := cc.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT: %v", err)
		}
		if _, ok := keyOf[owner(slot)]; !ok {
			keyOf[owner(slot)] = key
		}
	}
	if len(keyOf) != len(c.Nodes) {
		t.Fatalf("hash tags landed on %d nodes, want %d", len(keyOf), len(c.Nodes))
	}

	for _, n := range c.Nodes {
		key, ok := keyOf[n.Addr]
		if !ok {
			t.Fatalf("node %s serves none of the keys: %v", n.Addr, keyOf)
		}
		if err := cc.Set(ctx, key, n.Addr, 0).Err(); err != nil {
			t.Fatalf("cluster SET %s: %v", key, err)
		}
		if got, err := cc.Get(ctx, key).Result(); err != nil || got != n.Addr {
			t.Fatalf("cluster GET %s = %q, %v", key, got, err)
		}
	}
	// Each key lives on its own node: that node serves it, the others redirect.
	for _, n := range c.Nodes {
		nc := n.Client(t)
		for addr, key := range keyOf {
			got, err := nc.Get(ctx, key).Result()
			if addr == n.Addr {
				if err != nil || got != addr {
					t.Fatalf("GET %s on its node %s = %q, %v", key, addr, got, err)
				}
			} else if err == nil || !strings.HasPrefix(err.Error(), "MOVED") {
				t.Fatalf("GET %s on %s (not its node %s) = %q, %v; want MOVED", key, n.Addr, addr, got, err)
			}
		}
	}

	// AuditTTL scans every primary: the three keys, one per node, were
	// written without a TTL and each is reported; with TTLs, none is.
	rec := &errorRecorder{TB: t}
	if n := AuditTTL(rec, cc, "{tag*}:k"); n != len(c.Nodes) || len(rec.msgs) != len(c.Nodes) {
		t.Fatalf("AuditTTL on the cluster saw %d keys and reported %d (%q), want %d and %d", n, len(rec.msgs), rec.msgs, len(c.Nodes), len(c.Nodes))
	}
	for _, key := range keyOf {
		if err := cc.PExpire(ctx, key, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rec = &errorRecorder{TB: t}
	if n := AuditTTL(rec, cc, "{tag*}:k"); n != len(c.Nodes) || len(rec.msgs) != 0 {
		t.Fatalf("AuditTTL after PEXPIRE saw %d keys and reported %q, want %d and nothing", n, rec.msgs, len(c.Nodes))
	}
}

// errorRecorder is a testing.TB whose Errorf records the message.
type errorRecorder struct {
	testing.TB
	mu   sync.Mutex
	msgs []string
}

func (e *errorRecorder) Errorf(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.msgs = append(e.msgs, fmt.Sprintf(format, args...))
}

func TestAuditTTL(t *testing.T) {
	t.Parallel()
	c := Start(t).Client(t)
	ctx := ctxT(t, 20*time.Second)
	if err := c.Set(ctx, "audit:ttl", "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ZAdd(ctx, "audit:forever", redis.Z{Score: 1, Member: "m"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "other:forever", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	rec := &errorRecorder{TB: t}
	n := AuditTTL(rec, c, "audit:*")
	if n != 2 || len(rec.msgs) != 1 || !strings.Contains(rec.msgs[0], `"audit:forever"`) || !strings.Contains(rec.msgs[0], "no TTL") {
		t.Fatalf("AuditTTL saw %d keys and reported %q; want 2 keys and audit:forever alone", n, rec.msgs)
	}
}

func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t)
	fc := s.FailoverClient(t)
	ctx := ctxT(t, 30*time.Second)

	if err := fc.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatalf("SET before failover: %v", err)
	}
	if n, err := fc.Do(ctx, "WAIT", 1, 2000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica = %d, %v", n, err)
	}

	oldPrimary, oldReplica := s.Primary, s.Replica
	start := time.Now()
	s.Failover(t)
	t.Logf("failover took %v", time.Since(start))
	if s.Primary != oldReplica || s.Replica != oldPrimary {
		t.Fatalf("Failover did not swap Primary and Replica")
	}

	// The failover client follows the sentinels to the new primary; early
	// writes may still hit the old one, which is demoted soon.
	var err error
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = fc.Set(ctx, "after", "2", 0).Err(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("SET after failover: %v", err)
	}
	if got, err := fc.Get(ctx, "before").Result(); err != nil || got != "1" {
		t.Fatalf("GET before through the failover client = %q, %v", got, err)
	}
	pc := s.Primary.Client(t)
	if got, err := pc.Get(ctx, "after").Result(); err != nil || got != "2" {
		t.Fatalf("GET after on the new primary %s = %q, %v", s.Primary.Addr, got, err)
	}
	role, err := pc.Do(ctx, "ROLE").Slice()
	if err != nil || len(role) == 0 || role[0] != "master" {
		t.Fatalf("ROLE of the new primary = %v, %v", role, err)
	}
}

// TestRestartLoading: a server restarted by RestartLoading answers INFO
// with loading:1 and PING with LOADING, for as long as the test looks,
// then, after Finish, PING and all its keys.
func TestRestartLoading(t *testing.T) {
	t.Parallel()
	s := Start(t, "--enable-debug-command", "local")
	c := s.Client(t)
	ctx := ctxT(t, 30*time.Second)
	if err := c.Do(ctx, "DEBUG", "POPULATE", MinLoadingKeys, "loadtest").Err(); err != nil {
		t.Fatal(err)
	}
	pid := s.Pid
	l := s.RestartLoading(t)
	if s.Pid == pid {
		t.Fatalf("pid %d unchanged by RestartLoading", pid)
	}
	admin := adminClient(s.Addr)
	defer admin.Close()
	// Looked at twice, with a PING between: loading both times.
	for range 2 {
		info, err := admin.Info(ctx, "persistence").Result()
		if err != nil {
			t.Fatal(err)
		}
		if infoField(info, "loading") != "1" {
			t.Fatalf("INFO persistence after RestartLoading:\n%s", info)
		}
		if err := admin.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "LOADING") {
			t.Fatalf("PING while loading = %v, want a LOADING error", err)
		}
	}
	l.Finish(t)
	if n, err := c.DBSize(ctx).Result(); err != nil || n != MinLoadingKeys {
		t.Fatalf("DBSIZE after Finish = %d, %v; want %d", n, err, MinLoadingKeys)
	}
	info, err := admin.Info(ctx, "persistence").Result()
	if err != nil || infoField(info, "rdb_last_load_keys_loaded") != fmt.Sprint(MinLoadingKeys) {
		t.Fatalf("INFO persistence after Finish = %v:\n%s", err, info)
	}
	// A plain Restart afterwards loads at full speed.
	s.Restart(t)
	if n, err := c.DBSize(ctx).Result(); err != nil || n != MinLoadingKeys {
		t.Fatalf("DBSIZE after Restart = %d, %v; want %d", n, err, MinLoadingKeys)
	}
}
