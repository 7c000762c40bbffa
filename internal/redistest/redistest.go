// Package redistest starts real, private redis-server processes for tests.
//
// Every server it starts listens on 127.0.0.1 on a free port chosen at run
// time, keeps its files in a directory under t.TempDir(), persists nothing
// (--save "" --appendonly no) and is stopped in t.Cleanup. The package never
// talks to the shared Redis on 127.0.0.1:6379 and only ever signals the
// process ids it started itself.
//
// Tests call Start for a standalone server, StartCluster for a three-primary
// Redis Cluster and StartSentinel for a primary, a replica and three
// sentinels. Server.RestartLoading restarts a server from its snapshot
// and keeps it loading (INFO persistence loading:1) until the test lets
// it finish. When redis-server is not installed those calls skip the test,
// or fail it when the CI environment variable is set (see Require).
package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// readyTimeout bounds how long a start or restart waits for PING.
	readyTimeout = 10 * time.Second
	// startAttempts is how many ports a fresh start tries before giving up.
	startAttempts = 5
	// stopTimeout bounds each phase of Stop (SHUTDOWN, then SIGTERM).
	stopTimeout = 5 * time.Second
)

// managedArgs are options this package sets itself; extra arguments may not
// override them, so a server can never end up on another port or address.
var managedArgs = map[string]bool{
	"--port": true, "--bind": true, "--dir": true, "--logfile": true,
	"--daemonize": true, "--unixsocket": true, "--tls-port": true,
}

// Server is one redis-server process started for a test.
//
// Addr, Port and Dir stay the same for the life of the Server, also across
// Kill and Restart; Pid is the process id of the current (or last) process.
type Server struct {
	// Addr is "127.0.0.1:<Port>", ready to pass to a client.
	Addr string
	// Port is the TCP port the server listens on.
	Port int
	// Dir is the server's private working directory (under t.TempDir()).
	// It holds the log files and any nodes.conf or sentinel.conf.
	Dir string
	// Pid is the process id of the redis-server process last started.
	Pid int
	// LogFile is the path of the redis-server log file inside Dir.
	LogFile string
	// TLSAddr and TLSPort are where a server started with TLS (StartTLS,
	// StartClusterTLS, StartSentinelTLS) serves TLS; empty and 0 otherwise.
	TLSAddr string
	TLSPort int

	bin       string   // path of redis-server
	pre       []string // arguments placed before the managed options
	extra     []string // extra arguments appended after the managed options
	bus       bool     // the server also binds the cluster bus port, Port+10000
	tls       *TLSFiles
	mu        sync.Mutex
	proc      *process // current process, nil when none was started
	logOffset []int64  // sizes of the logs when proc was started
}

// Require returns the path of redis-server. When it is not installed it fails
// the test loudly if the CI environment variable is non-empty, and otherwise
// skips the test with a message saying what is missing.
func Require(t testing.TB) string {
	t.Helper()
	return requireTool(t, "redis-server")
}

// requireTool is Require for any of the Redis binaries.
func requireTool(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("redistest: %s not found; CI must install it (e.g. apt-get install redis-server): %v", name, err)
	}
	t.Skipf("redistest: %s not found in PATH, skipping a test that needs a real Redis (install redis-server to run it): %v", name, err)
	return ""
}

// Start starts a standalone redis-server on a free 127.0.0.1 port with
// --save "" --appendonly no in its own directory under t.TempDir(), with
// extraArgs appended (for example "--enable-debug-command", "yes",
// "--maxmemory", "1mb"). It waits up to 10s until the server answers PING
// and registers a t.Cleanup that stops it. If the port turns out to be taken
// it retries on another one; any other failure fails the test with the tail
// of the server's log.
func Start(t testing.TB, extraArgs ...string) *Server {
	t.Helper()
	s := newServer(t, extraArgs)
	s.boot(t)
	return s
}

// newServer prepares a Server (binary, directory, arguments) without starting
// it, and registers its Stop with t.Cleanup so that whatever gets started is
// stopped again, in reverse order of creation.
func newServer(t testing.TB, extraArgs []string) *Server {
	t.Helper()
	bin := Require(t)
	for _, a := range extraArgs {
		if managedArgs[a] {
			t.Fatalf("redistest: extra argument %q is managed by redistest and may not be overridden", a)
		}
	}
	dir := t.TempDir()
	s := &Server{
		Dir:     dir,
		LogFile: filepath.Join(dir, "redis.log"),
		bin:     bin,
		extra:   append([]string(nil), extraArgs...),
	}
	t.Cleanup(s.Stop)
	return s
}

// boot starts the server on a fresh free port, trying up to startAttempts
// ports when the chosen one turns out to be taken.
func (s *Server) boot(t testing.TB) {
	t.Helper()
	var lastErr error
	for attempt := 0; attempt < startAttempts; attempt++ {
		port, err := freePort(s.bus)
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s.Port = port
		s.Addr = "127.0.0.1:" + strconv.Itoa(port)
		if s.tls != nil {
			if s.TLSPort, err = freePort(false); err != nil {
				t.Fatalf("redistest: %v", err)
			}
			s.TLSAddr = "127.0.0.1:" + strconv.Itoa(s.TLSPort)
		}
		err = s.launch()
		if err == nil {
			return
		}
		lastErr = err
		var se *startError
		if !errors.As(err, &se) || !se.portTaken {
			break
		}
	}
	t.Fatalf("redistest: starting redis-server in %s: %v", s.Dir, lastErr)
}

// args returns the full redis-server argument list (without the binary).
func (s *Server) args() []string {
	args := append([]string(nil), s.pre...)
	args = append(args,
		"--port", strconv.Itoa(s.Port),
		"--bind", "127.0.0.1",
		"--dir", s.Dir,
		"--logfile", s.LogFile,
		"--daemonize", "no",
		"--save", "",
		"--appendonly", "no",
	)
	args = append(args, s.tlsArgs()...)
	return append(args, s.extra...)
}

// Stop stops the server gracefully: it sends SHUTDOWN NOSAVE and waits for
// the process to exit; if that does not work it sends SIGTERM and finally
// SIGKILL to the server's own pid. Stop is a no-op when the server is not
// running, so it is safe to call more than once.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil || p.exited() {
		return
	}
	s.shutdown()
	if p.wait(stopTimeout) {
		return
	}
	p.terminate()
	if p.wait(stopTimeout) {
		return
	}
	p.kill()
}

// shutdown asks the server to exit with SHUTDOWN NOSAVE NOW, falling back to
// SHUTDOWN NOSAVE for servers that do not know NOW (before Redis 7).
func (s *Server) shutdown() {
	c := adminClient(s.Addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := c.Do(ctx, "SHUTDOWN", "NOSAVE", "NOW").Err()
	var rerr redis.Error
	if errors.As(err, &rerr) {
		_ = c.Do(ctx, "SHUTDOWN", "NOSAVE").Err()
	}
}

// Kill sends SIGKILL to the server's own pid and waits until the process has
// exited. It is a no-op when the server is not running.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.kill()
	}
}

// Restart starts the server again on the same port, in the same directory
// and with the same arguments, and waits up to 10s until it answers PING. It
// is meant to follow Kill or Stop; a server that is still running is stopped
// first. If the port is briefly unavailable it retries a few times on that
// same port before failing the test.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	var err error
	for attempt := 0; attempt < startAttempts; attempt++ {
		if err = s.launch(); err == nil {
			return
		}
		var se *startError
		if !errors.As(err, &se) || !se.portTaken {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("redistest: restarting redis-server on %s: %v", s.Addr, err)
}

// launch starts one process on s.Port and waits until it is ready.
func (s *Server) launch() error {
	return s.launchWith(nil, waitReady)
}

// launchWith starts one process on s.Port, with more appended to its
// arguments for this process only, and waits until wait says it is up.
func (s *Server) launchWith(more []string, wait func(p *process, addr string, timeout time.Duration) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logOffset = s.logSize()
	p, err := spawn(s.bin, append(s.args(), more...), s.Dir)
	if err != nil {
		return fmt.Errorf("%w%s", err, s.logTail())
	}
	s.proc = p
	s.Pid = p.pid()
	if err := wait(p, s.Addr, readyTimeout); err != nil {
		p.kill()
		var se *startError
		if errors.As(err, &se) {
			se.log = s.logTail()
			se.portTaken = se.portTaken || logSaysPortTaken(se.log)
			return se
		}
		return fmt.Errorf("%w%s", err, s.logTail())
	}
	return nil
}

// PoolTimeout is how long the clients of Client and Cluster.Client wait
// for a free connection. go-redis's default (its read timeout plus a
// second, 4 s) is too short for the tests that start a couple of thousand
// decisions at one instant (the fan-in proofs) when the machine is also
// busy with other packages' tests: waiting for a connection is not what
// they test, so they wait longer instead of failing with a pool timeout.
// Tests of the pool timeout itself make clients of their own.
const PoolTimeout = 30 * time.Second

// Client returns a go-redis client for the server with ContextTimeoutEnabled
// set and a PoolTimeout of PoolTimeout. The client is closed in t.Cleanup,
// before the server is stopped.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  s.Addr,
		ContextTimeoutEnabled: true,
		PoolTimeout:           PoolTimeout,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
