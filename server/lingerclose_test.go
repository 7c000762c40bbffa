package server_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/server"
)

// TestEnginesAnswerOversizedBodiesWithConnectionClose: a client that
// asks to close the connection (Connection: close) and is still writing a
// body over MaxBodyBytes when the server answers 413 at the headers reads
// that answer, on both engines. net/http closed such a connection at once
// with the body unread (its own linger only ran when it, not the client,
// chose to close), so the kernel reset it and the client's write failed
// with "connection reset by peer" before it read the answer.
func TestEnginesAnswerOversizedBodiesWithConnectionClose(t *testing.T) {
	for _, engine := range []server.HTTPEngine{server.NetHTTP, server.FastHTTP} {
		t.Run(string(engine), func(t *testing.T) {
			e := serveEngine(t, engine, engineConfig, memStore(t), nil)
			sendOversizedClosing(t, func() (net.Conn, error) { return net.Dial("tcp", strings.TrimPrefix(e.url, "http://")) })
		})
	}
	// Over TLS, net/http's linger sends TLS's close_notify for the
	// shutting of its writing side.
	t.Run("net/http over TLS", func(t *testing.T) {
		e := start(t, engineConfig, memStore(t), func(o *server.Options) { o.MaxBodyBytes = 1024 })
		hs := httptest.NewUnstartedServer(e.srv)
		hs.StartTLS()
		defer hs.Close()
		conf := hs.Client().Transport.(*http.Transport).TLSClientConfig
		sendOversizedClosing(t, func() (net.Conn, error) { return tls.Dial("tcp", hs.Listener.Addr().String(), conf) })
	})
}

// sendOversizedClosing sends, on connections from dial, requests with a
// 3 MiB body and Connection: close, the whole of each before reading the
// answer, and fails t unless each is answered 413 body-too-large.
func sendOversizedClosing(t *testing.T, dial func() (net.Conn, error)) {
	t.Helper()
	const size = 3 << 20
	chunk := []byte(strings.Repeat(" ", 64<<10))
	for i := range 6 {
		conn, err := dial()
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
		head := fmt.Sprintf("POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", size)
		// As a client that sends its whole request before reading
		// the answer (Python's http.client, curl without Expect).
		_, werr := conn.Write([]byte(head))
		for sent := 0; werr == nil && sent < size; sent += len(chunk) {
			_, werr = conn.Write(chunk)
		}
		raw, rerr := io.ReadAll(conn)
		conn.Close()
		if werr != nil || rerr != nil || !strings.HasPrefix(string(raw), "HTTP/1.1 413 ") || !strings.Contains(string(raw), "body-too-large") {
			t.Fatalf("request %d: write %v, read %v, answer %.80q; want the 413 body-too-large", i, werr, rerr, raw)
		}
	}
}
