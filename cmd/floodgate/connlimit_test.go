package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/proctest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// TestServeIdleFloodLeavesDescriptors runs the binary under a file
// descriptor limit of 256 (the default connection limit is then 128) and
// opens 400 connections to --addr that each send one check and then sit
// idle, as keep-alive clients do: every one is answered (the one idle
// longest is closed to make room), and afterwards the admin listener, the
// probes' listener and decisions on Redis (whose pool needs descriptors of
// its own) still answer. Without the limit the process ran out of
// descriptors at about 245 connections and no listener accepted any more.
func TestServeIdleFloodLeavesDescriptors(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh to lower the file limit with")
	}
	const (
		nofile = 256
		flood  = 400
		limit  = 128 // connlimit.Default(256)
	)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(e2eAdminToken), 0o600); err != nil {
		t.Fatal(err)
	}
	rs := redistest.Start(t)
	for _, engine := range []string{"net/http", "fasthttp"} {
		t.Run(strings.ReplaceAll(engine, "/", ""), func(t *testing.T) {
			args := []string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, nofile), binary(t), "serve",
				"--addr", "127.0.0.1:0", "--log-format", "json", "--http-server", engine,
				"--redis", "redis://" + rs.Addr + "/0", "--prefix", fmt.Sprintf("idleflood%d", time.Now().UnixNano()),
				"--admin-addr", "127.0.0.1:0", "--admin-token-file", tokenFile, "--health-addr", "127.0.0.1:0"}
			p := proctest.Start(t, exec.Command("sh", args...), "floodgate listening")
			addr := p.Record("floodgate listening")["addr"]
			svc := &service{Proc: p, url: "http://" + addr}
			admin, health := "http://"+svc.addr(t, "floodgate admin listening"), "http://"+svc.addr(t, healthListening)

			const check = `{"policy":"api","identity":{"user":"flood"}}`
			req := fmt.Sprintf("POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(check), check)
			conns := make([]net.Conn, 0, flood)
			t.Cleanup(func() {
				for _, c := range conns {
					_ = c.Close()
				}
			})
			for i := range flood {
				c, err := net.DialTimeout("tcp", addr, 10*time.Second)
				if err != nil {
					t.Fatalf("connection %d: %v", i, err)
				}
				conns = append(conns, c)
				// 10 s bounds a hang: a connection never accepted.
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := io.WriteString(c, req); err != nil {
					t.Fatalf("connection %d: %v", i, err)
				}
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatalf("connection %d of %d idle ones, under a file limit of %d: %v\n%s", i, flood, nofile, err, tail(p.Logs()))
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("connection %d: %d", i, resp.StatusCode)
				}
			}
			client := &http.Client{Timeout: 10 * time.Second}
			for _, u := range []string{admin + "/healthz", health + "/readyz"} {
				resp, err := client.Get(u)
				if err != nil {
					t.Fatalf("GET %s with %d idle connections on --addr: %v", u, flood, err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("GET %s with %d idle connections on --addr: %d %s", u, flood, resp.StatusCode, body)
				}
			}
			resp, err := client.Post(svc.url+"/v1/check", "application/json", strings.NewReader(check))
			if err != nil {
				t.Fatalf("a check with %d idle connections on --addr: %v", flood, err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get(server.DegradedHeader) != "" {
				t.Fatalf("a check with %d idle connections on --addr: %d, degraded %q; want 200 decided on Redis", flood, resp.StatusCode, resp.Header.Get(server.DegradedHeader))
			}
			if got := metricValue(t, admin, "floodgate_connections_max"); got != limit {
				t.Errorf("floodgate_connections_max %v under a file limit of %d, want %d", got, nofile, limit)
			}
			if open := metricValue(t, admin, `floodgate_connections_open{listener="http"}`); open > limit {
				t.Errorf("floodgate_connections_open %v, above the limit %d", open, limit)
			}
			if closed := metricValue(t, admin, "floodgate_connections_idle_closed_total"); closed < flood-limit {
				t.Errorf("floodgate_connections_idle_closed_total %v, want at least %d", closed, flood-limit)
			}
			if strings.Contains(p.Logs(), "too many open files") {
				t.Errorf("the process ran out of file descriptors:\n%s", tail(p.Logs()))
			}
		})
	}
}

// tail returns the last 20 lines of logs.
func tail(logs string) string {
	lines := strings.Split(strings.TrimSpace(logs), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// TestServeFasthttpSurvivesNoDescriptors: with --http-server fasthttp and
// a --max-connections above what the file limit allows, a flood of idle
// connections runs the process out of descriptors; serve retries its
// accepts, as on net/http, and answers again once the clients have gone.
// fasthttp's Serve returned on the first EMFILE, and serve exited.
func TestServeFasthttpSurvivesNoDescriptors(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh to lower the file limit with")
	}
	const nofile, flood = 128, 200
	args := []string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, nofile), binary(t), "serve",
		"--addr", "127.0.0.1:0", "--log-format", "json", "--http-server", "fasthttp", "--max-connections", "100000"}
	p := proctest.Start(t, exec.Command("sh", args...), "floodgate listening")
	if _, ok := p.Logged("--max-connections leaves fewer file descriptors than the default reserve: a flood of connections may leave none for Redis and the other listeners"); !ok {
		t.Errorf("no warning of --max-connections above the default:\n%s", p.Logs())
	}
	url := "http://" + p.Record("floodgate listening")["addr"]
	conns := make([]net.Conn, 0, flood)
	closeAll := func() {
		for _, c := range conns {
			_ = c.Close()
		}
		conns = conns[:0]
	}
	t.Cleanup(closeAll)
	const check = `{"policy":"api","identity":{"user":"flood"}}`
	req := fmt.Sprintf("POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(check), check)
	for i := range flood {
		c, err := net.DialTimeout("tcp", p.Record("floodgate listening")["addr"], 10*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		_, _ = io.WriteString(c, req)
	}
	waitUntil(t, "the accepts to fail for want of descriptors", func() bool {
		_, ok := p.Logged("accepting a connection failed; retrying")
		return ok
	})
	closeAll()
	select {
	case <-p.Done():
		t.Fatalf("serve exited once out of descriptors: %v\n%s", p.Err(), tail(p.Logs()))
	default:
	}
	client := &http.Client{Timeout: 10 * time.Second}
	waitUntil(t, "a check answered after the flood", func() bool {
		resp, err := client.Post(url+"/v1/check", "application/json", strings.NewReader(check))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// TestServeGRPCFloodLeavesHTTP opens more connections to --grpc-addr than
// --max-connections that each send the HTTP/2 preface and an empty
// SETTINGS frame and then nothing, as a client holding connections does:
// gRPC closes them only after 5 idle minutes and they are never closed for
// room, so they hold half the budget at most, and checks on --addr are
// still answered. Before, they held every place (256 under ulimit -n 512)
// and no check on --addr was answered for minutes.
func TestServeGRPCFloodLeavesHTTP(t *testing.T) {
	const (
		limit = 40
		flood = 60
	)
	dir := t.TempDir()
	writeFileAtomic(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n")
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(e2eAdminToken), 0o600); err != nil {
		t.Fatal(err)
	}
	svc := startService(t, "--max-connections", fmt.Sprint(limit), "--grpc-addr", "127.0.0.1:0", "--envoy-config", dir,
		"--admin-addr", "127.0.0.1:0", "--admin-token-file", tokenFile)
	grpcAddr, admin := svc.addr(t, grpcListening), "http://"+svc.addr(t, "floodgate admin listening")
	// The client connection preface and an empty SETTINGS frame: the
	// HTTP/2 handshake done, no stream.
	preface := "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + "\x00\x00\x00\x04\x00\x00\x00\x00\x00"
	conns := make([]net.Conn, 0, flood)
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	for i := range flood {
		c, err := net.DialTimeout("tcp", grpcAddr, 10*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		if _, err := io.WriteString(c, preface); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	const open = `floodgate_connections_open{listener="grpc"}`
	waitUntil(t, "the gRPC listener to hold its half", func() bool { return metricValue(t, admin, open) >= limit/2 })
	client := &http.Client{Timeout: 10 * time.Second}
	for i := range 3 {
		resp, err := client.Post(svc.url+"/v1/check", "application/json", strings.NewReader(`{"policy":"api","identity":{"user":"flood"}}`))
		if err != nil {
			t.Fatalf("check %d with %d held connections on --grpc-addr (%v open): %v", i, flood, metricValue(t, admin, open), err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("check %d with %d held connections on --grpc-addr: %d", i, flood, resp.StatusCode)
		}
	}
	if got := metricValue(t, admin, open); got > limit/2 {
		t.Errorf("%s %v, want at most %d (half of --max-connections %d)", open, got, limit/2, limit)
	}
}

// TestServeClosesClientThatDoesNotRead sends GET /metrics 400 times
// over one connection and never reads the answers, on each engine with --write-timeout 1s: once the kernel's
// buffers are full the answer being written cannot finish, and serve
// closes the connection, so that floodgate_connections_open returns to 0
// and the client sees the end of the connection. The write timeout was a
// fixed 30 s: such clients held their places of --max-connections for
// half a minute whatever --read-timeout said (a walk, 66 of them with
// --max-connections 64: no check answered for about 44 s).
func TestServeClosesClientThatDoesNotRead(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(e2eAdminToken), 0o600); err != nil {
		t.Fatal(err)
	}
	const open = `floodgate_connections_open{listener="http"}`
	for _, engine := range []string{"net/http", "fasthttp"} {
		t.Run(strings.ReplaceAll(engine, "/", ""), func(t *testing.T) {
			svc := startService(t, "--http-server", engine, "--write-timeout", "1s",
				"--admin-addr", "127.0.0.1:0", "--admin-token-file", tokenFile)
			admin := "http://" + svc.addr(t, "floodgate admin listening")
			c, err := net.Dial("tcp", strings.TrimPrefix(svc.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// Never read: 400 answers of about 20 KB are more than the
			// receive buffer and the service's send buffer (4 MiB at most
			// by default on Linux) take.
			sent := make(chan error, 1)
			go func() {
				// Bounds the writer once the service stops reading.
				_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
				_, err := io.WriteString(c, strings.Repeat("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400))
				sent <- err
			}()
			// 20 s bounds a hang: the fixed write timeout held it 30 s.
			start := time.Now()
			deadline := start.Add(20 * time.Second)
			seen := false
			for {
				n := metricValue(t, admin, open)
				seen = seen || n > 0
				if seen && n == 0 {
					t.Logf("closed %v after the client began sending", time.Since(start))
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s %v 20 s after a client stopped reading, with --write-timeout 1s (seen open: %v)\n%s", open, n, seen, tail(svc.Logs()))
				}
				time.Sleep(100 * time.Millisecond)
			}
			// What the receive buffer holds, then the end: EOF, or a
			// reset for the requests the service left unread.
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("reading what the closed connection held: %v, want EOF or a reset", err)
			}
			_ = c.Close()
			<-sent
		})
	}
}
