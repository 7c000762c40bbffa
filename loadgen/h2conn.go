package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2conn is one HTTP/2 connection over cleartext TCP (h2c with prior
// knowledge) carrying unary gRPC calls for several workers, the small
// client the raw gRPC sender needs on top of x/net's Framer and HPACK.
//
// A worker starts its call by appending HEADERS and DATA frames to a
// shared buffer under mu and waking the writer goroutine, which sends
// whatever accumulated in one write: with 16 workers on a connection, a
// write usually carries several requests. The reader goroutine reads the
// frames, decodes header blocks with the connection's HPACK decoder,
// collects each stream's answer and hands it to the waiting worker
// through the call's channel. In closed loop (a call with then) the
// reader starts the worker's next request itself instead, and writes the
// requests it started once it has handled every frame it has: a worker
// goroutine then wakes only when its chain ends (the run is over, an
// error, a timeout), and the writer goroutine only for requests the
// workers start.
//
// It follows the protocol's rules for a client: preface and SETTINGS,
// SETTINGS and PING acknowledged, the server's MAX_CONCURRENT_STREAMS
// (callers wait for a free stream, first come first served: a stream
// that ends goes to the longest waiting caller before a chained worker
// may start its next request on it), flow control both ways (large receive
// windows granted and replenished; DATA held back while the server's send
// windows are exhausted), odd stream IDs up to a last one after which the
// connection takes no new streams, GOAWAY (streams the server did not
// take fail; no new streams), RST_STREAM. Any connection error fails
// every call waiting on it; the connection is then closed and a new one
// dialled for the next call.
type h2conn struct {
	nc   net.Conn
	rfr  *http2.Framer  // read by readLoop only
	br   *bufio.Reader  // rfr's buffer, read by readLoop only
	dec  *hpack.Decoder // used by readLoop only, under mu
	quit chan struct{}  // closed when the connection fails or is closed
	wake chan struct{}  // tells writeLoop that pending has frames

	// unusable is set once the connection takes no new streams (failed,
	// closed, GOAWAY received or stream IDs used up).
	unusable atomic.Bool

	// wmu is held by the goroutine that takes pending and writes it, so
	// that writes leave in the order their frames were queued; it is
	// taken before mu.
	wmu sync.Mutex

	mu         sync.Mutex
	waiters    []*streamWaiter // callers waiting for a stream, oldest first
	granted    int             // streams handed to waiters not yet started
	reading    bool            // readLoop is handling a frame and sends pending itself
	wfr        *http2.Framer   // writes into pending, under mu
	pending    []byte          // frames waiting for writeLoop
	err        error           // why the connection ended; nil while it works
	draining   bool            // no new streams
	streams    map[uint32]*grpcCall
	nextID     uint32 // the next stream ID
	lastID     uint32 // the last stream ID this connection may use
	maxStreams uint32 // the server's SETTINGS_MAX_CONCURRENT_STREAMS
	sendWin    int64  // the connection's send window
	initWin    int64  // the server's SETTINGS_INITIAL_WINDOW_SIZE
	maxFrame   int64  // the server's SETTINGS_MAX_FRAME_SIZE
	blocked    []*grpcCall
	recvUsed   uint32 // DATA bytes received since the last connection WINDOW_UPDATE

	// The request's headers and the connection's HPACK encoder, used
	// under mu in the order the blocks are written, so that its dynamic
	// table matches the server's: after the first request a block is an
	// index per field.
	fields []hpack.HeaderField
	enc    *hpack.Encoder
	block  bytes.Buffer // the block being encoded

	hdrID   uint32    // the stream whose header block is being decoded
	hdrCall *grpcCall // its call (nil: none, or forgotten)
	hdrEnd  bool      // that block ends its stream
}

// streamWaiter is a caller of start waiting for a stream while the
// server's limit is reached. Its fields are written under the
// connection's mu; ready receives one signal when it is handed a stream
// (granted) or the connection takes no new streams.
type streamWaiter struct {
	ready   chan struct{}
	granted bool // a stream is kept for it, counted in the connection's granted
	woken   bool // out of the queue: granted, or the connection is gone
}

// errNoStreamSlot is start's error when ctx ends while the call waits
// for a stream: the request was not sent.
var errNoStreamSlot = errors.New("waited for a stream slot (the server's MAX_CONCURRENT_STREAMS, all in use on its connection): not sent")

// grpcCall is one worker's call, reused from one request to the next.
// Between start and the signal on done, its fields are the connection's,
// written under its mu; after the signal, the worker's.
type grpcCall struct {
	done chan struct{} // receives one signal per call started
	// then, when set, is asked under the connection's mu, by the
	// goroutine that finished the call without an error on the
	// connection's side, for the next request to start on it at once;
	// false wakes the worker instead. It stays across calls.
	then func(call *grpcCall) (msg []byte, ok bool)
	id   uint32

	status      int // the answer's :status, 0 if none
	grpcStatus  int // -1 if none
	grpcMessage string
	data        []byte // DATA received: the length-prefixed response message
	err         error  // the call failed on the connection's side
	unsent      []byte // DATA not yet sent for want of send window
	sendWin     int64  // the stream's send window
}

// signal tells the worker that call has finished. The channel has room:
// a call started is signalled once, and its worker takes the signal
// before it starts the next.
func (call *grpcCall) signal() {
	select {
	case call.done <- struct{}{}:
	default:
	}
}

// HTTP/2 limits of the raw client.
const (
	// h2RecvWindow is the receive window granted for each stream and for
	// the connection, so that the server never waits for a WINDOW_UPDATE.
	h2RecvWindow = 1 << 30
	// h2MaxMessage bounds a response's DATA (the gRPC prefix and message).
	h2MaxMessage = 64 << 10
	// h2MaxPending bounds the frames waiting for the writer: past it the
	// server is not reading and the connection is given up.
	h2MaxPending = 16 << 20
	// h2LastStreamID is the largest stream ID a client may use.
	h2LastStreamID = 1<<31 - 1
)

// errConnGone says that a connection takes no new streams; the caller
// gets or dials another.
var errConnGone = errors.New("loadgen: the HTTP/2 connection takes no new streams")

// errNotHTTP2 marks a server that does not speak HTTP/2 (an HTTP/1 one,
// say), as a gRPC service does.
var errNotHTTP2 = errors.New("not an HTTP/2 server")

// errClosedUnsent is the error of a call whose request was not wholly
// sent (DATA held back for want of send window) when the server closed
// the connection: the server could not decide it.
var errClosedUnsent = errors.New("connection closed before the request was wholly sent: not decided (not re-sent)")

// errConnClosed ends connections closed by the load generator.
var errConnClosed = errors.New("loadgen: connection closed")

// pendingWriter appends the write Framer's frames to the connection's
// pending buffer; it is used under the connection's mu.
type pendingWriter struct{ c *h2conn }

func (w pendingWriter) Write(p []byte) (int, error) {
	w.c.pending = append(w.c.pending, p...)
	return len(p), nil
}

// dialH2 connects to addr (over TLS with tlsConf, offering only h2),
// exchanges prefaces and SETTINGS and starts the connection's reader and
// writer on wg. Stream IDs go up to lastID. ctx bounds the dial and the
// handshakes.
func dialH2(ctx context.Context, addr string, tlsConf *tls.Config, lastID uint32, fields []hpack.HeaderField, wg *sync.WaitGroup) (*h2conn, error) {
	c, err := connectH2(ctx, addr, tlsConf, lastID, fields)
	if err != nil {
		return nil, err
	}
	wg.Add(2)
	go func() { defer wg.Done(); c.readLoop() }()
	go func() { defer wg.Done(); c.writeLoop() }()
	return c, nil
}

// connectH2 connects to addr (over TLS with tlsConf, offering only h2)
// and exchanges prefaces and SETTINGS, bounded by ctx; it starts nothing.
func connectH2(ctx context.Context, addr string, tlsConf *tls.Config, lastID uint32, fields []hpack.HeaderField) (*h2conn, error) {
	var nc net.Conn
	var err error
	if tlsConf != nil {
		tc := tlsConf.Clone()
		tc.NextProtos = []string{"h2"}
		nc, err = (&tls.Dialer{Config: tc}).DialContext(ctx, "tcp", addr)
		if err == nil && nc.(*tls.Conn).ConnectionState().NegotiatedProtocol != "h2" {
			nc.Close()
			return nil, fmt.Errorf("loadgen: %s did not agree to HTTP/2 over TLS (ALPN h2): %w", addr, errNotHTTP2)
		}
	} else {
		var d net.Dialer
		nc, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(aLongTimeAgo) })
	c, err := handshakeH2(nc, lastID, fields)
	if !stop() {
		err = ctx.Err() // the deadline was set: the connection is unusable
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

func handshakeH2(nc net.Conn, lastID uint32, fields []hpack.HeaderField) (*h2conn, error) {
	c := &h2conn{
		nc:         nc,
		fields:     fields,
		quit:       make(chan struct{}),
		wake:       make(chan struct{}, 1),
		streams:    make(map[uint32]*grpcCall),
		nextID:     1,
		lastID:     lastID,
		maxStreams: h2LastStreamID, // unlimited until the server says
		sendWin:    65535,          // the initial windows of RFC 9113
		initWin:    65535,
		maxFrame:   16384,
	}
	c.enc = hpack.NewEncoder(&c.block)
	c.dec = hpack.NewDecoder(4096, c.onField)
	c.dec.SetMaxStringLength(h2MaxMessage)
	c.wfr = http2.NewFramer(pendingWriter{c}, nil)
	c.br = bufio.NewReaderSize(nc, 32<<10)
	c.rfr = http2.NewFramer(nil, c.br)
	c.rfr.SetMaxReadFrameSize(16384) // the default we leave unchanged
	c.rfr.SetReuseFrames()

	c.pending = append(c.pending, http2.ClientPreface...)
	_ = c.wfr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2RecvWindow},
	)
	_ = c.wfr.WriteWindowUpdate(0, h2RecvWindow-65535)
	if _, err := nc.Write(c.pending); err != nil {
		return nil, err
	}
	c.pending = c.pending[:0]
	f, err := c.rfr.ReadFrame()
	if errors.Is(err, http2.ErrFrameTooLarge) {
		// An HTTP/1 server's answer, read as a frame header, announces
		// megabytes.
		return nil, fmt.Errorf("reading the server's SETTINGS: %w: %w", errNotHTTP2, err)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the server's SETTINGS: %w", err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		return nil, fmt.Errorf("the server started with %v, not SETTINGS: %w", f.Header().Type, errNotHTTP2)
	}
	if err := c.settings(sf); err != nil {
		return nil, err
	}
	return c, nil
}

// start opens a stream for call with the request's headers and the
// message (kept until sent: the caller leaves it alone until done),
// waiting for a free stream while the server's limit is reached, behind
// the callers already waiting. It returns errConnGone when the
// connection takes no new streams, an error wrapping errNoStreamSlot and
// ctx's error when ctx ends while waiting (the request was not sent).
func (c *h2conn) start(ctx context.Context, call *grpcCall, msg []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.canStartLocked() {
		c.startLocked(call, msg)
		return nil
	}
	var w *streamWaiter
	for {
		if c.err != nil || c.draining {
			c.passOn(w)
			return errConnGone
		}
		if w != nil && w.granted && uint32(len(c.streams)) < c.maxStreams {
			c.granted--
			c.startLocked(call, msg)
			return nil
		}
		// Queued, or queued again at the head when the server lowered
		// its limit after the stream was granted.
		if w == nil {
			w = &streamWaiter{ready: make(chan struct{}, 1)}
			c.waiters = append(c.waiters, w)
		} else {
			if w.granted {
				c.granted--
			}
			*w = streamWaiter{ready: w.ready}
			c.waiters = append([]*streamWaiter{w}, c.waiters...)
		}
		c.mu.Unlock()
		select {
		case <-w.ready:
			c.mu.Lock()
		case <-ctx.Done():
			c.mu.Lock()
			c.passOn(w)
			return fmt.Errorf("%w (%w)", errNoStreamSlot, ctx.Err())
		}
	}
}

// passOn takes w (nil: none) out of the queue, or hands the stream
// granted to it to the next waiter, under mu.
func (c *h2conn) passOn(w *streamWaiter) {
	switch {
	case w == nil:
	case !w.woken:
		for i, q := range c.waiters {
			if q == w {
				c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
				break
			}
		}
	case w.granted:
		w.granted = false
		c.granted--
		c.grantLocked()
	}
}

// grantLocked hands the free streams to the waiting callers, oldest
// first, under mu; when the connection takes no new streams, it wakes
// them all.
func (c *h2conn) grantLocked() {
	if len(c.waiters) == 0 {
		return
	}
	gone := c.err != nil || c.draining
	n := 0
	for _, w := range c.waiters {
		if !gone && uint32(len(c.streams)+c.granted) >= c.maxStreams {
			break
		}
		w.woken, w.granted = true, !gone
		if w.granted {
			c.granted++
		}
		w.ready <- struct{}{} // room for one: a waiter is woken once per queueing
		n++
	}
	clear(c.waiters[:n])
	c.waiters = c.waiters[n:]
}

// canStartLocked reports whether a new stream can start at once, under
// mu: none is waiting for one, and the server's limit leaves room.
func (c *h2conn) canStartLocked() bool {
	return c.err == nil && !c.draining && len(c.waiters) == 0 && uint32(len(c.streams)+c.granted) < c.maxStreams
}

// startLocked opens a stream for call with the request's headers and
// msg, under mu, when canStartLocked.
func (c *h2conn) startLocked(call *grpcCall, msg []byte) {
	id := c.nextID
	c.nextID += 2
	if c.nextID > c.lastID {
		c.draining = true
		c.unusable.Store(true)
		c.grantLocked() // the waiters go to another connection
	}
	*call = grpcCall{done: call.done, then: call.then, id: id, grpcStatus: -1, data: call.data[:0], sendWin: c.initWin, unsent: msg}
	c.streams[id] = call
	c.block.Reset()
	for _, f := range c.fields {
		_ = c.enc.WriteField(f) // writes to a bytes.Buffer
	}
	_ = c.wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.block.Bytes(), EndHeaders: true})
	if !c.sendData(call) {
		c.blocked = append(c.blocked, call)
	}
	c.flushLocked()
}

// cancel forgets call's stream, telling the server with RST_STREAM
// (CANCEL), or, when its answer has already been handed over, drains it.
func (c *h2conn) cancel(call *grpcCall) {
	c.mu.Lock()
	if c.streams[call.id] != call {
		c.mu.Unlock()
		<-call.done // handed over under mu: the signal is there
		return
	}
	c.forget(call)
	_ = c.wfr.WriteRSTStream(call.id, http2.ErrCodeCancel)
	c.flushLocked()
	c.closeIfIdle()
	c.mu.Unlock()
}

// forget removes call's stream, under mu.
func (c *h2conn) forget(call *grpcCall) {
	delete(c.streams, call.id)
	if call.unsent != nil {
		for i, b := range c.blocked {
			if b == call {
				c.blocked = append(c.blocked[:i], c.blocked[i+1:]...)
				break
			}
		}
		call.unsent = nil
	}
	c.grantLocked()
}

// finish hands call's outcome to its worker, under mu.
func (c *h2conn) finish(call *grpcCall, err error) {
	if call.unsent != nil {
		// The server answered before it had the whole request.
		_ = c.wfr.WriteRSTStream(call.id, http2.ErrCodeCancel)
		c.flushLocked()
	}
	c.forget(call)
	call.err = err
	if call.then != nil && err == nil && c.canStartLocked() {
		if msg, ok := call.then(call); ok {
			c.startLocked(call, msg)
			return
		}
	}
	call.signal()
}

// closeIfIdle closes a draining connection once its last stream ended,
// under mu.
func (c *h2conn) closeIfIdle() {
	if c.draining && len(c.streams) == 0 {
		c.failLocked(errConnClosed)
	}
}

// sendData writes as much of call's unsent DATA as the send windows
// allow, under mu, and reports whether all of it went.
func (c *h2conn) sendData(call *grpcCall) bool {
	for len(call.unsent) > 0 {
		n := min(int64(len(call.unsent)), c.sendWin, call.sendWin, c.maxFrame)
		if n <= 0 {
			return false
		}
		last := n == int64(len(call.unsent))
		_ = c.wfr.WriteData(call.id, last, call.unsent[:n])
		c.sendWin -= n
		call.sendWin -= n
		call.unsent = call.unsent[n:]
	}
	call.unsent = nil
	return true
}

// sendBlocked sends the DATA held back once windows open, under mu.
func (c *h2conn) sendBlocked() {
	kept := c.blocked[:0]
	for _, call := range c.blocked {
		if !c.sendData(call) {
			kept = append(kept, call)
		}
	}
	clear(c.blocked[len(kept):])
	c.blocked = kept
	c.flushLocked()
}

// flushLocked wakes the writer when frames are pending, under mu; it
// gives the connection up when the server has stopped reading.
func (c *h2conn) flushLocked() {
	if len(c.pending) > h2MaxPending {
		c.failLocked(errors.New("the server is not reading its connection"))
		return
	}
	if len(c.pending) > 0 && !c.reading {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// fail ends the connection with err.
func (c *h2conn) fail(err error) {
	c.mu.Lock()
	c.failLocked(err)
	c.mu.Unlock()
}

// failLocked ends the connection, under mu: every call on it fails with
// err, waiting callers are woken, the socket is closed.
func (c *h2conn) failLocked(err error) {
	c.end(err, err)
}

// end ends the connection as failLocked does, under mu: the calls whose
// request was wholly sent fail with sent, those with DATA still held
// back for want of send window with unsent.
func (c *h2conn) end(sent, unsent error) {
	if c.err != nil {
		return
	}
	c.err, c.draining = sent, true
	c.unusable.Store(true)
	for _, call := range c.streams {
		call.err = sent
		if call.unsent != nil {
			call.err = unsent
		}
		call.unsent = nil
		call.signal()
	}
	clear(c.streams)
	c.blocked = nil
	c.grantLocked()
	close(c.quit)
	c.nc.Close()
}

// writeLoop sends the pending frames, all that accumulated in one write.
func (c *h2conn) writeLoop() {
	var buf []byte
	for {
		select {
		case <-c.quit:
			return
		case <-c.wake:
		}
		// Let the workers already runnable (answers often arrive several
		// at once) append their requests first, so that one write
		// carries them all.
		runtime.Gosched()
		if err := c.writePending(&buf); err != nil {
			c.fail(fmt.Errorf("writing to the server: %w", err))
			return
		}
	}
}

// writePending sends the pending frames in one write, swapping the
// pending buffer with *buf.
func (c *h2conn) writePending(buf *[]byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	*buf, c.pending = c.pending, (*buf)[:0]
	c.mu.Unlock()
	if len(*buf) == 0 {
		return nil
	}
	_, err := c.nc.Write(*buf)
	return err
}

// frameBuffered reports whether a whole frame is in the read buffer, so
// that reading it will not wait for the server; readLoop only.
func (c *h2conn) frameBuffered() bool {
	if c.br.Buffered() < 9 {
		return false
	}
	h, _ := c.br.Peek(3) // buffered: does not read
	return c.br.Buffered() >= 9+int(h[0])<<16|int(h[1])<<8|int(h[2])
}

// readLoop reads and handles frames until the connection ends.
//
// Frames queued while it handles a frame (a chained call's next request,
// acknowledgements, window updates) are not handed to writeLoop: it
// writes them itself, all at once, before it would wait for the server.
func (c *h2conn) readLoop() {
	var buf []byte
	for {
		f, err := c.rfr.ReadFrame()
		if err != nil {
			if c.streamError(err) {
				continue
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
				// Worded as the HTTP client's: the calls sent may have
				// been decided.
				c.mu.Lock()
				c.end(fmt.Errorf("%w: %w", errNothingRead, err), fmt.Errorf("%w: %w", errClosedUnsent, err))
				c.mu.Unlock()
				return
			}
			c.fail(fmt.Errorf("reading from the server: %w", err))
			return
		}
		c.mu.Lock()
		c.reading = true
		err = c.handle(f)
		c.reading = false
		if err != nil {
			c.failLocked(err)
		}
		flush := err == nil && len(c.pending) > 0 && !c.frameBuffered()
		c.mu.Unlock()
		if err != nil {
			return
		}
		if flush {
			if err := c.writePending(&buf); err != nil {
				c.fail(fmt.Errorf("writing to the server: %w", err))
				return
			}
		}
	}
}

// streamError fails the stream of a frame malformed for that stream only,
// and reports whether err was such.
func (c *h2conn) streamError(err error) bool {
	var se http2.StreamError
	if !errors.As(err, &se) {
		return false
	}
	c.mu.Lock()
	if call := c.streams[se.StreamID]; call != nil {
		_ = c.wfr.WriteRSTStream(se.StreamID, se.Code)
		c.flushLocked()
		c.finish(call, fmt.Errorf("stream error: %w", se))
		c.closeIfIdle()
	}
	c.mu.Unlock()
	return true
}

// handle acts on one frame from the server, under mu. An error is a
// connection error.
func (c *h2conn) handle(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.DataFrame:
		// Every DATA frame counts against the connection's window, those
		// of forgotten streams too.
		if c.recvUsed += f.Length; c.recvUsed >= h2RecvWindow/2 {
			_ = c.wfr.WriteWindowUpdate(0, c.recvUsed)
			c.recvUsed = 0
			c.flushLocked()
		}
		call := c.streams[f.StreamID]
		if call == nil {
			return nil
		}
		if len(call.data)+len(f.Data()) > h2MaxMessage {
			_ = c.wfr.WriteRSTStream(call.id, http2.ErrCodeCancel)
			c.flushLocked()
			c.finish(call, fmt.Errorf("response longer than %d bytes", h2MaxMessage))
			c.closeIfIdle()
			return nil
		}
		call.data = append(call.data, f.Data()...)
		if f.StreamEnded() {
			c.finish(call, nil)
			c.closeIfIdle()
		}
	case *http2.HeadersFrame:
		c.hdrID, c.hdrEnd = f.StreamID, f.StreamEnded()
		c.hdrCall = c.streams[f.StreamID]
		return c.headerBlock(f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.ContinuationFrame:
		c.hdrCall = c.streams[c.hdrID] // nil if canceled since the HEADERS
		return c.headerBlock(f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.RSTStreamFrame:
		if call := c.streams[f.StreamID]; call != nil {
			c.finish(call, fmt.Errorf("stream reset by the server (%v)", f.ErrCode))
			c.closeIfIdle()
		}
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		if err := c.settings(f); err != nil {
			return err
		}
		c.sendBlocked()
	case *http2.PingFrame:
		if !f.IsAck() {
			_ = c.wfr.WritePing(true, f.Data)
			c.flushLocked()
		}
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			if c.sendWin += int64(f.Increment); c.sendWin > h2LastStreamID {
				return errors.New("the server's WINDOW_UPDATE overflows the connection's window")
			}
		} else if call := c.streams[f.StreamID]; call != nil {
			call.sendWin += int64(f.Increment)
		}
		c.sendBlocked()
	case *http2.GoAwayFrame:
		c.draining = true
		c.unusable.Store(true)
		for id, call := range c.streams {
			if id > f.LastStreamID {
				c.finish(call, fmt.Errorf("the server is going away (GOAWAY, %v) and did not take the request", f.ErrCode))
			}
		}
		c.grantLocked()
		c.closeIfIdle()
	case *http2.PushPromiseFrame:
		return errors.New("PUSH_PROMISE although push is disabled")
	}
	return nil // PRIORITY and unknown frame types are ignored
}

// settings applies the server's SETTINGS and acknowledges them, under mu.
func (c *h2conn) settings(f *http2.SettingsFrame) error {
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingMaxConcurrentStreams:
			c.maxStreams = s.Val
			c.grantLocked()
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - c.initWin
			c.initWin = int64(s.Val)
			for _, call := range c.streams {
				call.sendWin += delta
			}
		case http2.SettingMaxFrameSize:
			c.maxFrame = int64(s.Val)
		case http2.SettingHeaderTableSize:
			// The encoder's table may not outgrow the server's; a
			// smaller size is announced in the next block.
			c.enc.SetMaxDynamicTableSizeLimit(s.Val)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("the server's SETTINGS: %w", err)
	}
	_ = c.wfr.WriteSettingsAck()
	c.flushLocked()
	return nil
}

// headerBlock decodes a fragment of a header block, under mu; at the end
// of a block that ends its stream, the call is finished. Blocks of
// forgotten streams are decoded too, for the decoder's table.
func (c *h2conn) headerBlock(frag []byte, end bool) error {
	if _, err := c.dec.Write(frag); err != nil {
		return fmt.Errorf("decoding the server's headers: %w", err)
	}
	if !end {
		return nil
	}
	if err := c.dec.Close(); err != nil {
		return fmt.Errorf("decoding the server's headers: %w", err)
	}
	if call := c.hdrCall; call != nil && c.hdrEnd {
		c.finish(call, nil)
		c.closeIfIdle()
	}
	c.hdrCall = nil
	return nil
}

// onField records the fields of an answer the load generator reads; it
// is the HPACK decoder's emit function.
func (c *h2conn) onField(f hpack.HeaderField) {
	call := c.hdrCall
	if call == nil {
		return
	}
	switch f.Name {
	case ":status":
		if f.Value == "200" {
			call.status = 200
		} else if n, err := strconv.Atoi(f.Value); err == nil {
			call.status = n
		}
	case "grpc-status":
		if f.Value == "0" {
			call.grpcStatus = 0
		} else if n, err := strconv.Atoi(f.Value); err == nil && n >= 0 {
			call.grpcStatus = n
		}
	case "grpc-message":
		call.grpcMessage = f.Value
	}
}
