package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

func TestDoctorExitStatusAndJSON(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "yes", "--maxmemory", "64mb", "--maxmemory-policy", "noeviction")
	ctx := context.Background()
	args := []string{"doctor", "--redis", "redis://" + srv.Addr, "--prefix", "dc", "--json", "--latency-samples", "5"}

	var out, errOut bytes.Buffer
	if code := run(ctx, args, &out, &errOut); code != 0 {
		t.Fatalf("healthy: exit %d, stderr %s\n%s", code, errOut.String(), out.String())
	}
	// A key without TTL under the prefix makes the run fail.
	if err := srv.Client(t).Set(ctx, "dc:api.per-user:sw:{rx}", "1 1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run(ctx, args, &out, &errOut); code != 1 {
		t.Fatalf("key without TTL: exit %d, want 1\n%s", code, out.String())
	}
	var rep struct {
		Worst  string `json:"worst"`
		Checks []struct {
			Group, Name, Status string
		} `json:"checks"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out.String())
	}
	found := false
	for _, c := range rep.Checks {
		found = found || (c.Group == "Keys" && c.Name == "ttl" && c.Status == "fail")
	}
	if rep.Worst != "fail" || !found {
		t.Fatalf("JSON report: worst %q, Keys/ttl fail %v\n%s", rep.Worst, found, out.String())
	}

	// The text report has no escape codes when not on a terminal.
	out.Reset()
	run(ctx, []string{"doctor", "--redis", "redis://" + srv.Addr, "--prefix", "dc", "--latency-samples", "5"}, &out, &errOut)
	if strings.Contains(out.String(), "\x1b[") || !strings.Contains(out.String(), "[FAIL] ttl") {
		t.Fatalf("text report:\n%s", out.String())
	}
	if code := run(ctx, []string{"doctor"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "--redis") {
		t.Fatalf("no Redis: exit %d, stderr %q", code, errOut.String())
	}
}

// TestDoctorRedisPasswordFile audits a Redis that requires a password the
// way serve reaches it: --redis-password-file, with no password in the
// URL. Without the file doctor cannot reach it, and its report says so
// (NOAUTH) and names the flag; the password never shows in the report.
func TestDoctorRedisPasswordFile(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "yes", "--maxmemory", "64mb", "--maxmemory-policy", "noeviction")
	ctx := context.Background()
	const pw = "doctor-redis-password-from-a-file"
	// redistest waits for an unauthenticated PING: require the password
	// once the server runs, and drop it before the server stops.
	if err := srv.Client(t).ConfigSet(ctx, "requirepass", pw).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: pw})
		defer c.Close()
		_ = c.ConfigSet(context.Background(), "requirepass", "").Err()
	})
	pwFile := filepath.Join(t.TempDir(), "redis-password")
	if err := os.WriteFile(pwFile, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"doctor", "--redis", "redis://" + srv.Addr, "--prefix", "dp", "--latency-samples", "5"}

	var out, errOut bytes.Buffer
	if code := run(ctx, base, &out, &errOut); code != 1 || !strings.Contains(out.String(), "[FAIL] reachable") ||
		!strings.Contains(out.String(), "NOAUTH") || !strings.Contains(out.String(), "fix: give doctor the user and password the instances use: --redis-password-file") {
		t.Fatalf("without the password: exit %d, want 1 and a report saying NOAUTH and --redis-password-file; stderr %q\n%s", code, errOut.String(), out.String())
	}
	out.Reset()
	errOut.Reset()
	if code := run(ctx, append(base, "--redis-password-file", pwFile), &out, &errOut); code != 0 {
		t.Fatalf("with --redis-password-file: exit %d, stderr %s\n%s", code, errOut.String(), out.String())
	}
	if !strings.Contains(out.String(), "[PASS] server") {
		t.Fatalf("with --redis-password-file, no passing server check:\n%s", out.String())
	}
	if strings.Contains(out.String()+errOut.String(), pw) {
		t.Fatalf("the Redis password is in doctor's output:\n%s\n%s", out.String(), errOut.String())
	}
}

// TestDoctorStderrOnCluster runs the binary's doctor against a healthy
// Cluster and against a closed port: go-redis's own log lines used to
// reach stderr raw ("redis: 2026/12/03 ... osscluster.go:3074: getting
// command info: doctor: refusing a command that is not a read: COMMAND",
// nine times on a healthy 3-primary Cluster, and a "failed to dial" line
// per retry with Redis down), outside doctor's report. Now the Cluster
// client's COMMAND is a permitted read, and go-redis's lines are not
// printed (the report says what went wrong). With Redis down, doctor printed
// only "doctor: cannot reach Redis (...)": it now prints its report, the
// Redis check failing and the checks that read Redis skipped, and exits 1.
func TestDoctorStderrOnCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	code, out := runCLI(t, "doctor", "--redis-cluster", strings.Join(c.Addrs, ","), "--prefix", "dcs", "--latency-samples", "5", "--rate-window", "-1s", "--color", "never")
	if code != 0 && code != 1 {
		t.Fatalf("doctor on a Cluster: exit %d\n%s", code, out)
	}
	if strings.Contains(out, "refusing") || strings.Contains(out, "osscluster.go") {
		t.Errorf("doctor on a healthy Cluster wrote go-redis noise:\n%s", out)
	}
	if !strings.Contains(out, "[PASS] cluster") {
		t.Errorf("no passing cluster check:\n%s", out)
	}
	closed := closedAddr(t)
	code, out = runCLI(t, "doctor", "--redis", "redis://"+closed, "--timeout", "30s", "--color", "never")
	for _, want := range []string{"[FAIL] reachable: cannot reach Redis (redis://" + closed + "): dial tcp", "connection refused",
		"fix: Redis stopped answering", "[INFO] skipped: skipped, Redis is unreachable", "[FAIL] validates: redis:fg:config could not be read, Redis is unreachable",
		"\nFAIL: 2 fail"} {
		if code != 1 || !strings.Contains(out, want) {
			t.Fatalf("doctor with Redis down: exit %d, want 1 and a report saying %q\n%s", code, want, out)
		}
	}
	if strings.Contains(out, "doctor: cannot reach Redis") {
		t.Errorf("doctor with Redis down still ends with an error instead of its report:\n%s", out)
	}
	// The report says why; go-redis's own lines (a "redis client ...
	// failed to dial" record before the report) are not printed at all.
	if strings.Contains(out, "failed to dial") || strings.Contains(out, "redis client") {
		t.Errorf("doctor with Redis down wrote go-redis's log lines besides its report:\n%s", out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, "redis: ") {
			t.Errorf("unstructured go-redis line: %s", line)
		}
	}
}

// TestDoctorEnvoyLimitOverrideKeys: the keys serve writes for limit
// overrides Envoy sends (prefix:<domain>.override.<window>-<hash>:fw:{id},
// one policy per domain and window) are known to doctor given the same
// --envoy-config: their owner is the domain's overrides, their TTL bound
// the override's window. They used to be reported as keys of policies
// the configuration does not define, and their TTL went unchecked.
func TestDoctorEnvoyLimitOverrideKeys(t *testing.T) {
	rs := redistest.Start(t, "--appendonly", "yes", "--maxmemory", "64mb", "--maxmemory-policy", "noeviction")
	dir := t.TempDir()
	envoyFile := filepath.Join(dir, "edge.yaml")
	writeFileAtomic(t, envoyFile, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n")
	cfgFile := filepath.Join(t.TempDir(), "floodgate.yaml")
	writeFileAtomic(t, cfgFile, "version: \"1\"\npolicies:\n  - name: api\n    layers:\n      - {name: per-user, algorithm: sliding_window, limit: 100, window: 1m, dimension: user}\n")
	svc := startService(t, "--redis", "redis://"+rs.Addr, "--prefix", "dov", "--config", cfgFile,
		"--grpc-addr", "127.0.0.1:0", "--envoy-config", dir)
	conn, err := grpc.NewClient(svc.addr(t, grpcListening), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlspb.NewRateLimitServiceClient(conn)
	client := rs.Client(t)
	ctx := context.Background()
	// Two overrides (7 a minute; 100 per 2 hours) and the configured limit.
	for _, d := range []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.1"}},
			Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: typev3.RateLimitUnit_MINUTE}},
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.2"}},
			Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 100, Unit: typev3.RateLimitUnit_HOUR, UnitMultiplier: wrapperspb.UInt32(2)}},
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.3"}}},
	} {
		key := ""
		// The first decisions may be taken by the fallback (scripts loading
		// on a loaded machine): ask until Redis holds the key.
		waitUntil(t, "a key in Redis for "+d.GetEntries()[0].GetValue(), func() bool {
			if _, err := rls.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}); err != nil {
				t.Fatalf("ShouldRateLimit: %v", err)
			}
			keys, _, err := client.Scan(ctx, 0, "dov:*{rremote_address=*"+d.GetEntries()[0].GetValue()+"}", 1000).Result()
			if err != nil || len(keys) == 0 {
				return false
			}
			key = keys[0]
			return true
		})
		t.Logf("%s: %s", d.GetEntries()[0].GetValue(), key)
	}

	doctorJSON := func() map[string]doctorCheck {
		t.Helper()
		_, out := runCLI(t, "doctor", "--redis", "redis://"+rs.Addr, "--prefix", "dov", "--config", cfgFile, "--envoy-config", dir,
			"--latency-samples", "5", "--rate-window", "-1s", "--json")
		var rep struct {
			Checks []doctorCheck `json:"checks"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("doctor --json: %v\n%s", err, out)
		}
		m := map[string]doctorCheck{}
		for _, c := range rep.Checks {
			m[c.Group+"/"+c.Name] = c
		}
		return m
	}
	checks := doctorJSON()
	for _, name := range []string{"Keys/policies", "Keys/ttl"} {
		t.Logf("%s: %s: %s\n\t%s", name, checks[name].Status, checks[name].Summary, strings.Join(checks[name].Evidence, "\n\t"))
	}
	if c := checks["Keys/policies"]; c.Status != "pass" || !strings.Contains(c.Summary, "every key belongs to a configured policy") {
		t.Errorf("Keys/policies with override keys: %s %q\n%s", c.Status, c.Summary, strings.Join(c.Evidence, "\n"))
	}
	if c := checks["Keys/ttl"]; c.Status != "pass" {
		t.Errorf("Keys/ttl with override keys: %s %q\n%s", c.Status, c.Summary, strings.Join(c.Evidence, "\n"))
	}

	// An override key of a one-minute window that lives 2 hours is beyond
	// its bound; the 2-hour override's keys are not.
	keys, _, err := client.Scan(ctx, 0, "dov:edge.override.1m0s-*", 1000).Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("the 1-minute override's keys: %v, %v", keys, err)
	}
	if err := client.Expire(ctx, keys[0], 2*time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	checks = doctorJSON()
	c := checks["Keys/ttl"]
	t.Logf("Keys/ttl: %s: %s\n\t%s", c.Status, c.Summary, strings.Join(c.Evidence, "\n\t"))
	// The TTL is read a moment after the EXPIRE (rounded to the second:
	// 2h0m0s, or 1h59m59s on a slow machine).
	ev := strings.Join(c.Evidence, "\n")
	if c.Status != "warn" || !(strings.Contains(ev, keys[0]+": TTL 2h0m0s, policy allows at most 1m") || strings.Contains(ev, keys[0]+": TTL 1h59m5")) ||
		strings.Contains(strings.Join(c.Evidence, "\n"), "override.2h0m0s") {
		t.Errorf("Keys/ttl with a 1-minute override key living 2h: %s %q\n%s", c.Status, c.Summary, strings.Join(c.Evidence, "\n"))
	}
}

// doctorCheck is one check of doctor --json.
type doctorCheck struct {
	Group    string   `json:"group"`
	Name     string   `json:"name"`
	Status   string   `json:"status"`
	Summary  string   `json:"summary"`
	Evidence []string `json:"evidence"`
}

// TestDoctorTLSHintsNameItsFlags: doctor against a Redis and an https
// instance that require a client certificate, given none. The Redis hint
// said the server "may not speak TLS", the instance checks that it "did
// not answer at all"; both now name doctor's client certificate flags
// (and these are doctor's flags).
func TestDoctorTLSHintsNameItsFlags(t *testing.T) {
	f := redistest.GenerateTLS(t)
	f.AuthClients = true
	rs := redistest.StartTLS(t, f, "--appendonly", "yes", "--maxmemory", "64mb", "--maxmemory-policy", "noeviction")
	flags := newDoctorCmd().Flags()
	for _, name := range []string{"redis-ca-file", "redis-cert-file", "redis-key-file", "tls-ca-file", "tls-cert-file", "tls-key-file"} {
		if flags.Lookup(name) == nil {
			t.Fatalf("doctor has no --%s flag", name)
		}
	}
	ctx := context.Background()
	var out, errOut bytes.Buffer
	code := run(ctx, []string{"doctor", "--redis", "rediss://" + rs.TLSAddr, "--redis-ca-file", f.CA, "--timeout", "30s"}, &out, &errOut)
	if code != 1 || !strings.Contains(out.String(), "requires a client certificate") ||
		!strings.Contains(out.String(), "--redis-cert-file, --redis-key-file") || strings.Contains(out.String(), "may not speak TLS") {
		t.Fatalf("Redis without a client certificate: exit %d, stderr %s\n%s", code, errOut.String(), out.String())
	}

	// An https instance that requires a client certificate (a TLS 1.3
	// handshake, as serve --tls-client-ca-file's).
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(http.NotFoundHandler())
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs: f.ClientConfig(t).RootCAs, MinVersion: tls.VersionTLS12}
	hs.Config.ErrorLog = log.New(io.Discard, "", 0)
	hs.StartTLS()
	t.Cleanup(hs.Close)
	plain := redistest.Start(t, "--appendonly", "yes", "--maxmemory", "64mb", "--maxmemory-policy", "noeviction")
	out.Reset()
	errOut.Reset()
	code = run(ctx, []string{"doctor", "--redis", "redis://" + plain.Addr, "--prefix", "dt", "--latency-samples", "5", "--rate-window", "-1s",
		"--instance", hs.URL, "--tls-ca-file", f.CA, "--color", "never"}, &out, &errOut)
	if code != 1 {
		t.Fatalf("instance without a client certificate: exit %d, stderr %s\n%s", code, errOut.String(), out.String())
	}
	for _, m := range []string{"requires a client certificate", "(--tls-cert-file, --tls-key-file)"} {
		if !strings.Contains(out.String(), "fix: "+hs.URL+": ") || !strings.Contains(out.String(), m) {
			t.Errorf("the report does not say %q in a fix for %s:\n%s", m, hs.URL, out.String())
		}
	}
	if strings.Contains(out.String(), "did not answer at all") {
		t.Errorf("the report says the instance did not answer:\n%s", out.String())
	}
}

// TestDoctorClockOfInMemoryInstance: with a serve process run without
// --redis among the instances given, doctor's clock check warns and names
// it (an outside walk saw "[PASS] instances: every instance disciplines
// its clock to Redis" above a line saying this one does not). Real serve
// processes, one on the deployment's Redis and one in memory.
func TestDoctorClockOfInMemoryInstance(t *testing.T) {
	rs := redistest.Start(t, "--appendonly", "yes", "--maxmemory", "64mb", "--maxmemory-policy", "noeviction")
	onRedis := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--prefix", "dcm")
	inMemory := startService(t)
	var out, errOut bytes.Buffer
	run(context.Background(), []string{"doctor", "--redis", "redis://" + rs.Addr + "/0", "--prefix", "dcm", "--json", "--latency-samples", "5",
		"--rate-window", "-1s", "--instance", onRedis.url, "--instance", inMemory.url}, &out, &errOut)
	var rep struct {
		Checks []struct {
			Group, Name, Status, Summary string
			Evidence                     []string
		} `json:"checks"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s%s", err, out.String(), errOut.String())
	}
	for _, c := range rep.Checks {
		if c.Group != "Clocks" || c.Name != "instances" {
			continue
		}
		ev := strings.Join(c.Evidence, "\n")
		if c.Status != "warn" || !strings.Contains(ev, inMemory.url+": runs in memory, its clock is not disciplined to Redis") ||
			!strings.Contains(ev, onRedis.url+": disciplined to Redis") || strings.Contains(c.Summary, "every instance disciplines") {
			t.Fatalf("Clocks/instances: %s, %q\n%s", c.Status, c.Summary, ev)
		}
		return
	}
	t.Fatalf("no Clocks/instances check in the report:\n%s", out.String())
}
