package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/loginguard"
)

// TestServeWaitReplicas: with --redis-wait-replicas 1 on a primary that
// has no replica, quota and lease operations are applied but answered 503
// store-not-replicated, never 200; rate limit decisions are not held up
// and the breaker stays closed (they are still decided by Redis). Once a
// replica is attached, the retried reserve is replayed (it was applied
// once) and answered 200.
func TestServeWaitReplicas(t *testing.T) {
	rs := redistest.Start(t)
	svc := startService(t, "--redis", "redis://"+rs.Addr, "--redis-wait-replicas", "1", "--redis-wait-timeout", "30ms")
	defer svc.stop(t)
	if !strings.Contains(svc.Logs(), "fewer replicas connected than --redis-wait-replicas") {
		t.Errorf("no warning at start about the primary without a replica:\n%s", svc.Logs())
	}

	reserve := `{"quota":"llm-tokens","identity":{"api_key":"k1"},"request_id":"job-1","estimate":100}`
	for i := range 10 {
		code, body := postBody(t, svc.url+"/v1/quota/reserve", reserve)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "store-not-replicated") {
			t.Fatalf("reserve #%d without a replica: %d %s; want 503 store-not-replicated", i+1, code, body)
		}
	}
	// A status consumes nothing: it is answered without waiting.
	if code, body := postBody(t, svc.url+"/v1/quota/status", `{"quota":"llm-tokens","identity":{"api_key":"k1"}}`); code != http.StatusOK {
		t.Fatalf("status without a replica: %d %s; want 200", code, body)
	}
	code, body := postBody(t, svc.url+"/v1/concurrency/acquire", `{"limiter":"reports","identity":{"user":"u1"}}`)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "store-not-replicated") {
		t.Fatalf("acquire without a replica: %d %s; want 503 store-not-replicated", code, body)
	}
	// The primary has the hold, once.
	held, err := rs.Client(t).Keys(context.Background(), "fg:llm-tokens:q:*").Result()
	if err != nil || len(held) == 0 {
		t.Fatalf("no quota keys on the primary: %v %v", held, err)
	}
	for i := range 5 {
		code, body := postBody(t, svc.url+"/v1/check", `{"policy":"api","identity":{"user":"u`+strconv.Itoa(i)+`"}}`)
		if code != http.StatusOK || !strings.Contains(body, `"allowed":true`) {
			t.Fatalf("check #%d: %d %s; want 200 allowed", i+1, code, body)
		}
	}
	if got := metricSum(t, svc.url+"/metrics", "rate_limit_fallback_total"); got != 0 {
		t.Fatalf("rate_limit_fallback_total = %v: decisions left Redis because quota operations were not replicated", got)
	}

	redistest.StartReplica(t, rs)
	// Retried as a client would on 503 store-not-replicated: a 30ms WAIT
	// can still expire on a loaded machine (a CI run saw it once), and
	// every retry must be the same single hold.
	for range 20 {
		code, body = postBody(t, svc.url+"/v1/quota/reserve", reserve)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "store-not-replicated") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var r struct {
		Allowed  bool  `json:"allowed"`
		Replayed bool  `json:"replayed"`
		Reserved int64 `json:"reserved"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &r) != nil || !r.Allowed || !r.Replayed || r.Reserved != 100 {
		t.Fatalf("reserve retried with a replica: %d %s; want 200, replayed, 100 reserved", code, body)
	}
}

func postBody(t *testing.T, url, body string) (int, string) {
	t.Helper()
	return postWith(t, url, body, nil)
}

// postWith is postBody sending the header lines of h too.
func postWith(t *testing.T, url, body string, h http.Header) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, vs := range h {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// metricSum sums the samples of the metric name (any labels) on url; 0
// when there are none.
func metricSum(t *testing.T, url, name string) float64 {
	t.Helper()
	return metricSumWith(t, http.DefaultClient, url, name)
}

// metricSumWith is metricSum read with c (an HTTPS listener's client).
func metricSumWith(t *testing.T, c *http.Client, url, name string) float64 {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
			sum += v
		}
	}
	return sum
}

// TestServeWaitReplicasAdmin: with --redis-wait-replicas 1, the admin
// writes to Redis (a tier assigned or removed, a reset, a login unlock)
// are answered 200 only once the replica has them. With the replica
// stopped, each is applied on the primary and answered 503
// store-not-replicated saying so, and its audit line says replicated
// false; an outside walk (cfgfail) saw an assignment answered 200 and
// then lost by a Sentinel failover.
func TestServeWaitReplicasAdmin(t *testing.T) {
	rs := redistest.Start(t)
	replica := redistest.StartReplica(t, rs)
	secretFile := filepath.Join(t.TempDir(), "login-secret")
	const secret = "0123456789abcdef0123456789abcdef-wait"
	if err := os.WriteFile(secretFile, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	// WAIT gets 500 ms (within the 1 s --decision-timeout) for the live
	// replica's acknowledgement: under load 50 ms expired once, and the
	// first assignment was answered 503.
	svc := startService(t, "--redis", "redis://"+rs.Addr, "--redis-wait-replicas", "1", "--redis-wait-timeout", "500ms",
		"--admin-token", e2eAdminToken, "--login-secret-file", secretFile)
	defer svc.stop(t)
	ctx := context.Background()
	pc, rc := rs.Client(t), replica.Client(t)

	// Confirmed: the replica holds the assignment as soon as it is answered.
	code, body := bearerPost(t, svc.url+"/admin/v1/tier", `{"dimension":"user","value":"42","tier":"enterprise"}`)
	if code != http.StatusOK {
		t.Fatalf("tier with the replica up: %d %s; want 200", code, body)
	}
	if got, err := rc.HGet(ctx, "fg:tiers", "user=42").Result(); err != nil || got != "enterprise" {
		t.Fatalf("replica's assignment right after the 200: %q, %v; want enterprise", got, err)
	}

	// A lockout for the unlock to lift, made as an application would.
	backend, err := loginguard.NewRedis(pc, "login")
	if err != nil {
		t.Fatal(err)
	}
	app, err := loginguard.New(backend, loginguard.Options{Secret: []byte(secret),
		Account: loginguard.Ladder{Captcha: 1, Delay: 2, Lock: 3, Lockout: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := app.Failure(ctx, "alice", netip.MustParseAddr("198.19.5.7")); err != nil {
			t.Fatal(err)
		}
	}
	if code, body := postBody(t, svc.url+"/v1/check", `{"policy":"api","identity":{"user":"7"}}`); code != http.StatusOK {
		t.Fatalf("check: %d %s", code, body)
	}
	waitUntil(t, "the replica to have the lockout and the counter", func() bool {
		n, err := rc.DBSize(ctx).Result()
		m, _ := pc.DBSize(ctx).Result()
		return err == nil && n == m
	})

	if err := posix.Kill(replica.Pid, posix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = posix.Kill(replica.Pid, posix.SIGCONT)
		}
	}()
	notReplicated := func(what string, code int, body, says string) {
		t.Helper()
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "store-not-replicated") || !strings.Contains(body, says) {
			t.Errorf("%s with the replica stopped: %d %s; want 503 store-not-replicated saying %q", what, code, body, says)
		}
	}
	code, body = bearerPost(t, svc.url+"/admin/v1/tier", `{"dimension":"user","value":"43","tier":"pro"}`)
	notReplicated("tier", code, body, "the tier assignment was stored on the Redis primary")
	if got, _ := pc.HGet(ctx, "fg:tiers", "user=43").Result(); got != "pro" {
		t.Errorf("primary's assignment of user=43 = %q, want pro (applied there)", got)
	}
	code, body = bearerPost(t, svc.url+"/admin/v1/tier", `{"dimension":"user","value":"42","tier":""}`)
	notReplicated("tier removed", code, body, "the tier assignment was stored on the Redis primary")
	if n, _ := pc.HExists(ctx, "fg:tiers", "user=42").Result(); n {
		t.Errorf("primary still has user=42's assignment after its removal")
	}
	code, body = bearerPost(t, svc.url+"/admin/v1/reset", `{"policy":"api","identity":{"user":"7"}}`)
	notReplicated("reset", code, body, "the reset was applied")
	code, body = bearerPost(t, svc.url+"/admin/v1/login/unlock", `{"account":"alice"}`)
	notReplicated("unlock", code, body, "the unlock was applied")

	// The log is read from serve's stderr as it comes.
	waitUntil(t, "the unlock's admin call logged", func() bool { return strings.Contains(svc.Logs(), `"path":"/admin/v1/login/unlock"`) })
	audits := map[string][]map[string]any{}
	for line := range strings.Lines(svc.Logs()) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil {
			if msg, _ := rec["msg"].(string); strings.HasPrefix(msg, "admin ") {
				audits[msg] = append(audits[msg], rec)
			}
		}
	}
	if a := audits["admin tier assignment"]; len(a) != 3 || a[0]["replicated"] != nil || a[1]["replicated"] != false || a[2]["replicated"] != false || a[1]["tier"] != "pro" {
		t.Errorf("tier audit lines: %v; want the confirmed one, then two with replicated false", a)
	}
	if a := audits["admin reset"]; len(a) != 1 || a[0]["replicated"] != false {
		t.Errorf("reset audit lines: %v; want one with replicated false", a)
	}
	if a := audits["admin login unlock"]; len(a) != 1 || a[0]["replicated"] != false || a[0]["cleared_account"] != true {
		t.Errorf("unlock audit lines: %v; want one with replicated false, cleared_account true", a)
	}

	if err := posix.Kill(replica.Pid, posix.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	// Sent again, as the 503 says is harmless: answered once replicated.
	waitUntil(t, "the assignment sent again answered 200", func() bool {
		code, _ := bearerPost(t, svc.url+"/admin/v1/tier", `{"dimension":"user","value":"43","tier":"pro"}`)
		return code == http.StatusOK
	})
	if got, err := rc.HGet(ctx, "fg:tiers", "user=43").Result(); err != nil || got != "pro" {
		t.Fatalf("replica's assignment after the 200: %q, %v; want pro", got, err)
	}
}

// TestServeWaitReplicasWarningNamesSentinelPrimary: behind Sentinel, with
// --redis-wait-replicas 2 and one replica, the start-up warning names the
// primary by its address and the master by its name; it named it
// "FailoverClient", go-redis's placeholder for a failover client's
// address.
func TestServeWaitReplicasWarningNamesSentinelPrimary(t *testing.T) {
	s := redistest.StartSentinel(t)
	svc := startService(t, "--redis-sentinel", strings.Join(s.SentinelAddrs, ","), "--redis-master", s.MasterName,
		"--redis-wait-replicas", "2", "--redis-wait-timeout", "30ms")
	defer svc.stop(t)
	const warning = "the Redis primary has fewer replicas connected than --redis-wait-replicas: its quota and lease operations and admin writes answer 503 store-not-replicated until enough are"
	rec, ok := svc.Logged(warning)
	if !ok {
		t.Fatalf("no warning at start about the primary with one replica of 2:\n%s", svc.Logs())
	}
	if rec["primary"] != s.Primary.Addr || rec["master"] != s.MasterName {
		t.Errorf("warning names primary %q, master %q; want %s, %s:\n%s", rec["primary"], rec["master"], s.Primary.Addr, s.MasterName, svc.Logs())
	}
}
