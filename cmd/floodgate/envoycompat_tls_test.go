package main

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// forwardTCP listens on 127.0.0.2 (loopback, but not a name or address in
// redistest's server certificate) and copies bytes both ways to target,
// so a client reaching Redis through it sees a certificate for another
// host. It is closed at the end of the test.
func forwardTCP(t *testing.T, target string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2: %v", err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(out, in); out.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	return ln.Addr().String()
}

// TestEnvoyCompatRedisTLS execs the binary with only environment variables
// against a redis-server whose address given to the binary speaks TLS only
// and requires a client certificate. With REDIS_TLS, the CA and the client
// certificate it answers over gRPC and POST /json and its counter is in
// that Redis; without the CA, without the client certificate, with
// REDIS_TLS off (plaintext) or through an address the certificate does not
// name it never becomes healthy and answers no decision; skipping the host
// name check accepts the other address but still verifies the chain.
func TestEnvoyCompatRedisTLS(t *testing.T) {
	f := redistest.GenerateTLS(t)
	f.AuthClients = true
	rdb := redistest.StartTLS(t, f)
	other := redistest.GenerateTLS(t) // a CA that did not sign the server's certificate
	wrongName := forwardTCP(t, rdb.TLSAddr)

	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFileAtomic(t, filepath.Join(root, "config", "d.yaml"),
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 2}\n")
	body := `{"domain":"d","descriptors":[{"entries":[{"key":"a","value":"x"}]}]}`
	base := func(addr, prefix string, extra ...string) []string {
		return append([]string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + addr, "RUNTIME_ROOT=" + root,
			"RUNTIME_WATCH_ROOT=true", "CACHE_KEY_PREFIX=" + prefix + "_"}, extra...)
	}
	client := []string{"REDIS_TLS_CLIENT_CERT=" + f.ClientCert, "REDIS_TLS_CLIENT_KEY=" + f.ClientKey}

	good := map[string][]string{
		"ca and client certificate": base(rdb.TLSAddr, "good", append([]string{"REDIS_TLS=true", "REDIS_TLS_CACERT=" + f.CA}, client...)...),
		// REDIS_TLS_CACERT adds to the system roots (SSL_CERT_FILE here), as
		// theirs does; without it the system roots alone are used.
		"system roots and another CA": base(rdb.TLSAddr, "sys", append([]string{"REDIS_TLS=true", "REDIS_TLS_CACERT=" + other.CA,
			"SSL_CERT_FILE=" + f.CA}, client...)...),
		"system roots only": base(rdb.TLSAddr, "sysonly", append([]string{"REDIS_TLS=true", "SSL_CERT_FILE=" + f.CA}, client...)...),
		"wrong name, skip hostname verification": base(wrongName, "skip", append([]string{"REDIS_TLS=true", "REDIS_TLS_CACERT=" + f.CA,
			"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true"}, client...)...),
		// A rediss:// URL uses the REDIS_TLS_* files without REDIS_TLS
		// (it used go-redis's defaults and ignored the CA).
		"rediss URL without REDIS_TLS": base("rediss://"+rdb.TLSAddr, "rediss", append([]string{"REDIS_TLS_CACERT=" + f.CA}, client...)...),
	}
	for name, env := range good {
		t.Run(name, func(t *testing.T) {
			p := startCompat(t, env...)
			waitFor(t, "healthcheck OK", func() bool { code, _ := httpGet(t, "http://"+p.http+"/healthcheck"); return code == 200 })
			conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			resp, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "d",
				Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "a", Value: "x"}}}}})
			if err != nil || resp.GetOverallCode() != rlspb.RateLimitResponse_OK || resp.GetStatuses()[0].GetLimitRemaining() != 1 {
				t.Fatalf("ShouldRateLimit: %v, %v", resp, err)
			}
			for i, want := range []int{200, 429} {
				if code, out := httpPost(t, "http://"+p.http+"/json", body); code != want {
					t.Fatalf("POST /json %d: %d %s, want %d", i, code, out, want)
				}
			}
		})
	}
	// The counters are in the TLS server (read here over its plain port).
	for _, prefix := range []string{"good", "sys", "sysonly", "skip", "rediss"} {
		keys := rdb.Client(t).Keys(context.Background(), prefix+"_d_a_x_*").Val()
		if len(keys) != 1 || rdb.Client(t).Get(context.Background(), keys[0]).Val() != "3" {
			t.Errorf("%s: counter keys %v, want one holding 3", prefix, keys)
		}
	}

	bad := map[string]struct {
		env  []string
		want string // in the log: why the backend is not reachable
	}{
		"no CA": {base(rdb.TLSAddr, "noca", append([]string{"REDIS_TLS=true"}, client...)...), "certificate signed by unknown authority"},
		"other CA": {base(rdb.TLSAddr, "otherca", append([]string{"REDIS_TLS=true", "REDIS_TLS_CACERT=" + other.CA}, client...)...),
			"certificate signed by unknown authority"},
		"wrong name": {base(wrongName, "name", append([]string{"REDIS_TLS=true", "REDIS_TLS_CACERT=" + f.CA}, client...)...),
			"127.0.0.2"},
		"skip hostname verification without the CA": {base(wrongName, "skipnoca", append([]string{"REDIS_TLS=true",
			"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true"}, client...)...), "certificate signed by unknown authority"},
		"no client certificate": {base(rdb.TLSAddr, "nocert", "REDIS_TLS=true", "REDIS_TLS_CACERT="+f.CA), "backend not reachable"},
		"plaintext":             {base(rdb.TLSAddr, "plain", client...), "backend not reachable"},
	}
	for name, tc := range bad {
		t.Run(name, func(t *testing.T) {
			p := startCompat(t, tc.env...)
			waitFor(t, "the backend failure logged", func() bool {
				if code, _ := httpGet(t, "http://"+p.http+"/healthcheck"); code == 200 {
					t.Fatalf("became healthy")
				}
				return strings.Contains(p.Logs(), "backend not reachable") && strings.Contains(p.Logs(), tc.want)
			})
			if code, out := httpGet(t, "http://"+p.http+"/healthcheck"); code != 500 {
				t.Errorf("healthcheck: %d %s, want 500", code, out)
			}
			// 400 is their answer to any error of ShouldRateLimit.
			if code, out := httpPost(t, "http://"+p.http+"/json", body); code != 400 {
				t.Errorf("POST /json: %d %s, want 400 (no decision)", code, out)
			}
			conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			resp, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "d",
				Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "a", Value: "x"}}}}})
			if err == nil {
				t.Errorf("ShouldRateLimit answered %v, want an error", resp)
			}
			if code, _ := httpGet(t, "http://"+p.http+"/healthcheck"); code != 500 {
				t.Errorf("healthcheck after a request: %d, want 500", code)
			}
		})
	}
	for _, prefix := range []string{"noca", "otherca", "name", "skipnoca", "nocert", "plain"} {
		if keys := rdb.Client(t).Keys(context.Background(), prefix+"_*").Val(); len(keys) != 0 {
			t.Errorf("%s: counters %v written without a verified TLS connection", prefix, keys)
		}
	}
}

// TestEnvoyCompatRedisTLSRefusesBadFiles: an unreadable or non-PEM CA file
// and a client certificate without its key stop the start with an error
// naming REDIS_TLS (theirs panics at start on the first two and ignores a
// lone certificate).
func TestEnvoyCompatRedisTLSRefusesBadFiles(t *testing.T) {
	f := redistest.GenerateTLS(t)
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"REDIS_TLS_CACERT=" + filepath.Join(t.TempDir(), "missing.pem")}, "REDIS_TLS: CA certificate"},
		{[]string{"REDIS_TLS_CACERT=" + notPEM}, "no PEM certificate"},
		{[]string{"REDIS_TLS_CLIENT_CERT=" + f.ClientCert}, "REDIS_TLS: client certificate"},
	} {
		cmd := exec.Command(binary(t), "envoy-compat")
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "PORT=0", "GRPC_PORT=0", "DEBUG_PORT=0", "REDIS_SOCKET_TYPE=tcp",
			"REDIS_URL=127.0.0.1:1", "REDIS_TLS=true", "RUNTIME_ROOT=" + t.TempDir()}, tc.env...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("%v: %v\n%s\nwant a failure naming %q", tc.env, err, out, tc.want)
		}
	}
}

// TestEnvoyCompatRedisTLSClusterAndSentinel: REDIS_TLS with the CA reaches
// a 3-primary Cluster and a Sentinel set whose every address given is a
// TLS port, and counts a cross-slot request there.
func TestEnvoyCompatRedisTLSClusterAndSentinel(t *testing.T) {
	f := redistest.GenerateTLS(t)
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFileAtomic(t, filepath.Join(root, "config", "d.yaml"),
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 2}\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
	body := `{"domain":"d","descriptors":[{"entries":[{"key":"a","value":"1"}]},{"entries":[{"key":"b","value":"2"}]}]}`
	cluster := redistest.StartClusterTLS(t, f)
	var clusterAddrs []string
	for _, n := range cluster.Nodes {
		clusterAddrs = append(clusterAddrs, n.TLSAddr)
	}
	sentinel := redistest.StartSentinelTLS(t, f)
	for name, env := range map[string][]string{
		"cluster":  {"REDIS_TYPE=cluster", "REDIS_URL=" + strings.Join(clusterAddrs, ",")},
		"sentinel": {"REDIS_TYPE=sentinel", "REDIS_URL=" + sentinel.MasterName + "," + strings.Join(sentinel.SentinelTLSAddrs, ",")},
	} {
		t.Run(name, func(t *testing.T) {
			p := startCompat(t, append(env, "REDIS_SOCKET_TYPE=tcp", "REDIS_TLS=true", "REDIS_TLS_CACERT="+f.CA,
				"RUNTIME_ROOT="+root, "RUNTIME_WATCH_ROOT=true")...)
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
