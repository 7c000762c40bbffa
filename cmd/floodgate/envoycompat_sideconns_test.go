package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/proctest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestEnvoyCompatDebugFloodBounded runs envoy-compat under a file
// descriptor limit of 256 (FLOODGATE_MAX_CONNECTIONS' default is then
// 128, and the debug listener's budget 32 of the reserve) and opens 150
// idle keep-alive connections to its debug port: the process never holds
// more than 33 of them (32, and the one accepted waiting for its place),
// each is answered (the one idle longest closed to make room), and
// afterwards /metrics there and /healthcheck and a decision on the HTTP
// port are answered. Before, the debug listener had no cap (serve's
// admin and probes' listeners got theirs first): a flood held a
// descriptor per connection, out of the reserve Redis and the runtime
// directory's reads need.
func TestEnvoyCompatDebugFloodBounded(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh to lower the file limit with")
	}
	if _, err := os.Stat("/proc/self/net/tcp"); err != nil {
		t.Skip("no /proc/net/tcp to count the process's connections with")
	}
	const (
		nofile = 256
		flood  = 150
		limit  = 32 // connlimit.Side(256, connlimit.Default(256))
	)
	rdb := redistest.Start(t)
	_, rt := compatRuntime(t, compatConfig)
	const listening = "floodgate envoy-compat listening"
	cmd := exec.Command("sh", "-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, nofile), binary(t), "envoy-compat")
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1", "GRPC_HOST=127.0.0.1",
		"PORT=0", "GRPC_PORT=0", "DEBUG_PORT=0", "LOG_FORMAT=json", "LOG_LEVEL=info",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + rdb.Addr, "CACHE_KEY_PREFIX=debugflood_"}, rt...)
	p := proctest.Start(t, cmd, listening)
	rec := p.Record(listening)
	pid := cmd.Process.Pid // sh execs envoy-compat: the same process

	var most int
	conns := make([]net.Conn, 0, flood)
	var once sync.Once
	closeAll := func() {
		once.Do(func() {
			for _, c := range conns {
				_ = c.Close()
			}
		})
	}
	t.Cleanup(closeAll)
	err := floodIdle(rec["debug"], "/rlconfig", flood, &conns, func() error {
		n, err := socketsOn(pid, rec["debug"])
		most = max(most, n)
		return err
	})
	if err != nil {
		t.Errorf("%d idle connections to the debug port under a file limit of %d: %v\n%s", flood, nofile, err, tail(p.Logs()))
	}
	if most > limit+1 {
		t.Errorf("the process held %d connections on the debug port during a flood of %d, want at most %d (its limit, and one accepted waiting for a place)", most, flood, limit+1)
	}
	// Fresh connections, while the flood's are still open.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(url string) string {
		t.Helper()
		resp, err := client.Get(url)
		if err != nil {
			t.Fatalf("GET %s with %d idle connections on the debug port: %v\n%s", url, flood, err, tail(p.Logs()))
		}
		body := readAll(resp)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s with %d idle connections on the debug port: %d %s", url, flood, resp.StatusCode, body)
		}
		return body
	}
	metrics := get("http://" + rec["debug"] + "/metrics")
	get("http://" + rec["http"] + "/healthcheck")
	for _, want := range []string{fmt.Sprintf(`floodgate_side_connections_max{listener="debug"} %d`, limit), `floodgate_side_connections_idle_closed_total{listener="debug"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	resp, err := client.Post("http://"+rec["http"]+"/json", "application/json",
		strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"route","value":"/api/v1/items"}]}]}`))
	if err != nil {
		t.Fatalf("/json with the debug port flooded: %v", err)
	}
	if body := readAll(resp); resp.StatusCode != 200 || !strings.Contains(body, `"OK"`) {
		t.Fatalf("/json with the debug port flooded: %d %s", resp.StatusCode, body)
	}
	if strings.Contains(p.Logs(), "too many open files") {
		t.Errorf("the process ran out of file descriptors:\n%s", tail(p.Logs()))
	}
}

// readAll reads and closes resp's body.
func readAll(resp *http.Response) string {
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
