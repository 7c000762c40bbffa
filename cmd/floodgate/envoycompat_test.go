package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-rl/floodgate/internal/proctest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// compatProc is a running "floodgate envoy-compat" process.
type compatProc struct {
	*proctest.Proc
	http, grpc, debug string
}

// startCompat execs the binary as their Deployment would: only environment
// variables, no flags. Ports 0 pick free ports, read back from the log.
func startCompat(t *testing.T, env ...string) *compatProc {
	t.Helper()
	return startCompatArgs(t, nil, env...)
}

// startCompatArgs is startCompat with flags after "envoy-compat".
func startCompatArgs(t *testing.T, args []string, env ...string) *compatProc {
	t.Helper()
	const listening = "floodgate envoy-compat listening"
	cmd := exec.Command(binary(t), append([]string{"envoy-compat"}, args...)...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1", "GRPC_HOST=127.0.0.1",
		"PORT=0", "GRPC_PORT=0", "DEBUG_PORT=0", "LOG_FORMAT=json", "LOG_LEVEL=info"}, env...)
	p := proctest.Start(t, cmd, listening)
	rec := p.Record(listening)
	return &compatProc{Proc: p, http: rec["http"], grpc: rec["grpc"], debug: rec["debug"]}
}

// compatRuntime writes config as edge.yaml in a new runtime directory
// laid out as envoy-compat (and envoyproxy/ratelimit) reads it,
// RUNTIME_ROOT/ratelimit/config, and returns that config directory and
// the environment naming it, without the root watch or statsd.
func compatRuntime(t *testing.T, config string) (cfgDir string, env []string) {
	t.Helper()
	root := t.TempDir()
	cfgDir = filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFileAtomic(t, filepath.Join(cfgDir, "edge.yaml"), config)
	return cfgDir, []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false", "USE_STATSD=false"}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func httpPost(t *testing.T, url, body string) (int, string) {
	t.Helper()
	code, _, b := postFull(t, url, body)
	return code, b
}

// waitFor polls cond every 50 ms for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// writeFileAtomic replaces path, as ConfigMap updates and editors do.
func writeFileAtomic(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// compatConfig uses constructs the native loader refuses: a middle
// wildcard, share_threshold, quota_mode, metadata and unit month.
const compatConfig = `domain: edge
descriptors:
  - key: route
    value: /api/*/items
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: plan
    value: gold
    quota_mode: true
    metadata: {tier: gold}
    rate_limit: {unit: month, requests_per_unit: 100}
`

func TestEnvoyCompatBinary(t *testing.T) {
	rdb := redistest.Start(t)
	cfgDir, rt := compatRuntime(t, compatConfig)
	p := startCompat(t, append(rt, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+rdb.Addr, "CACHE_KEY_PREFIX=t1_")...)

	waitFor(t, "healthcheck OK", func() bool {
		code, body := httpGet(t, "http://"+p.http+"/healthcheck")
		return code == 200 && body == "OK"
	})
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hr, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("grpc health: %v, %v", hr, err)
	}

	// POST /json: two requests fit (share_threshold: both routes share one counter), the third is 429.
	body := func(route string) string {
		return `{"domain":"edge","descriptors":[{"entries":[{"key":"route","value":"` + route + `"}]}]}`
	}
	for i, route := range []string{"/api/v1/items", "/api/v2/items", "/api/v3/items"} {
		code, out := httpPost(t, "http://"+p.http+"/json", body(route))
		want := 200
		if i == 2 {
			want = 429
		}
		if code != want {
			t.Fatalf("POST /json %s: %d %s, want %d", route, code, out, want)
		}
	}
	if code, _ := httpPost(t, "http://"+p.http+"/json", "{not json"); code != 400 {
		t.Errorf("bad JSON: %d, want 400", code)
	}
	// The counter is theirs: prefix, domain, entry with the wildcard, window start.
	keys := rdb.Client(t).Keys(context.Background(), "t1_edge_route_/api/*/items_*").Val()
	if len(keys) != 1 || rdb.Client(t).Get(context.Background(), keys[0]).Val() != "3" {
		t.Errorf("counter keys %v, want one holding 3", keys)
	}

	// gRPC ShouldRateLimit, month unit and quota_mode.
	rc := rlspb.NewRateLimitServiceClient(conn)
	resp, err := rc.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "plan", Value: "gold"}}}}})
	if err != nil || resp.GetOverallCode() != rlspb.RateLimitResponse_OK || resp.GetStatuses()[0].GetLimitRemaining() != 99 ||
		resp.GetStatuses()[0].GetCurrentLimit().GetUnit() != rlspb.RateLimitResponse_RateLimit_MONTH {
		t.Fatalf("ShouldRateLimit: %v, %v", resp, err)
	}
	if len(resp.GetResponseHeadersToAdd()) != 0 {
		t.Errorf("headers %v without LIMIT_RESPONSE_HEADERS_ENABLED", resp.GetResponseHeadersToAdd())
	}

	// Debug port: /rlconfig and /metrics.
	if _, out := httpGet(t, "http://"+p.debug+"/rlconfig"); !strings.Contains(out, "edge.plan_gold: unit=MONTH requests_per_unit=100") {
		t.Errorf("/rlconfig:\n%s", out)
	}
	if _, out := httpGet(t, "http://"+p.debug+"/metrics"); !strings.Contains(out, `floodgate_envoy_hits_total{domain="edge",key="route_/api/*/items",stat="over_limit"} 1`) {
		t.Errorf("/metrics lacks the over_limit count:\n%s", out)
	}

	// Reload: a new limit applies; a bad file is refused and the last good one stays.
	writeFileAtomic(t, filepath.Join(cfgDir, "edge.yaml"), strings.Replace(compatConfig, "requests_per_unit: 100", "requests_per_unit: 7", 1))
	waitFor(t, "reload", func() bool {
		_, out := httpGet(t, "http://"+p.debug+"/rlconfig")
		return strings.Contains(out, "requests_per_unit=7")
	})
	writeFileAtomic(t, filepath.Join(cfgDir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: a\n    value: 1.5\n")
	waitFor(t, "rejection logged", func() bool { return strings.Contains(p.Logs(), "Error loading new configuration") })
	if _, out := httpGet(t, "http://"+p.debug+"/rlconfig"); !strings.Contains(out, "requests_per_unit=7") {
		t.Errorf("after a bad file /rlconfig:\n%s", out)
	}

	if err := p.Stop(t); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}

func TestEnvoyCompatRefusesBadSettings(t *testing.T) {
	for _, tc := range []struct{ env, want string }{
		{"NEAR_LIMIT_RATIO=abc", "NEAR_LIMIT_RATIO"},
		{"BACKEND_TYPE=memcache", "memcached is not supported"},
		{"CONFIG_TYPE=GRPC_XDS_SOTW", "only FILE"},
		{"REDIS_TYPE=ring", "REDIS_TYPE=ring"},
		{"HOST=[::1]", "HOST=[::1]: give the IPv6 address without brackets (HOST=::1)"},
	} {
		cmd := exec.Command(binary(t), "envoy-compat")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "PORT=0", "GRPC_PORT=0", "DEBUG_PORT=0", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=127.0.0.1:1", tc.env}
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s: %v\n%s\nwant a failure naming %q", tc.env, err, out, tc.want)
		}
	}
}

// TestEnvoyCompatStartsWithTheirOddSettings: settings theirs starts with,
// reading them in its own way, start this service too, each logged as
// taken; they stopped the start before (outside walk: a deployment
// changed only in its image would crash-loop).
func TestEnvoyCompatStartsWithTheirOddSettings(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFileAtomic(t, filepath.Join(root, "config", "a.yaml"), "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	p := startCompat(t, "BACKEND_TYPE=memory", "RUNTIME_ROOT="+root, "RUNTIME_WATCH_ROOT=false", "NEAR_LIMIT_RATIO=1.5",
		"EXPIRATION_JITTER_MAX_SECONDS=-1", "LOCAL_CACHE_SIZE_IN_BYTES=-5", "REDIS_POOL_SIZE=0")
	for _, want := range []string{"NEAR_LIMIT_RATIO=1.5", "EXPIRATION_JITTER_MAX_SECONDS=-1", "LOCAL_CACHE_SIZE_IN_BYTES=-5", "REDIS_POOL_SIZE=0"} {
		if !strings.Contains(p.Logs(), want) || !strings.Contains(p.Logs(), "setting taken as envoyproxy/ratelimit takes it") {
			t.Errorf("no log line for %s:\n%s", want, p.Logs())
		}
	}
	for i, want := range []string{`"overallCode":"OK"`, `"overallCode":"OVER_LIMIT"`} {
		if code, out := httpPost(t, "http://"+p.http+"/json", `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`); !strings.Contains(out, want) {
			t.Errorf("request %d: %d %s, want %s", i+1, code, out, want)
		}
	}
	if err := p.Stop(t); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}

// TestEnvoyCompatURLErrorsHidePasswords: a malformed REDIS_URL stops the
// start with an error that names the setting but not the password in it
// (the URL parser's error quoted the URL whole, and a sentinel or cluster
// address given as a URL was dialled and logged, password and all, on
// every retry).
func TestEnvoyCompatURLErrorsHidePasswords(t *testing.T) {
	const secret = "S3cretPassw0rd"
	for _, env := range [][]string{
		{"REDIS_URL=rediss://:" + secret + "@127.0.0.1:6379:bad"},
		{"REDIS_URL=redis://:" + secret + "%zz@127.0.0.1:6379"},
		{"REDIS_TYPE=sentinel", "REDIS_URL=main,redis://:" + secret + "@127.0.0.1:26379"},
		{"REDIS_TYPE=cluster", "REDIS_URL=redis://:" + secret + "@127.0.0.1:7000,127.0.0.1:7001"},
	} {
		// Bounded: with the address dialled, the process kept retrying.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, binary(t), "envoy-compat")
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "PORT=0", "GRPC_PORT=0", "DEBUG_PORT=0", "REDIS_SOCKET_TYPE=tcp",
			"RUNTIME_ROOT=" + t.TempDir()}, env...)
		out, err := cmd.CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), "REDIS_URL") {
			t.Errorf("%v: %v\n%s\nwant a failure naming REDIS_URL", env, err, out)
		}
		if strings.Contains(string(out), secret) {
			t.Errorf("%v: the password is in the output:\n%s", env, out)
		}
	}
}

// TestEnvoyCompatHealthNeedsPerSecondRedis: with REDIS_PERSECOND, the
// per-second Redis must answer too before /healthcheck says OK: per-second
// limits are decided there (it probed the main Redis only, and said OK
// while every per-second decision failed).
func TestEnvoyCompatHealthNeedsPerSecondRedis(t *testing.T) {
	rdb := redistest.Start(t)
	p := startCompat(t, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+rdb.Addr, "RUNTIME_ROOT="+t.TempDir(),
		"REDIS_PERSECOND=true", "REDIS_PERSECOND_SOCKET_TYPE=tcp", "REDIS_PERSECOND_URL="+closedAddr(t))
	waitFor(t, "the per-second Redis reported unreachable", func() bool {
		return strings.Contains(p.Logs(), "backend not reachable")
	})
	for range 3 {
		if code, out := httpGet(t, "http://"+p.http+"/healthcheck"); code != 500 {
			t.Fatalf("healthcheck with the per-second Redis unreachable: %d %s, want 500", code, out)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// TestServeEnvoyHeadersOffByDefault: serve adds no response headers to its
// gRPC answers unless --envoy-response-headers is given (it used to add
// them always).
func TestServeEnvoyHeadersOffByDefault(t *testing.T) {
	dir := t.TempDir()
	writeFileAtomic(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n")
	for _, tc := range []struct {
		flags []string
		want  int
	}{{nil, 0}, {[]string{"--envoy-response-headers"}, 3}} {
		svc := startService(t, append([]string{"--grpc-addr", "127.0.0.1:0", "--envoy-config", dir}, tc.flags...)...)
		grpcAddr := svc.addr(t, grpcListening)
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "edge",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "a"}}}}})
		conn.Close()
		if err != nil || len(resp.GetResponseHeadersToAdd()) != tc.want {
			t.Errorf("flags %v: %v headers %v, want %d", tc.flags, err, resp.GetResponseHeadersToAdd(), tc.want)
		}
		svc.stop(t)
	}
}

// TestEnvoyCompatClusterAndSentinel runs the binary on a 3-primary Redis
// Cluster (REDIS_TYPE=cluster, a request whose two counters live in
// different slots) and behind Sentinel (REDIS_TYPE=sentinel,
// REDIS_URL=master,sentinel,...), as their settings describe them.
func TestEnvoyCompatClusterAndSentinel(t *testing.T) {
	root := t.TempDir()
	writeFileAtomic(t, filepath.Join(root, "notes.yaml"), "not read: its key does not start with config.")
	if err := os.MkdirAll(filepath.Join(root, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFileAtomic(t, filepath.Join(root, "config", "d.yaml"),
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 2}\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
	body := `{"domain":"d","descriptors":[{"entries":[{"key":"a","value":"1"}]},{"entries":[{"key":"b","value":"2"}]}]}`
	cluster := redistest.StartCluster(t)
	sentinel := redistest.StartSentinel(t)
	for name, env := range map[string][]string{
		"cluster":  {"REDIS_TYPE=cluster", "REDIS_URL=" + strings.Join(cluster.Addrs, ",")},
		"sentinel": {"REDIS_TYPE=sentinel", "REDIS_URL=" + sentinel.MasterName + "," + strings.Join(sentinel.SentinelAddrs, ",")},
	} {
		t.Run(name, func(t *testing.T) {
			p := startCompat(t, append(env, "REDIS_SOCKET_TYPE=tcp", "RUNTIME_ROOT="+root, "RUNTIME_WATCH_ROOT=true")...)
			waitFor(t, "healthcheck OK", func() bool { code, _ := httpGet(t, "http://"+p.http+"/healthcheck"); return code == 200 })
			for i, want := range []int{200, 200, 429} {
				code, out := httpPost(t, "http://"+p.http+"/json", body)
				if code != want {
					t.Fatalf("request %d: %d %s, want %d", i, code, out, want)
				}
				if i == 2 && !strings.Contains(out, `"limitRemaining":2`) {
					t.Errorf("request %d: %s: descriptor b should have counted 3 of 5", i, out)
				}
			}
		})
	}
}

// TestEnvoyCompatHealthFollowsRedis: started while Redis is down, the
// service listens and /healthcheck and gRPC health say not serving until
// Redis answers, as theirs marks its redis component.
func TestEnvoyCompatHealthFollowsRedis(t *testing.T) {
	rdb := redistest.Start(t)
	rdb.Kill()
	p := startCompat(t, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+rdb.Addr, "RUNTIME_ROOT="+t.TempDir())
	if code, _ := httpGet(t, "http://"+p.http+"/healthcheck"); code != 500 {
		t.Fatalf("healthcheck with Redis down: %d, want 500", code)
	}
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hr, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("grpc health with Redis down: %v, %v", hr, err)
	}
	rdb.Restart(t)
	waitFor(t, "healthcheck OK", func() bool { code, _ := httpGet(t, "http://"+p.http+"/healthcheck"); return code == 200 })
}

// TestEnvoyCompatActiveHealthCheck: with
// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true, /healthcheck and gRPC health
// turn not serving when Redis goes away after it had answered, and back
// when it returns, as theirs does when its last connection closes (the
// setting was ignored: health stayed good for good). Without it, health
// stays good, as theirs.
func TestEnvoyCompatActiveHealthCheck(t *testing.T) {
	rdb := redistest.Start(t)
	active := startCompat(t, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+rdb.Addr, "RUNTIME_ROOT="+t.TempDir(), "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true")
	passive := startCompat(t, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+rdb.Addr, "RUNTIME_ROOT="+t.TempDir())
	health := func(p *compatProc) int { code, _ := httpGet(t, "http://"+p.http+"/healthcheck"); return code }
	waitFor(t, "both healthy", func() bool { return health(active) == 200 && health(passive) == 200 })
	conn, err := grpc.NewClient(active.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	grpcStatus := func() healthpb.HealthCheckResponse_ServingStatus {
		hr, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
		if err != nil {
			t.Fatal(err)
		}
		return hr.GetStatus()
	}
	rdb.Kill()
	waitFor(t, "healthcheck 500 with Redis gone", func() bool {
		return health(active) == 500 && grpcStatus() == healthpb.HealthCheckResponse_NOT_SERVING
	})
	if code := health(passive); code != 200 {
		t.Fatalf("without the setting, healthcheck %d with Redis gone; want 200 (as theirs)", code)
	}
	if !strings.Contains(active.Logs(), "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION") {
		t.Errorf("the health change is not logged:\n%s", active.Logs())
	}
	// go-redis's own complaints (failed dials) are in the service's JSON
	// log too: they were plain text lines among the JSON.
	for _, line := range strings.Split(strings.TrimSpace(active.Logs()), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("a log line that is not JSON (LOG_FORMAT=json): %s", line)
		}
	}
	rdb.Restart(t)
	waitFor(t, "healthcheck OK again", func() bool {
		return health(active) == 200 && grpcStatus() == healthpb.HealthCheckResponse_SERVING
	})
}

// TestEnvoyCompatCutsSlowClients: a /json request whose body never
// finishes, and a gRPC connection that never sends its preface, are cut
// after the compat read timeout (10 s) instead of held: the HTTP listener
// had only a header timeout, so a body sent slowly kept its connection
// for ever, and gRPC waited 120 s for a preface.
func TestEnvoyCompatCutsSlowClients(t *testing.T) {
	_, rt := compatRuntime(t, compatConfig)
	p := startCompat(t, append(rt, "BACKEND_TYPE=memory")...)
	var wg sync.WaitGroup
	for _, tc := range []struct{ name, addr, send string }{
		{"HTTP body never finished", p.http, "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"domain\":"},
		{"gRPC preface never sent", p.grpc, ""},
	} {
		wg.Go(func() {
			conn, err := net.Dial("tcp", tc.addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			if _, err := conn.Write([]byte(tc.send)); err != nil {
				t.Error(err)
				return
			}
			// 60 s: far beyond the 10 s asked for, far below gRPC's 120 s
			// default and the HTTP listener's none.
			_ = conn.SetReadDeadline(time.Now().Add(60 * time.Second))
			_, err = io.Copy(io.Discard, conn)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Errorf("%s: the connection was still open after 60 s", tc.name)
			}
		})
	}
	wg.Wait()
}

// TestEnvoyCompatConfigRejectedGauge: floodgate_envoy_config_rejected on
// /metrics is 1 while the runtime directory holds files that failed to
// load (at start-up too, where envoy-compat runs without a configuration)
// and 0 once they load, or are the files in force again; putting those
// back is not counted as a load. RateLimitEnvoyCompatConfigRejected fires
// on it: on increase(floodgate_envoy_config_load_total{result="error"}
// [15m]) it kept firing for 15 minutes after the fix.
func TestEnvoyCompatConfigRejectedGauge(t *testing.T) {
	root := t.TempDir()
	cfgDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(cfgDir, "edge.yaml")
	const bad = "domain: edge\ndescriptors:\n  - key: a\n    value: 1.5\n"
	writeFileAtomic(t, file, bad)
	p := startCompatArgs(t, []string{"--reload-interval", "50ms"}, "BACKEND_TYPE=memory", "RUNTIME_ROOT="+root,
		"RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false", "USE_STATSD=false")
	metric := func(name string) string {
		t.Helper()
		_, out := httpGet(t, "http://"+p.debug+"/metrics")
		for line := range strings.Lines(out) {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				return strings.TrimSpace(v)
			}
		}
		return "absent"
	}
	const gauge = "floodgate_envoy_config_rejected"
	success := `floodgate_envoy_config_load_total{result="success"}`
	expect := func(what, name, want string) {
		t.Helper()
		if got := metric(name); got != want {
			t.Fatalf("%s: %s = %s, want %s\n%s", what, name, got, want, p.Logs())
		}
	}
	settle := func(what, want string) {
		t.Helper()
		waitFor(t, what, func() bool { return metric(gauge) == want })
	}
	expect("started with a bad directory", gauge, "1")

	writeFileAtomic(t, file, compatConfig)
	settle("the fixed directory to clear the gauge", "0")
	expect("the fixed directory", success, "1")

	writeFileAtomic(t, file, bad)
	settle("a bad file to set the gauge", "1")

	// The files in force put back: cleared, not counted as a load.
	writeFileAtomic(t, file, compatConfig)
	settle("the restored file to clear the gauge", "0")
	expect("the restored file", success, "1")
	if logs := p.Logs(); !strings.Contains(logs, "runtime directory holds the configuration in force again") {
		t.Errorf("the restore was not logged:\n%s", logs)
	}

	// A new configuration that loads, after a rejection, clears it too.
	writeFileAtomic(t, file, bad)
	settle("a bad file to set the gauge again", "1")
	writeFileAtomic(t, file, strings.Replace(compatConfig, "requests_per_unit: 100", "requests_per_unit: 7", 1))
	settle("a new good file to clear the gauge", "0")
	expect("a new good file", success, "2")
	if _, out := httpGet(t, "http://"+p.debug+"/rlconfig"); !strings.Contains(out, "requests_per_unit=7") {
		t.Errorf("/rlconfig after the new file:\n%s", out)
	}
	if err := p.Stop(t); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}

// TestEnvoyCompatReloadIntervalAsServe: the same flag takes the same
// values on both commands. envoy-compat's --reload-interval refused 0
// ("want a positive duration") where serve's takes it as the default,
// and its help said nothing of the 10ms floor it enforced. Now both say
// the floor and 0's meaning in their help, and envoy-compat started with
// 0 polls the runtime directory at the default interval.
func TestEnvoyCompatReloadIntervalAsServe(t *testing.T) {
	const says = "at least 10ms (0: the default; SIGHUP checks at once)"
	for _, command := range []string{"serve", "envoy-compat"} {
		code, out, errOut := cli(command, "--help")
		if code != 0 {
			t.Fatalf("%s --help: exit %d: %s", command, code, errOut)
		}
		line := ""
		for l := range strings.Lines(out) {
			if strings.HasPrefix(strings.TrimSpace(l), "--reload-interval ") {
				line = l
			}
		}
		if !strings.Contains(line, says) {
			t.Errorf("%s --help says of --reload-interval %q, want %q in it", command, line, says)
		}
	}

	cfgDir, env := compatRuntime(t, compatConfig)
	p := startCompatArgs(t, []string{"--reload-interval", "0"}, append(env, "BACKEND_TYPE=memory")...)
	writeFileAtomic(t, filepath.Join(cfgDir, "edge.yaml"), strings.Replace(compatConfig, "requests_per_unit: 2", "requests_per_unit: 7", 1))
	waitFor(t, "the changed file to be loaded with --reload-interval 0", func() bool {
		_, out := httpGet(t, "http://"+p.debug+"/rlconfig")
		return strings.Contains(out, "requests_per_unit=7")
	})
	if err := p.Stop(t); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}
