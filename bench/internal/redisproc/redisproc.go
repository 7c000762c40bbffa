// Package redisproc runs a private redis-server for the benchmark: on a free
// loopback port, without persistence, in a temporary directory, stopped by
// its own pid. It never touches the machine's shared Redis on port 6379.
package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// sharedPort is the machine's shared Redis port; never used.
const sharedPort = 6379

// ErrStart reports a redis-server that could not be started.
var ErrStart = errors.New("redisproc: cannot start redis-server")

// Options configures Start. The zero value is ready to use.
type Options struct {
	// Bin is the redis-server executable. Default "redis-server" from PATH.
	Bin string
	// ExtraArgs are appended to the command line, e.g. {"--maxmemory", "1gb"}.
	ExtraArgs []string
	// StartTimeout bounds the wait for the server to answer. Default 10s.
	StartTimeout time.Duration
}

// Server is one running redis-server. Stop it with Stop.
type Server struct {
	// Addr is "127.0.0.1:<Port>".
	Addr string
	// Port is the TCP port the server listens on.
	Port int
	// Dir is the server's working directory, removed by Stop.
	Dir string

	cmd  *exec.Cmd
	done chan struct{}
}

// Start launches redis-server on a free port of 127.0.0.1 with
// --save "" --appendonly no and waits until it answers PING from its own
// pid. It retries on another port when the chosen one was taken meanwhile.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Bin == "" {
		opts.Bin = "redis-server"
	}
	if opts.StartTimeout < 0 {
		return nil, fmt.Errorf("%w: negative start timeout %v", ErrStart, opts.StartTimeout)
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 10 * time.Second
	}
	bin, err := exec.LookPath(opts.Bin)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStart, err)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		s, err := start(ctx, bin, opts)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func start(ctx context.Context, bin string, opts Options) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStart, err)
	}
	dir, err := os.MkdirTemp("", "floodgate-bench-redis-")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStart, err)
	}
	logPath := filepath.Join(dir, "redis.log")
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--logfile", logPath,
		"--daemonize", "no",
	}
	args = append(args, opts.ExtraArgs...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: exec %s: %w", ErrStart, bin, err)
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, Dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	if err := s.waitReady(ctx, opts.StartTimeout); err != nil {
		s.Stop()
		log, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("%w: %w\n%s", ErrStart, err, tail(string(log), 2000))
	}
	return s, nil
}

// Pid returns the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Client returns a new go-redis client for the server with the given pool
// size (0 means go-redis's default). The caller closes it.
func (s *Server) Client(poolSize int) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                  s.Addr,
		PoolSize:              poolSize,
		DisableIdentity:       true,
		ContextTimeoutEnabled: true,
		// A rate-limit decision must not be sent twice.
		MaxRetries: -1,
	})
}

// Stop ends the server (SIGTERM, then SIGKILL after 5 s), signalling only its
// own pid, and removes its directory. It is safe to call more than once.
func (s *Server) Stop() {
	select {
	case <-s.done:
	default:
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(5 * time.Second)
		select {
		case <-s.done:
		case <-t.C:
			_ = s.cmd.Process.Kill()
			<-s.done
		}
		t.Stop()
	}
	os.RemoveAll(s.Dir)
}

// Exited reports whether the server process has ended.
func (s *Server) Exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *Server) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, PoolSize: 1, DisableIdentity: true, DialTimeout: 500 * time.Millisecond, ContextTimeoutEnabled: true})
	defer c.Close()
	var lastErr error
	for {
		if s.Exited() {
			return fmt.Errorf("redis-server exited during start-up (%s)", s.cmd.ProcessState)
		}
		// Dial by hand first so that go-redis does not log refused dials.
		conn, err := net.DialTimeout("tcp", s.Addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			var info string
			info, err = c.Info(ctx, "server").Result()
			if err == nil {
				pid, perr := strconv.Atoi(InfoField(info, "process_id"))
				if perr == nil && pid == s.Pid() {
					return nil
				}
				return fmt.Errorf("%s answered by pid %q, not ours (%d)", s.Addr, InfoField(info, "process_id"), s.Pid())
			}
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("no answer on %s within %v: %v", s.Addr, timeout, lastErr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// InfoField returns the value of field in the text of an INFO reply, or ""
// when it is absent.
func InfoField(info, field string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// freePort returns a loopback port that was free a moment ago, never the
// shared Redis port.
func freePort() (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port != sharedPort {
			return port, nil
		}
	}
	return 0, errors.New("no free loopback port")
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
