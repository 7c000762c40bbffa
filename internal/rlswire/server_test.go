package rlswire

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// okService answers every request OK with one status per descriptor.
type okService struct {
	rlspb.UnimplementedRateLimitServiceServer
}

func (okService) ShouldRateLimit(_ context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}
	for range req.GetDescriptors() {
		resp.Statuses = append(resp.Statuses, &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK})
	}
	return resp, nil
}

// TestServerOptions calls a gRPC server built with ServerOptions over
// raw HTTP/2 frames, as Envoy does: every request is answered OK, decoded
// and encoded right (through rlswire's codec), and the server sends no PING
// of its own (gRPC's dynamic windows send one per round trip of a busy
// connection for bandwidth estimation; the static windows send none) and
// advertises the static stream window.
func TestServerOptions(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(ServerOptions(0)...)
	rlspb.RegisterRateLimitServiceServer(gs, okService{})
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)

	fr := dialHTTP2(t, ln.Addr().String())
	req, _ := proto.Marshal(&rlspb.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitpb.RateLimitDescriptor{
		{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "user", Value: "u-1"}}}}})
	msg := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(req)))
	msg = append(msg, req...)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "rls"},
		{":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}

	const requests = 50
	// Send in rounds of ten, each after the answers to the one before,
	// as a busy client does: gRPC's bandwidth estimator pings on the
	// first data of each round trip.
	answered, pings, window := 0, 0, uint32(0)
	for round := 0; round < requests/10; round++ {
		for i := 0; i < 10; i++ {
			id := uint32(2*(round*10+i) + 1)
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
				t.Fatal(err)
			}
			if err := fr.WriteData(id, true, msg); err != nil {
				t.Fatal(err)
			}
		}
		for answered < (round+1)*10 {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("after %d answers: %v", answered, err)
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if f.IsAck() {
					continue
				}
				if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
					window = v
				}
				if err := fr.WriteSettingsAck(); err != nil {
					t.Fatal(err)
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					pings++
					if err := fr.WritePing(true, f.Data); err != nil {
						t.Fatal(err)
					}
				}
			case *http2.DataFrame:
				resp := &rlspb.RateLimitResponse{}
				if d := f.Data(); len(d) < 5 || proto.Unmarshal(d[5:], resp) != nil || resp.GetOverallCode() != rlspb.RateLimitResponse_OK || len(resp.GetStatuses()) != 1 {
					t.Fatalf("stream %d: answer %x, want OK with one status", f.StreamID, d)
				}
			case *http2.HeadersFrame:
				if f.StreamEnded() {
					answered++
				}
			}
		}
	}
	if pings != 0 {
		t.Errorf("the server sent %d PINGs over %d requests, want none (static flow-control windows)", pings, requests)
	}
	if window != StreamWindow {
		t.Errorf("initial stream window %d, want %d", window, StreamWindow)
	}
}

// envoyHeaders are the header fields of a call of Envoy's rate limit
// filter (Envoy 1.3x, with tracing on), and grpc-go's own.
var envoyHeaders = [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "ratelimit"},
	{":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"},
	{"content-type", "application/grpc"}, {"te", "trailers"}, {"grpc-timeout", "20m"},
	{"user-agent", "envoy/1.31.2/Clean/RELEASE/BoringSSL"}, {"x-envoy-internal", "true"},
	{"x-forwarded-for", "10.0.0.7"}, {"x-envoy-expected-rq-timeout-ms", "20"},
	{"x-request-id", "6f1f7c1e-0a8b-4a4e-9b1c-6c1f0e6a3b2d"},
	{"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
	{"tracestate", "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"},
	{"x-b3-traceid", "80f198ee56343ba864fe8b2a57d3eff7"}, {"x-b3-spanid", "e457b5a2e4d86bd1"},
	{"x-b3-parentspanid", "05e3ac9a4f6e3b90"}, {"x-b3-sampled", "1"},
	{"x-datadog-trace-id", "2214460402545184466"}, {"x-datadog-parent-id", "6171283412329447373"}}

// TestServerOptionsBoundMetadata calls a gRPC server built with
// ServerOptions over raw HTTP/2 frames, a connection a call: a call with
// Envoy's header fields and up to 60 KiB of custom metadata besides is
// answered; one whose header list is over MaxHeaderList (in HEADERS and
// CONTINUATION frames) is refused before the service sees it, its stream
// reset or its connection closed (as golang.org/x/net/http2 does when
// more comes after the bound, or one field alone is over it). Without the
// bound (gRPC's default, 16 MiB) a security walk sent 15 MiB of metadata
// a call, and 16 such calls at once took the server from 79 to 214 MB of
// memory.
func TestServerOptionsBoundMetadata(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(ServerOptions(0)...)
	rlspb.RegisterRateLimitServiceServer(gs, okService{})
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)

	req, _ := proto.Marshal(&rlspb.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitpb.RateLimitDescriptor{
		{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "user", Value: "u-1"}}}}})
	msg := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(req)))
	msg = append(msg, req...)
	size := 0
	for _, f := range envoyHeaders {
		size += len(f[0]) + len(f[1]) + 32
	}
	if size > 2<<10 {
		t.Fatalf("Envoy's header list is %d bytes, over the 2 KiB MaxHeaderList's comment says", size)
	}

	// call sends, on a new connection, a call with Envoy's header fields
	// and fields custom metadata fields of size bytes each, and returns
	// what ended it: "ok" for an answer OK, "reset" for a RST_STREAM,
	// "closed" when the server closed the connection.
	call := func(fields, size int) string {
		t.Helper()
		fr := dialHTTP2(t, ln.Addr().String())
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, f := range envoyHeaders {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		for i := range fields {
			_ = enc.WriteField(hpack.HeaderField{Name: "x-padding-" + strconv.Itoa(i), Value: strings.Repeat("p", size), Sensitive: true})
		}
		block := hb.Bytes()
		const chunk = 16 << 10 // the default SETTINGS_MAX_FRAME_SIZE
		first := block[:min(chunk, len(block))]
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: first, EndHeaders: len(block) <= chunk}); err != nil {
			return "closed"
		}
		for rest := block[len(first):]; len(rest) > 0; {
			n := min(chunk, len(rest))
			if err := fr.WriteContinuation(1, n == len(rest), rest[:n]); err != nil {
				return "closed"
			}
			rest = rest[n:]
		}
		if err := fr.WriteData(1, true, msg); err != nil {
			return "closed"
		}
		answer := "no answer"
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return "closed"
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = fr.WriteSettingsAck()
				}
			case *http2.DataFrame:
				resp := &rlspb.RateLimitResponse{}
				if d := f.Data(); len(d) >= 5 && proto.Unmarshal(d[5:], resp) == nil && resp.GetOverallCode() == rlspb.RateLimitResponse_OK {
					answer = "ok"
				}
			case *http2.HeadersFrame:
				if f.StreamEnded() {
					return answer
				}
			case *http2.RSTStreamFrame:
				return "reset"
			case *http2.GoAwayFrame:
				return "closed"
			}
		}
	}
	for _, c := range []struct {
		fields, size int
		refused      bool
	}{
		{0, 0, false},
		{1, 16 << 10, false},
		{4, 15 << 10, false},
		{1, 60 << 10, false},
		{1, MaxHeaderList, true},
		{5, 15 << 10, true},
		{1, 128 << 10, true},
		{8, 1 << 20, true},
	} {
		got := call(c.fields, c.size)
		if refused := got != "ok"; refused != c.refused {
			t.Errorf("Envoy's headers and %d fields of %d bytes: %s, want refused %v", c.fields, c.size, got, c.refused)
		}
	}
}

// dialHTTP2 opens a connection to addr, closed when the test ends, with
// a 10-second deadline, sends the HTTP/2 client preface and an empty
// SETTINGS frame, and returns its framer.
func dialHTTP2(t *testing.T, addr string) *http2.Framer {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return fr
}
