package envoycompat

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
)

// goneMixedService is a Service on st with metrics and a log buffer, its
// configuration doc.
func goneMixedService(t *testing.T, st Store, doc string) (*Service, *Metrics, *syncbuf.Buffer) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	svc, err := NewService(Options{Store: st, Metrics: m, Now: func() time.Time { return fixedNow },
		Log: slog.New(slog.NewTextHandler(logs, nil)), LogEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := loadStrings(t, false, doc)
	if err != nil {
		t.Fatal(err)
	}
	svc.SetConfig(cfg)
	return svc, m, logs
}

// TestGoneCallerPerSecondNotCounted: with REDIS_PERSECOND, a request
// whose counters on the main Redis were updated and whose per-second
// update was dropped unsent because its client went (the per-second
// server stalled, its in-flight slots held by live callers) is no Redis
// error: the error built for it dropped context.Canceled (%v), and the
// service counted the gone client as redis_error and logged a store
// error, as 60f1dba had stopped for incrEach (review17, 2 of 2).
func TestGoneCallerPerSecondNotCounted(t *testing.T) {
	srvMain, srvPS := redistest.Start(t), redistest.Start(t)
	mainC := redis.NewClient(&redis.Options{Addr: srvMain.Addr, ContextTimeoutEnabled: true, ReadTimeout: -1})
	psC := redis.NewClient(&redis.Options{Addr: srvPS.Addr, ContextTimeoutEnabled: true, ReadTimeout: -1})
	t.Cleanup(func() { _ = mainC.Close(); _ = psC.Close() })
	adminMain, adminPS := srvMain.Client(t), srvPS.Client(t)
	svc, m, logs := goneMixedService(t, &RedisStore{Client: mainC, PerSecond: psC, Timeout: time.Minute, PerSecondTimeout: time.Minute}, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: s
    rate_limit: {unit: second, requests_per_unit: 1000}
`)
	ctx := context.Background()
	if _, err := svc.shouldRateLimit(ctx, "", req(t, "d", 1, "k=v1", "s=x")); err != nil {
		t.Fatal(err)
	}
	unpause := redistest.PauseWrites(t, adminPS)
	live := make(chan error, 2)
	for i, v := range []string{"s=l1", "s=l2"} {
		go func() {
			_, err := svc.shouldRateLimit(ctx, "", req(t, "d", 1, v))
			live <- err
		}()
		if !waitBlocked(t, adminPS, i+1) {
			t.Fatalf("live caller %d never blocked on the paused per-second server", i+1)
		}
	}
	keys := adminMain.Keys(ctx, "*").Val()
	if len(keys) != 1 {
		t.Fatalf("the main server's keys %q, want one", keys)
	}
	req1, hangUp := context.WithCancel(ctx)
	gone := make(chan error, 1)
	go func() {
		_, err := svc.shouldRateLimit(req1, "", req(t, "d", 1, "k=v1", "s=x"))
		gone <- err
	}()
	waitUntil(t, "the main counter updated", func() bool { return adminMain.Get(ctx, keys[0]).Val() == "2" })
	// The per-second update, queued or about to be, waits for a slot the
	// live callers hold: the queue drops it unsent at its next cut, once
	// the server resumes and a slot frees, since its client has gone.
	hangUp()
	unpause()
	goneErrs := redistest.GoneErrors(t, gone, 1)
	for range 2 {
		if err := <-live; err != nil {
			t.Errorf("live caller: %v", err)
		}
	}
	for _, err := range goneErrs {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("gone caller: %v, want it to wrap context.Canceled", err)
		}
	}
	if n := testutil.ToFloat64(m.redisError); n != 0 {
		t.Errorf("redis_error %v for a client that went, want 0", n)
	}
	if strings.Contains(logs.String(), "store error") {
		t.Errorf("a store error logged for a client that went:\n%s", logs)
	}
}

// TestGoneCallerBesideRefusalCounted: on a Ring, a request one of whose
// counters Redis refused (out of memory) while the other was dropped
// unsent because its client went is a Redis error: the joined error
// wrapped context.Canceled, and the service took the refusal for a gone
// client, neither counted nor logged (review17, 2 of 2).
func TestGoneCallerBesideRefusalCounted(t *testing.T) {
	r := newGoneRing(t)
	m, logs, adminA, poolB := r.m, r.logs, r.adminA, r.poolB
	ctx := context.Background()
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "1"}} {
		if err := adminA.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	hangUp, gone, live, unpause := r.holdB(t)
	waitUntil(t, "shard b's counter waiting for the pool", func() bool { return poolB.PoolStats().PendingRequests >= 1 })
	waitUntil(t, "shard a's refusal (OOM)", func() bool {
		return strings.Contains(adminA.Info(ctx, "errorstats").Val(), "errorstat_OOM:count=")
	})
	hangUp()
	goneErrs := redistest.GoneErrors(t, gone, 1)
	unpause()
	if err := <-live; err != nil {
		t.Errorf("live caller: %v", err)
	}
	for _, err := range goneErrs {
		if errors.Is(err, context.Canceled) {
			t.Errorf("the request with a refused counter: %v, want no context.Canceled (a Redis error)", err)
		}
	}
	if n := testutil.ToFloat64(m.redisError); n != 1 {
		t.Errorf("redis_error %v, want 1: shard a refused the write (OOM)", n)
	}
	if !strings.Contains(logs.String(), "store error") {
		t.Errorf("no store error logged for shard a's refusal:\n%s", logs)
	}
}
