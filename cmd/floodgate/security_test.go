package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/loginguard"
	"github.com/floodgate-rl/floodgate/server"
)

// metricValue scrapes url's /metrics and returns the value of the sample
// whose line starts with name (labels included, if given).
func metricValue(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no %s in /metrics:\n%s", name, body)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestServeMemoryMaxKeysEvicts runs the real binary in memory mode with a
// small --memory-max-keys and floods it with batches of unique login
// identities: no decision fails, an account decided before the flood keeps
// its count, and the evictions are on /metrics.
func TestServeMemoryMaxKeysEvicts(t *testing.T) {
	svc := startService(t, "--memory-max-keys", "640")
	alice := map[string]string{"account": "alice", "ip": "192.0.2.1"}
	for range 2 {
		if code, r := post(t, svc.url+"/v1/check", server.CheckRequest{Policy: "login", Identity: alice}); code != 200 || !r.Allowed {
			t.Fatalf("alice before the flood: %d %+v", code, r)
		}
	}
	n := 0
	for b := range 30 {
		var req server.BatchRequest
		for range 100 {
			n++
			req.Requests = append(req.Requests, server.CheckRequest{Policy: "login",
				Identity: map[string]string{"account": fmt.Sprint("junk-", n), "ip": fmt.Sprintf("10.0.%d.%d", n>>8&255, n&255)}})
		}
		data, _ := json.Marshal(req)
		resp, err := http.Post(svc.url+"/v1/check/batch", "application/json", bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.Contains(string(body), `"error"`) {
			t.Fatalf("batch %d: %d %s", b, resp.StatusCode, body)
		}
	}
	if code, r := post(t, svc.url+"/v1/check", server.CheckRequest{Policy: "login", Identity: alice}); code != 200 || !r.Allowed || r.Remaining != 2 {
		t.Fatalf("alice after the flood: %d %+v, want allowed with 2 left", code, r)
	}
	if v := metricValue(t, svc.url, "floodgate_memstore_evictions_total"); v < 1000 {
		t.Fatalf("floodgate_memstore_evictions_total %v, want thousands", v)
	}
	// How full the store is (absent before: only the quota and lease
	// stores had it). A login decision has two layers, which may take a
	// full shard one past its share.
	held := metricValue(t, svc.url, `floodgate_memory_store_entries{store="ratelimit"}`)
	most := metricValue(t, svc.url, `floodgate_memory_store_entries_max{store="ratelimit"}`)
	if most != 640 || held < 600 || held > 640+64 {
		t.Fatalf("ratelimit store: %v held of %v on /metrics, want about 640 of 640", held, most)
	}
	if code, out := runCLI(t, "serve", "--memory-max-keys", "0"); code == 0 || !strings.Contains(out, "--memory-max-keys 0") {
		t.Fatalf("--memory-max-keys 0: exit %d: %s", code, out)
	}
}

// TestServeMemoryQuotaBounds runs the real binary in memory mode with
// small bounds on quota periods, quota records and leases: past each, the
// operation that needs one more is answered 503 store-unavailable (nothing
// counted) while what is held goes on being served. An outside walk grew
// a memory-mode process past 1 GB with distinct identities and request
// ids before: the quota store held a million periods whatever
// --memory-max-keys said, and reservations without a bound across
// identities.
func TestServeMemoryQuotaBounds(t *testing.T) {
	svc := startService(t, "--memory-max-quota-periods", "3", "--memory-max-quota-records", "4", "--memory-max-leases", "2")
	reserve := func(key, id string) (int, string) {
		return postBody(t, svc.url+"/v1/quota/reserve", fmt.Sprintf(`{"quota":"llm-tokens","identity":{"api_key":%q},"request_id":%q,"estimate":1}`, key, id))
	}
	full := func(what string, code int, body string) {
		t.Helper()
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "store-unavailable") || !strings.Contains(body, "the in-memory store is full") {
			t.Fatalf("%s: %d %s; want 503 store-unavailable saying the store is full", what, code, body)
		}
	}
	// The first three identities are held, whichever partitions they
	// fall in, and every later one refused.
	var held []string
	for i := range 40 {
		key := fmt.Sprint("k", i)
		switch code, body := reserve(key, "r0"); code {
		case 200:
			held = append(held, key)
		default:
			full("a period beyond 3", code, body)
		}
	}
	if len(held) != 3 || held[2] != "k2" {
		t.Fatalf("identities held: %v, want k0, k1 and k2", held)
	}
	if code, body := reserve(held[0], "r1"); code != 200 {
		t.Fatalf("a 4th reservation, for %s: %d %s", held[0], code, body)
	}
	code, body := reserve(held[1], "r1")
	full("a 5th reservation", code, body)
	if code, body := postBody(t, svc.url+"/v1/quota/settle", fmt.Sprintf(`{"quota":"llm-tokens","identity":{"api_key":%q},"request_id":"r0","actual":1}`, held[0])); code != 200 {
		t.Fatalf("settling a held reservation: %d %s", code, body)
	}
	acquire := func(user string) (int, string) {
		return postBody(t, svc.url+"/v1/concurrency/acquire", fmt.Sprintf(`{"limiter":"reports","identity":{"user":%q}}`, user))
	}
	for _, user := range []string{"u0", "u0"} {
		if code, body := acquire(user); code != 200 {
			t.Fatalf("acquire for %s: %d %s", user, code, body)
		}
	}
	code, body = acquire("u1")
	full("a 3rd lease", code, body)
	code, body = acquire("u0")
	full("a 3rd lease of a held identity", code, body)
	for _, m := range []struct {
		store     string
		held, max float64
	}{{"quota_periods", 3, 3}, {"quota_records", 4, 4}, {"leases", 2, 2}} {
		held := metricValue(t, svc.url, fmt.Sprintf("floodgate_memory_store_entries{store=%q}", m.store))
		most := metricValue(t, svc.url, fmt.Sprintf("floodgate_memory_store_entries_max{store=%q}", m.store))
		if held != m.held || most != m.max {
			t.Errorf("%s: %v held of %v on /metrics, want %v of %v", m.store, held, most, m.held, m.max)
		}
	}
}

// TestServeMemoryBoundsAreExact runs the binary in memory mode with
// --memory-max-quota-periods 40 and --memory-max-leases 40: 40 distinct
// identities are each served a quota check and a lease, the 41st answered
// 503 store-unavailable, and /metrics shows the stores at 40 of 40. The
// stores split their bound over partitions that each held only their
// share, so a new identity whose partition was full got 503 while others
// had room (an outside walk: with --memory-max-quota-periods 1000 the
// first 503 came at identity #485-536, with 2 at the second identity;
// with 700 identities 11 were refused while the gauge showed 689 of
// 1,000, under RateLimitMemoryStoreFull's 0.9).
func TestServeMemoryBoundsAreExact(t *testing.T) {
	const bound = 40
	svc := startService(t, "--memory-max-quota-periods", fmt.Sprint(bound), "--memory-max-leases", fmt.Sprint(bound))
	for _, op := range []struct{ path, body string }{
		{"/v1/quota/check", `{"quota":"llm-tokens","identity":{"api_key":"key%d"},"cost":1}`},
		{"/v1/concurrency/acquire", `{"limiter":"reports","identity":{"user":"user%d"}}`},
	} {
		for i := range bound + 1 {
			code, body := postBody(t, svc.url+op.path, fmt.Sprintf(op.body, i))
			if i < bound && code != http.StatusOK {
				t.Fatalf("%s, identity #%d of a bound of %d: %d %s", op.path, i+1, bound, code, body)
			}
			if i == bound && (code != http.StatusServiceUnavailable || !strings.Contains(body, "the in-memory store is full")) {
				t.Fatalf("%s, identity #%d: %d %s; want 503 saying the store is full", op.path, i+1, code, body)
			}
		}
	}
	for _, store := range []string{"quota_periods", "leases"} {
		held := metricValue(t, svc.url, fmt.Sprintf("floodgate_memory_store_entries{store=%q}", store))
		most := metricValue(t, svc.url, fmt.Sprintf("floodgate_memory_store_entries_max{store=%q}", store))
		if held != bound || most != bound {
			t.Errorf("%s: %v held of %v on /metrics, want %d of %d", store, held, most, bound, bound)
		}
	}
}

// e2eAdminToken is a token strong enough for server.ValidateAdminToken.
const e2eAdminToken = "e2e-admin-token-0123456789abcdefghij"

// adminGet sends GET path with the bearer token to base and returns the
// status.
func adminGet(t *testing.T, base, path, token string) int {
	t.Helper()
	var h map[string]string
	if token != "" {
		h = map[string]string{"Authorization": "Bearer " + token}
	}
	return getWith(t, base+path, h)
}

// getWith answers GET url sent with the headers h.
func getWith(t *testing.T, url string, h map[string]string) int {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestServeAdminHardening runs the binary: weak tokens are refused at
// start, the token comes from a file, the admin API and /metrics live on
// --admin-addr only (with --pprof's profiles, which pages of other sites
// cannot reach through a browser), and admin calls are logged with the
// caller's address.
func TestServeAdminHardening(t *testing.T) {
	for _, args := range [][]string{
		{"--admin-token", "a"},
		{"--admin-token", "short-token"},
		{"--admin-token", strings.Repeat("ab", 20)},
	} {
		if code, out := runCLI(t, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...); code == 0 || !strings.Contains(out, "weak admin token") {
			t.Fatalf("serve %v: exit %d: %s", args, code, out)
		}
	}
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(tokenFile, []byte(e2eAdminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := runCLI(t, "serve", "--admin-addr", "127.0.0.1:0"); code == 0 || !strings.Contains(out, "--admin-addr needs an admin token") {
		t.Fatalf("--admin-addr without a token: exit %d: %s", code, out)
	}
	svc := startService(t, "--admin-token-file", tokenFile, "--admin-addr", "127.0.0.1:0", "--metrics-admin-only", "--pprof")
	adminURL := "http://" + svc.addr(t, "floodgate admin listening")
	if code := adminGet(t, svc.url, "/admin/v1/config", e2eAdminToken); code != http.StatusNotFound {
		t.Fatalf("admin API on the public address: %d, want 404", code)
	}
	if code := adminGet(t, svc.url, "/metrics", ""); code != http.StatusNotFound {
		t.Fatalf("/metrics on the public address: %d, want 404", code)
	}
	if code := adminGet(t, adminURL, "/admin/v1/config", e2eAdminToken); code != http.StatusOK {
		t.Fatalf("admin API on --admin-addr: %d", code)
	}
	if code := adminGet(t, adminURL, "/metrics", ""); code != http.StatusOK {
		t.Fatalf("/metrics on --admin-addr: %d", code)
	}
	// --pprof: the runtime's profiles on the admin listener only.
	if code := adminGet(t, adminURL, "/debug/pprof/heap", ""); code != http.StatusOK {
		t.Fatalf("/debug/pprof/heap on --admin-addr: %d", code)
	}
	if code := adminGet(t, svc.url, "/debug/pprof/heap", ""); code != http.StatusNotFound {
		t.Fatalf("/debug/pprof/heap on the public address: %d, want 404", code)
	}
	// A page of another site cannot have its visitor's browser start
	// profiles (an image's GET would do): refused whatever the method, as
	// the admin API is; the operator's own browser and go tool pprof are
	// served.
	for _, h := range []map[string]string{
		{"Sec-Fetch-Site": "cross-site"},
		{"Sec-Fetch-Site": "same-site"},
		{"Origin": "https://evil.example"},
		// The admin listener's own origin: it serves no page sending
		// this, and a page of a DNS name rebound to it sends the same.
		{"Origin": adminURL, "Sec-Fetch-Site": "same-origin"},
	} {
		if code := getWith(t, adminURL+"/debug/pprof/profile?seconds=1", h); code != http.StatusForbidden {
			t.Fatalf("/debug/pprof/profile with %v: %d, want 403", h, code)
		}
	}
	for _, h := range []map[string]string{
		nil,                               // go tool pprof, curl
		{"Sec-Fetch-Site": "none"},        // typed in the address bar
		{"Sec-Fetch-Site": "same-origin"}, // a link of the index page
	} {
		if code := getWith(t, adminURL+"/debug/pprof/heap", h); code != http.StatusOK {
			t.Fatalf("/debug/pprof/heap with %v: %d, want 200", h, code)
		}
	}
	// Not the command line, which anyone reaching the admin listener
	// could read without the token: it may hold --admin-token or a Redis
	// URL with its password.
	if code := adminGet(t, adminURL, "/debug/pprof/cmdline", ""); code != http.StatusNotFound {
		t.Fatalf("/debug/pprof/cmdline on --admin-addr: %d, want 404", code)
	}
	if code := adminGet(t, adminURL, "/admin/v1/config", "wrong-token"); code != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", code)
	}
	// The log is read from the process's stderr as it comes.
	var logs string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if logs = svc.Logs(); strings.Contains(logs, `"msg":"admin authentication failed"`) {
			break
		}
	}
	if !strings.Contains(logs, `"msg":"admin call","caller":"127.0.0.1:`) || !strings.Contains(logs, `"msg":"admin authentication failed","caller":"127.0.0.1:`) {
		t.Fatalf("admin calls not logged with their caller:\n%s", logs)
	}
	if strings.Contains(logs, e2eAdminToken) {
		t.Fatal("the admin token is in the log")
	}
	svc.stop(t)
}

// TestServeRedisTLSAndPasswordFile runs the binary against a redis-server
// that requires TLS with client certificates and a password: the TLS
// flags and --redis-password-file (the URL carries no password) make it
// work.
func TestServeRedisTLSAndPasswordFile(t *testing.T) {
	f := redistest.GenerateTLS(t)
	f.AuthClients = true
	const pw = "redis-password-from-a-file-42"
	rs := redistest.StartTLS(t, f)
	// redistest waits for an unauthenticated PING: require the password
	// once the server runs, and drop it before the server stops.
	if err := rs.Client(t).ConfigSet(context.Background(), "requirepass", pw).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: rs.Addr, Password: pw})
		defer c.Close()
		_ = c.ConfigSet(context.Background(), "requirepass", "").Err()
	})
	pwFile := filepath.Join(t.TempDir(), "redis-password")
	if err := os.WriteFile(pwFile, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	svc := startService(t, "--redis", "rediss://"+rs.TLSAddr+"/0", "--redis-password-file", pwFile,
		"--redis-ca-file", f.CA, "--redis-cert-file", f.ClientCert, "--redis-key-file", f.ClientKey, "--fallback", "off")
	for want := int64(49); want >= 48; want-- {
		code, r := post(t, svc.url+"/v1/check", server.CheckRequest{Policy: "login", Identity: map[string]string{"account": "a", "ip": "192.0.2.1"}})
		if code != 200 || !r.Allowed || r.Layers[1].Remaining != want {
			t.Fatalf("check over TLS: %d %+v, want per-ip remaining %d", code, r, want)
		}
	}
	if strings.Contains(svc.Logs(), pw) {
		t.Fatal("the Redis password is in the log")
	}
	// config push takes the same flags.
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("version: \"1\"\npolicies:\n  - name: p\n    layers:\n      - {name: u, algorithm: fixed_window, limit: 7, window: 1m, dimension: user}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := cli("config", "push", file, "--redis", "rediss://"+rs.TLSAddr+"/0", "--redis-password-file", pwFile,
		"--redis-ca-file", f.CA, "--redis-cert-file", f.ClientCert, "--redis-key-file", f.ClientKey, "--prefix", "tlspush"); code != 0 || !strings.Contains(out, `published version "1"`) {
		t.Fatalf("config push over TLS with a password file: %d %s %s", code, out, errOut)
	}
}

// TestServeLoginSecretFile: a login secret under 32 bytes is refused; one
// readable by group or others is used with a warning.
func TestServeLoginSecretFile(t *testing.T) {
	rs := redistest.Start(t)
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := runCLI(t, "serve", "--addr", "127.0.0.1:0", "--redis", "redis://"+rs.Addr, "--login-secret-file", short); code == 0 || !strings.Contains(out, "want at least 32") {
		t.Fatalf("short secret: exit %d: %s", code, out)
	}
	open := filepath.Join(dir, "open")
	if err := os.WriteFile(open, []byte("0123456789abcdef0123456789abcdef0123456789\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	svc := startService(t, "--redis", "redis://"+rs.Addr, "--login-secret-file", open)
	if logs := svc.Logs(); !strings.Contains(logs, "secret file readable by group or others") || !strings.Contains(logs, `"mode":"0644"`) {
		t.Fatalf("no warning about a world-readable secret:\n%s", logs)
	}
	// Without an admin token the unlock endpoint it enables is off: said
	// at start.
	if logs := svc.Logs(); !strings.Contains(logs, "POST /admin/v1/login/unlock answers 403 admin-disabled") {
		t.Fatalf("no warning that the unlock endpoint is off without an admin token:\n%s", logs)
	}
}

// TestServeLoginUnlockNetworkSize: an application's guard that counts
// IPv4 clients by /24 locks a network; serve unlocks it only with the
// same --login-ipv4-prefix, and says when it found nothing to lift (it
// answered "unlocked" and left the lock in place: serve had no such
// flag).
func TestServeLoginUnlockNetworkSize(t *testing.T) {
	rs := redistest.Start(t)
	secret := "0123456789abcdef0123456789abcdef-login"
	secretFile := filepath.Join(t.TempDir(), "login-secret")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	backend, err := loginguard.NewRedis(rs.Client(t), "login")
	if err != nil {
		t.Fatal(err)
	}
	app, err := loginguard.New(backend, loginguard.Options{Secret: []byte(secret), IPv4Prefix: 24,
		IP: loginguard.Ladder{Captcha: 1, Delay: 2, Lock: 3, Lockout: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	attacker := netip.MustParseAddr("198.19.5.7")
	for i := range 5 {
		if _, err := app.Failure(ctx, fmt.Sprintf("user%d", i), attacker); err != nil {
			t.Fatal(err)
		}
	}
	locked := func() bool {
		st, err := app.Status(ctx, "someone", netip.MustParseAddr("198.19.5.200"))
		if err != nil {
			t.Fatal(err)
		}
		return !st.IP.LockedUntil.IsZero()
	}
	if !locked() {
		t.Fatal("the /24 is not locked")
	}
	unlock := func(svc *service) string {
		req, _ := http.NewRequest(http.MethodPost, svc.url+"/admin/v1/login/unlock", strings.NewReader(`{"ip":"198.19.5.7"}`))
		req.Header.Set("Authorization", "Bearer "+e2eAdminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("unlock: %d %s", resp.StatusCode, body)
		}
		return string(body)
	}
	def := startService(t, "--redis", "redis://"+rs.Addr, "--login-secret-file", secretFile, "--admin-token", e2eAdminToken)
	if body := unlock(def); !strings.Contains(body, `"unlocked":false`) || !strings.Contains(body, "--login-ipv4-prefix") || !locked() {
		t.Fatalf("unlock by /32 of a /24 lock: %s (locked %v); want unlocked false naming --login-ipv4-prefix, still locked", body, locked())
	}
	def.stop(t)
	same := startService(t, "--redis", "redis://"+rs.Addr, "--login-secret-file", secretFile, "--admin-token", e2eAdminToken, "--login-ipv4-prefix", "24")
	defer same.stop(t)
	if body := unlock(same); !strings.Contains(body, `"unlocked":true`) || !strings.Contains(body, `"ip":true`) || locked() {
		t.Fatalf("unlock with --login-ipv4-prefix 24: %s (locked %v); want the /24 unlocked", body, locked())
	}
	if code, out := runCLI(t, "serve", "--addr", "127.0.0.1:0", "--redis", "redis://"+rs.Addr, "--login-secret-file", secretFile, "--login-ipv4-prefix", "40"); code == 0 || !strings.Contains(out, "--login-ipv4-prefix") {
		t.Fatalf("--login-ipv4-prefix 40: exit %d: %s", code, out)
	}
}

// TestConfigPushVersionRules runs "floodgate config push": the same
// version with other content exits 1 and leaves Redis as it was (it used
// to exit 0, and a new instance then ran the new content while running
// ones kept the old, both reporting one version); going back needs --force.
func TestConfigPushVersionRules(t *testing.T) {
	rs := redistest.Start(t)
	prefix := fmt.Sprintf("pushv%d", time.Now().UnixNano())
	dir := t.TempDir()
	write := func(version string, limit int) string {
		file := filepath.Join(dir, fmt.Sprintf("c-%s-%d.yaml", version, limit))
		doc := fmt.Sprintf("version: %q\npolicies:\n  - name: p\n    layers:\n      - {name: u, algorithm: fixed_window, limit: %d, window: 1m, dimension: user}\n", version, limit)
		if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return file
	}
	url := "redis://" + rs.Addr + "/0"
	push := func(file string, extra ...string) (int, string) {
		code, out, errOut := cli(append([]string{"config", "push", file, "--redis", url, "--prefix", prefix}, extra...)...)
		return code, out + errOut
	}
	if code, out := push(write("2", 10)); code != 0 {
		t.Fatalf("push v2: %d %s", code, out)
	}
	if code, out := push(write("2", 20)); code != 1 || !strings.Contains(out, "already published with different content") {
		t.Fatalf("push v2 with other content: %d %s", code, out)
	}
	if code, out := push(write("1", 30)); code != 1 || !strings.Contains(out, "--force") {
		t.Fatalf("push v1 after v2: %d %s", code, out)
	}
	if code, out := push(write("1", 30), "--force"); code != 0 {
		t.Fatalf("forced rollback: %d %s", code, out)
	}
	svc := startService(t, "--redis", url, "--config-from-redis", "--prefix", prefix, "--fallback", "off")
	if _, r := post(t, svc.url+"/v1/peek", server.PeekRequest{Policy: "p", Identity: map[string]string{"user": "a"}}); r.Limit != 30 {
		t.Fatalf("served config: %+v, want the rolled-back limit 30", r)
	}
	// A push that drops a policy callers use says so (it said only
	// "published").
	renamed := filepath.Join(dir, "renamed.yaml")
	if err := os.WriteFile(renamed, []byte("version: \"5\"\npolicies:\n  - name: q\n    layers:\n      - {name: u, algorithm: fixed_window, limit: 7, window: 1m, dimension: user}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := push(renamed); code != 0 || !strings.Contains(out, `warning: version "5" drops policy "p", which version "1" defined: requests naming it get 400 unknown-policy`) {
		t.Fatalf("push dropping a policy: %d %s; want a warning naming it", code, out)
	}
}

// TestServeListenerTLS runs the binary with --tls-cert-file,
// --tls-key-file and --tls-client-ca-file: HTTPS and gRPC over TLS answer
// a client presenting a certificate of the CA and refuse one without;
// gRPC reflection is off unless --grpc-reflection.
func TestServeListenerTLS(t *testing.T) {
	f := redistest.GenerateTLS(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte("domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, reflect := range []bool{false, true} {
		args := []string{"--tls-cert-file", f.Cert, "--tls-key-file", f.Key, "--tls-client-ca-file", f.CA,
			"--grpc-addr", "127.0.0.1:0", "--envoy-config", dir}
		if reflect {
			args = append(args, "--grpc-reflection")
		}
		svc := startService(t, args...)
		base := strings.Replace(svc.url, "http://", "https://", 1)
		grpcAddr := svc.addr(t, grpcListening)
		withCert := &http.Client{Transport: &http.Transport{TLSClientConfig: f.ClientConfig(t)}}
		resp, err := withCert.Get(base + "/healthz")
		if err != nil {
			t.Fatalf("HTTPS with a client certificate: %v", err)
		}
		resp.Body.Close()
		noCert := f.ClientConfig(t)
		noCert.Certificates = nil
		if resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: noCert}}).Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			t.Fatalf("HTTPS without a client certificate: %d, want a refused handshake", resp.StatusCode)
		}
		// Refused handshakes are logged at most once per interval: one
		// line each let any client fill the log.
		for range 20 {
			if conn, err := tls.Dial("tcp", strings.TrimPrefix(base, "https://"), noCert); err == nil {
				_, _ = conn.Read(make([]byte, 1))
				conn.Close()
			}
		}
		waitUntil(t, "a failed handshake logged", func() bool { return strings.Contains(svc.Logs(), "TLS handshake failed") })
		if n := strings.Count(svc.Logs(), "TLS handshake"); n > 2 {
			t.Fatalf("%d lines about failed TLS handshakes for 21 refused clients, want them rate-limited:\n%s", n, svc.Logs())
		}
		if resp, err := http.Get(svc.url + "/healthz"); err == nil && resp.StatusCode == 200 {
			t.Fatal("plain HTTP answered on a TLS listener")
		}
		call := func(tc *tls.Config) error {
			conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
			if err != nil {
				return err
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
				{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}},
			}})
			return err
		}
		if err := call(f.ClientConfig(t)); err != nil {
			t.Fatalf("gRPC over TLS with a client certificate: %v", err)
		}
		if err := call(noCert); err == nil {
			t.Fatal("gRPC without a client certificate answered")
		}
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(f.ClientConfig(t))))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
		if err == nil {
			err = stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
			// Send says io.EOF when the server has already ended the
			// stream (Unimplemented comes back at once); Recv gives
			// the status either way.
			if err == nil || errors.Is(err, io.EOF) {
				_, err = stream.Recv()
			}
		}
		cancel()
		conn.Close()
		if reflect && err != nil {
			t.Fatalf("reflection with --grpc-reflection: %v", err)
		}
		if !reflect && status.Code(err) != codes.Unimplemented {
			t.Fatalf("reflection without --grpc-reflection: %v, want Unimplemented", err)
		}
		svc.stop(t)
	}
}

// TestServeSignedConfigFromRedis: with --config-verify-key-file the
// service applies only a document pushed with --sign-key-file: started on
// an unsigned one, it runs without a configuration (not ready, 503) until
// a signed one is pushed.
func TestServeSignedConfigFromRedis(t *testing.T) {
	rs := redistest.Start(t)
	prefix := fmt.Sprintf("signed%d", time.Now().UnixNano())
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte("config-signing-key-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(file, []byte("version: \"1\"\npolicies:\n  - name: p\n    layers:\n      - {name: u, algorithm: fixed_window, limit: 7, window: 1m, dimension: user}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url := "redis://" + rs.Addr + "/0"
	if code, out, errOut := cli("config", "push", file, "--redis", url, "--prefix", prefix); code != 0 {
		t.Fatalf("unsigned push: %d %s %s", code, out, errOut)
	}
	// It starts on an unsigned document, refusing it: not ready, deciding
	// nothing, until a signed one is pushed.
	svc := startService(t, "--redis", url, "--prefix", prefix, "--config-from-redis", "--config-verify-key-file", keyFile, "--fallback", "off")
	if code, body := httpGet(t, svc.url+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not signed") {
		t.Fatalf("serve on an unsigned document: /readyz %d %s; want 503 saying it is not signed", code, body)
	}
	if code, _ := post(t, svc.url+"/v1/peek", server.PeekRequest{Policy: "p", Identity: map[string]string{"user": "a"}}); code != http.StatusServiceUnavailable {
		t.Fatalf("peek on an unsigned document: %d, want 503", code)
	}
	// doctor given the instances' key fails the document they refuse (it
	// passed it: it had no way to know).
	doctorArgs := []string{"doctor", "--redis", url, "--prefix", prefix, "--latency-samples", "3"}
	if _, out := runCLI(t, append(doctorArgs, "--config-verify-key-file", keyFile)...); !strings.Contains(out, "[FAIL] validates") || !strings.Contains(out, "not signed") {
		t.Fatalf("doctor with the key on an unsigned document:\n%s", out)
	}
	if _, out := runCLI(t, doctorArgs...); !strings.Contains(out, "[PASS] validates") {
		t.Fatalf("doctor without the key on an unsigned document:\n%s", out)
	}
	// Signing changes the stored document, so it takes a new version.
	if err := os.WriteFile(file, []byte("version: \"2\"\npolicies:\n  - name: p\n    layers:\n      - {name: u, algorithm: fixed_window, limit: 7, window: 1m, dimension: user}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := cli("config", "push", file, "--redis", url, "--prefix", prefix, "--sign-key-file", keyFile); code != 0 {
		t.Fatalf("signed push: %d %s %s", code, out, errOut)
	}
	if _, out := runCLI(t, append(doctorArgs, "--config-verify-key-file", keyFile)...); !strings.Contains(out, "[PASS] validates") {
		t.Fatalf("doctor with the key on a signed document:\n%s", out)
	}
	waitUntil(t, "the signed document to apply", func() bool { return get(t, svc.url+"/readyz") == http.StatusOK })
	if _, r := post(t, svc.url+"/v1/peek", server.PeekRequest{Policy: "p", Identity: map[string]string{"user": "a"}}); r.Limit != 7 {
		t.Fatalf("signed config: %+v", r)
	}
}

// TestServeRefusesNegativeDurations: every duration flag of serve refuses a
// negative value, naming the flag, before anything starts (the config file
// named here does not exist: the flag is what is wrong first). Before,
// --reload-interval, --redis-timeout and --clock-skew-warn took one
// silently (the first as its default, the others as no timeout and no
// warning), and the rest failed with "server: negative option".
func TestServeRefusesNegativeDurations(t *testing.T) {
	for _, fl := range []string{"--reload-interval", "--redis-timeout", "--decision-timeout", "--fallback-budget",
		"--clock-skew-warn", "--drain-timeout", "--read-timeout", "--write-timeout", "--shutdown-delay"} {
		code, out := runCLI(t, "serve", "--addr", "127.0.0.1:0", "--config", filepath.Join(t.TempDir(), "none.yaml"), fl+"=-1s")
		if code == 0 || !strings.Contains(out, fl+" -1s: must not be negative") {
			t.Errorf("%s=-1s: exit %d: %s", fl, code, out)
		}
	}
}

// TestServeRefusesTinyIOTimeouts: a nonzero --read-timeout or
// --write-timeout below 100ms is refused, naming the flag (rwhttp walk:
// --write-timeout 1ns was taken, then every answer on --addr failed,
// curl's "Empty reply from server").
func TestServeRefusesTinyIOTimeouts(t *testing.T) {
	for _, fl := range []string{"--read-timeout", "--write-timeout"} {
		for _, v := range []string{"1ns", "99ms"} {
			code, out := runCLI(t, "serve", "--addr", "127.0.0.1:0", "--config", filepath.Join(t.TempDir(), "none.yaml"), fl+"="+v)
			if code == 0 || !strings.Contains(out, fl+" "+v+": want at least 100ms") {
				t.Errorf("%s=%s: exit %d: %s", fl, v, code, out)
			}
		}
	}
}

// TestServeGRPCConnectionSetupBounded: a client that opens a connection to
// --grpc-addr and never completes the HTTP/2 (or TLS) handshake is cut
// after --read-timeout, as a slow HTTP request is, rather than held for
// gRPC's default of two minutes: idle sockets opened faster than that
// would otherwise run the process out of file descriptors.
func TestServeGRPCConnectionSetupBounded(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte("domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	svc := startService(t, "--read-timeout", "500ms", "--grpc-addr", "127.0.0.1:0", "--envoy-config", dir)
	conn, err := net.Dial("tcp", svc.addr(t, grpcListening))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The server's SETTINGS frame comes first; then, without our preface,
	// the connection must end. 30 s is far beyond the 500 ms asked for
	// and far below gRPC's default 120 s.
	if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("a connection that never sent the HTTP/2 preface was still open after 30 s")
	}
	// The service still answers a real client.
	gc, err := grpc.NewClient(svc.addr(t, grpcListening), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := rlspb.NewRateLimitServiceClient(gc).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}},
	}}); err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	svc.stop(t)
}

// TestServeNotesGroupReadableSecret: a secret file only its group can
// read, the group being this process's (what a Kubernetes Secret volume
// with the pod's fsGroup gives: 0440, which the process cannot chmod on
// the read-only volume), is noted at Info level, not warned about with
// advice it cannot follow (the deploy kit's pods warned at every start).
func TestServeNotesGroupReadableSecret(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("file groups are a Unix notion")
	}
	f := redistest.GenerateTLS(t)
	key, err := os.ReadFile(f.Key)
	if err != nil {
		t.Fatal(err)
	}
	grouped := filepath.Join(t.TempDir(), "server.key") // created with this process's group
	if err := os.WriteFile(grouped, key, 0o440); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(grouped, 0o440); err != nil { // whatever the umask
		t.Fatal(err)
	}
	svc := startService(t, "--tls-cert-file", f.Cert, "--tls-key-file", grouped)
	if _, ok := svc.Logged("secret file readable by group or others; make it readable by this user only (chmod 600)"); ok {
		t.Fatalf("warned about a 0440 key of this process's group:\n%s", svc.Logs())
	}
	rec, ok := svc.Logged("secret file readable by its group, a group of this process (as a Kubernetes Secret volume with the pod's fsGroup makes it); others cannot read it")
	if !ok || rec["level"] != "INFO" || rec["mode"] != "0440" {
		t.Fatalf("no Info note for a 0440 --tls-key-file:\n%s", svc.Logs())
	}
}

// TestServeWarnsOnSharedKeyFile: a TLS private key readable by group or
// others is warned about at start, as the secret files are (it was not).
func TestServeWarnsOnSharedKeyFile(t *testing.T) {
	f := redistest.GenerateTLS(t)
	key, err := os.ReadFile(f.Key)
	if err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(t.TempDir(), "server.key")
	if err := os.WriteFile(shared, key, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	svc := startService(t, "--tls-cert-file", f.Cert, "--tls-key-file", shared)
	rec, ok := svc.Logged("secret file readable by group or others; make it readable by this user only (chmod 600)")
	if !ok || rec["flag"] != "--tls-key-file" {
		t.Fatalf("no warning for a 0644 --tls-key-file:\n%s", svc.Logs())
	}
}
