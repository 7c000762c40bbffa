package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestEnvoyCompatMaxConnections: envoy-compat had no connection cap (116
// idle keep-alive connections under ulimit -n 128 took every listener and
// the Redis dials down, and idle ones were cut only after 2 minutes).
// With FLOODGATE_MAX_CONNECTIONS=4, four idle keep-alive connections fill the
// budget; a new client's /healthcheck and decision are still answered,
// the connection idle longest being closed to make room, and the budget
// is in the metrics.
func TestEnvoyCompatMaxConnections(t *testing.T) {
	rdb := redistest.Start(t)
	_, rt := compatRuntime(t, compatConfig)
	p := startCompat(t, append(rt, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+rdb.Addr, "CACHE_KEY_PREFIX=conns_", "FLOODGATE_MAX_CONNECTIONS=4")...)
	// Each check on a connection of its own, closed after: no pooled
	// connection takes a place.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	get := func(path string) (int, error) {
		resp, err := hc.Get("http://" + p.http + path)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	waitFor(t, "healthcheck OK", func() bool { code, err := get("/healthcheck"); return err == nil && code == 200 })

	// Four keep-alive clients, each idle after one request.
	idle := make([]*bufio.Reader, 4)
	conns := make([]net.Conn, 4)
	for i := range idle {
		c, err := net.Dial("tcp", p.http)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		conns[i], idle[i] = c, bufio.NewReader(c)
		if _, err := io.WriteString(c, "GET /healthcheck HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(idle[i], nil)
		if err != nil {
			t.Fatalf("keep-alive client %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}

	if code, err := get("/healthcheck"); err != nil || code != 200 {
		t.Fatalf("/healthcheck beyond the cap: %d, %v", code, err)
	}
	resp, err := hc.Post("http://"+p.http+"/json", "application/json",
		strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"route","value":"/api/v1/items"}]}]}`))
	if err != nil {
		t.Fatalf("/json beyond the cap: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"OK"`) {
		t.Fatalf("/json beyond the cap: %d %s", resp.StatusCode, b)
	}

	// Idle clients were closed to make room: the ones idle longest,
	// which under load need not be the first connected (the server marks
	// each idle after its answer, in its own goroutine's order). The read
	// deadline bounds a hang: before, they stayed open 2 minutes.
	var closed atomic.Int32
	var wg sync.WaitGroup
	for i := range conns {
		_ = conns[i].SetReadDeadline(time.Now().Add(10 * time.Second))
		wg.Go(func() {
			if _, err := idle[i].ReadByte(); errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
				closed.Add(1)
			}
		})
	}
	wg.Wait()
	if closed.Load() == 0 {
		t.Errorf("none of the four idle clients was closed to make room")
	}

	_, metrics := httpGet(t, "http://"+p.debug+"/metrics")
	for _, want := range []string{"floodgate_connections_max 4", `floodgate_connections_open{listener="http"}`, "floodgate_connections_idle_closed_total"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// isReset reports whether err is a connection reset by the peer.
func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && strings.Contains(op.Err.Error(), "reset")
}
