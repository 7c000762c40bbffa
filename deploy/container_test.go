package deploy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// mount maps a path inside a container to the file or directory of this
// repository it comes from.
type mount struct{ target, source string }

// hostPath returns the host path of the container path p under the
// longest matching mount, or false when no mount holds it.
func hostPath(mounts []mount, p string) (string, bool) {
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].target) > len(mounts[j].target) })
	for _, m := range mounts {
		if p == m.target {
			return m.source, true
		}
		if rest, ok := strings.CutPrefix(p, strings.TrimSuffix(m.target, "/")+"/"); ok {
			return filepath.Join(m.source, filepath.FromSlash(rest)), true
		}
	}
	return "", false
}

// flagArgs returns the flags of a "serve" command line as name → value,
// accepting "--name value" and "--name=value", and fails t on anything
// else, or on a flag given twice.
func flagArgs(t *testing.T, where string, args []string) map[string]string {
	t.Helper()
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("%s: command %q does not start with serve", where, args)
	}
	out := map[string]string{}
	for i := 1; i < len(args); i++ {
		name, ok := strings.CutPrefix(args[i], "--")
		if !ok {
			t.Fatalf("%s: argument %q is not a flag", where, args[i])
		}
		value := ""
		if n, v, ok := strings.Cut(name, "="); ok {
			name, value = n, v
		} else if i+1 < len(args) {
			i++
			value = args[i]
		}
		if _, dup := out[name]; dup {
			t.Fatalf("%s: --%s given twice", where, name)
		}
		out[name] = value
	}
	return out
}

// port returns the port of a listen address flag.
func port(t *testing.T, where, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s: listen address %q: %v", where, addr, err)
	}
	var n int
	if _, err := fmt.Sscanf(p, "%d", &n); err != nil {
		t.Fatalf("%s: listen address %q: %v", where, addr, err)
	}
	return n
}

// runAsContainer starts the floodgate binary with a container's serve
// command made to run on this machine: every file flag (--config,
// --envoy-config, --admin-token-file) is mapped through the container's
// mounts to this repository (or to the test's stand-ins for Secrets and
// volumes), every listen address keeps its host part with a free port,
// and, when redisURL is not empty, --redis is replaced by it (the
// service's healthAddr is set when it has --health-addr). It fails t
// when a file flag points outside the mounts or at a missing file.
func runAsContainer(t *testing.T, where string, args []string, mounts []mount, redisURL string) *service {
	t.Helper()
	flags := flagArgs(t, where, args)
	local := []string{"serve"}
	for name, value := range flags {
		switch name {
		case "config", "envoy-config", "login-secret-file", "admin-token-file":
			p, ok := hostPath(mounts, value)
			if !ok {
				t.Fatalf("%s: --%s %s is not under any mount", where, name, value)
			}
			if _, err := os.Stat(p); err != nil {
				t.Fatalf("%s: --%s %s: %v", where, name, value, err)
			}
			value = p
		case "addr", "grpc-addr", "admin-addr", "health-addr":
			host, _, err := net.SplitHostPort(value)
			if err != nil {
				t.Fatalf("%s: --%s %q: %v", where, name, value, err)
			}
			value = net.JoinHostPort(host, "0")
		case "redis":
			if redisURL != "" {
				value = redisURL
			}
		}
		local = append(local, "--"+name+"="+value)
	}
	s := startService(t, floodgateBinary(t), local, nil, flags["grpc-addr"] != "", flags["admin-addr"] != "")
	if flags["health-addr"] != "" {
		s.healthAddr = s.recordedAddr(t, healthListening)
	}
	return s
}

// checkAdmin checks the admin listener of a serve run with --admin-addr
// and the admin token token: /admin/v1/top-denied (the alert runbooks'
// endpoint) answers there with the token and 401 without it, and not on
// the API's address; /metrics answers on both (serve keeps it on --addr
// unless --metrics-admin-only).
func checkAdmin(t *testing.T, where string, s *service, token string) {
	t.Helper()
	if s.adminAddr == "" {
		t.Fatalf("%s: no admin listener", where)
	}
	const path = "/admin/v1/top-denied?n=5"
	if code, body := getWith(t, s.adminAddr, path, "Bearer "+token); code != 200 || !strings.Contains(body, `"top"`) {
		t.Errorf("%s: GET %s on the admin address with the token: %d %s", where, path, code, body)
	}
	if code, body := getWith(t, s.adminAddr, path, ""); code != 401 {
		t.Errorf("%s: GET %s on the admin address without the token: %d %s, want 401", where, path, code, body)
	}
	if code, body := getWith(t, s.httpAddr, path, "Bearer "+token); code != 404 {
		t.Errorf("%s: GET %s on --addr: %d %s, want 404 (admin endpoints on --admin-addr only)", where, path, code, body)
	}
	for _, a := range []string{s.httpAddr, s.adminAddr} {
		if code, body := get(t, a, "/metrics"); code != 200 || !strings.Contains(body, "rate_limit_") {
			t.Errorf("%s: GET /metrics on %s: %d, no rate_limit_ metrics", where, a, code)
		}
	}
}

// adminToken returns a random admin token, as openssl rand -hex 32 makes.
func adminToken(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// checkServing checks what a deployment relies on: the probe endpoints
// answer 200 (with Redis up), a decision of the example configuration's
// policy is taken, and, when it serves gRPC, Envoy's example routes are
// limited as configured.
func checkServing(t *testing.T, where string, s *service) {
	t.Helper()
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, s.httpAddr, p); code != 200 {
			t.Errorf("%s: GET %s: %d %s", where, p, code, body)
		}
	}
	code, reply := post(t, s.httpAddr, "/v1/check", `{"policy":"api","identity":{"user":"42"}}`)
	if code != 200 || reply["allowed"] != true {
		t.Errorf("%s: POST /v1/check: %d %v, want 200 and allowed", where, code, reply)
	}
	if s.grpcAddr == "" {
		return
	}
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlspb.NewRateLimitServiceClient(conn)
	decide := func(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return client.ShouldRateLimit(ctx, req)
	}
	clearOfMinuteTurn()
	checkEnvoyRoutes(t, where, decide)
}
