package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httputil"
	"strconv"
	"syscall"
	"time"
)

// rawWorker speaks HTTP/1.1 on a keep-alive connection of its own, for
// plain http targets when no Options.HTTPClient is given: a request is one
// write of a prepared head and body, an answer one buffered read, with no
// allocation when the answer has a Content-Length. That costs the load
// generator a fraction of net/http's client, whose generality (proxies,
// redirects, connection pools shared by goroutines) a closed-loop worker
// with one connection does not need. Anything unexpected closes the
// connection; the next request opens a new one.
//
// A request is sent once. Before a kept-alive connection is used again,
// it is checked for a close or reset from the server waiting to be read
// (as net/http's client learns it from its idle reader), and replaced if
// so; a connection that closes after the request was written fails the
// request, which the server may have decided.
type rawWorker struct {
	s    *httpSender
	addr string
	head []byte // request line and headers up to "Content-Length: "

	conn     net.Conn
	br       *bufio.Reader
	ctx      context.Context // the context whose end aborts conn's I/O
	unhook   func() bool     // stops that
	body     []byte
	req      []byte
	answer   []byte
	degraded bool // the last answer carried DegradedHeader
}

// aLongTimeAgo is a deadline in the past: I/O on a connection given it
// fails at once.
var aLongTimeAgo = time.Unix(1, 0)

func newRawWorker(s *httpSender, host, requestURI string) *rawWorker {
	head := "POST " + requestURI + " HTTP/1.1\r\nHost: " + host + "\r\nUser-Agent: floodgate-loadgen\r\nContent-Type: application/json\r\nContent-Length: "
	return &rawWorker{s: s, addr: host, head: []byte(head)}
}

func (w *rawWorker) send(ctx context.Context, id int) (verdict, error) {
	if err := ctx.Err(); err != nil {
		return verdict{}, err
	}
	s := w.s
	w.body = append(w.body[:0], s.head...)
	w.body = append(w.body, s.idHead...)
	w.body = strconv.AppendInt(w.body, int64(id), 10)
	w.body = append(w.body, '"')
	w.body = append(w.body, s.tail...)
	w.req = append(w.req[:0], w.head...)
	w.req = strconv.AppendInt(w.req, int64(len(w.body)), 10)
	w.req = append(w.req, "\r\n\r\n"...)
	w.req = append(w.req, w.body...)

	if w.conn != nil && peerClosed(w.conn) {
		w.drop() // closed by the server while kept alive: nothing sent on it
	}
	status, answer, err := w.exchange(ctx)
	if err != nil {
		w.drop()
		return verdict{}, err
	}
	v, err := s.decide(status, answer)
	if err == nil && w.degraded {
		v.degraded = true
	}
	return v, err
}

// errNothingRead marks a connection that closed after the request was
// written and before the first byte of the answer (the raw gRPC client's
// too, for the calls sent on a connection the server closed).
var errNothingRead = errors.New("connection closed before an answer: the request was sent and may have been decided (not re-sent)")

// exchange writes w.req and reads the answer's status and body, and sets
// w.degraded to whether it carried DegradedHeader.
func (w *rawWorker) exchange(ctx context.Context) (int, []byte, error) {
	w.degraded = false
	if w.conn == nil {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", w.addr)
		if err != nil {
			return 0, nil, err
		}
		w.conn = conn
		if w.br == nil {
			w.br = bufio.NewReaderSize(conn, 4096)
		} else {
			w.br.Reset(conn)
		}
		w.ctx = nil
	}
	if w.ctx != ctx {
		if w.unhook != nil {
			w.unhook()
		}
		conn := w.conn
		w.unhook = context.AfterFunc(ctx, func() { _ = conn.SetDeadline(aLongTimeAgo) })
		w.ctx = ctx
	}
	if _, err := w.conn.Write(w.req); err != nil {
		return 0, nil, fmt.Errorf("writing the request: %w", err)
	}
	line, err := w.br.ReadSlice('\n')
	if err != nil {
		if len(line) == 0 && (err == io.EOF || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET)) {
			return 0, nil, fmt.Errorf("%w: %w", errNothingRead, err)
		}
		return 0, nil, fmt.Errorf("reading the status line: %w", err)
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, nil, fmt.Errorf("malformed status line %q", clip(line))
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, nil, fmt.Errorf("malformed status line %q", clip(line))
	}
	length, chunked, closing := int64(-1), false, false
	for {
		line, err := w.br.ReadSlice('\n')
		if err != nil {
			return 0, nil, fmt.Errorf("reading the headers: %w", err)
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, nil, fmt.Errorf("malformed header %q", clip(line))
		}
		value = bytes.TrimSpace(value)
		switch {
		case asciiEqualFold(name, "Content-Length"):
			if length, err = strconv.ParseInt(string(value), 10, 64); err != nil || length < 0 {
				return 0, nil, fmt.Errorf("malformed Content-Length %q", clip(value))
			}
		case asciiEqualFold(name, "Transfer-Encoding"):
			chunked = asciiEqualFold(value, "chunked")
		case asciiEqualFold(name, "Connection"):
			closing = asciiEqualFold(value, "close")
		case asciiEqualFold(name, DegradedHeader):
			w.degraded = true
		}
	}
	const limit = 64 << 10
	w.answer = w.answer[:0]
	var body io.Reader
	switch {
	case chunked:
		body = httputil.NewChunkedReader(w.br)
	case length >= 0:
		body = io.LimitReader(w.br, length)
		if length <= limit {
			w.answer = growTo(w.answer, int(length))
			if _, err := io.ReadFull(w.br, w.answer); err != nil {
				return 0, nil, fmt.Errorf("reading the answer: %w", err)
			}
			body = nil
		}
	default:
		body, closing = w.br, true // the answer ends with the connection
	}
	if body != nil {
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(io.LimitReader(body, limit)); err != nil {
			return 0, nil, fmt.Errorf("reading the answer: %w", err)
		}
		if _, err := io.Copy(io.Discard, body); err != nil && !closing {
			return 0, nil, fmt.Errorf("reading the answer: %w", err)
		}
		w.answer = append(w.answer, buf.Bytes()...)
	}
	if chunked {
		// The chunks end at the last, empty one; trailer fields and an
		// empty line follow.
		for {
			line, err := w.br.ReadSlice('\n')
			if err != nil {
				return 0, nil, fmt.Errorf("reading the trailer: %w", err)
			}
			if len(bytes.TrimRight(line, "\r\n")) == 0 {
				break
			}
		}
	}
	if closing {
		w.drop()
	}
	return status, w.answer, nil
}

// drop closes the connection; the next request opens a new one.
func (w *rawWorker) drop() {
	if w.unhook != nil {
		w.unhook()
		w.unhook = nil
	}
	if w.conn != nil {
		w.conn.Close()
		w.conn = nil
	}
	w.ctx = nil
}

func (w *rawWorker) close() { w.drop() }

func growTo(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// asciiEqualFold reports whether b is s, ignoring the case of ASCII
// letters.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	lower := func(c byte) byte {
		if 'A' <= c && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}
	for i := range b {
		if lower(b[i]) != lower(s[i]) {
			return false
		}
	}
	return true
}
