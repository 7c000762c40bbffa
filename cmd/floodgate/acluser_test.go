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
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/loginguard"
)

// clusterGrants are what docs/operations.md adds to the serve user on
// a Redis Cluster: the slot map, go-redis's COMMAND at start and the
// readiness check.
var clusterGrants = []string{"+cluster|slots", "+command", "+cluster|info"}

// aclPassword stands for PASSWORD in the documented ACL lines.
const aclPassword = "acl-user-password"

// docACL returns the rules of the "ACL SETUSER <user> ..." line in
// docs/operations.md (Redis ACL users), PASSWORD replaced, so that the
// tests run serve and envoy-compat as exactly the documented user.
func docACL(t *testing.T, user string) []string {
	t.Helper()
	raw, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "ACL SETUSER "+user+" "); ok {
			rules := strings.Fields(rest)
			for i, r := range rules {
				if r == ">PASSWORD" {
					rules[i] = ">" + aclPassword
				}
			}
			return rules
		}
	}
	t.Fatalf("docs/operations.md has no line starting with ACL SETUSER %s", user)
	return nil
}

// setACLUser makes user on every server of admins with reset, then rules
// and extra, and clears their ACL LOG.
func setACLUser(t *testing.T, admins []*redis.Client, user string, rules []string, extra ...string) {
	t.Helper()
	args := []any{"ACL", "SETUSER", user, "reset"}
	for _, r := range append(rules, extra...) {
		args = append(args, r)
	}
	for _, a := range admins {
		if err := a.Do(context.Background(), args...).Err(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if err := a.Do(context.Background(), "ACL", "LOG", "RESET").Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// aclRefusals returns what the servers' ACL LOG holds: every command,
// key or channel Redis refused to a user.
func aclRefusals(t *testing.T, admins []*redis.Client) []string {
	t.Helper()
	var out []string
	for _, a := range admins {
		entries, err := a.ACLLog(context.Background(), 100).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			out = append(out, fmt.Sprintf("%s: %s %s %s", a.Options().Addr, e.Username, e.Reason, e.Object))
		}
	}
	return out
}

// checkDoctorPermitted fails t when doctor's report out says Redis
// refused a read (NOPERM): the documented doctor user lacked a
// permission. On a Cluster without +command, go-redis's COMMAND was
// refused before every command, and the persistence, latency and
// host-offset checks warned with it.
func checkDoctorPermitted(t *testing.T, out string) {
	t.Helper()
	if strings.Contains(out, "NOPERM") || strings.Contains(out, "Redis reads failed") {
		t.Errorf("doctor, as the documented user, met a refused read:\n%s", out)
	}
	if !strings.Contains(out, "[PASS] host-offset") {
		t.Errorf("doctor's host-offset check did not pass:\n%s", out)
	}
}

// bearerPost sends body to url with the admin token and returns the
// status and body.
func bearerPost(t *testing.T, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e2eAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// TestServeACLUser runs serve, then doctor, as the ACL users
// docs/operations.md documents, read from the page, on a standalone Redis
// and on a Cluster (with the grants the page adds to serve's for it):
// every policy of the example
// configuration decides (each algorithm's script), a quota, a lease, the
// admin endpoints (tiers, reset, quota restore, login unlock of a real
// lockout, outside --prefix) and /readyz answer, a configuration pushed is
// announced on the channel the user may subscribe to, and Redis refused
// nothing (ACL LOG empty, which also covers the heartbeats, the clock
// sync and the readiness probe, and doctor's reads of serve's keys), and
// doctor's report names no refused read. An outside walk found the page had no
// such list: a user without the login guard's keys got NOPERM on unlock,
// one without @dangerous (ROLE) left /readyz at 503, one without channels
// never heard of a push. A later walk (fixacl) found doctor's user
// without COMMAND, which go-redis's Cluster client asks for before every
// command until it gets it: NOPERM in three of doctor's checks.
func TestServeACLUser(t *testing.T) {
	rules := docACL(t, "floodgate")
	t.Run("standalone", func(t *testing.T) {
		rs := redistest.Start(t)
		testServeACLUser(t, []*redis.Client{rs.Client(t)}, rs.Client(t), "redis://floodgate@"+rs.Addr, rules)
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		var admins []*redis.Client
		for _, n := range c.Nodes {
			admins = append(admins, n.Client(t))
		}
		testServeACLUser(t, admins, c.Client(t), "redis-cluster://floodgate@"+strings.Join(c.Addrs, ","), append(rules, clusterGrants...))
	})
}

func testServeACLUser(t *testing.T, admins []*redis.Client, admin redis.UniversalClient, url string, rules []string) {
	setACLUser(t, admins, "floodgate", rules)
	setACLUser(t, admins, "doctor", docACL(t, "doctor"))
	dir := t.TempDir()
	pw, secretFile := filepath.Join(dir, "pw"), filepath.Join(dir, "login-secret")
	secret := "0123456789abcdef0123456789abcdef-acl"
	for f, v := range map[string]string{pw: aclPassword, secretFile: secret} {
		if err := os.WriteFile(f, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	keys, _ := config.KeysFor("fg")
	if _, err := config.Publish(ctx, admin, keys, config.DefaultYAML()); err != nil {
		t.Fatal(err)
	}
	// A real lockout for the unlock to lift, made as an application
	// would (as the admin user).
	backend, err := loginguard.NewRedis(admin, "login")
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

	svc := startService(t, "--redis", url, "--redis-password-file", pw, "--prefix", "fg", "--config-from-redis",
		"--admin-token", e2eAdminToken, "--login-secret-file", secretFile)
	defer svc.stop(t)
	waitUntil(t, "readyz 200", func() bool { code, _ := readyz(t, svc.url); return code == 200 })

	ok := func(what string, code int, body string, want string) {
		t.Helper()
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("%s: %d %s; want 200 with %s", what, code, body, want)
		}
	}
	for _, body := range []string{
		`{"policy":"api","identity":{"user":"42"}}`,
		`{"policy":"login","identity":{"account":"a","ip":"192.0.2.1"}}`,
		`{"policy":"llm","identity":{"api_key":"k"},"cost":10}`,
		`{"policy":"downstream","identity":{"route":"/r"}}`,
	} {
		code, resp := httpPost(t, svc.url+"/v1/check", body)
		ok("check "+body, code, resp, `"allowed":true`)
	}
	code, resp := httpPost(t, svc.url+"/v1/check/batch", `{"requests":[{"policy":"api","identity":{"user":"43"}}]}`)
	ok("batch", code, resp, `"allowed":true`)
	code, resp = httpPost(t, svc.url+"/v1/peek", `{"policy":"api","identity":{"user":"42"}}`)
	ok("peek", code, resp, `"remaining":99`)
	code, resp = httpPost(t, svc.url+"/v1/quota/check", `{"quota":"llm-tokens","identity":{"api_key":"k"},"cost":5}`)
	ok("quota check", code, resp, `"used":5`)
	code, resp = httpPost(t, svc.url+"/v1/quota/reserve", `{"quota":"llm-tokens","identity":{"api_key":"k"},"request_id":"r1","estimate":100}`)
	ok("quota reserve", code, resp, `"reserved":100`)
	code, resp = httpPost(t, svc.url+"/v1/quota/settle", `{"quota":"llm-tokens","identity":{"api_key":"k"},"request_id":"r1","actual":40}`)
	ok("quota settle", code, resp, `"used":45`)
	code, resp = httpPost(t, svc.url+"/v1/quota/status", `{"quota":"llm-tokens","identity":{"api_key":"k"}}`)
	ok("quota status", code, resp, `"used":45`)
	code, resp = httpPost(t, svc.url+"/v1/concurrency/acquire", `{"limiter":"reports","identity":{"user":"42"}}`)
	ok("acquire", code, resp, `"acquired":true`)
	var acquired struct {
		LeaseID string `json:"lease_id"`
	}
	_ = json.Unmarshal([]byte(resp), &acquired)
	lease := acquired.LeaseID
	code, resp = httpPost(t, svc.url+"/v1/concurrency/renew", `{"limiter":"reports","identity":{"user":"42"},"lease_id":"`+lease+`"}`)
	ok("renew", code, resp, `"renewed":true`)
	code, resp = httpPost(t, svc.url+"/v1/concurrency/release", `{"limiter":"reports","identity":{"user":"42"},"lease_id":"`+lease+`"}`)
	ok("release", code, resp, `"released":true`)
	code, resp = bearerPost(t, svc.url+"/admin/v1/tier", `{"dimension":"user","value":"42","tier":"pro"}`)
	ok("tier", code, resp, `"tier":"pro"`)
	code, resp = httpPost(t, svc.url+"/v1/check", `{"policy":"api","identity":{"user":"42"}}`)
	ok("check at the assigned tier", code, resp, `"tier":"pro"`)
	code, resp = bearerPost(t, svc.url+"/admin/v1/tier", `{"dimension":"user","value":"42","tier":""}`)
	ok("tier removed", code, resp, `"dimension":"user"`)
	code, resp = bearerPost(t, svc.url+"/admin/v1/reset", `{"policy":"api","identity":{"user":"42"}}`)
	ok("reset", code, resp, `"reset":[`)
	code, resp = bearerPost(t, svc.url+"/admin/v1/quota/restore", `{"quota":"llm-tokens","identity":{"api_key":"k"},"used":7}`)
	ok("quota restore", code, resp, `"used":7`)
	code, resp = bearerPost(t, svc.url+"/admin/v1/login/unlock", `{"account":"alice"}`)
	ok("login unlock", code, resp, `"unlocked":true`)

	// The push is announced: the instance is subscribed (the poll alone
	// would apply it too, 10 s later, so the subscription is checked).
	subs := int64(0)
	for _, a := range admins {
		n, err := a.PubSubNumSub(ctx, keys.Channel).Result()
		if err != nil {
			t.Fatal(err)
		}
		subs += n[keys.Channel]
	}
	if subs != 1 {
		t.Errorf("%d subscribers of %s, want the instance", subs, keys.Channel)
	}
	v2 := strings.Replace(string(config.DefaultYAML()), `version: "1"`, `version: "2"`, 1)
	if _, err := config.Publish(ctx, admin, keys, []byte(v2)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "version 2 applied", func() bool {
		_, body := readyz(t, svc.url)
		return strings.Contains(body, `"config_version":"2"`)
	})
	if code, body := readyz(t, svc.url); code != 200 {
		t.Errorf("readyz: %d %s", code, body)
	}
	_, out := runCLI(t, "doctor", "--redis", strings.Replace(url, "floodgate@", "doctor@", 1), "--redis-password-file", pw,
		"--prefix", "fg", "--instance", svc.url, "--color", "never")
	checkDoctorPermitted(t, out)
	if refused := aclRefusals(t, admins); len(refused) > 0 {
		t.Errorf("Redis refused the documented users:\n%s", strings.Join(refused, "\n"))
	}
	if logs := svc.Logs(); strings.Contains(logs, "NOPERM") || strings.Contains(logs, `"level":"WARN"`) {
		t.Errorf("serve warned or met NOPERM:\n%s", logs)
	}
}

// TestEnvoyCompatACLUser runs envoy-compat as the ACL user
// docs/operations.md documents for it, read from the page: the health
// check passes (it reads its probe key) and a descriptor is counted to
// its limit, with nothing refused by Redis.
func TestEnvoyCompatACLUser(t *testing.T) {
	rules := docACL(t, "envoy-compat")
	t.Run("standalone", func(t *testing.T) {
		rdb := redistest.Start(t)
		testEnvoyCompatACLUser(t, []*redis.Client{rdb.Client(t)}, rules, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+rdb.Addr)
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		var admins []*redis.Client
		for _, n := range c.Nodes {
			admins = append(admins, n.Client(t))
		}
		// The page adds the slot map and COMMAND on a Cluster.
		testEnvoyCompatACLUser(t, admins, append(rules, "+cluster|slots", "+command"),
			"REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=cluster", "REDIS_URL="+strings.Join(c.Addrs, ","))
	})
}

func testEnvoyCompatACLUser(t *testing.T, admins []*redis.Client, rules []string, env ...string) {
	setACLUser(t, admins, "envoy-compat", rules)
	root := t.TempDir()
	cfgDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFileAtomic(t, filepath.Join(cfgDir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")
	p := startCompat(t, append(env, "REDIS_AUTH=envoy-compat:"+aclPassword,
		"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true", "RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_WATCH_ROOT=false", "USE_STATSD=false", "CACHE_KEY_PREFIX=ec:")...)
	waitFor(t, "healthcheck OK", func() bool {
		code, _ := httpGet(t, "http://"+p.http+"/healthcheck")
		return code == 200
	})
	var codes []int
	for range 3 {
		code, _ := httpPost(t, "http://"+p.http+"/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"u1"}]}]}`)
		codes = append(codes, code)
	}
	if fmt.Sprint(codes) != "[200 200 429]" {
		t.Errorf("three requests at a limit of 2: %v, want [200 200 429]", codes)
	}
	if refused := aclRefusals(t, admins); len(refused) > 0 {
		t.Errorf("Redis refused the documented user:\n%s", strings.Join(refused, "\n"))
	}
	if logs := p.Logs(); strings.Contains(logs, "NOPERM") {
		t.Errorf("envoy-compat met NOPERM:\n%s", logs)
	}
}
