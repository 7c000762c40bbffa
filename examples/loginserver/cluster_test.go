package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/loginguard"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/redis/go-redis/v9"
)

// runCommand runs the command with args (and -addr on a free port) until
// the test ends, and returns the address it listens on.
func runCommand(t *testing.T, args ...string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = run(ctx, append([]string{"-addr", addr}, args...))
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if runErr != nil {
			t.Errorf("run: %v", runErr)
		}
	})
	for i := 0; ; i++ { // wait for the listener, bounded
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return addr
		}
		select {
		case <-done:
			t.Fatalf("loginserver stopped before it listened")
		default:
		}
		if i == 500 {
			t.Fatalf("loginserver never listened on %s: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// secretFile writes a guard secret to a file of the test's.
func secretFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte("loginserver-cluster-secret-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRedisClusterFlag runs the command with -redis-cluster on a
// 3-primary Cluster, as floodgate serve takes one: logins are decided
// (the owner gets in; a guesser is asked for a CAPTCHA, then delayed or
// locked), where -redis, the only Redis flag there was, made a client for
// a single Redis whose calls the nodes redirected (503 for every login).
func TestRedisClusterFlag(t *testing.T) {
	cl := redistest.StartCluster(t)
	addr := runCommand(t, "-trusted-proxies", "127.0.0.0/8", "-iterations", "1000",
		"-secret-file", secretFile(t), "-redis-cluster", strings.Join(cl.Addrs, ","))
	if status, body := postTo(t, addr, "2001:db8:aa::10", demoPassword, ""); status != 200 {
		t.Fatalf("owner: %d %s", status, body)
	}
	var statuses []int
	for i := range 12 {
		status, body := postTo(t, addr, "203.0.113.7", fmt.Sprintf("guess-%d", i), "junk")
		if status != 401 && status != 429 {
			t.Fatalf("guess %d: %d %s, want 401 or 429", i, status, body)
		}
		statuses = append(statuses, status)
	}
	if statuses[0] != 401 || statuses[len(statuses)-1] != 429 {
		t.Fatalf("guesses answered %v: want 401 first and 429 in the end", statuses)
	}
	// The state is in the Cluster.
	var mu sync.Mutex
	n := 0
	err := cl.Client(t).ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
		keys, err := c.Keys(ctx, "*loginserver*").Result()
		mu.Lock()
		n += len(keys)
		mu.Unlock()
		return err
	})
	if err != nil || n == 0 {
		t.Fatalf("keys under loginserver in the Cluster: %d (%v), want some", n, err)
	}
}

// TestClusterNodeAsSingleRedis gives -redis's client (one for a single
// Redis) the address of each node of a 3-primary Cluster: the calls a
// node redirects (MOVED: the keys' slot is another node's) fail with
// floodgate.ErrClusterRedirect, whose text says the address is a Redis
// Cluster node and to use a cluster client, and the server logs that -redis
// is a Cluster node's address and to use -redis-cluster. They were
// reported as "store unavailable: redis: MOVED ..." (a walk: every login
// got 503, and the log sent the operator to Redis's health). The command
// itself now refuses such an address at start
// (TestRedisFlagRefusesClusterNode); this checks the errors and the
// handler's log past that check, e.g. a node joined to a Cluster later.
func TestClusterNodeAsSingleRedis(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := context.Background()
	redirected := map[string]int{}
	for i, node := range cl.Addrs {
		client, err := redisClient(node, "", "", "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.Close() })
		store, err := redisstore.New(client, redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		limiter, err := floodgate.New(store, floodgate.Options{Prefix: "loginserver"})
		if err != nil {
			t.Fatal(err)
		}
		policy, err := floodgate.NewSlidingWindow("login-per-ip", 20, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		backend, err := loginguard.NewRedis(client, "loginserver")
		if err != nil {
			t.Fatal(err)
		}
		guard, err := loginguard.New(backend, loginguard.Options{Secret: []byte("loginserver-test-secret-0123456789")})
		if err != nil {
			t.Fatal(err)
		}
		check := func(what string, err error) {
			t.Helper()
			switch {
			case err == nil: // this node serves the keys' slot
			case errors.Is(err, floodgate.ErrClusterRedirect) && errors.Is(err, floodgate.ErrStoreUnavailable) &&
				strings.Contains(err.Error(), "Redis Cluster node") && strings.Contains(err.Error(), "cluster client"):
				redirected[what]++
			default:
				t.Errorf("node %d, %s: %v, want nil or floodgate.ErrClusterRedirect saying to use a cluster client", i, what, err)
			}
		}
		_, err = limiter.Allow(ctx, policy, "203.0.113.9")
		check("limiter", err)
		_, err = guard.Check(ctx, "demo", netip.MustParseAddr("203.0.113.9"))
		check("guard", err)

		// The server's log says what to do.
		log := &syncWriter{w: &bytes.Buffer{}}
		ips, err := clientip.New(clientip.Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
		if err != nil {
			t.Fatal(err)
		}
		h, err := newHandler(config{Limiter: limiter, PerIP: policy, Guard: guard, IPs: ips, Iterations: 1000, Clock: time.Now,
			Logger: slog.New(slog.NewTextHandler(log, nil))})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		status, body := postTo(t, strings.TrimPrefix(srv.URL, "http://"), "203.0.113.9", demoPassword, "")
		if status != 200 && status != 503 {
			t.Fatalf("node %d: login %d %s, want 200 or 503", i, status, body)
		}
		if status == 503 && !strings.Contains(log.String(), "Redis Cluster node") {
			t.Errorf("node %d: 503 %s, and the log does not say the address is a Redis Cluster node:\n%s", i, body, log.String())
		}
	}
	// Each key lives on one node of three: two of them redirect.
	for _, what := range []string{"limiter", "guard"} {
		if redirected[what] < 2 {
			t.Errorf("%s: %d nodes redirected, want at least 2", what, redirected[what])
		}
	}
}

// syncWriter serializes writes to w (the handler logs from its goroutines).
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// String returns what was written.
func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

// TestRedisSentinelFlag runs the command with -redis-sentinel and
// -redis-master, as floodgate serve takes them: the owner logs in and a
// wrong password is refused, decided on the primary the sentinels name.
func TestRedisSentinelFlag(t *testing.T) {
	s := redistest.StartSentinel(t)
	addr := runCommand(t, "-trusted-proxies", "127.0.0.0/8", "-iterations", "1000", "-secret-file", secretFile(t),
		"-redis-sentinel", strings.Join(s.SentinelAddrs, ","), "-redis-master", s.MasterName)
	if status, body := postTo(t, addr, "2001:db8:aa::10", demoPassword, ""); status != 200 {
		t.Fatalf("owner: %d %s", status, body)
	}
	if status, body := postTo(t, addr, "203.0.113.7", "wrong", ""); status != 401 {
		t.Fatalf("wrong password: %d %s, want 401", status, body)
	}
}

// TestRedisFlagsTogether: one Redis at a time, and -redis-master only
// with -redis-sentinel.
func TestRedisFlagsTogether(t *testing.T) {
	for _, args := range [][]string{
		{"-redis", "127.0.0.1:1", "-redis-cluster", "127.0.0.1:2"},
		{"-redis-cluster", "127.0.0.1:2", "-redis-sentinel", "127.0.0.1:3", "-redis-master", "m"},
		{"-redis-sentinel", "127.0.0.1:3"},
		{"-redis-master", "m"},
	} {
		if err := run(context.Background(), args); err == nil {
			t.Errorf("%v: ran, want an error", args)
		}
	}
}

// TestRedisFlagRefusesClusterNode runs the command with -redis given each
// node of a 3-primary Cluster: it refuses to start, saying the address is
// a Redis Cluster node and to use -redis-cluster. It used to start: the
// per-IP limit's failures were logged only as "rate limit: store failed"
// (503 for most clients), and clients whose keys' slots the node served
// logged in without a word (a walk). A -redis nobody listens on still
// starts (Redis may come up later; logins answer 503 until it does).
func TestRedisFlagRefusesClusterNode(t *testing.T) {
	cl := redistest.StartCluster(t)
	for i, node := range cl.Addrs {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second) // a server that starts serves until then
		err := run(ctx, []string{"-addr", "127.0.0.1:0", "-iterations", "1000", "-secret-file", secretFile(t), "-redis", node})
		cancel()
		if err == nil || !strings.Contains(err.Error(), "Redis Cluster node") || !strings.Contains(err.Error(), "-redis-cluster") ||
			!strings.Contains(err.Error(), node) {
			t.Errorf("node %d: run = %v, want an error naming %s as a Redis Cluster node and saying to use -redis-cluster", i, err, node)
		}
	}
	// Nothing listens on a port just closed: the server starts.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := l.Addr().String()
	l.Close()
	addr := runCommand(t, "-trusted-proxies", "127.0.0.0/8", "-iterations", "1000", "-secret-file", secretFile(t), "-redis", down)
	if status, body := postTo(t, addr, "203.0.113.9", demoPassword, ""); status != 503 {
		t.Fatalf("login with Redis down: %d %s, want 503", status, body)
	}
}
