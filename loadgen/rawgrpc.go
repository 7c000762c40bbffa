package loadgen

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// rawGRPCSender calls ShouldRateLimit with the load generator's own small
// gRPC client (h2conn) over Options.Connections connections, worker i on
// connection i mod Connections: the request's headers are encoded by
// each connection's HPACK encoder (indexed after the first request, as
// Envoy's and grpc-go's clients send them), its message written by hand around the identity, the answer's
// overall_code read without decoding the whole message. A connection that
// ends is replaced by a new one at the next request.
type rawGRPCSender struct {
	addr   string
	tls    *tls.Config         // nil: plain TCP
	lastID uint32              // the last stream ID of a connection
	fields []hpack.HeaderField // the request's headers
	ids    *identities
	// The constant parts of the request message: the domain field, the
	// descriptor entry's key field, the hits_addend field (empty for a
	// cost of 1, the default).
	domain, key, hits []byte

	slots []h2slot
	next  int

	wg     sync.WaitGroup // the connections' goroutines
	mu     sync.Mutex
	conns  []*h2conn // the connections opened, to close at the end
	closed bool
}

// h2slot holds the connection a group of workers shares.
type h2slot struct {
	c  atomic.Pointer[h2conn]
	mu sync.Mutex // held while dialling
}

func newRawGRPCSender(o Options, host string, ids *identities, tlsConf *tls.Config) (*rawGRPCSender, error) {
	s := &rawGRPCSender{addr: host, lastID: h2LastStreamID, ids: ids, slots: make([]h2slot, o.Connections), tls: tlsConf}
	scheme := "http"
	if tlsConf != nil {
		scheme = "https"
	}
	if o.lastStreamID != 0 {
		s.lastID = o.lastStreamID
	}
	s.fields = []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: scheme},
		{Name: ":path", Value: rlspb.RateLimitService_ShouldRateLimit_FullMethodName},
		{Name: ":authority", Value: host},
		{Name: "content-type", Value: "application/grpc"},
		{Name: "te", Value: "trailers"},
		{Name: "user-agent", Value: "floodgate-loadgen"},
	}
	if o.GRPCDeadline > 0 {
		s.fields = append(s.fields, hpack.HeaderField{Name: "grpc-timeout", Value: grpcTimeout(o.GRPCDeadline)})
	}
	// The first block of a connection carries every field as a literal.
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range s.fields {
		if err := enc.WriteField(f); err != nil {
			return nil, err
		}
	}
	if block.Len() > 16384 {
		return nil, fmt.Errorf("%w: target %q: host too long", ErrInvalidOptions, o.Target)
	}
	s.domain = appendStringField(nil, 1, o.Domain)
	s.key = appendStringField(nil, 1, o.IdentityKey)
	if o.Cost != 1 {
		s.hits = protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), uint64(o.Cost))
	}
	return s, nil
}

// grpcTimeout is d as gRPC's grpc-timeout header writes it: at most
// eight digits and a unit, the finest unit that holds d (rounded up, so
// that the deadline sent is never shorter than d).
func grpcTimeout(d time.Duration) string {
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Nanosecond, "n"}, {time.Microsecond, "u"}, {time.Millisecond, "m"}, {time.Second, "S"}, {time.Minute, "M"}, {time.Hour, "H"}} {
		n := d / u.unit
		if d%u.unit != 0 {
			n++
		}
		if n <= 99_999_999 {
			return strconv.FormatInt(int64(n), 10) + u.name
		}
	}
	return "99999999H"
}

// appendStringField appends field num of type string, omitted when empty
// as proto3 does.
func appendStringField(b []byte, num protowire.Number, v string) []byte {
	if v == "" {
		return b
	}
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), v)
}

// appendRequest appends the length-prefixed gRPC message of a
// RateLimitRequest{domain, descriptors: [{entries: [{key, identity}]}],
// hits_addend}, field by field as proto.Marshal orders them.
func (s *rawGRPCSender) appendRequest(b []byte, identity string) []byte {
	entry := len(s.key)
	if identity != "" {
		entry += protowire.SizeTag(2) + protowire.SizeBytes(len(identity))
	}
	desc := protowire.SizeTag(1) + protowire.SizeBytes(entry)
	size := len(s.domain) + protowire.SizeTag(2) + protowire.SizeBytes(desc) + len(s.hits)
	b = append(b, 0) // not compressed
	b = binary.BigEndian.AppendUint32(b, uint32(size))
	b = append(b, s.domain...)
	b = protowire.AppendVarint(protowire.AppendTag(b, 2, protowire.BytesType), uint64(desc))
	b = protowire.AppendVarint(protowire.AppendTag(b, 1, protowire.BytesType), uint64(entry))
	b = append(b, s.key...)
	b = appendStringField(b, 2, identity)
	return append(b, s.hits...)
}

func (s *rawGRPCSender) worker() worker {
	slot := &s.slots[s.next%len(s.slots)]
	s.next++
	return &rawGRPCWorker{s: s, slot: slot, call: grpcCall{done: make(chan struct{}, 1)}}
}

// conn returns the slot's connection, dialling a new one when it has none
// that takes new streams.
func (s *rawGRPCSender) conn(ctx context.Context, slot *h2slot) (*h2conn, error) {
	if c := slot.c.Load(); c != nil && !c.unusable.Load() {
		return c, nil
	}
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if c := slot.c.Load(); c != nil && !c.unusable.Load() {
		return c, nil
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, errConnClosed
	}
	c, err := dialH2(ctx, s.addr, s.tls, s.lastID, s.fields, &s.wg)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	kept := s.conns[:0]
	for _, old := range s.conns {
		if !old.isClosed() {
			kept = append(kept, old)
		}
	}
	clear(s.conns[len(kept):])
	s.conns = append(kept, c)
	s.mu.Unlock()
	slot.c.Store(c)
	return c, nil
}

// isClosed reports whether the connection has ended.
func (c *h2conn) isClosed() bool {
	select {
	case <-c.quit:
		return true
	default:
		return false
	}
}

func (s *rawGRPCSender) close() error {
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for _, c := range conns {
		c.fail(errConnClosed)
	}
	s.wg.Wait()
	return nil
}

// rawGRPCWorker keeps its request message and call from one request to
// the next.
type rawGRPCWorker struct {
	s    *rawGRPCSender
	slot *h2slot
	msg  []byte
	call grpcCall
	ch   *chain // set in closed loop: answers start the next request
}

// chain makes the worker's answers start its next requests on the same
// connection from the connection's reader, without waking the worker.
func (w *rawGRPCWorker) chain(ch *chain) {
	w.ch = ch
	w.call.then = w.then
}

// then is the call's then in closed loop: an answer that is allowed or
// denied is recorded and the next request built; anything else goes to
// the worker.
func (w *rawGRPCWorker) then(call *grpcCall) ([]byte, bool) {
	v, err := call.result()
	if err != nil {
		return nil, false
	}
	id, ok := w.ch.next(v)
	if !ok {
		return nil, false
	}
	w.msg = w.s.appendRequest(w.msg[:0], w.s.ids.string(id))
	return w.msg, true
}

func (w *rawGRPCWorker) send(ctx context.Context, id int) (verdict, error) {
	if err := ctx.Err(); err != nil {
		return verdict{}, err
	}
	w.msg = w.s.appendRequest(w.msg[:0], w.s.ids.string(id))
	done := w.call.done
	var c *h2conn
	for attempt := 1; ; attempt++ {
		var err error
		if c, err = w.s.conn(ctx, w.slot); err != nil {
			return verdict{}, err
		}
		err = c.start(ctx, &w.call, w.msg)
		if err == nil {
			break
		}
		if !errors.Is(err, errConnGone) || attempt == 3 {
			return verdict{}, err
		}
	}
	// The channel, not the field: a chained call's fields are rewritten
	// by the connection's reader meanwhile.
	select {
	case <-done:
	case <-ctx.Done():
		c.cancel(&w.call)
		return verdict{}, ctx.Err()
	}
	return w.call.result()
}

func (w *rawGRPCWorker) close() {}

// result reads a finished call's outcome as the grpc-go client path does:
// OK allowed, OVER_LIMIT denied, anything else an error; degraded when
// its response_headers_to_add hold DegradedHeader.
func (call *grpcCall) result() (verdict, error) {
	if call.err != nil {
		return verdict{}, call.err
	}
	if call.grpcStatus < 0 {
		if call.status != 200 {
			return verdict{}, fmt.Errorf("HTTP status %d without grpc-status", call.status)
		}
		return verdict{}, errors.New("answer without grpc-status")
	}
	if call.grpcStatus != 0 {
		// A status error, as grpc-go's client returns: the same text, and
		// status.Code reads its code (Preflight does).
		return verdict{}, status.Error(codes.Code(call.grpcStatus), decodeGRPCMessage(call.grpcMessage))
	}
	if call.status != 200 {
		return verdict{}, fmt.Errorf("HTTP status %d", call.status)
	}
	code, degraded, err := readResponse(call.data)
	if err != nil {
		return verdict{}, err
	}
	switch c := rlspb.RateLimitResponse_Code(code); c {
	case rlspb.RateLimitResponse_OK:
		return verdict{allowed: true, degraded: degraded}, nil
	case rlspb.RateLimitResponse_OVER_LIMIT:
		return verdict{degraded: degraded}, nil
	default:
		return verdict{}, fmt.Errorf("overall_code %v", c)
	}
}

// readResponse reads field 1 (overall_code) of the length-prefixed
// RateLimitResponse in data, absent 0 (UNKNOWN), and whether one of its
// field 3 (response_headers_to_add) entries is DegradedHeader, skipping
// the rest.
func readResponse(data []byte) (code int32, degraded bool, err error) {
	if len(data) < 5 {
		return 0, false, fmt.Errorf("response of %d bytes, not a gRPC message", len(data))
	}
	if data[0] != 0 {
		return 0, false, errors.New("compressed response (none was asked for)")
	}
	if n := binary.BigEndian.Uint32(data[1:5]); uint64(n) != uint64(len(data)-5) {
		return 0, false, fmt.Errorf("response message of %d bytes announced, %d received", n, len(data)-5)
	}
	b := data[5:]
	var c uint64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, false, fmt.Errorf("malformed response: %w", protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			c, n = protowire.ConsumeVarint(b)
		case num == 3 && typ == protowire.BytesType:
			var header []byte
			header, n = protowire.ConsumeBytes(b)
			degraded = degraded || isDegradedHeader(header)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return 0, false, fmt.Errorf("malformed response: %w", protowire.ParseError(n))
		}
		b = b[n:]
	}
	return int32(c), degraded, nil
}

// isDegradedHeader reports whether the HeaderValue message m has the key
// (field 1) DegradedHeader, in any case.
func isDegradedHeader(m []byte) bool {
	for len(m) > 0 {
		num, typ, n := protowire.ConsumeTag(m)
		if n < 0 {
			return false
		}
		m = m[n:]
		if num == 1 && typ == protowire.BytesType {
			key, n := protowire.ConsumeBytes(m)
			return n >= 0 && asciiEqualFold(key, DegradedHeader)
		}
		if n = protowire.ConsumeFieldValue(num, typ, m); n < 0 {
			return false
		}
		m = m[n:]
	}
	return false
}

// decodeGRPCMessage undoes grpc-message's percent-encoding.
func decodeGRPCMessage(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b = append(b, byte(v))
				i += 2
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}
