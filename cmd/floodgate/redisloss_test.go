package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// TestServeRedisFailoverToResyncedReplica: behind Sentinel, the primary
// made a replica of another server, its replica fully synced from that
// server by chained replication and then promoted (SENTINEL FAILOVER),
// holds the other server's data: every counter gone. serve logs it at
// WARN as a resync with the failover's line of it (not "Redis failed
// over ...", "only the last moments lost"), both run_ids, the old
// primary's replication ID and the new one's, role master, and counts
// it in floodgate_redis_restarts_total{kind="resync"}. An outside walk
// (resync2, 2 of 2) saw remaining go from 89 to 99 and kind failover.
func TestServeRedisFailoverToResyncedReplica(t *testing.T) {
	s := redistest.StartSentinel(t)
	x := redistest.Start(t)
	ctx := context.Background()
	cp, cr, cx := s.Primary.Client(t), s.Replica.Client(t), x.Client(t)
	prefix := fmt.Sprintf("resyncfailover%d", time.Now().UnixNano())
	svc := startService(t, "--redis-sentinel", strings.Join(s.SentinelAddrs, ","), "--redis-master", s.MasterName, "--prefix", prefix)
	waitBeats(t, cp, prefix)
	check := func() server.CheckResponse {
		code, cr := post(t, svc.url+"/v1/check", server.CheckRequest{Policy: "api", Identity: map[string]string{"user": "resync2"}})
		if code != 200 {
			t.Fatalf("check answered %d", code)
		}
		return cr
	}
	first := check()
	for range 9 {
		check()
	}
	repl, err := cp.Info(ctx, "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := cx.Set(ctx, "x", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(x.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the replica synced with the other server's data", func() bool {
		n, err := cr.DBSize(ctx).Result()
		return err == nil && n == 1 && cr.Exists(ctx, "x").Val() == 1
	})
	xrepl, err := cx.Info(ctx, "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	s.Failover(t)
	waitUntil(t, "the change logged", func() bool { return restartLines(svc.Logs()) >= 1 })
	rec := restartRecords(svc.Logs())[0]
	if rec["level"] != "WARN" || rec["kind"] != "resync" || rec["msg"] != redisResyncFailoverMsg || rec["primary"] != s.Primary.Addr ||
		rec["from_run_id"] == rec["to_run_id"] || rec["role"] != "master" ||
		!strings.Contains(repl, fmt.Sprintf("master_replid:%v", rec["from_replid"])) || !strings.Contains(xrepl, fmt.Sprintf("master_replid:%v", rec["to_replid2"])) {
		t.Fatalf("failover to a replica of another server's data logged as %v, want WARN, kind resync, %q at %s, from the old primary's replication ID (INFO said %q) to the other server's as master_replid2 (%q)",
			rec, redisResyncFailoverMsg, s.Primary.Addr, repl, xrepl)
	}
	wantRestarts(t, svc.url, 0, 0, 0, 1)
	// The counters are gone: the walk's remaining back at the limit.
	waitUntil(t, "decisions on the new primary", func() bool { return !check().Degraded })
	if after := check(); after.Remaining <= first.Remaining-9 {
		t.Fatalf("remaining %d after the failover, %d at the first check of 10 before: the counters were not lost, the case is not reproduced", after.Remaining, first.Remaining)
	}
	if n := restartLines(svc.Logs()); n != 1 {
		t.Fatalf("%d lines of Redis changes for one failover:\n%s", n, svc.Logs())
	}
	svc.stop(t)
}

// TestServeRedisRestartAOFLine: a single Redis with AOF restarted
// reloads its counters from the append-only file, and the line says it
// runs with AOF and gives no loaded_keys: Redis 7.0's
// rdb_last_load_keys_loaded counts only the keys of the file's RDB base
// (none before a rewrite). A walk saw "loaded_keys":0,"aof":true with 5
// keys restored.
func TestServeRedisRestartAOFLine(t *testing.T) {
	rs := redistest.Start(t, "--appendonly", "yes")
	admin := rs.Client(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("aofline%d", time.Now().UnixNano())
	svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--prefix", prefix)
	waitBeats(t, admin, prefix)
	for i := range 5 {
		if err := admin.Set(ctx, fmt.Sprintf("aof%d", i), "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rs.Restart(t)
	waitUntil(t, "the restart logged", func() bool { return restartLines(svc.Logs()) >= 1 })
	rec := restartRecords(svc.Logs())[0]
	if n, err := admin.Exists(ctx, "aof0", "aof1", "aof2", "aof3", "aof4").Result(); err != nil || n != 5 {
		t.Fatalf("%d of 5 keys after the restart, %v: the append-only file did not restore them, the case is not reproduced", n, err)
	}
	if _, ok := rec["loaded_keys"]; ok || rec["kind"] != "restart" || rec["aof"] != true || rec["loading"] != false || rec["msg"] != redisRestartMsg+loadedAOFMsg {
		t.Fatalf("restart with AOF logged as %v, want kind restart, aof true, loading false, %q, no loaded_keys", rec, redisRestartMsg+loadedAOFMsg)
	}
	svc.stop(t)
}

// TestServeNoticesRedisResyncWritableReplica: a single Redis with
// replica-read-only no made a replica of another server and fully
// synced is reported while still a replica (its heartbeat, and the
// check after it, succeed there): the line says role slave. The line
// and the docs said "and promoted", "once it is promoted".
func TestServeNoticesRedisResyncWritableReplica(t *testing.T) {
	a, b := redistest.Start(t, "--replica-read-only", "no"), redistest.Start(t)
	admin := a.Client(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("resyncreplica%d", time.Now().UnixNano())
	svc := startService(t, "--redis", "redis://"+a.Addr+"/0", "--prefix", prefix)
	waitBeats(t, admin, prefix)
	host, port, err := net.SplitHostPort(b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the resync logged", func() bool { return restartLines(svc.Logs()) >= 1 })
	rec := restartRecords(svc.Logs())[0]
	if rec["kind"] != "resync" || rec["msg"] != redisResyncMsg || rec["role"] != "slave" || strings.Contains(redisResyncMsg, "and promoted") {
		t.Fatalf("resync of a writable replica logged as %v, want kind resync, role slave, %q without 'and promoted'", rec, redisResyncMsg)
	}
	if info, err := admin.Info(ctx, "replication").Result(); err != nil || !strings.Contains(info, "role:slave") {
		t.Fatalf("INFO replication %q, %v after the line: want a replica still", info, err)
	}
	wantRestarts(t, svc.url, 0, 0, 0, 1)
	svc.stop(t)
}
