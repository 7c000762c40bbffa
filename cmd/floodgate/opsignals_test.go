package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/plural"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/runwatch"
	"github.com/floodgate-rl/floodgate/metrics"
	"github.com/floodgate-rl/floodgate/server"
)

// logRecords returns the JSON records of logs whose message is msg.
func logRecords(logs, msg string) []map[string]any {
	var out []map[string]any
	for line := range strings.SplitSeq(logs, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// TestLogFallbacksRateLimited: serve's OnFallback writes one WARN line
// per reason per interval, with the reason and the error, and a
// decision held back costs no allocation.
func TestLogFallbacksRateLimited(t *testing.T) {
	var buf bytes.Buffer
	onFallback := logFallbacks(slog.New(slog.NewJSONHandler(&buf, nil)), time.Hour)
	refused := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	for range 50 {
		onFallback(fallback.ReasonUnavailable, refused)
	}
	onFallback(fallback.ReasonBreakerOpen, fallback.ErrBreakerOpen)
	recs := logRecords(buf.String(), fallbackLogMsg)
	if len(recs) != 2 {
		t.Fatalf("%d lines for 50 unavailable and 1 breaker_open decisions, want 2:\n%s", len(recs), buf.String())
	}
	if recs[0]["level"] != "WARN" || recs[0]["reason"] != "unavailable" || recs[0]["error"] != refused.Error() {
		t.Fatalf("first line %v, want WARN, reason unavailable, error %q", recs[0], refused)
	}
	if recs[1]["reason"] != "breaker_open" {
		t.Fatalf("second line %v, want reason breaker_open", recs[1])
	}
	if n := testing.AllocsPerRun(100, func() { onFallback(fallback.ReasonUnavailable, refused) }); n != 0 {
		t.Fatalf("a degraded decision not logged allocates %v times, want 0", n)
	}
}

// TestServeLogsDegradedDecisions: with Redis gone, serve's decisions
// taken by the fallback are logged at WARN with their reason and error,
// at most one line per reason per 10 s, the next line of a reason
// saying how many were not logged. An outside walk found 47 decisions
// fallen back (reason unavailable, Redis at maxclients) logged nowhere.
func TestServeLogsDegradedDecisions(t *testing.T) {
	rs := redistest.Start(t)
	svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--prefix", fmt.Sprintf("degradedlog%d", time.Now().UnixNano()))
	check := func() {
		post(t, svc.url+"/v1/check", server.CheckRequest{Policy: "api", Identity: map[string]string{"user": "u"}})
	}
	check()
	rs.Stop()
	start := time.Now()
	var first map[string]any
	waitUntil(t, "a degraded decision logged", func() bool {
		check()
		recs := logRecords(svc.Logs(), fallbackLogMsg)
		if len(recs) > 0 {
			first = recs[0]
		}
		return first != nil
	})
	if first["level"] != "WARN" || first["reason"] == nil || first["reason"] == "" || first["error"] == nil || first["error"] == "" {
		t.Fatalf("degraded decision logged as %v, want WARN with a reason and an error:\n%s", first, svc.Logs())
	}
	// The next line of a reason, 10 s on, says how many were held back.
	deadline := time.Now().Add(40 * time.Second)
	var again map[string]any
	for again == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no second line of a reason with a suppressed count:\n%s", svc.Logs())
		}
		check()
		time.Sleep(20 * time.Millisecond)
		seen := map[any]bool{}
		for _, rec := range logRecords(svc.Logs(), fallbackLogMsg) {
			if seen[rec["reason"]] {
				again = rec
				break
			}
			seen[rec["reason"]] = true
		}
	}
	if n, _ := again["suppressed"].(float64); n < 1 {
		t.Fatalf("second %s line %v: want a suppressed count of at least 1", again["reason"], again)
	}
	// At most one line per reason per 10 s (one more for the interval
	// under way).
	perReason := map[any]int{}
	for _, rec := range logRecords(svc.Logs(), fallbackLogMsg) {
		perReason[rec["reason"]]++
	}
	most := 2 + int(time.Since(start)/fallbackLogEvery)
	for r, n := range perReason {
		if n > most {
			t.Fatalf("%d lines of reason %v in %v, want at most %d:\n%s", n, r, time.Since(start), most, svc.Logs())
		}
	}
	svc.stop(t)
}

// TestServeNoticesRedisRestart: a Redis restarted on the same port
// without persistence (every counter gone) is logged at WARN with both
// run_ids and counted in floodgate_redis_restarts_total{kind="restart"};
// the three kinds are exported at 0 from the start. An outside walk
// saw the breaker open for a few seconds, then every counter at zero,
// and no metric, log line or alert say so.
func TestServeNoticesRedisRestart(t *testing.T) {
	rs := redistest.Start(t)
	admin := rs.Client(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("restartlog%d", time.Now().UnixNano())
	svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--prefix", prefix)
	waitBeats(t, admin, prefix)
	before, err := admin.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	wantRestarts(t, svc.url, 0, 0, 0, 0)
	rs.Restart(t)
	var rec map[string]any
	waitUntil(t, "the restart logged", func() bool {
		recs := restartRecords(svc.Logs())
		if len(recs) > 0 {
			rec = recs[0]
		}
		return len(recs) > 0
	})
	if rec["level"] != "WARN" || rec["kind"] != "restart" || rec["from_run_id"] == "" || rec["to_run_id"] == "" || rec["from_run_id"] == rec["to_run_id"] ||
		!strings.Contains(before, fmt.Sprintf("run_id:%v", rec["from_run_id"])) {
		t.Fatalf("restart logged as %v, want WARN, kind restart, from the run_id before (INFO said %q) to another", rec, before)
	}
	// Nothing persisted: the line says limits start over, and why.
	if rec["msg"] != redisRestartMsg+loadedNothingMsg || rec["loaded_keys"] != 0.0 || rec["aof"] != false {
		t.Fatalf("restart with nothing loaded logged as %v, want %q, loaded_keys 0, aof false", rec, redisRestartMsg+loadedNothingMsg)
	}
	wantRestarts(t, svc.url, 1, 0, 0, 0)
	if n := restartLines(svc.Logs()); n != 1 {
		t.Fatalf("%d restart lines for one restart:\n%s", n, svc.Logs())
	}

	// Saved, then restarted from its snapshot: the line said limits
	// start over though the counters were those of the save (a walk).
	if err := admin.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	rs.Restart(t)
	waitUntil(t, "the second restart logged", func() bool { return restartLines(svc.Logs()) >= 2 })
	rec = restartRecords(svc.Logs())[1]
	keys, _ := rec["loaded_keys"].(float64)
	if msg, _ := rec["msg"].(string); rec["kind"] != "restart" || keys < 1 || rec["aof"] != false ||
		msg != redisRestartMsg+fmt.Sprintf(loadedRDBMsg, plural.Count(int64(keys), "key", "keys")) || strings.Contains(msg, "start over") {
		t.Fatalf("restart from an RDB snapshot logged as %v, want kind restart, the keys it loaded, no 'start over'", rec)
	}
	wantRestarts(t, svc.url, 2, 0, 0, 0)
	svc.stop(t)
}

// TestServeNoticesRedisResync: a single Redis made a replica of an
// empty server, fully synced (every key gone) and promoted back, its
// run_id the same, is logged at WARN as a resync, with both replication
// IDs, and counted in floodgate_redis_restarts_total{kind="resync"}. An
// outside walk saw a user's remaining go from 89 back to 99 with
// nothing logged or counted (3 of 3 runs).
func TestServeNoticesRedisResync(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	admin := a.Client(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("resynclog%d", time.Now().UnixNano())
	svc := startService(t, "--redis", "redis://"+a.Addr+"/0", "--prefix", prefix)
	waitBeats(t, admin, prefix)
	repl, err := admin.Info(ctx, "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the full sync from the empty server", func() bool {
		info, err := admin.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	if err := admin.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the resync logged", func() bool { return restartLines(svc.Logs()) >= 1 })
	rec := restartRecords(svc.Logs())[0]
	if rec["level"] != "WARN" || rec["kind"] != "resync" || rec["msg"] != redisResyncMsg || rec["from_run_id"] != rec["to_run_id"] ||
		!strings.Contains(repl, fmt.Sprintf("master_replid:%v", rec["from_replid"])) || rec["to_replid2"] == rec["from_replid"] || rec["role"] != "master" {
		t.Fatalf("resync logged as %v, want WARN, kind resync, the same run_id, from the replication ID before (INFO said %q)", rec, repl)
	}
	wantRestarts(t, svc.url, 0, 0, 0, 1)
	if n := restartLines(svc.Logs()); n != 1 {
		t.Fatalf("%d lines of Redis changes for one resync:\n%s", n, svc.Logs())
	}
	svc.stop(t)
}

// TestRestartMsgPersistence: a restart's and a replacement's line say
// what the new process loaded; only one that loaded nothing says limits
// start over, one whose INFO persistence failed says neither, and one
// still loading its data says the keys loaded so far, not a final count
// or nothing (review4).
func TestRestartMsgPersistence(t *testing.T) {
	for _, tc := range []struct {
		name      string
		p         runwatch.Persistence
		has       string
		startOver bool
	}{
		{"unknown", runwatch.Persistence{}, "none without persistence", false},
		{"AOF", runwatch.Persistence{Known: true, AOF: true}, "none if this restart turned AOF on", false},
		{"RDB", runwatch.Persistence{Known: true, LoadedKeys: 12}, "it loaded 12 keys at its start (its RDB snapshot, or a full sync", false},
		{"nothing", runwatch.Persistence{Known: true}, "it loaded nothing", true},
		{"one key", runwatch.Persistence{Known: true, LoadedKeys: 1}, "it loaded 1 key at its start", false},
		// Still loading (review4): the keys so far, never a final count
		// or "nothing".
		{"loading", runwatch.Persistence{Known: true, Loading: true, LoadedKeys: 59484, LoadedPercent: 1.98},
			"it was still loading its data when checked: 59484 keys so far (1.98%); its counters, quotas and leases will be those it loads", false},
		{"loading, none yet", runwatch.Persistence{Known: true, Loading: true},
			"it was still loading its data when checked: 0 keys so far (0%); its counters", false},
		{"loading, no percentage", runwatch.Persistence{Known: true, Loading: true, LoadedKeys: 1, LoadedPercent: -1},
			"still loading its data when checked: 1 key so far; its counters", false},
		{"loading AOF", runwatch.Persistence{Known: true, Loading: true, AOF: true, LoadedPercent: 50},
			"it runs with AOF and was still loading its data when checked (50% of it): its counters, quotas and leases will be those its append-only file held", false},
	} {
		for _, k := range []runwatch.Kind{runwatch.KindRestart, runwatch.KindReplaced} {
			msg := restartMsg(k, tc.p)
			if !strings.Contains(msg, tc.has) || strings.Contains(msg, "start over") != tc.startOver {
				t.Errorf("%s, %v: %q, want %q, start over %v", tc.name, k, msg, tc.has, tc.startOver)
			}
			if tc.p.Loading && (strings.Contains(msg, "it loaded") || strings.Contains(msg, "nothing")) {
				t.Errorf("%s, %v: %q says what it loaded, though it was still loading", tc.name, k, msg)
			}
		}
		if restartMsg(runwatch.KindFailover, tc.p) != redisFailoverMsg {
			t.Errorf("%s: the failover's line depends on what it loaded", tc.name)
		}
	}
}

// TestServeRedisRestartKindsSentinel: behind Sentinel, a SENTINEL
// FAILOVER is logged and counted as a failover (its line does not say
// limits start over: the promoted replica holds what it replicated), a
// failover back too, and the first primary restarted on its port as a
// restart. A walk found every failover counted as a restart,
// RateLimitRedisRestarted firing on each planned one, though the counts
// carried over exactly.
func TestServeRedisRestartKindsSentinel(t *testing.T) {
	s := redistest.StartSentinel(t)
	prefix := fmt.Sprintf("restartkind%d", time.Now().UnixNano())
	svc := startService(t, "--redis-sentinel", strings.Join(s.SentinelAddrs, ","), "--redis-master", s.MasterName, "--prefix", prefix)
	waitBeats(t, s.Primary.Client(t), prefix)
	wantRestarts(t, svc.url, 0, 0, 0, 0)

	// wantLine waits for the n-th line of a Redis change and fails t
	// unless it is kind's, with its message, at the current primary.
	wantLine := func(n int, kind, msg string) {
		t.Helper()
		waitUntil(t, fmt.Sprintf("change %d logged", n), func() bool { return restartLines(svc.Logs()) >= n })
		recs := restartRecords(svc.Logs())
		if len(recs) < n || !strings.HasPrefix(fmt.Sprint(recs[n-1]["msg"]), msg) {
			t.Fatalf("no %q line as change %d:\n%s", msg, n, svc.Logs())
		}
		rec := recs[n-1]
		if rec["level"] != "WARN" || rec["kind"] != kind || rec["primary"] != s.Primary.Addr || restartLines(svc.Logs()) != n {
			t.Fatalf("change %d logged as %v, want WARN, kind %s, primary %s:\n%s", n, rec, kind, s.Primary.Addr, svc.Logs())
		}
	}
	s.Failover(t)
	wantLine(1, "failover", redisFailoverMsg)
	if strings.Contains(redisFailoverMsg, "start over") {
		t.Fatalf("the failover's line says limits start over: %q", redisFailoverMsg)
	}
	wantRestarts(t, svc.url, 0, 1, 0, 0)
	// Back to the first primary, the one started without --replicaof
	// (a restart of the other one comes back as a replica).
	s.Failover(t)
	wantLine(2, "failover", redisFailoverMsg)

	// The sentinels frozen for longer than their tilt trigger (2 s), so
	// that they do not fail the restarting primary over: they enter TILT
	// mode when thawed. The instance keeps the primary they named.
	thaw := s.FreezeSentinels(t)
	frozen := time.Now()
	s.Primary.Restart(t)
	time.Sleep(time.Until(frozen.Add(2500 * time.Millisecond)))
	thaw()
	wantLine(3, "restart", redisRestartMsg)
	wantRestarts(t, svc.url, 1, 2, 0, 0)
	svc.stop(t)
}

// TestRestartKindsExported: every kind runwatch reports has a series of
// floodgate_redis_restarts_total (metrics.RedisRestartKinds) and a line
// of its own.
func TestRestartKindsExported(t *testing.T) {
	msgs := map[string]bool{}
	for _, k := range runwatch.Kinds() {
		if !slices.Contains(metrics.RedisRestartKinds(), k.String()) {
			t.Errorf("kind %v has no series in %v", k, metrics.RedisRestartKinds())
		}
		msgs[restartMsg(k, runwatch.Persistence{})] = true
	}
	if len(msgs) != len(runwatch.Kinds()) || len(metrics.RedisRestartKinds()) != len(runwatch.Kinds()) {
		t.Fatalf("%d messages and %d series for %d kinds", len(msgs), len(metrics.RedisRestartKinds()), len(runwatch.Kinds()))
	}
	if strings.Contains(redisFailoverMsg, "start over") {
		t.Fatalf("the failover line says limits start over: %q", redisFailoverMsg)
	}
}

// restartLines counts logs' lines of Redis changes, of every kind.
func restartLines(logs string) int { return len(restartRecords(logs)) }

// restartRecords returns logs' lines of Redis changes, of every kind (a
// restart's and a replacement's messages end with what the new process
// loaded), in order.
func restartRecords(logs string) []map[string]any {
	var out []map[string]any
	for line := range strings.SplitSeq(logs, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		msg, _ := rec["msg"].(string)
		for _, prefix := range []string{redisRestartMsg, redisFailoverMsg, redisReplacedMsg, redisResyncMsg, redisResyncFailoverMsg} {
			if strings.HasPrefix(msg, prefix) {
				out = append(out, rec)
				break
			}
		}
	}
	return out
}

// waitBeats waits until the instance has beaten into prefix's set
// (through admin) three times: the restart check after the first has
// read the run_id.
func waitBeats(t *testing.T, admin *redis.Client, prefix string) {
	t.Helper()
	var scores []float64
	waitUntil(t, "three heartbeats", func() bool {
		z, err := admin.ZRangeWithScores(context.Background(), prefix+":instances", 0, -1).Result()
		if err == nil && len(z) == 1 && (len(scores) == 0 || scores[len(scores)-1] != z[0].Score) {
			scores = append(scores, z[0].Score)
		}
		return len(scores) >= 3
	})
}

// wantRestarts fails t unless the instance at url exports
// floodgate_redis_restarts_total at restart, failover, replaced and
// resync for those kinds.
func wantRestarts(t *testing.T, url string, restart, failover, replaced, resync float64) {
	t.Helper()
	for kind, want := range map[string]float64{"restart": restart, "failover": failover, "replaced": replaced, "resync": resync} {
		name := `floodgate_redis_restarts_total{kind="` + kind + `"}`
		if got := metricValue(t, url, name); got != want {
			t.Fatalf("%s %v, want %v", name, got, want)
		}
	}
}

// TestServeRedisRestartWhileLoading: a single Redis restarted from a
// 20,000-key snapshot and kept loading it (redistest.RestartLoading),
// with serve running. While it loads (INFO persistence loading:1),
// decisions are the fallback's and /readyz is 503 naming LOADING; the
// heartbeat fails (Redis refuses writes while it loads), so the restart
// check, run after each beat, has not yet read the new process. Once
// loaded, decisions are Redis's again, /readyz 200, and the one restart
// line says what it loaded: every key of the snapshot, loading false.
// Only unit tests of INFO replies covered a restart mid-load (review4).
func TestServeRedisRestartWhileLoading(t *testing.T) {
	rs := redistest.Start(t, "--enable-debug-command", "local")
	admin := rs.Client(t)
	ctx := context.Background()
	const keys = redistest.MinLoadingKeys
	if err := admin.Do(ctx, "DEBUG", "POPULATE", keys, "loading").Err(); err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("loadinglog%d", time.Now().UnixNano())
	svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--prefix", prefix)
	waitBeats(t, admin, prefix)
	check := func() server.CheckResponse {
		code, cr := post(t, svc.url+"/v1/check", server.CheckRequest{Policy: "api", Identity: map[string]string{"user": "loading"}})
		if code != 200 {
			t.Fatalf("check answered %d", code)
		}
		return cr
	}
	if cr := check(); cr.Degraded {
		t.Fatalf("a check before the restart was degraded: %+v", cr)
	}

	loading := rs.RestartLoading(t)
	waitUntil(t, "/readyz 503 naming LOADING while Redis loads", func() bool {
		code, body := readyz(t, svc.url)
		return code == 503 && strings.Contains(body, "LOADING")
	})
	waitUntil(t, "a decision by the fallback while Redis loads", func() bool { return check().Degraded })
	info, err := admin.Info(ctx, "persistence").Result()
	if err != nil || !strings.Contains(info, "loading:1") {
		t.Fatalf("Redis was done loading (%v) before the test had seen serve during it; INFO:\n%s", err, info)
	}

	loading.Finish(t)
	waitUntil(t, "/readyz 200 once Redis loaded", func() bool { code, _ := readyz(t, svc.url); return code == 200 })
	waitUntil(t, "a decision by Redis once it loaded", func() bool { return !check().Degraded })
	waitUntil(t, "the restart logged", func() bool { return restartLines(svc.Logs()) > 0 })
	rec := restartRecords(svc.Logs())[0]
	loaded, _ := rec["loaded_keys"].(float64)
	msg, _ := rec["msg"].(string)
	switch rec["loading"] {
	case false:
		// The usual case: checked after the first beat since it loaded.
		if rec["kind"] != "restart" || loaded < keys || msg != redisRestartMsg+fmt.Sprintf(loadedRDBMsg, plural.Count(int64(loaded), "key", "keys")) {
			t.Fatalf("restart logged as %v, want kind restart, loading false, at least %d keys loaded", rec, keys)
		}
	case true:
		// Only if the check after a beat of the old process met the new
		// one (its INFO retried across the restart): then it says so.
		if rec["kind"] != "restart" || loaded >= keys || !strings.Contains(msg, "it was still loading its data when checked: ") {
			t.Fatalf("restart logged as %v while loading, want kind restart, the keys so far, the still-loading line", rec)
		}
	default:
		t.Fatalf("restart logged as %v, without loading", rec)
	}
	wantRestarts(t, svc.url, 1, 0, 0, 0)
	if n := restartLines(svc.Logs()); n != 1 {
		t.Fatalf("%d restart lines for one restart:\n%s", n, svc.Logs())
	}
	svc.stop(t)
}
