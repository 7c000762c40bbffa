package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/proctest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// TestServeSideListenersFloodBounded runs the binary under a file
// descriptor limit of 256 (--max-connections' default is then 128, and
// --admin-addr and --health-addr each 32 of the reserve) and opens 150
// connections to each of the probes' and the admin listener at once,
// each sending GET /healthz and then sitting idle, as keep-alive clients
// do: every one is answered (the one idle longest on that listener is
// closed to make room), the process never holds more than 33 connections
// on either port (32, and the one accepted waiting for its place), and
// afterwards a fresh /readyz and /healthz on them, and a check on --addr
// decided on Redis, are answered. Before, neither listener was capped:
// the flood held one descriptor per connection, ran the process out of
// them (300 on top of what serve holds), and the probes, --addr and the
// Redis dials failed until the clients left.
func TestServeSideListenersFloodBounded(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh to lower the file limit with")
	}
	if _, err := os.Stat("/proc/self/net/tcp"); err != nil {
		t.Skip("no /proc/net/tcp to count the process's connections with")
	}
	const (
		nofile = 256
		flood  = 150 // on each listener
		limit  = 32  // connlimit.Side(256, connlimit.Default(256))
	)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(e2eAdminToken), 0o600); err != nil {
		t.Fatal(err)
	}
	rs := redistest.Start(t)
	args := []string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, nofile), binary(t), "serve",
		"--addr", "127.0.0.1:0", "--log-format", "json",
		"--redis", "redis://" + rs.Addr + "/0", "--prefix", fmt.Sprintf("sideflood%d", time.Now().UnixNano()),
		"--admin-addr", "127.0.0.1:0", "--admin-token-file", tokenFile, "--health-addr", "127.0.0.1:0"}
	cmd := exec.Command("sh", args...)
	p := proctest.Start(t, cmd, "floodgate listening")
	pid := cmd.Process.Pid // sh execs serve: the same process
	svc := &service{Proc: p, url: "http://" + p.Record("floodgate listening")["addr"]}
	adminAddr, healthAddr := svc.addr(t, "floodgate admin listening"), svc.addr(t, healthListening)

	type result struct {
		most int   // connections the process held on the port, at most
		err  error // the flood's first failure
	}
	listeners := []struct{ name, addr string }{{"health", healthAddr}, {"admin", adminAddr}}
	results := make([]result, len(listeners))
	release := make(chan struct{}) // ends the floods, whose connections stay open until then
	var flooded, ended sync.WaitGroup
	t.Cleanup(func() { close(release); ended.Wait() })
	for i, l := range listeners {
		r := &results[i]
		flooded.Add(1)
		ended.Go(func() {
			conns := make([]net.Conn, 0, flood)
			defer func() {
				for _, c := range conns {
					_ = c.Close()
				}
			}()
			r.err = floodIdle(l.addr, "/healthz", flood, &conns, func() error {
				n, err := socketsOn(pid, l.addr)
				r.most = max(r.most, n)
				return err
			})
			flooded.Done()
			<-release
		})
	}
	flooded.Wait()
	for i, l := range listeners {
		r := results[i]
		if r.err != nil {
			t.Errorf("%d idle connections to --%s-addr under a file limit of %d: %v", flood, l.name, nofile, r.err)
		}
		if r.most > limit+1 {
			t.Errorf("the process held %d connections on --%s-addr (%s) during a flood of %d, want at most %d (its limit, and one accepted waiting for a place)", r.most, l.name, l.addr, flood, limit+1)
		}
	}
	// Fresh connections, while the floods' are still open.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for _, u := range []string{"http://" + healthAddr + "/readyz", "http://" + healthAddr + "/healthz", "http://" + adminAddr + "/healthz"} {
		resp, err := client.Get(u)
		if err != nil {
			t.Fatalf("GET %s with %d idle connections on each of --health-addr and --admin-addr: %v\n%s", u, flood, err, tail(p.Logs()))
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s with %d idle connections on each of --health-addr and --admin-addr: %d %s", u, flood, resp.StatusCode, body)
		}
	}
	const check = `{"policy":"api","identity":{"user":"flood"}}`
	resp, err := client.Post(svc.url+"/v1/check", "application/json", strings.NewReader(check))
	if err != nil {
		t.Fatalf("a check on --addr with the side listeners flooded: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get(server.DegradedHeader) != "" {
		t.Fatalf("a check on --addr with the side listeners flooded: %d, degraded %q; want 200 decided on Redis", resp.StatusCode, resp.Header.Get(server.DegradedHeader))
	}
	admin := "http://" + adminAddr
	for _, name := range []string{"health", "admin"} {
		if got := metricValue(t, admin, fmt.Sprintf(`floodgate_side_connections_max{listener=%q}`, name)); got != limit {
			t.Errorf("floodgate_side_connections_max of %s: %v, want %d", name, got, limit)
		}
		if got := metricValue(t, admin, fmt.Sprintf(`floodgate_side_connections_open{listener=%q}`, name)); got > limit {
			t.Errorf("floodgate_side_connections_open of %s: %v, above its limit %d", name, got, limit)
		}
		if got := metricValue(t, admin, fmt.Sprintf(`floodgate_side_connections_idle_closed_total{listener=%q}`, name)); got < flood-limit {
			t.Errorf("floodgate_side_connections_idle_closed_total of %s: %v, want at least %d", name, got, flood-limit)
		}
	}
	// The public budget is the listeners' of --addr and --grpc-addr only.
	if got := metricValue(t, admin, "floodgate_connections_max"); got != 128 {
		t.Errorf("floodgate_connections_max %v, want 128 (connlimit.Default(256))", got)
	}
	if strings.Contains(p.Logs(), "too many open files") {
		t.Errorf("the process ran out of file descriptors:\n%s", tail(p.Logs()))
	}
}

// floodIdle opens n connections to addr one after the other, each
// sending GET path and reading its answer (200 wanted), then sitting idle (kept in
// conns, for the caller to close); after each answer it calls after. It
// returns the first failure: a connection not accepted or answered within
// 10 s (a bound on a hang), or after's error.
func floodIdle(addr, path string, n int, conns *[]net.Conn, after func() error) error {
	for i := range n {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			return fmt.Errorf("connection %d: %v", i, err)
		}
		*conns = append(*conns, c)
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
			return fmt.Errorf("connection %d: %v", i, err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return fmt.Errorf("connection %d: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("connection %d: %d", i, resp.StatusCode)
		}
		if err := after(); err != nil {
			return err
		}
	}
	return nil
}

// socketsOn counts the TCP connections the process pid holds open on
// the port it listens on at addr (its listening socket aside): the
// descriptors of /proc/pid/fd that are sockets whose local port is that
// port, as /proc/pid/net/tcp and tcp6 give them. A connection still in
// the listen backlog, not accepted, holds no descriptor and is not
// counted; one the process closed is not counted either, whatever its
// TCP state.
func socketsOn(pid int, addr string) (int, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	pn, err := strconv.Atoi(port)
	if err != nil {
		return 0, err
	}
	want := fmt.Sprintf(":%04X", pn)
	inodes := make(map[string]bool)
	for _, f := range []string{"tcp", "tcp6"} {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(raw), "\n")[1:] {
			fields := strings.Fields(line)
			// sl local_address rem_address st ... inode (the 10th)
			if len(fields) < 10 || !strings.HasSuffix(fields[1], want) || fields[3] == "0A" {
				continue
			}
			inodes[fields[9]] = true
		}
	}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(dir, fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if in, ok := strings.CutPrefix(target, "socket:["); ok && inodes[strings.TrimSuffix(in, "]")] {
			n++
		}
	}
	return n, nil
}

// TestServeSilentConnectionsDoNotShutOutProbes: with the probes'
// listener's budget (32 under a file limit of 256) filled by connections
// that send nothing, a probe is still answered, and by closing the
// connections silent longest for room, not by waiting for the server's
// header timeout to cut them. A review found 40 silent connections,
// reopened as they were cut, failing every /readyz with a 1 s timeout
// (and the manifest's 2 s liveness probe on /healthz with 70 under the
// default budget of 64): only keep-alive connections idle between two
// requests were closed for room, and a silent one held its place for the
// header timeout (5 s).
func TestServeSilentConnectionsDoNotShutOutProbes(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh to lower the file limit with")
	}
	const (
		nofile = 256
		silent = 40
		limit  = 32 // connlimit.Side(256, connlimit.Default(256))
	)
	args := []string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, nofile), binary(t), "serve",
		"--addr", "127.0.0.1:0", "--log-format", "json", "--health-addr", "127.0.0.1:0"}
	cmd := exec.Command("sh", args...)
	p := proctest.Start(t, cmd, "floodgate listening")
	svc := &service{Proc: p, url: "http://" + p.Record("floodgate listening")["addr"]}
	healthAddr := svc.addr(t, healthListening)
	for i := range silent {
		c, err := net.DialTimeout("tcp", healthAddr, 10*time.Second)
		if err != nil {
			t.Fatalf("silent connection %d: %v", i, err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for _, path := range []string{"/readyz", "/healthz"} {
		resp, err := client.Get("http://" + healthAddr + path)
		if err != nil {
			t.Fatalf("GET %s behind %d silent connections (a budget of %d): %v", path, silent, limit, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s behind %d silent connections: %d", path, silent, resp.StatusCode)
		}
	}
	if got := metricValue(t, svc.url, `floodgate_side_connections_idle_closed_total{listener="health"}`); got < 1 {
		t.Errorf(`floodgate_side_connections_idle_closed_total{listener="health"} = %v: no silent connection was closed for room (the probes waited for the header timeout)`, got)
	}
	if got := metricValue(t, svc.url, `floodgate_side_connections_idle{listener="health"}`); got != 0 {
		t.Errorf(`floodgate_side_connections_idle{listener="health"} = %v, want 0: silent connections are not keep-alive ones`, got)
	}
}
