package deploy

import (
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
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/proctest"
)

// These helpers run the floodgate binary the way the kit's files tell a
// container runtime to, and talk to it.

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// floodgateBinary builds ../cmd/floodgate once per test run (in a directory
// removed by TestMain) and returns its path.
func floodgateBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "floodgate-deploy-bin-")
		if err != nil {
			buildErr = err
			return
		}
		cleanups = append(cleanups, func() { os.RemoveAll(dir) })
		builtBin = filepath.Join(dir, "floodgate")
		// Built in Floodgate's own module (the parent directory), with
		// its own dependencies.
		cmd := exec.Command("go", "build", "-o", builtBin, "./cmd/floodgate")
		cmd.Dir = ".."
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// cleanups run after every test of the package.
var cleanups []func()

func TestMain(m *testing.M) {
	code := m.Run()
	for _, f := range cleanups {
		f()
	}
	os.Exit(code)
}

// service is a running floodgate process.
type service struct {
	proc       *proctest.Proc
	httpAddr   string // from its "floodgate listening" log line
	grpcAddr   string // from its gRPC log line, when it serves gRPC
	adminAddr  string // from its admin log line, when it has --admin-addr
	healthAddr string // from its health log line, when it has --health-addr (runAsContainer)
}

// recordedAddr returns the address of the listener whose log message is
// msg, which the process logs with its listeners (before its HTTP
// listening line), or fails t when it has not logged it.
func (s *service) recordedAddr(t *testing.T, msg string) string {
	t.Helper()
	rec, ok := s.proc.Logged(msg)
	if !ok {
		t.Fatalf("the process did not log %q", msg)
	}
	return loopback(t, rec["addr"])
}

const (
	// grpcListening is the log message of serve's gRPC listener.
	grpcListening = "floodgate gRPC (Envoy rate limit service) listening"
	// adminListening is the log message of serve's --admin-addr listener.
	adminListening = "floodgate admin listening"
	// healthListening is the log message of serve's --health-addr
	// listener.
	healthListening = "floodgate health listening"
)

// startService execs bin with args and env (added to this process's
// environment) and waits for its listening log lines (JSON, the default
// format): the HTTP one always, the gRPC one when wantGRPC, the admin one
// when wantAdmin. It stops the process with SIGTERM in t.Cleanup.
func startService(t *testing.T, bin string, args, env []string, wantGRPC, wantAdmin bool) *service {
	t.Helper()
	msgs := []string{"floodgate listening"}
	if wantGRPC {
		msgs = append(msgs, grpcListening)
	}
	if wantAdmin {
		msgs = append(msgs, adminListening)
	}
	p := launch(t, bin, args, env, msgs...)
	s := &service{proc: p, httpAddr: loopback(t, p.Record(msgs[0])["addr"])}
	if wantGRPC {
		s.grpcAddr = loopback(t, p.Record(grpcListening)["addr"])
	}
	if wantAdmin {
		s.adminAddr = loopback(t, p.Record(adminListening)["addr"])
	}
	return s
}

// launch execs bin with args and env (added to this process's
// environment) and waits until it has logged every message of msgs (JSON
// log records; see proctest.Start, which also stops it in t.Cleanup).
func launch(t *testing.T, bin string, args, env []string, msgs ...string) *proctest.Proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	return proctest.Start(t, cmd, msgs...)
}

// loopback turns a listener address such as "[::]:41234" into one to dial.
func loopback(t *testing.T, addr string) string {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("listening address %q: %v", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// get returns the status and body of GET http://addr/path.
func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	return getWith(t, addr, path, "")
}

// getWith returns the status and body of GET http://addr/path sent with
// authorization as its Authorization header (none when empty).
func getWith(t *testing.T, addr, path, authorization string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(body)
}

// post sends body as JSON to http://addr/path and returns the status and
// the decoded reply.
func post(t *testing.T, addr, path, body string) (int, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	var reply map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&reply); err != nil {
		t.Fatalf("POST %s: decoding the reply: %v", path, err)
	}
	return resp.StatusCode, reply
}
