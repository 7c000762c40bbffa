package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// ipv6Forward listens on a free port of ::1 and forwards every connection
// to target (a redistest server, which listens on 127.0.0.1 only). It
// returns its address, "[::1]:port", and counts the connections it took
// in *conns. The test is skipped where ::1 cannot be bound.
func ipv6Forward(t *testing.T, target string, conns *atomic.Int64) string {
	t.Helper()
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback (::1) to listen on: %v", err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			open = append(open, c, s)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(s, c); _ = s.Close() })
			wg.Go(func() { _, _ = io.Copy(c, s); _ = c.Close() })
		}
	})
	return ln.Addr().String()
}

// TestServeMultiHostURLIPv6: serve takes a redis-cluster:// and a
// redis-sentinel:// --redis URL whose hosts are bracketed IPv6 addresses
// (here forwarders on ::1 to real servers) and decides through them. An
// outside walk on IPv6 got `invalid Redis connection settings:
// "redis-cluster://[::1]:24101,[::1]:24102": invalid IP-literal`.
func TestServeMultiHostURLIPv6(t *testing.T) {
	check := func(t *testing.T, url string, conns *atomic.Int64) {
		t.Helper()
		svc := startService(t, "--redis", url, "--fallback", "off", "--decision-timeout", "5s",
			"--prefix", fmt.Sprintf("v6%d", time.Now().UnixNano()))
		waitCentral(t, svc.url, server.CheckRequest{Policy: "api", Identity: map[string]string{"user": "v6"}})
		if conns.Load() == 0 {
			t.Fatalf("decided without connecting to the ::1 addresses of %s", url)
		}
		svc.stop(t)
	}
	t.Run("cluster", func(t *testing.T) {
		var conns atomic.Int64
		c := redistest.StartCluster(t)
		var hosts []string
		for _, a := range c.Addrs[:2] {
			hosts = append(hosts, ipv6Forward(t, a, &conns))
		}
		check(t, "redis-cluster://"+strings.Join(hosts, ","), &conns)
	})
	t.Run("sentinel", func(t *testing.T) {
		var conns atomic.Int64
		s := redistest.StartSentinel(t)
		hosts := []string{s.SentinelAddrs[0]} // a mixed list: IPv4, then IPv6
		for _, a := range s.SentinelAddrs[1:] {
			hosts = append(hosts, ipv6Forward(t, a, &conns))
		}
		check(t, "redis-sentinel://"+strings.Join(hosts, ",")+"/0?master="+s.MasterName, &conns)
	})
}

// TestEnvoyCompatUnbracketedIPv6: an IPv6 address without brackets in
// REDIS_URL stops envoy-compat at start, with a message naming REDIS_URL
// and the bracketed form, for a single Redis as for a cluster list. A
// single one (REDIS_URL=::1:24000) started, logged "too many colons in
// address" and kept /healthcheck at 500 for ever. Nothing is dialled.
func TestEnvoyCompatUnbracketedIPv6(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"REDIS_URL=::1:6390"}, "REDIS_URL: not host:port; an IPv6 address goes in brackets: [::1]:6390"},
		{[]string{"REDIS_URL=fd00::5:6390", "REDIS_TYPE=single"}, "REDIS_URL: not host:port; an IPv6 address goes in brackets: [fd00::5]:6390"},
		{[]string{"REDIS_URL=redis-host", "REDIS_TYPE=single"}, "REDIS_URL: not host:port (or a redis://, rediss:// or unix:// URL; credentials go in REDIS_AUTH)"},
		{[]string{"REDIS_TYPE=cluster", "REDIS_URL=[::1]:7000,::1:7001"}, "REDIS_URL: address 2 of the list is not host:port; an IPv6 address goes in brackets: [::1]:7001"},
	} {
		// Bounded: without the check, the process ran on.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, binary(t), "envoy-compat")
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1", "GRPC_HOST=127.0.0.1",
			"PORT=0", "GRPC_PORT=0", "DEBUG_PORT=0", "REDIS_SOCKET_TYPE=tcp", "RUNTIME_ROOT=" + t.TempDir()}, tc.env...)
		out, err := cmd.CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("%v: %v\n%s\nwant a failure saying %q", tc.env, err, out, tc.want)
		}
	}
}

// TestSameListenAddrIPv6: listener addresses are compared as addresses:
// [0:0:0:0:0:0:0:1]:P is [::1]:P (compared as text, --admin-addr got past
// the check and failed at bind), and the address checkAdminAddr suggests
// is in the family of the one refused (an IPv6 user was told
// 127.0.0.1:9090).
func TestSameListenAddrIPv6(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"[::1]:8080", "[::1]:8080", true},
		{"[0:0:0:0:0:0:0:1]:8080", "[::1]:8080", true},
		{"[::ffff:127.0.0.1]:8080", "127.0.0.1:8080", true},
		{"[::1]:08080", "[::1]:8080", true},
		{"[0:0:0:0:0:0:0:0]:8080", "[::1]:8080", true},
		{"0.0.0.0:8080", "[::1]:8080", true},
		{":8080", "[::1]:8080", true},
		{"LOCALHOST:8080", "localhost:8080", true},
		{"[::1]:8080", "[::2]:8080", false},
		{"[::1]:8080", "127.0.0.1:8080", false},
		{"[::1]:8080", "[::1]:8081", false},
		{"[::1]:0", "[0:0:0:0:0:0:0:1]:0", false},
		// The review: a v4-mapped wildcard listens on every IPv4
		// address, and an empty port is the kernel's choice, as 0.
		{"[::ffff:0.0.0.0]:8080", "127.0.0.1:8080", true},
		{"127.0.0.1:", "127.0.0.1:", false},
	} {
		if got := sameListenAddr(tc.a, tc.b); got != tc.want {
			t.Errorf("sameListenAddr(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
	for a, want := range map[string]string{
		"[::1]:8080":              "[::1]:9090",
		"[::]:8080":               "[::1]:9090",
		"127.0.0.1:8080":          "127.0.0.1:9090",
		":8080":                   "127.0.0.1:9090",
		"[::ffff:127.0.0.1]:8080": "127.0.0.1:9090",
		"localhost:8080":          "127.0.0.1:9090",
	} {
		if got := adminAddrExample(a); got != want {
			t.Errorf("adminAddrExample(%s) = %s, want %s", a, got, want)
		}
	}
}
