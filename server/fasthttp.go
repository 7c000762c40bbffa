package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/servelog"
)

// HTTPEngine names the HTTP/1.x server implementation Serve runs.
type HTTPEngine string

// The HTTP engines.
const (
	// NetHTTP is the standard library's net/http server (the default).
	NetHTTP HTTPEngine = "net/http"
	// FastHTTP is github.com/valyala/fasthttp: POST /v1/check,
	// /v1/check/batch and /v1/peek are served natively, at a third of
	// net/http's cost per request, every other endpoint through the
	// net/http handler (fasthttpadaptor). HTTP/1.1 only; see
	// docs/operations.md for what differs.
	FastHTTP HTTPEngine = "fasthttp"
)

// ParseHTTPEngine returns the engine named s ("" is NetHTTP).
func ParseHTTPEngine(s string) (HTTPEngine, error) {
	switch e := HTTPEngine(s); e {
	case "", NetHTTP:
		return NetHTTP, nil
	case FastHTTP:
		return e, nil
	}
	return "", fmt.Errorf("server: HTTP engine %q: want %s or %s", s, NetHTTP, FastHTTP)
}

// fastReadBufferSize is fasthttp's buffer per connection, which bounds
// the request line and headers together (as MaxHeaderBytes bounds them on
// net/http): a request whose headers do not fit is answered 431.
const fastReadBufferSize = 64 << 10

// serveFast is Serve on fasthttp.
func (s *Server) serveFast(ctx context.Context, ln net.Listener) error {
	var conns connSet
	fs := &fasthttp.Server{
		Handler:      s.fastHandler(),
		ErrorHandler: s.fastError,
		// As Serve's http.Server: fasthttp's ReadTimeout bounds the
		// header and the body together.
		ReadTimeout:    s.opts.ReadTimeout,
		WriteTimeout:   s.opts.WriteTimeout,
		IdleTimeout:    2 * time.Minute,
		ReadBufferSize: fastReadBufferSize,
		// fasthttp reads a whole body before the handler runs: it stops
		// at MaxBodyBytes (fastError answers the same 413 problem as the
		// handlers), so a slow client holds no more than that. (A 256 KiB
		// margin let each connection hold about 600 KB.)
		MaxRequestBodySize:           int(min(s.opts.MaxBodyBytes, 1<<30)),
		NoDefaultServerHeader:        true, // net/http sends none
		NoDefaultContentType:         true, // nor a Content-Type it was not given
		DisablePreParseMultipartForm: true,
		CloseOnShutdown:              true, // Connection: close once shut down (and before: closeWhileDraining)
		Logger:                       s.serverLog(),
		ConnState:                    conns.track,
	}
	if hook := s.opts.ConnState; hook != nil {
		fs.ConnState = func(c net.Conn, st fasthttp.ConnState) {
			conns.track(c, st)
			hook(c, netHTTPState(st))
		}
	}
	// fasthttp's shutdown closes the listeners its Serve has registered
	// and returns at once when there are none: a shutdown that came
	// before the serving goroutine reached fs.Serve (a context that ended
	// as Serve was called) would leave that Serve to start afterwards and
	// serve for ever. The shutdown therefore waits until fs.Serve accepts
	// (it registers the listener first) or has returned.
	sl := &acceptSignal{Listener: ln, accepting: make(chan struct{}), retrying: func(err error, wait time.Duration) {
		s.warn.Warn(servelog.KindAccept, "accepting a connection failed; retrying", "error", err, "retry_in", wait)
	}}
	exited := make(chan struct{})
	serve := func() error {
		defer close(exited)
		return fs.Serve(sl)
	}
	shutdown := func(ctx context.Context) error {
		select {
		case <-sl.accepting:
		case <-exited:
		}
		return fs.ShutdownWithContext(ctx)
	}
	return s.serveAndDrain(ctx, serve, shutdown, conns.closeAll)
}

// acceptSignal is a listener that closes accepting when Accept is first
// called, and retries an accept that failed for want of file descriptors.
type acceptSignal struct {
	net.Listener
	once      sync.Once
	accepting chan struct{}
	retrying  func(err error, wait time.Duration) // told of each retry
}

// Accept implements net.Listener. Its connections linger on close after
// an error answer (lingerConn). An accept failing for want of file
// descriptors (EMFILE, ENFILE) is retried after a pause growing from 5 ms
// to 1 s, as net/http's Serve does: fasthttp's returns on every error but
// a timeout, and serve then ended, its other listeners with it, as soon as
// the process ran out of descriptors.
func (l *acceptSignal) Accept() (net.Conn, error) {
	l.once.Do(func() { close(l.accepting) })
	var wait time.Duration
	c, err := l.Listener.Accept()
	for err != nil && (errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)) {
		wait = min(max(2*wait, 5*time.Millisecond), time.Second)
		l.retrying(err, wait)
		time.Sleep(wait)
		c, err = l.Listener.Accept()
	}
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*tls.Conn); ok {
		// Embedding *tls.Conn keeps its Handshake and ConnectionState,
		// by which fasthttp knows the request came over TLS.
		return &lingerTLSConn{Conn: tc, linger: lingering{time: lingerTime}}, nil
	}
	return &lingerConn{Conn: c, linger: lingering{time: lingerTime}}, nil
}

// Lingering after an error answer: how long, and how much of what the
// client still sends is read and dropped.
const (
	lingerTime  = 500 * time.Millisecond
	lingerBytes = 1 << 20
)

// lingerConn is a connection that fasthttp closes after an answer sent
// before the request was read to its end (413 at the headers for a body
// over MaxBodyBytes, 431, 400). Closed at once with the client's body
// unread, the kernel resets it, and a client still sending that body
// (Go's http.Client among them) gets the reset ("broken pipe") instead of
// the answer. Marked by lingerOnClose, its first Close shuts the writing
// side (the answer is out) and lingers (lingerBeforeClose); a second
// Close, as closeAll makes at the drain timeout while fasthttp's lingers,
// closes at once.
type lingerConn struct {
	net.Conn
	linger lingering
}

func (c *lingerConn) lingerOnClose() { c.linger.marked.Store(true) }

// Close implements net.Conn.
func (c *lingerConn) Close() error {
	if c.linger.start() {
		if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
			lingerBeforeClose(c.Conn, cw.CloseWrite, c.linger.time)
		}
	}
	return c.Conn.Close()
}

// lingerTLSConn is lingerConn over TLS.
type lingerTLSConn struct {
	*tls.Conn
	linger lingering
}

func (c *lingerTLSConn) lingerOnClose() { c.linger.marked.Store(true) }

// Close implements net.Conn.
func (c *lingerTLSConn) Close() error {
	if c.linger.start() {
		lingerBeforeClose(c.Conn, c.Conn.CloseWrite, c.linger.time)
	}
	return c.Conn.Close()
}

// lingering is when and how long a connection lingers on close.
type lingering struct {
	marked, started atomic.Bool
	time            time.Duration // lingerTime
}

// start reports whether a Close is to linger: the first one after
// lingerOnClose.
func (l *lingering) start() bool { return l.marked.Load() && l.started.CompareAndSwap(false, true) }

// lingerBeforeClose shuts c's writing side and reads and drops what the
// peer still sends, until it closes or d has passed. After lingerBytes it
// stops reading and waits out d, as net/http waits: closed while the
// peer still sends, the connection is reset, and a reset that comes
// before the peer has read the answer loses it.
func lingerBeforeClose(c net.Conn, closeWrite func() error, d time.Duration) {
	if closeWrite() != nil {
		return
	}
	deadline := time.Now().Add(d)
	if c.SetReadDeadline(deadline) != nil {
		return
	}
	if n, err := io.Copy(io.Discard, io.LimitReader(c, lingerBytes)); n == lingerBytes && err == nil {
		time.Sleep(time.Until(deadline))
	}
}

// fastHandler serves POST /v1/check, /v1/check/batch and /v1/peek on
// fasthttp's request (refusing Hosts not allowed and browser requests of
// untrusted pages as the net/http handler does), and every other request
// through the net/http handler.
func (s *Server) fastHandler() fasthttp.RequestHandler {
	// The request's context is fasthttp's, which ends when the server
	// shuts down: requests in flight then must finish (Serve's drain), as
	// on net/http.
	slow := fasthttpadaptor.NewFastHTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mux.ServeHTTP(w, r.WithContext(context.WithoutCancel(r.Context())))
	}))
	// A request target with a fragment ("/v1/check#x", which no client
	// sends) is no endpoint to net/http, whose ServeMux sees the '#' in
	// the path; fasthttp, and its adaptor, cut the fragment off and served
	// /v1/check. It is answered the 404 net/http answers, after the same
	// Host and cross-origin rules.
	fragment := fasthttpadaptor.NewFastHTTPHandler(s.refuseHost(s.refuseCrossOrigin(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.EscapedPath()
		if u, err := url.ParseRequestURI(r.RequestURI); err == nil {
			path = u.EscapedPath() // the fragment kept, as net/http keeps it
		}
		writeProblem(w, notFound(path, publicEndpoints(s.opts.SeparateAdmin, s.opts.MetricsAdminOnly)))
	}))))
	return func(ctx *fasthttp.RequestCtx) {
		defer s.recoverFast(ctx)
		// While s drains, every answer closes its connection, as
		// ServeHTTP's on net/http (fasthttp's CloseOnShutdown only does
		// from the end of ShutdownDelay). Checked once the handler has
		// answered: the flag is atomic, the response ctx's own.
		defer s.closeWhileDraining(ctx)
		if s.fastRefuse(ctx) {
			return
		}
		if bytes.IndexByte(ctx.Request.Header.RequestURI(), '#') >= 0 {
			fragment(ctx)
			return
		}
		if ctx.IsPost() {
			if route, query, ok := fastRoute(ctx.Request.Header.RequestURI()); ok {
				if err := s.fastHost(ctx); err != nil {
					s.fastFail(ctx, err)
					return
				}
				if err := s.fastCrossOrigin(ctx); err != nil {
					s.fastFail(ctx, err)
					return
				}
				if err := s.noConfiguration(); err != nil {
					s.fastFail(ctx, err)
					return
				}
				switch route {
				case "/v1/check":
					s.fastSingle(ctx, route, query, decodeCheck)
					return
				case "/v1/peek":
					s.fastSingle(ctx, route, query, decodePeek)
					return
				case "/v1/check/batch":
					s.fastBatch(ctx, route)
					return
				}
			}
		}
		slow(ctx)
	}
}

// closeWhileDraining has ctx's answer carry Connection: close, and its
// connection closed once written, while s drains.
func (s *Server) closeWhileDraining(ctx *fasthttp.RequestCtx) {
	if s.draining.Load() {
		ctx.SetConnectionClose()
	}
}

// fastRefuse answers, as net/http answers them before any handler runs,
// the requests fasthttp would serve that net/http refuses: a protocol
// version other than HTTP/1.x (505) and an Expect other than 100-continue
// (417). It reports whether it answered; the connection then closes, as
// on net/http, and nothing is decided or counted. (A Transfer-Encoding of
// identity, which net/http answers 501, cannot be told: fasthttp drops
// the header as it parses it; see docs/operations.md.)
func (s *Server) fastRefuse(ctx *fasthttp.RequestCtx) bool {
	h := &ctx.Request.Header
	switch {
	case !bytes.HasPrefix(h.Protocol(), http1Bytes):
		ctx.Error("505 HTTP Version Not Supported: unsupported protocol version", http.StatusHTTPVersionNotSupported)
	case unmetExpectation(h.PeekBytes(expectBytes)):
		ctx.Response.ResetBody()
		ctx.SetStatusCode(http.StatusExpectationFailed)
	default:
		return false
	}
	ctx.SetConnectionClose()
	return true
}

func unmetExpectation(expect []byte) bool {
	return len(expect) > 0 && !bytes.EqualFold(bytes.TrimSpace(expect), continueBytes)
}

var (
	http1Bytes    = []byte("HTTP/1.")
	expectBytes   = []byte(fasthttp.HeaderExpect)
	continueBytes = []byte("100-continue")
)

// fastRoute splits an origin-form request target into its path, when it
// is one of the natively served ones, and its query: the path and raw
// query net/http's request would have. Any other target (absolute-form, a
// path ServeMux would clean or redirect) goes to the net/http handler.
func fastRoute(uri []byte) (route, query string, ok bool) {
	path := uri
	var q []byte
	for i, c := range uri {
		if c == '?' {
			path, q = uri[:i], uri[i+1:]
			break
		}
	}
	for _, r := range [...]string{"/v1/check", "/v1/peek", "/v1/check/batch"} {
		if string(path) == r {
			return r, string(q), true
		}
	}
	return "", "", false
}

// fastBody returns the request's body, or the problem of a body over
// MaxBodyBytes (the connection then closes, as net/http's does).
func (s *Server) fastBody(ctx *fasthttp.RequestCtx) ([]byte, error) {
	if ces := ctx.Request.Header.PeekAll(fasthttp.HeaderContentEncoding); len(ces) > 0 {
		// Every line of the header, as on net/http.
		if err := contentEncoding(string(bytes.Join(ces, []byte{','}))); err != nil {
			return nil, err
		}
	}
	body := ctx.PostBody()
	if int64(len(body)) > s.opts.MaxBodyBytes {
		ctx.SetConnectionClose()
		return nil, s.bodyTooLarge()
	}
	return body, nil
}

// fastSingle is single on fasthttp.
func (s *Server) fastSingle(ctx *fasthttp.RequestCtx, route, query string, decode func(*config.Config, []byte) (check, error)) {
	body, err := s.fastBody(ctx)
	if err != nil {
		s.fastFail(ctx, err)
		return
	}
	var layers [4]LayerResult
	resp, status, err := s.decideOne(context.Background(), body, query, route, decode, layers[:])
	if err != nil {
		s.fastFail(ctx, err)
		return
	}
	h := &ctx.Response.Header
	h.SetContentTypeBytes(contentTypeJSONBytes)
	var buf [4 * 20]byte
	vals, ends := appendRateHeaders(buf[:0], resp.Limit, resp.Remaining, resp.Reset, resp.Allowed, resp.RetryAfterMS)
	start := 0
	for i, end := range ends {
		if end > start {
			h.SetCanonical(rateHeaderNamesBytes[i], vals[start:end])
		}
		start = end
	}
	if resp.Degraded {
		h.Set(DegradedHeader, resp.degradedHeader())
	}
	ctx.SetStatusCode(status)
	// The answer goes into the response's own body buffer, which fasthttp
	// pools with its capacity: once warm, no growth and no copy. (Appending
	// to a fresh buffer grew it seven times per answer.)
	r := &ctx.Response
	r.SwapBody(appendCheckResponse(r.SwapBody(nil)[:0], &resp))
}

// fastBatch is handleBatch on fasthttp.
func (s *Server) fastBatch(ctx *fasthttp.RequestCtx, route string) {
	body, err := s.fastBody(ctx)
	if err != nil {
		s.fastFail(ctx, err)
		return
	}
	if err := batchQuery(string(ctx.URI().QueryString())); err != nil {
		s.fastFail(ctx, err)
		return
	}
	out, err := s.decideBatch(context.Background(), body, route)
	if err != nil {
		s.fastFail(ctx, err)
		return
	}
	ctx.Response.Header.SetContentTypeBytes(contentTypeJSONBytes)
	ctx.SetStatusCode(http.StatusOK)
	encodeJSON(ctx, out)
}

// fastFail is fail on fasthttp.
func (s *Server) fastFail(ctx *fasthttp.RequestCtx, err error) {
	p, retry := s.failure(context.Background(), err)
	s.fastProblem(ctx, p)
	if retry {
		ctx.Response.Header.Set("Retry-After", "1")
	}
}

// fastProblem is writeProblem on fasthttp.
func (s *Server) fastProblem(ctx *fasthttp.RequestCtx, p *problemError) {
	ctx.Response.ResetBody()
	ctx.Response.Header.SetContentType("application/problem+json")
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetStatusCode(p.status)
	encodeProblem(ctx, p)
}

// fastError answers the requests fasthttp could not read: a body over
// fasthttp's limit with the problem the handlers answer a body over
// MaxBodyBytes with, anything else as net/http answers it (plain text,
// "431 Request Header Fields Too Large" or "400 Bad Request"; a request
// not read within ReadTimeout gets "408 Request Timeout", where net/http
// closes silently). The connection closes after it.
func (s *Server) fastError(ctx *fasthttp.RequestCtx, err error) {
	// fasthttp closes the connection after this answer, with whatever
	// of the request is left unread.
	if lc, ok := ctx.Conn().(interface{ lingerOnClose() }); ok {
		lc.lingerOnClose()
	}
	var small *fasthttp.ErrSmallBuffer
	var netErr net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		p := s.bodyTooLarge()
		s.metrics.rejected.WithLabelValues(p.kind).Inc()
		s.fastProblem(ctx, p)
	case errors.As(err, &small):
		ctx.Error("431 Request Header Fields Too Large", http.StatusRequestHeaderFieldsTooLarge)
	case errors.As(err, &netErr) && netErr.Timeout():
		ctx.Error("408 Request Timeout", http.StatusRequestTimeout)
	default:
		ctx.Error("400 Bad Request", http.StatusBadRequest)
	}
}

// recoverFast answers a request whose handler panicked with 500 and closes
// its connection, where fasthttp would let the panic end the process
// (net/http logs it and closes the connection).
func (s *Server) recoverFast(ctx *fasthttp.RequestCtx) {
	if v := recover(); v != nil {
		if v == http.ErrAbortHandler {
			ctx.SetConnectionClose()
			return
		}
		s.log.Error("panic serving a request", "path", string(ctx.Path()), "panic", fmt.Sprint(v))
		ctx.Error("500 Internal Server Error", http.StatusInternalServerError)
		ctx.SetConnectionClose()
	}
}

var (
	contentTypeJSONBytes = []byte("application/json")
	rateHeaderNamesBytes = func() (b [4][]byte) {
		for i, n := range rateHeaderNames {
			b[i] = []byte(n)
		}
		return b
	}()
)

// netHTTPState returns net/http's name of fasthttp's connection state st.
func netHTTPState(st fasthttp.ConnState) http.ConnState {
	switch st {
	case fasthttp.StateNew:
		return http.StateNew
	case fasthttp.StateActive:
		return http.StateActive
	case fasthttp.StateIdle:
		return http.StateIdle
	case fasthttp.StateHijacked:
		return http.StateHijacked
	}
	return http.StateClosed
}

// connSet tracks a fasthttp server's open connections, so that they can
// be closed after the drain timeout (fasthttp's shutdown leaves them).
type connSet struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// track is fasthttp.Server.ConnState.
func (c *connSet) track(conn net.Conn, st fasthttp.ConnState) {
	switch st {
	case fasthttp.StateNew:
		c.mu.Lock()
		if c.conns == nil {
			c.conns = make(map[net.Conn]struct{})
		}
		c.conns[conn] = struct{}{}
		c.mu.Unlock()
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		c.mu.Lock()
		delete(c.conns, conn)
		c.mu.Unlock()
	}
}

// closeAll closes every connection still open.
func (c *connSet) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for conn := range c.conns {
		_ = conn.Close()
	}
}
