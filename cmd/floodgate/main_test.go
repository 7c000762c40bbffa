package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/proctest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildDir  string
)

// binary builds the floodgate command once per test run.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "floodgate-bin-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "floodgate")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// service is a running "floodgate serve" process.
type service struct {
	*proctest.Proc
	url string
}

// startService execs the binary with serve args on a free port and waits
// for its "listening" log line.
func startService(t *testing.T, args ...string) *service {
	t.Helper()
	const listening = "floodgate listening"
	cmd := exec.Command(binary(t), append([]string{"serve", "--addr", "127.0.0.1:0", "--log-format", "json"}, args...)...)
	p := proctest.Start(t, cmd, listening)
	return &service{Proc: p, url: "http://" + p.Record(listening)["addr"]}
}

// grpcListening is the log message of serve's gRPC listener.
const grpcListening = "floodgate gRPC (Envoy rate limit service) listening"

// addr returns the address in the service's log record with message msg:
// one of the listeners serve opens before its "floodgate listening" line
// (gRPC, admin). It fails t if there is no such record.
func (s *service) addr(t *testing.T, msg string) string {
	t.Helper()
	rec, ok := s.Logged(msg)
	if !ok || rec["addr"] == "" {
		t.Fatalf("no %q with an address in the log:\n%s", msg, s.Logs())
	}
	return rec["addr"]
}

// stop sends SIGTERM and waits for a clean exit.
func (s *service) stop(t *testing.T) {
	t.Helper()
	if err := s.Stop(t); err != nil {
		t.Fatalf("serve exited with %v after SIGTERM", err)
	}
	if !strings.Contains(s.Logs(), "shutting down") {
		t.Fatalf("no graceful shutdown in the log:\n%s", s.Logs())
	}
}

func post(t *testing.T, url string, body any) (int, server.CheckResponse) {
	t.Helper()
	data, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(data))
	if err != nil {
		t.Error(err)
		return 0, server.CheckResponse{}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var cr server.CheckResponse
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(raw, &cr); err != nil {
			t.Errorf("decoding %s: %v", raw, err)
		}
	}
	return resp.StatusCode, cr
}

// runCLI runs the binary with args and returns its exit code and output.
func runCLI(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary(t), args...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

const e2eConfig = `version: "1"
policies:
  - name: fifty
    layers:
      - {name: per-user, algorithm: sliding_window, limit: 50, window: 1h, dimension: user}
  - name: api
    layers:
      - {name: edge, algorithm: fixed_window, limit: 1000, window: 1h, dimension: global}
      - {name: per-user, algorithm: token_bucket, limit: 3, window: 1h, dimension: user}
`

// e2eQuotas adds a quota to e2eConfig.
const e2eQuotas = `quotas:
  - {name: tokens, limit: 1000, period: month, dimension: api_key}
`

// TestServeOnRedisEndToEnd runs the real binary against a real Redis:
// 200 concurrent checks at limit 50 admit exactly 50, the check command
// exits 0/2, a quota reservation settles once in Redis, the configuration
// file reloads live (and a broken one is rejected), readiness follows
// Redis, and SIGTERM shuts down cleanly.
func TestServeOnRedisEndToEnd(t *testing.T) {
	rs := redistest.Start(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "floodgate.yaml")
	if err := os.WriteFile(cfgPath, []byte(e2eConfig+e2eQuotas), 0o644); err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("e2e%d", time.Now().UnixNano())
	svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--config", cfgPath, "--prefix", prefix,
		"--reload-interval", "50ms", "--fallback-budget", "5s", "--decision-timeout", "10s", "--admin-token", e2eAdminToken)

	var allowed, failed atomic.Int64
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			code, r := post(t, svc.url+"/v1/check", server.CheckRequest{Policy: "fifty", Identity: map[string]string{"user": "u1"}})
			switch {
			case code != 200:
				failed.Add(1)
			case r.Allowed:
				allowed.Add(1)
			}
		}()
	}
	close(gate)
	wg.Wait()
	if allowed.Load() != 50 || failed.Load() != 0 {
		t.Fatalf("200 concurrent checks at limit 50: %d allowed, %d failed; want exactly 50 allowed", allowed.Load(), failed.Load())
	}
	// The counters are in Redis, under the prefix.
	if n, err := rs.Client(t).Exists(context.Background(), prefix+":fifty.per-user:sw:{ru1}").Result(); err != nil || n != 1 {
		t.Fatalf("counter key not in Redis: %d %v", n, err)
	}

	// The check command: exit 2 when denied, 0 when allowed.
	if code, out := runCLI(t, "check", "--addr", svc.url, "--policy", "fifty", "--id", "user=u1"); code != 2 || !strings.Contains(out, "DENIED") {
		t.Fatalf("check of an exhausted user: exit %d\n%s", code, out)
	}
	if code, out := runCLI(t, "check", "--addr", svc.url, "--policy", "api", "--id", "user=u2", "--cost", "2"); code != 0 || !strings.Contains(out, "ALLOWED") || !strings.Contains(out, "remaining 1") {
		t.Fatalf("check of a fresh user: exit %d\n%s", code, out)
	}
	if code, out := runCLI(t, "check", "--addr", svc.url, "--policy", "nope", "--id", "user=u2"); code != 1 || !strings.Contains(out, `unknown policy "nope"`) {
		t.Fatalf("check of an unknown policy: exit %d\n%s", code, out)
	}

	// A quota reservation, settled for less, twice: charged once, in Redis.
	quotaReserveSettle(t, svc.url, rs, prefix)

	// Live reload: raise the limit in the file.
	if err := os.WriteFile(cfgPath, []byte(strings.Replace(e2eConfig+e2eQuotas, "limit: 50,", "limit: 60,", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the raised limit", func() bool {
		_, r := post(t, svc.url+"/v1/peek", server.PeekRequest{Policy: "fifty", Identity: map[string]string{"user": "u1"}})
		return r.Limit == 60
	})
	// A broken file is rejected; the last good configuration stays.
	if err := os.WriteFile(cfgPath, []byte("version: 2\npolicies:\n  - name: fifty\n    layers: oops\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// os.WriteFile truncates first: a poll may see the empty file and
	// reject it before the next poll reads the whole broken one, so wait
	// for the rejection of the broken content itself, with its position.
	waitUntil(t, "the broken file to be rejected with its position", func() bool {
		return strings.Contains(svc.Logs(), `floodgate.yaml:4:13: policy \"fifty\" layers must be a list`)
	})
	if code, r := post(t, svc.url+"/v1/check", server.CheckRequest{Policy: "fifty", Identity: map[string]string{"user": "u1"}}); code != 200 || r.Limit != 60 || !r.Allowed {
		t.Fatalf("after a rejected reload: %d %+v", code, r)
	}
	// The admin API says the file holds something else than what runs
	// (only the log and a counter did).
	req, _ := http.NewRequest(http.MethodGet, svc.url+"/admin/v1/config", nil)
	req.Header.Set("Authorization", "Bearer "+e2eAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var info server.ConfigInfo
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil || info.Rejected == nil || !strings.Contains(info.Rejected.Error, "layers must be a list") {
		t.Fatalf("GET /admin/v1/config after a rejected reload: %+v %v; want the rejection", info, err)
	}
	// A file deleted: the admin API says the source is unreadable (a walk
	// saw only the stale rejection there), until the file is back.
	configInfo := func() server.ConfigInfo {
		t.Helper()
		return adminConfigInfo(t, svc.url)
	}
	if err := os.Remove(cfgPath); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the deleted file reported unreadable", func() bool {
		u := configInfo().Unreadable
		return u != nil && strings.Contains(u.Error, "no such file") && !u.At.IsZero()
	})
	if err := os.WriteFile(cfgPath, []byte("version: 2\npolicies:\n  - name: fifty\n    layers: oops\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the file readable again", func() bool { return configInfo().Unreadable == nil })

	// Readiness follows Redis.
	if code := get(t, svc.url+"/readyz"); code != 200 {
		t.Fatalf("readyz: %d", code)
	}
	rs.Kill()
	if code := get(t, svc.url+"/readyz"); code != 503 {
		t.Fatalf("readyz with Redis down: %d", code)
	}
	rs.Restart(t)
	waitUntil(t, "readiness after Redis restart", func() bool { return get(t, svc.url+"/readyz") == 200 })

	svc.stop(t)
}

// quotaReserveSettle reserves 300 tokens, settles 120 twice through the
// typed client, and checks the usage the service reports and the keys it
// left in Redis.
func quotaReserveSettle(t *testing.T, url string, rs *redistest.Server, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := server.NewClient(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	key := map[string]string{"api_key": "k1"}
	estimate, actual := int64(300), int64(120)
	r, err := c.QuotaReserve(ctx, server.QuotaReserveRequest{Quota: "tokens", Identity: key, RequestID: "job-1", Estimate: &estimate})
	if err != nil || !r.Allowed || r.Reserved != 300 || r.Remaining != 700 {
		t.Fatalf("reserve: %+v %v", r, err)
	}
	for i := range 2 {
		r, err = c.QuotaSettle(ctx, server.QuotaSettleRequest{Quota: "tokens", Identity: key, RequestID: "job-1", Actual: &actual})
		want := int64(180) // refunded by the first settle; a replay gives nothing back
		if i == 1 {
			want = 0
		}
		if err != nil || r.Used != 120 || r.Reserved != 0 || r.Refunded != want || r.Replayed != (i == 1) {
			t.Fatalf("settle #%d: %+v %v", i+1, r, err)
		}
	}
	if r, err = c.QuotaStatus(ctx, server.QuotaStatusRequest{Quota: "tokens", Identity: key}); err != nil || r.Used != 120 || r.Remaining != 880 {
		t.Fatalf("status: %+v %v", r, err)
	}
	// The quota's state is in Redis under the service's prefix, and no
	// key of it lives for ever.
	client := rs.Client(t)
	keys, _, err := client.Scan(ctx, 0, prefix+":tokens:q:*", 1000).Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("no quota keys under %s in Redis: %v", prefix, err)
	}
	for _, k := range keys {
		if ttl, err := client.PTTL(ctx, k).Result(); err != nil || ttl <= 0 {
			t.Fatalf("quota key %s has TTL %v (%v)", k, ttl, err)
		}
	}
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// TestServeInMemoryDefault: with no flags but the address, the service
// runs in memory on the built-in example configuration.
func TestServeInMemoryDefault(t *testing.T) {
	svc := startService(t)
	code, r := post(t, svc.url+"/v1/check", server.CheckRequest{Policy: "api", Identity: map[string]string{"user": "42"}})
	if code != 200 || !r.Allowed || r.Tier != "free" || len(r.Layers) != 3 || r.Layers[1].Limit != 100 {
		t.Fatalf("default api policy: %d %+v", code, r)
	}
	if !strings.Contains(svc.Logs(), `"store":"memory"`) {
		t.Fatalf("not in memory:\n%s", svc.Logs())
	}
	// Admin endpoints are off without a token.
	req, _ := http.NewRequest("GET", svc.url+"/admin/v1/config", nil)
	req.Header.Set("Authorization", "Bearer x")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("admin without --admin-token: %d", resp.StatusCode)
	}
	svc.stop(t)
}

// cli runs the command in process.
func cli(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestConfigPushNamesTheFile: config push checks the file before it
// connects, and reports every problem against the file's name and line,
// not the Redis key it would be stored under.
func TestConfigPushNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	noVersion, invalid := filepath.Join(dir, "nover.yaml"), filepath.Join(dir, "invalid.yaml")
	os.WriteFile(noVersion, []byte(strings.Replace(e2eConfig, `version: "1"`, "", 1)), 0o644)
	os.WriteFile(invalid, []byte("version: 3\npolicies: []\n"), 0o644)
	for file, want := range map[string]string{
		noVersion: noVersion + ": a shared configuration needs a version field",
		invalid:   invalid + ":2:11: policies is empty",
	} {
		code, _, errOut := cli("config", "push", file, "--redis", "redis://127.0.0.1:1/0")
		if code != 1 || !strings.Contains(errOut, want) || strings.Contains(errOut, "redis:") {
			t.Errorf("push %s: exit %d, stderr %q; want 1 and %q", file, code, errOut, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte(e2eConfig), 0o644)
	os.WriteFile(bad, []byte(strings.Replace(e2eConfig, "algorithm: token_bucket", "algorithm: token-bucket", 1)+"extra: 1\n"), 0o644)
	if code, out, _ := cli("config", "validate", good); code != 0 || !strings.Contains(out, "good.yaml: OK") {
		t.Fatalf("valid file: %d %q", code, out)
	}
	code, _, errOut := cli("config", "validate", good, bad)
	if code != 1 {
		t.Fatalf("invalid file: exit %d", code)
	}
	for _, want := range []string{
		bad + `:9:37: layer "per-user" of policy "api": unknown algorithm "token-bucket"`,
		bad + `:10:1: unknown field "extra" in the configuration`,
		"1 of 2 files invalid",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if code, _, errOut := cli("config", "validate", filepath.Join(dir, "missing.yaml")); code != 1 || !strings.Contains(errOut, "no such file") {
		t.Fatalf("missing file: %d %s", code, errOut)
	}
	if code, out, _ := cli("config", "example"); code != 0 || !bytes.Equal([]byte(out), config.DefaultYAML()) {
		t.Fatalf("config example: %d", code)
	}
}

func TestConfigPushAndServeFromRedis(t *testing.T) {
	rs := redistest.Start(t)
	prefix := fmt.Sprintf("push%d", time.Now().UnixNano())
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte(e2eConfig), 0o644)
	url := "redis://" + rs.Addr + "/0"
	if code, out, errOut := cli("config", "push", file, "--redis", url, "--prefix", prefix); code != 0 || !strings.Contains(out, `published version "1"`) {
		t.Fatalf("push: %d %s %s", code, out, errOut)
	}
	svc := startService(t, "--redis", url, "--config-from-redis", "--prefix", prefix, "--fallback", "off")
	if _, r := post(t, svc.url+"/v1/peek", server.PeekRequest{Policy: "fifty", Identity: map[string]string{"user": "a"}}); r.Limit != 50 {
		t.Fatalf("config from Redis: %+v", r)
	}
	os.WriteFile(file, []byte(strings.Replace(strings.Replace(e2eConfig, `"1"`, `"2"`, 1), "limit: 50,", "limit: 55,", 1)), 0o644)
	if code, _, errOut := cli("config", "push", file, "--redis", url, "--prefix", prefix); code != 0 {
		t.Fatalf("push v2: %d %s", code, errOut)
	}
	waitUntil(t, "version 2 to apply", func() bool {
		_, r := post(t, svc.url+"/v1/peek", server.PeekRequest{Policy: "fifty", Identity: map[string]string{"user": "a"}})
		return r.Limit == 55
	})
	// An invalid document is refused before it reaches Redis.
	os.WriteFile(file, []byte("version: 3\npolicies: []\n"), 0o644)
	if code, _, errOut := cli("config", "push", file, "--redis", url, "--prefix", prefix); code != 1 || !strings.Contains(errOut, file+":2:11: policies is empty") || strings.Contains(errOut, "redis:") {
		t.Fatalf("push invalid: %d %s", code, errOut)
	}
	svc.stop(t)
}

func TestDemoIncident(t *testing.T) {
	code, out, errOut := cli("demo", "incident", "--gap", "20ms")
	if code != 0 || !strings.Contains(out, "floodgate (one atomic step):     2 allowed, counter 998 → 1000, 0 over the limit") {
		t.Fatalf("demo: %d\n%s%s", code, out, errOut)
	}
	rs := redistest.Start(t)
	code, out, errOut = cli("demo", "incident", "--redis", "redis://"+rs.Addr+"/0", "--limit", "100", "--requests", "20", "--gap", "20ms")
	if code != 0 || !strings.Contains(out, "on Redis redis://"+rs.Addr) || !strings.Contains(out, "2 allowed, counter 98 → 100") {
		t.Fatalf("demo on Redis: %d\n%s%s", code, out, errOut)
	}
	if n, _ := rs.Client(t).DBSize(context.Background()).Result(); n != 0 {
		t.Fatalf("demo left %d keys in Redis", n)
	}
}

func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"check", "--id", "user"}, `--id "user": want dimension=value`},
		{[]string{"check", "--id", "user=1", "--id", "user=2"}, `dimension "user" given twice`},
		{[]string{"check", "--addr", "ftp://x", "--id", "user=1"}, `--addr "ftp://x": want the service's URL, such as http://127.0.0.1:8080`},
		{[]string{"check", "--addr", "127.0.0.1:8080", "--id", "user=1"}, `--addr "127.0.0.1:8080": want the service's URL`},
		{[]string{"serve", "--redis", "http://x:1"}, `scheme "http"`},
		// newuser4 walk: a URL for serve's listeners got "too many colons
		// in address".
		{[]string{"serve", "--addr", "http://127.0.0.1:0"}, `--addr "http://127.0.0.1:0": want host:port, such as 127.0.0.1:8080, not a URL`},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--envoy-config", "../../deploy/config/ratelimit.yaml", "--grpc-addr", "grpc://127.0.0.1:0"}, `--grpc-addr "grpc://127.0.0.1:0": want host:port`},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--health-addr", "http://127.0.0.1:0"}, `--health-addr "http://127.0.0.1:0": want host:port`},
		// An outside walk: host:port, as redis-cli takes it, got the URL
		// parser's "first path segment in URL cannot contain colon", or
		// the scheme "localhost"; every command taking --redis says what
		// it wants.
		{[]string{"serve", "--addr", "127.0.0.1:0", "--redis", "127.0.0.1:6380"}, `config: invalid Redis connection settings: "127.0.0.1:6380": no scheme: want redis://host:port/db (or rediss://), such as redis://127.0.0.1:6380/0`},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--redis", "localhost:6380"}, `"localhost:6380": no scheme: want redis://host:port/db (or rediss://), such as redis://localhost:6380/0`},
		{[]string{"doctor", "--redis", "127.0.0.1:6380"}, `"127.0.0.1:6380": no scheme: want redis://host:port/db (or rediss://)`},
		// IPv6 walk: no hint for an IPv6 address without brackets, and
		// bracketed ones refused in a sentinel or cluster URL.
		{[]string{"serve", "--addr", "127.0.0.1:0", "--redis", "::1:6380"}, `"::1:6380": no scheme: want redis://host:port/db (or rediss://); put an IPv6 address in brackets: redis://[::1]:6380/0`},
		{[]string{"doctor", "--redis", "redis-cluster://[::1]:1,::1:2"}, `address "::1:2" is not host:port: put an IPv6 address in brackets: [::1]:2`},
		{[]string{"config", "push", "../../deploy/config/floodgate.yaml", "--redis", "redis-sentinel://[::1]:1,[::1]:2/0"}, `"redis-sentinel://[::1]:1,[::1]:2/0": a redis-sentinel URL needs ?master=NAME`},
		{[]string{"config", "push", "../../deploy/config/floodgate.yaml", "--redis", "localhost:6380"}, `"localhost:6380": no scheme: want redis://host:port/db (or rediss://)`},
		{[]string{"demo", "incident", "--redis", "127.0.0.1:6380"}, `"127.0.0.1:6380": no scheme: want redis://host:port/db (or rediss://)`},
		{[]string{"demo", "incident", "--gap", "0"}, "--gap 0s: want above 0 and at most 1s (1ns for next to no pause)"},
		// An outside walk: the range said 0..1s, which 0 is not in.
		{[]string{"demo", "incident", "--gap", "100h"}, "--gap 100h0m0s: want above 0 and at most 1s (1ns for next to no pause)"},
		{[]string{"doctor", "--redis", "redis://127.0.0.1:1", "--latency-samples", "999999999"}, "--latency-samples 999999999: want 1..1000"},
		{[]string{"doctor", "--redis", "redis://127.0.0.1:1", "--scan-count", "0"}, "--scan-count 0: want 1..10000"},
		{[]string{"serve", "--config-from-redis"}, "needs --redis"},
		// Refused before Redis is dialled (it took 2 s of dialling), and
		// before the Redis flags are checked.
		{[]string{"serve", "--addr", "127.0.0.1:0", "--config", "c.yaml", "--config-from-redis"}, "give either --config or --config-from-redis, not both"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--redis", "redis://127.0.0.1:1", "--redis-pool", "100000000", "--config", "c.yaml", "--config-from-redis"}, "give either --config or --config-from-redis, not both"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--login-secret-file", "x"}, "--login-secret-file needs --redis"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--login-ipv4-prefix", "24"}, "describe the login guard that --login-secret-file enables"},
		{[]string{"serve", "--prefix", "bad prefix"}, "--prefix"},
		{[]string{"serve", "--log-format", "xml"}, "--log-format"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--pprof"}, "--pprof needs --admin-addr"},
		{[]string{"serve", "--addr", "127.0.0.1:8086", "--health-addr", "127.0.0.1:8086"}, "--health-addr 127.0.0.1:8086 is the address of --addr (127.0.0.1:8086): the health listener needs a port of its own, e.g. --health-addr :8086"},
		// It failed later with "bind: address already in use".
		{[]string{"serve", "--addr", "127.0.0.1:38886", "--admin-addr", "127.0.0.1:38886"}, "--admin-addr 127.0.0.1:38886 is the address of --addr (127.0.0.1:38886): the admin listener needs a port of its own, e.g. --admin-addr 127.0.0.1:9090"},
		{[]string{"serve", "--addr", "127.0.0.1:38887", "--grpc-addr", "127.0.0.1:38888", "--admin-addr", "127.0.0.1:38888"}, "--admin-addr 127.0.0.1:38888 is the address of --grpc-addr (127.0.0.1:38888)"},
		// IPv6 walk: the same address written two ways got past the
		// check, and the example was an IPv4 address.
		{[]string{"serve", "--addr", "[::1]:38889", "--admin-addr", "[0:0:0:0:0:0:0:1]:38889"}, "--admin-addr [0:0:0:0:0:0:0:1]:38889 is the address of --addr ([::1]:38889): the admin listener needs a port of its own, e.g. --admin-addr [::1]:9090"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:9091", "--envoy-config", "edge.yaml", "--health-addr", ":9091"}, "--health-addr :9091 is the address of --grpc-addr (127.0.0.1:9091)"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", "0.0.0.0:9090", "--health-addr", "127.0.0.1:9090"}, "--health-addr 127.0.0.1:9090 is the address of --admin-addr (0.0.0.0:9090)"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--grpc-stream-workers", "-1"}, "--grpc-stream-workers -1: want 0..16384"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--max-connections", "-1"}, "--max-connections -1: want 0 (derived from the file descriptor limit) or more"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--trusted-origin", "https://app.example.com/"}, `--trusted-origin: server: invalid trusted origin "https://app.example.com/": an origin has no path`},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--trusted-origin", "app.example.com"}, `--trusted-origin: server: invalid trusted origin "app.example.com": want scheme://host[:port]`},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--allowed-host", ""}, `--allowed-host: server: invalid allowed host "": empty: give a host name, e.g. floodgate.example.com`},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--allowed-host", "floodgate.example.com:8080"}, `--allowed-host: server: invalid allowed host "floodgate.example.com:8080": a host name has no port (every port is served): write floodgate.example.com`},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--allowed-host", "https://floodgate.example.com"}, `--allowed-host: server: invalid allowed host "https://floodgate.example.com": a host name, not a URL: write floodgate.example.com`},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--allowed-host", "floodgate.example.com/"}, `--allowed-host: server: invalid allowed host "floodgate.example.com/": a host name has no path: write floodgate.example.com`},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--allowed-host", "ok.example", "--allowed-host", "floodgate example"}, `--allowed-host: server: invalid allowed host "floodgate example": invalid character ' ' (want letters, digits, '-', '_' and '.')`},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--allowed-host", "10.0.0.5"}, `--allowed-host: server: invalid allowed host "10.0.0.5": an IP address: requests to IP addresses and localhost are always served; list host names only`},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--allowed-host", "api.*.example.com"}, `--allowed-host: server: invalid allowed host "api.*.example.com": a wildcard is allowed only as a leading *. (*.example.com)`},
		{[]string{"serve", "--fallback", "sideways"}, `--fallback "sideways": want local, open, closed or off`},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--redis", "redis://127.0.0.1:1", "--redis-wait-replicas", "17"}, "--redis-wait-replicas 17: out of range 0..16 (0: do not wait)"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--redis", "redis://127.0.0.1:1", "--redis-wait-replicas", "1", "--redis-wait-timeout", "-1s"}, "--redis-wait-timeout -1s: want 0 (the default, 200ms) or a positive duration"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--redis", "redis://127.0.0.1:1", "--redis-wait-timeout", "1s"}, "--redis-wait-timeout needs --redis-wait-replicas"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--redis-sentinel-password-file", "pw"}, "--redis-sentinel-password-file needs sentinels: --redis-sentinel (with --redis-master) or a redis-sentinel:// --redis URL"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--redis", "redis-sentinel://127.0.0.1:1?master=m", "--redis-sentinel-username", "u"}, "--redis-sentinel-username needs --redis-sentinel-password-file"},
		{[]string{"doctor", "--redis", "redis-sentinel://127.0.0.1:1?master=m", "--redis-sentinel-username", "u"}, "--redis-sentinel-username needs --redis-sentinel-password-file"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"}, "needs --envoy-config"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--envoy-config", "edge.yaml"}, "--envoy-config needs --grpc-addr"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--envoy-config", "nofile.yaml"}, "--envoy-config: config: Envoy descriptor configuration: stat nofile.yaml: no such file"},
		{[]string{"demo", "incident", "--start", "2000"}, "start 2000 out of range"},
		{[]string{"config", "push", "nofile.yaml"}, "no such file"},
		{[]string{"nosuchcommand"}, `unknown command "nosuchcommand" for "floodgate" (want one of: check, completion, config, demo`},
		// Found by a walk of every command's flags: a panic, an
		// out-of-memory crash, exit 0 for a mistyped subcommand, and
		// errors that did not name their flag.
		{[]string{"config", "nope"}, `unknown command "nope" for "floodgate config" (want one of: example, push, validate)`},
		{[]string{"demo", "nope"}, `unknown command "nope" for "floodgate demo"`},
		{[]string{"demo", "incident", "--limit", "0"}, "--limit 0, --requests 50: want at least 1 each"},
		// envoy-compat takes what serve takes (0 is the default there too:
		// TestEnvoyCompatReloadIntervalAsServe).
		{[]string{"envoy-compat", "--reload-interval", "-1s"}, "--reload-interval -1s: must not be negative"},
		{[]string{"envoy-compat", "--reload-interval", "1ns"}, "--reload-interval 1ns: want at least 10ms (0: the default, 1s)"},
		{[]string{"envoy-compat", "--reload-interval", "5ms"}, "--reload-interval 5ms: want at least 10ms (0: the default, 1s)"},
		{[]string{"serve", "--reload-interval", "-1s"}, "--reload-interval -1s: must not be negative"},
		{[]string{"serve", "--reload-interval", "1ns"}, "--reload-interval 1ns: want at least 10ms (0: the default, 1s)"},
		{[]string{"serve", "--redis", "redis://127.0.0.1:1", "--redis-pool", "100000000"}, "--redis-pool 100000000: out of range 0..10000"},
		{[]string{"serve", "--redis", "redis://127.0.0.1:1", "--redis-timeout", "-1s"}, "--redis-timeout -1s"},
		{[]string{"serve", "--redis", "redis://127.0.0.1:1", "--fallback-factor", "0.5"}, "--fallback-factor 0.5: want 1..1000"},
		{[]string{"serve", "--fallback-factor", "2"}, "--fallback-factor"},
		// An outside walk: in memory mode these did nothing, silently.
		{[]string{"serve", "--addr", "127.0.0.1:0", "--fallback", "closed"}, "--fallback needs --redis, --redis-sentinel or --redis-cluster (without one, serve keeps every count in this process's memory)"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--fallback", "off", "--fallback-budget", "1s"}, "--fallback needs --redis, --redis-sentinel or --redis-cluster"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--fallback-budget", "10ms"}, "--fallback-budget needs --redis, --redis-sentinel or --redis-cluster"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--clock-sync=false"}, "--clock-sync needs --redis, --redis-sentinel or --redis-cluster"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--clock-skew-warn", "5s"}, "--clock-skew-warn needs --redis, --redis-sentinel or --redis-cluster"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--redis", "redis://127.0.0.1:1", "--fallback", "off", "--fallback-budget", "10ms"}, "--fallback-budget is unused with --fallback off: no fallback decides, and --decision-timeout bounds each decision (drop --fallback-budget, or pick another --fallback)"},
		// An outside walk grew a memory-mode process past 1 GB through
		// the quota endpoints: the stores of quotas and leases have
		// bounds of their own now, checked at start.
		{[]string{"serve", "--addr", "127.0.0.1:0", "--memory-max-quota-periods", "0"}, "--memory-max-quota-periods 0: want at least 1"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--memory-max-quota-records", "-5"}, "--memory-max-quota-records -5: want at least 1"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--memory-max-leases", "0"}, "--memory-max-leases 0: want at least 1"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--redis", "redis://127.0.0.1:1", "--memory-max-leases", "10"}, "--memory-max-leases applies in memory mode only: with --redis, --redis-sentinel or --redis-cluster, quotas and leases are kept in Redis"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--redis-cluster", "127.0.0.1:1", "--memory-max-quota-periods", "10"}, "--memory-max-quota-periods applies in memory mode only"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--tls-key-file", "/nonexistent"}, "--tls-key-file needs --tls-cert-file"},
		{[]string{"doctor", "--redis", "redis://127.0.0.1:1", "--timeout", "0"}, "--timeout 0s: want a positive duration"},
		{[]string{"doctor", "--redis", "redis://127.0.0.1:1", "--latency-samples", "-1"}, "--latency-samples -1: want 1..1000"},
		{[]string{"doctor", "--redis", "redis://127.0.0.1:1", "--prefix", ""}, "--prefix"},
		{[]string{"loadtest", "--target", "ftp://x:1"}, `unknown scheme "ftp"`},
		{[]string{"loadtest", "--mode", "grpc", "--target", "http://x:1"}, "mode grpc needs a grpc:// or grpcs:// target"},
		{[]string{"loadtest", "--expect-limit", "10"}, "--expect-algorithm is missing"},
		// An outside walk: --expect-limit 0 was said to be missing, and a
		// quota could not be described (a calendar period is no window).
		{[]string{"loadtest", "--expect-algorithm", "gcra", "--expect-limit", "0", "--expect-window", "1m"}, "--expect-limit 0: out of range 1..1099511627776"},
		{[]string{"loadtest", "--expect-algorithm", "gcra", "--expect-limit", "-5", "--expect-window", "1m"}, "--expect-limit -5: out of range 1..1099511627776"},
		{[]string{"loadtest", "--expect-algorithm", "quota", "--expect-limit", "10", "--expect-window", "month"}, "--expect-algorithm quota: a quota counts per calendar period (day, week, month), not per window, and cannot be described here: give --expected-deny-ratio instead"},
		{[]string{"loadtest", "--expect-burst", "5"}, "--expect-algorithm is missing"},
		{[]string{"loadtest", "--expect-algorithm", "gcra", "--expect-limit", "10", "--expect-window", "1m", "--expected-deny-ratio", "0.5"}, "exclude each other"},
		{[]string{"loadtest", "--concurrency", "0"}, "--concurrency 0: want at least 1"},
		{[]string{"loadtest", "--target", "grpc://x:1", "--connections", "-1"}, "--connections -1: want 0"},
		{[]string{"loadtest", "--connections", "2"}, "--connections applies to gRPC targets only"},
	} {
		code, _, errOut := cli(tc.args...)
		if code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestCompletion: a shell completion has no script for fails (exit 1)
// naming those there are, as a mistyped subcommand does; it used to print
// the help and exit 0. The known ones still print their script.
func TestCompletion(t *testing.T) {
	code, out, errOut := cli("completion", "tcsh")
	if want := `unknown command "tcsh" for "floodgate completion" (want one of: bash, fish, powershell, zsh)`; code != 1 || out != "" || !strings.Contains(errOut, want) {
		t.Fatalf("completion tcsh: exit %d, stdout %q, stderr %q; want 1, nothing, and %q", code, out, errOut, want)
	}
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		if code, out, errOut := cli("completion", shell); code != 0 || !strings.Contains(out, "floodgate") || errOut != "" {
			t.Errorf("completion %s: exit %d, %d bytes, stderr %q; want 0 and a script", shell, code, len(out), errOut)
		}
	}
	if code, out, _ := cli("completion"); code != 0 || !strings.Contains(out, "Available Commands") {
		t.Errorf("completion alone: exit %d\n%s\nwant its help, exit 0", code, out)
	}
}

// TestServeEnvoyConfigReload runs the binary's gRPC API with a directory
// of descriptor files: an edited file applies without a restart, a broken
// one is rejected (logged and counted) and the last good limits stay.
func TestServeEnvoyConfigReload(t *testing.T) {
	dir := t.TempDir()
	edge := filepath.Join(dir, "edge.yaml")
	doc := func(n int) string {
		return fmt.Sprintf("domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", n)
	}
	if err := os.WriteFile(edge, []byte(doc(3)), 0o644); err != nil {
		t.Fatal(err)
	}
	svc := startService(t, "--grpc-addr", "127.0.0.1:0", "--envoy-config", dir, "--reload-interval", "50ms")
	grpcAddr := svc.addr(t, grpcListening)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlspb.NewRateLimitServiceClient(conn)
	limit := func() uint32 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}},
		}})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	if l := limit(); l != 3 {
		t.Fatalf("initial limit %d", l)
	}
	// Write elsewhere and rename, as configuration management does.
	replace := func(content string) {
		t.Helper()
		tmp := filepath.Join(t.TempDir(), "edge.yaml")
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, edge); err != nil {
			t.Fatal(err)
		}
	}
	replace(doc(40))
	waitUntil(t, "the edited descriptor limit", func() bool { return limit() == 40 })
	replace(doc(50) + "  - key: [broken\n")
	waitUntil(t, "the broken file to be rejected", func() bool {
		return strings.Contains(svc.Logs(), "Envoy descriptor configuration rejected")
	})
	if l := limit(); l != 40 {
		t.Fatalf("a broken file changed the limit to %d", l)
	}
	resp, err := http.Get(svc.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`floodgate_config_reload_total{result="applied",source="envoy"} 1`,
		`floodgate_config_reload_total{result="invalid",source="envoy"} 1`,
		`floodgate_config_reload_total{result="applied",source="policies"} 0`,
		`floodgate_config_source_rejected{source="envoy"} 1`,
		`floodgate_config_source_rejected{source="policies"} 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	svc.stop(t)
}

// closedAddr returns a loopback address nothing listens on: a port just
// taken and let go.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// adminConfigInfo reads GET /admin/v1/config of the service at url (run
// with --admin-token e2eAdminToken).
func adminConfigInfo(t *testing.T, url string) server.ConfigInfo {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+"/admin/v1/config", nil)
	req.Header.Set("Authorization", "Bearer "+e2eAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info server.ConfigInfo
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		t.Fatal(err)
	}
	return info
}
