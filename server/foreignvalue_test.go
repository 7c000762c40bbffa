package server_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/server"
)

// labelledCounter returns the value of the series of counter name in reg
// whose label has value, 0 when there is none.
func labelledCounter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestForeignValueIsNamedAsSuch: a Redis key holding a value floodgate
// did not write (what a rollback, a version mix or a stray SET leaves) is
// one key's problem, not Redis's. A check on it is decided by the
// fallback with degraded_reason foreign_value (it said "unavailable",
// which sent the mixed walk's operator to Redis's health, where nothing
// was wrong), and a warning names the key (only a debug line did); a
// quota check or a lease acquire on such a key is answered 503 saying a
// key this identity needs holds such a value, without naming the key,
// counted in floodgate_decision_errors_total as foreign_value (it was
// store_unavailable), and logged naming the key (WRONGTYPE does not).
func TestForeignValueIsNamedAsSuch(t *testing.T) {
	st, rs := redisStore(t)
	client := rs.Client(t)
	local, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fb, err := fallback.New(st, local, fallback.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fb.Close)
	qs, cs := redisQuotaLeases(t, client)
	logs := &lockedBuffer{}
	e := start(t, limits, fb, func(o *server.Options) {
		o.QuotaStore, o.ConcurrencyStore = qs, cs
		o.WarnEvery = time.Nanosecond // every one logged
		o.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
	u := id("user", "fv1")
	if r := e.check("api", u, 1); r.Degraded {
		t.Fatalf("check on a healthy Redis: %+v", r)
	}
	if code, _ := e.quotaCall("/v1/quota/check", server.QuotaCheckRequest{Quota: "hundred", Identity: u}); code != 200 {
		t.Fatalf("quota check on a healthy Redis: %d", code)
	}
	if code, lease := e.acquire("/v1/concurrency/acquire", server.AcquireRequest{Limiter: "five", Identity: u}); code != 200 || !lease.Acquired {
		t.Fatalf("acquire on a healthy Redis: %d %+v", code, lease)
	}
	ctx := ctxT(t)
	keys, err := client.Keys(ctx, "*{rfv1}*").Result()
	if err != nil || len(keys) < 3 {
		t.Fatalf("keys of the identity: %v %v", keys, err)
	}
	for _, k := range keys {
		if err := client.Set(ctx, k, "notastate", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}

	r := e.check("api", u, 1)
	if !r.Degraded || r.DegradedReason != "foreign_value" {
		t.Errorf("check on a foreign value: degraded %v, reason %q; want foreign_value", r.Degraded, r.DegradedReason)
	}
	if st := fb.BreakerState(); st != fallback.BreakerClosed {
		t.Errorf("breaker %v after a foreign value, want closed", st)
	}
	const msg = "a Redis key holds a value floodgate did not write: delete it, or find the instance writing another state format (a build of another version, a rollback; docs/operations.md, state formats)"
	named := func(level, op string) {
		t.Helper()
		for _, rec := range logs.lines(t, msg) {
			text, _ := rec["error"].(string)
			if rec["level"] == level && rec["operation"] == op && strings.Contains(text, "{rfv1}") {
				return
			}
		}
		t.Errorf("no %s line %q for the %s naming the key; log:\n%s", level, msg, op, logs.String())
	}
	named("WARN", "check")

	for _, tc := range []struct {
		path, op string
		body     any
	}{
		{"/v1/quota/check", "quota check", server.QuotaCheckRequest{Quota: "hundred", Identity: u}},
		{"/v1/concurrency/acquire", "lease acquire", server.AcquireRequest{Limiter: "five", Identity: u}},
	} {
		rep := e.post(tc.path, tc.body)
		p := problemOf(t, rep)
		if rep.status != 503 || p.Type != server.ProblemTypePrefix+"store-unavailable" ||
			!strings.Contains(p.Detail, "a Redis key this identity's "+tc.op+" needs holds a value floodgate did not write") ||
			strings.Contains(p.Detail, "{") {
			t.Errorf("%s on a foreign value: %d %s %q; want 503 store-unavailable saying a key holds a foreign value, not naming it", tc.path, rep.status, p.Type, p.Detail)
		}
		named("ERROR", tc.op)
	}
	if got := labelledCounter(t, e.reg, "floodgate_decision_errors_total", "reason", "foreign_value"); got != 2 {
		t.Errorf("floodgate_decision_errors_total{reason=\"foreign_value\"} = %v, want 2", got)
	}
	if got := labelledCounter(t, e.reg, "floodgate_decision_errors_total", "reason", "store_unavailable"); got != 0 {
		t.Errorf("floodgate_decision_errors_total{reason=\"store_unavailable\"} = %v, want 0", got)
	}
}

// TestForeignQuotaMarkerIsNamedAsSuch: a value floodgate did not write at
// a quota period's marker key alone (the usage intact or deleted) is a
// foreign value too: a quota check and an admin restore are answered 503
// saying a key holds such a value, counted as foreign_value, and the
// value is left in place. The marker was only asked whether it existed,
// so the check said the usage was lost (409 quota-state-lost, "restore
// it") and the restore overwrote the foreign value and answered 200.
func TestForeignQuotaMarkerIsNamedAsSuch(t *testing.T) {
	st, rs := redisStore(t)
	client := rs.Client(t)
	qs, cs := redisQuotaLeases(t, client)
	e := start(t, limits, st, func(o *server.Options) {
		o.QuotaStore, o.ConcurrencyStore = qs, cs
		o.Logger = slog.New(slog.NewJSONHandler(&lockedBuffer{}, nil))
	})
	u := id("user", "fm1")
	if code, _ := e.quotaCall("/v1/quota/check", server.QuotaCheckRequest{Quota: "hundred", Identity: u}); code != 200 {
		t.Fatalf("quota check on a healthy Redis: %d", code)
	}
	ctx := ctxT(t)
	markers, err := client.Keys(ctx, "*{rfm1}*:k").Result()
	if err != nil || len(markers) != 1 {
		t.Fatalf("the identity's quota marker: %v %v", markers, err)
	}
	usages, err := client.Keys(ctx, "*{rfm1}*:u").Result()
	if err != nil || len(usages) != 1 {
		t.Fatalf("the identity's quota usage: %v %v", usages, err)
	}
	if err := client.Del(ctx, usages[0], markers[0]).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.LPush(ctx, markers[0], "junk").Err(); err != nil {
		t.Fatal(err)
	}
	want := func(what string, rep reply) {
		t.Helper()
		p := problemOf(t, rep)
		if rep.status != 503 || p.Type != server.ProblemTypePrefix+"store-unavailable" ||
			!strings.Contains(p.Detail, "holds a value floodgate did not write") {
			t.Errorf("%s with a foreign value at the marker: %d %s %q; want 503 store-unavailable saying a key holds a foreign value", what, rep.status, p.Type, p.Detail)
		}
	}
	want("quota check", e.post("/v1/quota/check", server.QuotaCheckRequest{Quota: "hundred", Identity: u}))
	want("quota restore", e.do("POST", "/admin/v1/quota/restore", testToken, server.RestoreRequest{Quota: "hundred", Identity: u, Used: ptr(30)}))
	if typ := client.Type(ctx, markers[0]).Val(); typ != "list" {
		t.Errorf("the marker is a %s after the restore, want the list left in place", typ)
	}
	if got := labelledCounter(t, e.reg, "floodgate_decision_errors_total", "reason", "foreign_value"); got != 2 {
		t.Errorf("floodgate_decision_errors_total{reason=\"foreign_value\"} = %v, want 2", got)
	}
}
