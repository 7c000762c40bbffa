package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// heldRequest is a POST whose body is sent but for its last byte: it
// holds its server's drain until finish sends that byte.
type heldRequest struct {
	conn net.Conn
	last byte
}

// holdRequest connects to addr and sends a POST of body to path, but for
// the body's last byte.
func holdRequest(t *testing.T, addr, path, body string) *heldRequest {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, addr, len(body))
	if _, err := io.WriteString(c, head+body[:len(body)-1]); err != nil {
		t.Fatal(err)
	}
	return &heldRequest{conn: c, last: body[len(body)-1]}
}

// holdAcceptedRequest is holdRequest on a connection the server has
// already answered a request on (GET /healthcheck, kept alive), so that
// the held request is in the server's hands, not in the listen backlog,
// whose connections a closing listener resets (envoy-compat closes its
// listeners at SIGTERM: a request sent just before could fail so on a
// loaded machine). The pause after it lets the server read the held
// request's head, making the connection active rather than idle.
func holdAcceptedRequest(t *testing.T, addr, path, body string) *heldRequest {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, "GET /healthcheck HTTP/1.1\r\nHost: %s\r\n\r\n", addr); err != nil {
		t.Fatal(err)
	}
	if resp := readAnswer(t, c, bufio.NewReader(c)); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthcheck before the held request: %d", resp.StatusCode)
	}
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, addr, len(body))
	if _, err := io.WriteString(c, head+body[:len(body)-1]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	return &heldRequest{conn: c, last: body[len(body)-1]}
}

// finish sends the body's last byte and returns the answer, its body read.
func (h *heldRequest) finish(t *testing.T) *http.Response {
	t.Helper()
	if _, err := h.conn.Write([]byte{h.last}); err != nil {
		t.Fatalf("finishing the held request: %v", err)
	}
	return readAnswer(t, h.conn, bufio.NewReader(h.conn))
}

// readAnswer reads one answer from c (a safety deadline of 30 s, never
// reached by a passing test) and its body.
func readAnswer(t *testing.T, c net.Conn, br *bufio.Reader) *http.Response {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatalf("reading the answer's body: %v", err)
	}
	resp.Body.Close()
	return resp
}

// refused reports whether a TCP connection to addr is refused.
func refused(addr string) bool {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return errors.Is(err, syscall.ECONNREFUSED)
	}
	c.Close()
	return false
}

// checkBody is a POST /v1/check of the built-in configuration.
const checkBody = `{"policy":"api","identity":{"user":"drain"}}`

// TestServeGRPCStopsAcceptingAfterDelay: at the end of --shutdown-delay
// serve's gRPC listener stops accepting with the HTTP one, while an HTTP
// request still holds the drain, as docs/operations.md says ("stop
// accepting, drain HTTP ..., then gRPC"). Before, gRPC took new
// connections and answered their calls until the HTTP drain was over (up
// to --drain-timeout: a minute here). The held request is still answered,
// with Connection: close, and serve exits cleanly.
func TestServeGRPCStopsAcceptingAfterDelay(t *testing.T) {
	dir := t.TempDir()
	writeFileAtomic(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")
	for _, engine := range []string{"net/http", "fasthttp"} {
		t.Run(engine, func(t *testing.T) {
			svc := startService(t, "--http-server", engine, "--grpc-addr", "127.0.0.1:0", "--envoy-config", dir,
				"--shutdown-delay", "1s", "--drain-timeout", "1m", "--read-timeout", "1m")
			httpAddr, grpcAddr := svc.url[len("http://"):], svc.addr(t, grpcListening)
			held := holdRequest(t, httpAddr, "/v1/check", checkBody)
			if err := svc.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the HTTP listener to stop accepting", func() bool { return refused(httpAddr) })
			waitFor(t, "the gRPC listener to stop accepting while an HTTP request drains", func() bool { return refused(grpcAddr) })
			resp := held.finish(t)
			if resp.StatusCode != http.StatusOK || !resp.Close {
				t.Errorf("the held request: %d, Connection %q; want 200 and close", resp.StatusCode, resp.Header.Get("Connection"))
			}
			select {
			case <-svc.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("serve still running 30 s after its last request was answered")
			}
			if err := svc.Err(); err != nil {
				t.Fatalf("serve exited with %v", err)
			}
		})
	}
}

// TestServeClosesConnectionsDuringDelay: from SIGTERM on, during
// --shutdown-delay, serve's answers carry Connection: close and it
// closes their connection, on both engines, so that keep-alive clients
// move to new connections (to other instances, once the endpoints are
// updated) before the listener closes; before, they stayed on the
// instance for the whole delay, and their idle connections were closed
// under the requests on their way when it stopped accepting.
func TestServeClosesConnectionsDuringDelay(t *testing.T) {
	for _, engine := range []string{"net/http", "fasthttp"} {
		t.Run(engine, func(t *testing.T) {
			svc := startService(t, "--http-server", engine, "--shutdown-delay", "1m")
			addr := svc.url[len("http://"):]
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			ask := func() *http.Response {
				t.Helper()
				req := fmt.Sprintf("POST /v1/check HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", addr, len(checkBody), checkBody)
				if _, err := io.WriteString(c, req); err != nil {
					t.Fatal(err)
				}
				return readAnswer(t, c, br)
			}
			if resp := ask(); resp.StatusCode != http.StatusOK || resp.Close {
				t.Fatalf("before SIGTERM: %d, Connection %q; want 200, kept alive", resp.StatusCode, resp.Header.Get("Connection"))
			}
			if err := svc.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "/readyz 503 draining", func() bool { code, _ := httpGet(t, svc.url+"/readyz"); return code == http.StatusServiceUnavailable })
			resp := ask()
			if resp.StatusCode != http.StatusOK || !resp.Close {
				t.Fatalf("during --shutdown-delay: %d, Connection %q; want 200 and close", resp.StatusCode, resp.Header.Get("Connection"))
			}
			if n, err := br.ReadByte(); err != io.EOF {
				t.Fatalf("after an answer with Connection: close, the connection gave %v, %v; want it closed (EOF)", n, err)
			}
			if refused(addr) {
				t.Fatal("the listener stopped accepting during a minute of --shutdown-delay")
			}
		})
	}
}

// TestEnvoyCompatStopsAcceptingAtSignal: at SIGTERM every listener of
// envoy-compat stops accepting, as docs/envoy.md says, while an HTTP
// request still drains: before, the gRPC listener took new connections
// until the HTTP drain was over (up to 10 s). The request in flight is
// answered, with Connection: close.
func TestEnvoyCompatStopsAcceptingAtSignal(t *testing.T) {
	rdb := redistest.Start(t)
	_, rt := compatRuntime(t, compatConfig)
	p := startCompat(t, append(rt, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+rdb.Addr, "CACHE_KEY_PREFIX=drain_")...)
	waitFor(t, "healthcheck OK", func() bool {
		code, body := httpGet(t, "http://"+p.http+"/healthcheck")
		return code == 200 && body == "OK"
	})
	held := holdAcceptedRequest(t, p.http, "/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"plan","value":"gold"}]}]}`)
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the HTTP listener to stop accepting", func() bool { return refused(p.http) })
	waitFor(t, "the gRPC listener to stop accepting while an HTTP request drains", func() bool { return refused(p.grpc) })
	waitFor(t, "the debug listener to stop accepting while an HTTP request drains", func() bool { return refused(p.debug) })
	resp := held.finish(t)
	if resp.StatusCode != http.StatusOK || !resp.Close {
		t.Errorf("the held request: %d, Connection %q; want 200 and close", resp.StatusCode, resp.Header.Get("Connection"))
	}
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("envoy-compat still running 30 s after its last request was answered")
	}
	if err := p.Err(); err != nil {
		t.Fatalf("envoy-compat exited with %v", err)
	}
}
