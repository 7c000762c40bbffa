package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/quota"
	"github.com/floodgate-rl/floodgate/replicawait"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/redis/go-redis/v9"
)

// startWaiting serves limits with its quotas in rs through a
// replicawait.Client (one replica asked for; rs has none), bounded to
// maxConcurrent operations at once, with the service's log in logs.
func startWaiting(t *testing.T, rs *redistest.Server, maxConcurrent int, logs io.Writer) *env {
	t.Helper()
	st, _ := redisStore(t)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr, PoolSize: 4, ContextTimeoutEnabled: true, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	t.Cleanup(func() { c.Close() })
	w, err := replicawait.New(c, replicawait.Options{Replicas: 1, MaxConcurrent: maxConcurrent})
	if err != nil {
		t.Fatal(err)
	}
	qs, err := quota.NewRedisStore(w)
	if err != nil {
		t.Fatal(err)
	}
	return start(t, limits, st, func(o *server.Options) {
		o.QuotaStore = qs
		o.DecisionTimeout = time.Second
		o.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
}

// TestQuotaCheckNoPlaceNotReplicated: with --redis-wait-replicas on a
// primary without a replica and more quota checks at once than can wait
// for it, each check is answered 503 store-not-replicated, saying truly
// whether it was applied: "nothing was applied" for one that found no
// place in time (not store-unavailable, nor a check that ran answered as
// unsent), "applied" for one that ran. One sent and cut off by the
// decision deadline may only be answered store-indeterminate.
func TestQuotaCheckNoPlaceNotReplicated(t *testing.T) {
	rs := redistest.Start(t)
	var logs syncbuf.Buffer
	e := startWaiting(t, rs, 1, &logs)
	const n = 30 // each sent check holds the one place for a tick of Redis's clock at least: 100 ms at hz 10
	type answer struct {
		status int
		p      server.Problem
		err    error
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			body := fmt.Sprintf(`{"quota":"hundred","identity":{"user":"u%d"}}`, i)
			resp, err := http.Post(e.url+"/v1/quota/check", "application/json", strings.NewReader(body))
			if err != nil {
				answers[i].err = err
				return
			}
			defer resp.Body.Close()
			answers[i].status = resp.StatusCode
			answers[i].err = json.NewDecoder(resp.Body).Decode(&answers[i].p)
		})
	}
	wg.Wait()
	unsent := 0
	for i, a := range answers {
		if a.err != nil {
			t.Fatalf("check u%d: %v", i, a.err)
		}
		used := e.quotaStatus("hundred", id("user", fmt.Sprint("u", i))).Used
		kind := strings.TrimPrefix(a.p.Type, server.ProblemTypePrefix)
		switch {
		case a.status != http.StatusServiceUnavailable:
			t.Errorf("check u%d: %d %+v; want 503", i, a.status, a.p)
		case kind == "store-not-replicated" && strings.HasPrefix(a.p.Detail, "nothing was applied"):
			unsent++
			if used != 0 {
				t.Errorf("check u%d answered %q, but its usage is %d", i, a.p.Detail, used)
			}
		case kind == "store-not-replicated":
			if used != 1 {
				t.Errorf("check u%d answered %q, but its usage is %d", i, a.p.Detail, used)
			}
		case kind == "store-indeterminate":
			// Sent, and its answer cut off by the decision deadline:
			// either outcome is possible.
		default:
			t.Errorf("check u%d: %d %s %q (usage %d); want 503 store-not-replicated", i, a.status, kind, a.p.Detail, used)
		}
	}
	if unsent == 0 {
		t.Errorf("no check of %d was refused unsent with one place and a 1s deadline:\n%s", n, logs.String())
	}
	// Counted once each, as docs/operations.md says: unsent as
	// store_unavailable, the others as indeterminate.
	if got := labelledCounter(t, e.reg, "floodgate_decision_errors_total", "reason", "store_unavailable"); got != float64(unsent) {
		t.Errorf("floodgate_decision_errors_total{reason=\"store_unavailable\"} = %v, want %d (the checks not sent)", got, unsent)
	}
	if got := labelledCounter(t, e.reg, "floodgate_decision_errors_total", "reason", "indeterminate"); got != float64(n-unsent) {
		t.Errorf("floodgate_decision_errors_total{reason=\"indeterminate\"} = %v, want %d (the checks sent)", got, n-unsent)
	}
	if got := labelledCounter(t, e.reg, "floodgate_http_rejected_total", "problem", "store-not-replicated"); got != 0 {
		t.Errorf("floodgate_http_rejected_total{problem=\"store-not-replicated\"} = %v, want 0", got)
	}
}

// TestQuotaRestoreNotReplicatedAudited: an admin restore that the primary
// applied but no replica confirmed is answered 503 store-not-replicated
// with a restore's detail, and logged with the admin audit line (the
// usage it replaced, replicated false): an administrative change made is
// never left unaudited.
func TestQuotaRestoreNotReplicatedAudited(t *testing.T) {
	rs := redistest.Start(t)
	var logs syncbuf.Buffer
	e := startWaiting(t, rs, 0, &logs)
	body := `{"quota":"hundred","identity":{"user":"r1"},"used":40}`
	r := e.do("POST", "/admin/v1/quota/restore", testToken, body)
	p := problemOf(t, r)
	if r.status != http.StatusServiceUnavailable || p.Type != server.ProblemTypePrefix+"store-not-replicated" || !strings.Contains(p.Detail, "the restore was applied") || !strings.Contains(p.Detail, "sets the same usage") {
		t.Fatalf("restore without a replica: %d %+v; want 503 store-not-replicated saying the restore was applied", r.status, p)
	}
	if used := e.quotaStatus("hundred", id("user", "r1")).Used; used != 40 {
		t.Fatalf("usage after the restore = %d, want 40 (applied on the primary)", used)
	}
	// Sent again: the same usage, and the usage it replaced is the first's.
	if r := e.do("POST", "/admin/v1/quota/restore", testToken, body); r.status != http.StatusServiceUnavailable {
		t.Fatalf("restore sent again: %d %s", r.status, r.body)
	}
	var audits []map[string]any
	for line := range bytes.Lines([]byte(logs.String())) {
		var rec map[string]any
		if json.Unmarshal(line, &rec) == nil && rec["msg"] == "admin quota restore" {
			audits = append(audits, rec)
		}
	}
	if len(audits) != 2 {
		t.Fatalf("%d audit lines for two applied restores, want 2:\n%s", len(audits), logs.String())
	}
	for i, want := range []float64{0, 40} {
		a := audits[i]
		if a["used"] != float64(40) || a["previous_used"] != want || a["replicated"] != false || a["identity"] != "user=r1" || a["period"] == "" {
			t.Errorf("audit line %d: %v; want used 40, previous_used %v, replicated false", i+1, a, want)
		}
	}
}

// TestResetNotReplicatedSaysWhatItDeleted: under --redis-wait-replicas
// with no replica to confirm, a reset that deleted nothing (the identity
// had no state) is answered 200, keys 0: it changed nothing a failover
// could bring back. One that deleted state is a 503 store-not-replicated
// saying how many keys it deleted. Both are logged with targeted (the
// keys covered) and deleted (those that held state). A reset of nothing
// was a 503 saying "the reset was applied", its log line had keys (the
// keys targeted) and no deleted, while a success's keys meant deleted.
func TestResetNotReplicatedSaysWhatItDeleted(t *testing.T) {
	st, rs := redisStore(t)
	c := rs.Client(t)
	w, err := replicawait.New(c, replicawait.Options{Replicas: 1, Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	e := start(t, limits, st, func(o *server.Options) {
		o.Resetters = []server.Resetter{server.RedisResetter{Client: c, Writer: w}}
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	u := id("user", "reset-nr")
	body := server.ResetRequest{Policy: "api", Identity: u}

	r := e.do("POST", "/admin/v1/reset", testToken, body)
	p := problemOf(t, r)
	if r.status != http.StatusServiceUnavailable || p.Type != server.ProblemTypePrefix+"store-not-replicated" || !strings.HasPrefix(p.Detail, "the reset deleted nothing: ") || !strings.Contains(p.Detail, "may include an earlier reset's deletion") {
		t.Fatalf("reset of an identity without state, no replica: %d %+v; want 503 store-not-replicated saying it deleted nothing and the replicas may lack an earlier deletion", r.status, p)
	}
	e.check("api", u, 1)
	r = e.do("POST", "/admin/v1/reset", testToken, body)
	p = problemOf(t, r)
	if r.status != http.StatusServiceUnavailable || p.Type != server.ProblemTypePrefix+"store-not-replicated" || !strings.HasPrefix(p.Detail, "the reset was applied: 1 key deleted on the Redis primary") {
		t.Fatalf("reset after a decision, no replica: %d %+v; want 503 store-not-replicated saying 1 key was deleted", r.status, p)
	}
	// Sent again, as the 503 invites: nothing left to delete, but the
	// first deletion is still unconfirmed.
	r = e.do("POST", "/admin/v1/reset", testToken, body)
	if p = problemOf(t, r); r.status != http.StatusServiceUnavailable || !strings.HasPrefix(p.Detail, "the reset deleted nothing: ") {
		t.Fatalf("reset sent again, no replica: %d %+v; want 503 store-not-replicated: the first deletion is not confirmed", r.status, p)
	}

	var audits []map[string]any
	for line := range bytes.Lines([]byte(logs.String())) {
		var rec map[string]any
		if json.Unmarshal(line, &rec) == nil && rec["msg"] == "admin reset" {
			audits = append(audits, rec)
		}
	}
	if len(audits) != 3 {
		t.Fatalf("%d admin reset lines, want 3:\n%s", len(audits), logs.String())
	}
	for i, want := range []struct {
		deleted    float64
		replicated any
	}{{0, false}, {1, false}, {0, false}} {
		a := audits[i]
		if a["targeted"] != float64(1) || a["deleted"] != want.deleted || a["replicated"] != want.replicated || a["keys"] != nil {
			t.Errorf("admin reset line %d: %v; want targeted 1, deleted %v, replicated %v, no keys", i+1, a, want.deleted, want.replicated)
		}
	}
}
