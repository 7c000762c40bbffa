package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/proctest"
	"github.com/floodgate-rl/floodgate/server"
)

// shutdownWait bounds every wait of the shutdown tests: far longer than
// any of them takes, far shorter than the drain timeouts that must not
// be what ends them.
const shutdownWait = time.Minute

// drainTimedOut is what Serve logs when the drain timeout is reached with
// connections still open, before closing them.
const drainTimedOut = "drain timeout reached: closing the connections still open"

// bothEngines are the HTTP engines Serve runs, by subtest name.
var bothEngines = []struct {
	name   string
	engine server.HTTPEngine
}{{"nethttp", server.NetHTTP}, {"fasthttp", server.FastHTTP}}

// rawCheck is POST /v1/check for user on the wire, with extra header
// lines (each ending in CRLF).
func rawCheck(user, extra string) string {
	body := check("api", user)
	return fmt.Sprintf("POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s",
		len(body), extra, body)
}

// dialEngine opens a TCP connection to e, closed when the test ends.
func dialEngine(t *testing.T, e *engineEnv) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(shutdownWait)); err != nil {
		t.Fatal(err)
	}
	return conn
}

// writeRaw writes s on conn.
func writeRaw(t *testing.T, conn net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(conn, s); err != nil {
		t.Fatalf("writing %.40q: %v", s, err)
	}
}

// readAnswer reads one response from br, body included.
func readAnswer(t *testing.T, br *bufio.Reader, what string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: reading the body: %v", what, err)
	}
	return resp, string(b)
}

// closedByPeer reports whether err is the server closing the connection:
// an end of file or a reset (when it closed with bytes unread).
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// expectClosed reads from br (conn's reader) until the server closes
// conn, and fails t if anything arrives instead or it stays open for
// shutdownWait.
func expectClosed(t *testing.T, conn net.Conn, br *bufio.Reader, what string) {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(shutdownWait)); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(br)
	if len(got) > 0 || (err != nil && !closedByPeer(err)) {
		t.Fatalf("%s: read %q, %v; want the connection closed by the server, with nothing more", what, got, err)
	}
}

// expectServeReturned waits for Serve to return after e.cancel and fails
// t unless it returned nil within shutdownWait.
func expectServeReturned(t *testing.T, e *engineEnv) {
	t.Helper()
	select {
	case err := <-e.done:
		close(e.done)
		if err != nil {
			t.Fatalf("Serve after the shutdown: %v", err)
		}
	case <-time.After(shutdownWait):
		t.Fatalf("Serve had not returned %v after the shutdown began", shutdownWait)
	}
}

// waitNotAccepting dials e until a connection is refused: the listener
// is closed, and the server is past its shutdown delay, draining.
func waitNotAccepting(t *testing.T, e *engineEnv) {
	t.Helper()
	addr := strings.TrimPrefix(e.url, "http://")
	for end := time.Now().Add(shutdownWait); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			return
		}
		conn.Close()
	}
	t.Fatalf("still accepting connections %v after the shutdown began", shutdownWait)
}

// sendShortBody sends a request's headers with Expect: 100-continue
// and, once the server has answered 100 Continue (it read the headers and
// is reading the body), part of its body.
func sendShortBody(t *testing.T, conn net.Conn, br *bufio.Reader) {
	t.Helper()
	writeRaw(t, conn, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Content-Length: 100\r\nExpect: 100-continue\r\n\r\n")
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
		t.Fatalf("after Expect: 100-continue: %q %v", line, err)
	}
	if blank, err := br.ReadString('\n'); err != nil || blank != "\r\n" {
		t.Fatalf("100 Continue ends with %q %v", blank, err)
	}
	writeRaw(t, conn, `{"policy":"api","identity":`)
}

// sendFirst sends a whole request on conn and reads its answer, which
// must keep the connection.
func sendFirst(t *testing.T, conn net.Conn, br *bufio.Reader) {
	t.Helper()
	writeRaw(t, conn, rawCheck("first", ""))
	if resp, body := readAnswer(t, br, "first request"); resp.StatusCode != 200 || resp.Close {
		t.Fatalf("first request: %d close=%v %s, want 200 on a kept connection", resp.StatusCode, resp.Close, body)
	}
}

// TestShutdownClosesUnfinishedRequests: on both engines, a connection
// whose request has not all arrived when the shutdown begins is closed by
// the server, without an answer, and Serve returns nil, with a drain
// timeout of 200ms and a ReadTimeout of an hour (so the read timeout is
// not what closes it). A body short of its Content-Length, which the
// server is reading (it answered 100 Continue), is a request in flight:
// it is waited for until the drain timeout, which the log reports, and
// only then cut. Headers without their end may instead be closed at once
// as an idle connection (net/http's and fasthttp's own rules: a
// keep-alive connection whose next request is still arriving, a new
// connection whose first request is late): either way it is closed and
// does not keep Serve from returning.
func TestShutdownClosesUnfinishedRequests(t *testing.T) {
	cases := []struct {
		name string
		// send sends a request that stops short.
		send func(t *testing.T, conn net.Conn, br *bufio.Reader)
		// inFlight: the request is being read, so that only the
		// drain timeout ends it.
		inFlight bool
	}{
		{name: "headers unfinished", send: func(t *testing.T, conn net.Conn, _ *bufio.Reader) {
			writeRaw(t, conn, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Le")
		}},
		{name: "body short", send: sendShortBody, inFlight: true},
		{name: "keep-alive then headers unfinished", send: func(t *testing.T, conn net.Conn, br *bufio.Reader) {
			sendFirst(t, conn, br)
			writeRaw(t, conn, "POST /v1/check HTTP/1.1\r\nHost: x\r\n")
		}},
		{name: "keep-alive then body short", inFlight: true, send: func(t *testing.T, conn net.Conn, br *bufio.Reader) {
			sendFirst(t, conn, br)
			sendShortBody(t, conn, br)
		}},
	}
	for _, eng := range bothEngines {
		for _, c := range cases {
			t.Run(eng.name+"/"+strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
				var logs proctest.Buffer
				e := serveEngine(t, eng.engine, engineConfig, memStore(t), func(o *server.Options) {
					o.DrainTimeout = 200 * time.Millisecond
					o.ReadTimeout = time.Hour
					o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
				})
				conn := dialEngine(t, e)
				br := bufio.NewReader(conn)
				c.send(t, conn, br)
				e.cancel()
				expectClosed(t, conn, br, "unfinished request at shutdown")
				expectServeReturned(t, e)
				if c.inFlight && !strings.Contains(logs.String(), drainTimedOut) {
					t.Errorf("no %q in the log:\n%s", drainTimedOut, logs.String())
				}
			})
		}
	}
}

// TestShutdownClosesIdleKeepAlive: on both engines, a keep-alive
// connection that was answered and then sent nothing is closed at
// shutdown, and Serve returns nil: with a drain timeout of an hour, the
// idle connection is not waited for.
func TestShutdownClosesIdleKeepAlive(t *testing.T) {
	for _, eng := range bothEngines {
		t.Run(eng.name, func(t *testing.T) {
			e := serveEngine(t, eng.engine, engineConfig, memStore(t), func(o *server.Options) { o.DrainTimeout = time.Hour })
			conn := dialEngine(t, e)
			br := bufio.NewReader(conn)
			writeRaw(t, conn, rawCheck("idle", ""))
			if resp, body := readAnswer(t, br, "request before the shutdown"); resp.StatusCode != 200 || resp.Close {
				t.Fatalf("request before the shutdown: %d close=%v %s, want 200 on a kept connection", resp.StatusCode, resp.Close, body)
			}
			e.cancel()
			expectClosed(t, conn, br, "idle keep-alive connection at shutdown")
			expectServeReturned(t, e)
		})
	}
}

// TestShutdownKeepAliveRequestWhileDraining: on both engines, while a
// decision is in flight holding the drain (and the listener refuses new
// connections), a request sent on a keep-alive connection that was idle
// is either answered with Connection: close or finds its connection
// closed, never kept; the decision in flight is answered with
// Connection: close too, its connection is then closed, and Serve returns
// nil.
func TestShutdownKeepAliveRequestWhileDraining(t *testing.T) {
	for _, eng := range bothEngines {
		t.Run(eng.name, func(t *testing.T) {
			st := newGatedStore(t)
			defer st.open()
			e := serveEngine(t, eng.engine, engineConfig, st, func(o *server.Options) { o.DrainTimeout = time.Hour })
			// The keep-alive connection, answered once (no decision:
			// the store's gate is for the request in flight).
			kept := dialEngine(t, e)
			keptR := bufio.NewReader(kept)
			writeRaw(t, kept, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			if resp, body := readAnswer(t, keptR, "request before the shutdown"); resp.StatusCode != 200 || resp.Close {
				t.Fatalf("request before the shutdown: %d close=%v %s, want 200 on a kept connection", resp.StatusCode, resp.Close, body)
			}
			// The decision in flight.
			busy := dialEngine(t, e)
			busyR := bufio.NewReader(busy)
			writeRaw(t, busy, rawCheck("busy", ""))
			<-st.entered
			e.cancel()
			waitNotAccepting(t, e)

			_, err := io.WriteString(kept, rawCheck("late", ""))
			if err == nil {
				_, err = keptR.Peek(1)
			}
			switch {
			case err == nil:
				resp, body := readAnswer(t, keptR, "request on a keep-alive connection while draining")
				if resp.StatusCode != 200 || !resp.Close {
					t.Fatalf("request on a keep-alive connection while draining: %d close=%v %s, want 200 with Connection: close",
						resp.StatusCode, resp.Close, body)
				}
				expectClosed(t, kept, keptR, "keep-alive connection after its answer while draining")
				t.Log("the request while draining was answered with Connection: close")
			case closedByPeer(err):
				t.Logf("the request while draining found its connection closed: %v", err)
			default:
				t.Fatalf("request on a keep-alive connection while draining: %v, want an answer or the connection closed", err)
			}

			st.open()
			resp, body := readAnswer(t, busyR, "decision in flight at shutdown")
			if resp.StatusCode != 200 || !strings.Contains(body, `"allowed":true`) || !resp.Close {
				t.Fatalf("decision in flight at shutdown: %d close=%v %s, want an allowed decision with Connection: close",
					resp.StatusCode, resp.Close, body)
			}
			expectClosed(t, busy, busyR, "connection of the decision answered while draining")
			expectServeReturned(t, e)
		})
	}
}

// TestServeReturnsWhenCancelledBeforeServing: a Serve whose context has
// already ended (a SIGTERM as the process starts) shuts down at once and
// returns, on both engines, leaving its listener closed. fasthttp's
// ShutdownWithContext does nothing when its Serve has not yet registered
// the listener, and that Serve, started a moment later, then serves for
// ever: on one processor the serving goroutine only runs once Serve
// waits for it, after the shutdown, so the old code hung here every time.
func TestServeReturnsWhenCancelledBeforeServing(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for _, eng := range bothEngines {
		t.Run(eng.name, func(t *testing.T) {
			holder, err := config.NewHolder(parse(t, engineConfig))
			if err != nil {
				t.Fatal(err)
			}
			lim, err := floodgate.New(memStore(t), floodgate.Options{Prefix: uniquePrefix(t), Clock: fixedClock})
			if err != nil {
				t.Fatal(err)
			}
			srv, err := server.New(lim, holder, server.Options{Registerer: prometheus.NewRegistry(), HTTPEngine: eng.engine})
			if err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ctx, ln) }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Serve: %v", err)
				}
			case <-time.After(shutdownWait):
				t.Fatalf("Serve had not returned %v after being called with an ended context", shutdownWait)
			}
			if conn, err := net.Dial("tcp", ln.Addr().String()); err == nil {
				conn.Close()
				t.Error("the listener still accepts connections after Serve returned")
			}
		})
	}
}
