package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/clocksync"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/server"
)

// TestServeHTTPUsesServiceClock checks that serve's HTTP API stamps every
// time it sends to Redis or returns with the service's clock (the one
// --clock-sync disciplines), not the raw local one: with --clock-offset
// 1h and no sync, a check's reset, a lease's expiry, a quota
// reservation's hold in Redis and, with Redis down, the local fallback's
// reset all lie an hour ahead. (The quotas and leases take the clock from
// the limiter: server.Options.Clock is left to its default.)
func TestServeHTTPUsesServiceClock(t *testing.T) {
	rs := redistest.Start(t)
	prefix := fmt.Sprintf("httpclock%d", time.Now().UnixNano())
	svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--prefix", prefix, "--clock-sync=false", "--clock-offset", "1h",
		"--fallback-budget", "5s", "--decision-timeout", "10s") // the built-in configuration: api, llm-tokens, reports
	defer svc.stop(t)
	before := time.Now()
	// within fails t unless got lies between before and now, both an hour
	// ahead, plus ahead (what the time adds to the decision's instant),
	// give or take slack (rounding to the second or millisecond, a
	// sliding window's reset within its window).
	within := func(what string, got time.Time, ahead, slack time.Duration) {
		t.Helper()
		lo, hi := before.Add(time.Hour+ahead-slack), time.Now().Add(time.Hour+ahead+slack)
		if got.Before(lo) || got.After(hi) {
			t.Errorf("%s: %v, want between %v and %v (the service's clock, an hour ahead)", what, got.UTC(), lo.UTC(), hi.UTC())
		}
	}
	postJSON := func(path string, body, out any) {
		t.Helper()
		data, _ := json.Marshal(body)
		resp, err := http.Post(svc.url+path, "application/json", bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, raw)
		}
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s: decoding %s: %v", path, raw, err)
		}
	}

	var c server.CheckResponse
	postJSON("/v1/check", server.CheckRequest{Policy: "api", Identity: map[string]string{"user": "u"}}, &c)
	if c.Degraded {
		t.Fatalf("check degraded with Redis up: %+v", c)
	}
	// The edge layer, a fixed window of a minute, resets at the end of
	// the service's minute.
	within("check: edge layer's reset", edgeReset(t, c), 0, time.Minute)

	var acq server.AcquireResponse
	postJSON("/v1/concurrency/acquire", server.AcquireRequest{Limiter: "reports", Identity: map[string]string{"user": "u"}}, &acq)
	expires, err := time.Parse(time.RFC3339Nano, acq.ExpiresAt)
	if err != nil || !acq.Acquired {
		t.Fatalf("acquire: %+v, %v", acq, err)
	}
	within("acquire: expires_at", expires, 30*time.Second, time.Millisecond) // lease_ttl 30s

	estimate := int64(5)
	var q server.QuotaResponse
	postJSON("/v1/quota/reserve", server.QuotaReserveRequest{Quota: "llm-tokens", Identity: map[string]string{"api_key": "k"}, RequestID: "r1", Estimate: &estimate}, &q)
	if !q.Allowed {
		t.Fatalf("reserve: %+v", q)
	}
	// The reservation's hold (10m) ends at its score in the quota's holds,
	// Unix microseconds.
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys, err := rdb.Keys(ctx, prefix+":llm-tokens:*:h").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("hold keys %v, %v; want the reservation's one", keys, err)
	}
	holds, err := rdb.ZRangeWithScores(ctx, keys[0], 0, -1).Result()
	if err != nil || len(holds) != 1 {
		t.Fatalf("holds %v, %v; want r1's", holds, err)
	}
	within("reserve: hold's end in Redis", time.UnixMicro(int64(holds[0].Score)), 10*time.Minute, time.Millisecond)

	rs.Kill()
	postJSON("/v1/check", server.CheckRequest{Policy: "api", Identity: map[string]string{"user": "v"}}, &c)
	if !c.Degraded || c.FailureMode != "local" {
		t.Fatalf("check with Redis killed: %+v; want decided by the local fallback", c)
	}
	within("local fallback: edge layer's reset", edgeReset(t, c), 0, time.Minute)
}

// edgeReset returns the reset of c's layer "edge" (the built-in api
// policy's).
func edgeReset(t *testing.T, c server.CheckResponse) time.Time {
	t.Helper()
	for _, l := range c.Layers {
		if l.Name == "edge" {
			return time.Unix(l.Reset, 0)
		}
	}
	t.Fatalf("no layer edge in %+v", c)
	return time.Time{}
}

// TestServeSyncsClockOnceRedisAnswers: an instance started while Redis is
// down, its clock 90 s ahead, disciplines its clock within a second or so
// of Redis answering (the walk: it stamped requests 90 s ahead for up to
// the 10 s sync interval, admitting a second limit beside synced
// instances), logs "clock disciplined to Redis" then (it logged nothing),
// and its failed rounds before say that decisions use the local clock.
func TestServeSyncsClockOnceRedisAnswers(t *testing.T) {
	rs := redistest.Start(t)
	rs.Kill()
	svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--clock-offset", "90s")
	defer svc.stop(t)
	if _, ok := svc.Logged("clock sync with Redis failed at startup; using the local clock until it succeeds (tried every second)"); !ok {
		t.Fatalf("no start-up sync failure in the log:\n%s", svc.Logs())
	}
	rs.Restart(t)
	deadline := time.Now().Add(30 * time.Second) // generous: clocksync's TestRunRetriesUntilFirstSync checks the retry
	for {
		if rec, ok := svc.Logged("clock disciplined to Redis"); ok {
			skew, err := time.ParseDuration(rec["skew"])
			if err != nil || skew > -89*time.Second || skew < -91*time.Second {
				t.Fatalf("disciplined with skew %q, want about -90s", rec["skew"])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no \"clock disciplined to Redis\" within 30 s of Redis answering:\n%s", svc.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// steppedTime answers TIME with the machine's clock plus offset.
type steppedTime struct{ offset atomic.Int64 }

func (s *steppedTime) Time(ctx context.Context) *redis.TimeCmd {
	cmd := redis.NewTimeCmd(ctx)
	cmd.SetVal(time.Now().Add(time.Duration(s.offset.Load())))
	return cmd
}

// TestServeLogsClockStep: serve's clock logs "Redis clock stepped" with
// the offsets before and after at each round that sees Redis's clock
// jump, every jump, however close together (an outside walk stepped it
// +30 s, -300 s, +300 s within a minute: nothing said so, and the skew
// warning, at most once a minute, came 48 s after the first).
func TestServeLogsClockStep(t *testing.T) {
	var buf syncbuf.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	src := new(steppedTime)
	c, err := clocksync.New(src, clocksync.Options{Samples: 1, OnStep: logStep(log)})
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []time.Duration{0, 30 * time.Second, -270 * time.Second, 30 * time.Second} {
		src.offset.Store(int64(off))
		if err := c.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	var got []map[string]string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]string
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		got = append(got, rec)
	}
	if len(got) != 3 {
		t.Fatalf("logged %d lines, want 3 steps:\n%s", len(got), buf.String())
	}
	prev := time.Duration(0)
	for i, off := range []time.Duration{30 * time.Second, -270 * time.Second, 30 * time.Second} {
		rec := got[i]
		from, err1 := time.ParseDuration(rec["from"])
		to, err2 := time.ParseDuration(rec["to"])
		step, err3 := time.ParseDuration(rec["step"])
		if !strings.HasPrefix(rec["msg"], "Redis clock stepped") || rec["level"] != "WARN" || err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("line %d: %v", i, rec)
		}
		// The offsets measured, within a round trip of the steps made.
		near := func(got, want time.Duration) bool {
			return got > want-50*time.Millisecond && got < want+50*time.Millisecond
		}
		if !near(from, prev) || !near(to, off) || step != to-from {
			t.Errorf("line %d: from %v to %v step %v; want about %v to %v", i, from, to, step, prev, off)
		}
		prev = off
	}
}
