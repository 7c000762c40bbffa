package rlswire

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// echo answers each request with the response its domain names (an index
// into responses()), after checking it arrived as sent.
type echo struct {
	rlspb.UnimplementedRateLimitServiceServer
	t    *testing.T
	sent chan *rlspb.RateLimitRequest
}

func (e *echo) ShouldRateLimit(_ context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	want := <-e.sent
	if !proto.Equal(req, want) {
		e.t.Errorf("the service got %v, the client sent %v", req, want)
	}
	i := len(req.GetDescriptors()) % len(responses())
	return responses()[i], nil
}

// rawCodec sends its message's bytes as they are, to put bytes on the wire
// that no protobuf marshaler would write.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

// TestCodecOverGRPC runs Codec in a real gRPC server, called by a grpc-go
// client with protobuf-go's codec: requests arrive as sent, responses
// arrive as answered, other services (health) still work, and a request
// that is not valid protobuf is refused as gRPC refuses it with its own
// codec (INTERNAL), without reaching the service (strings that are not
// UTF-8 do reach it: TestCodecKeepsInvalidUTF8).
func TestCodecOverGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(Codec{}))
	e := &echo{t: t, sent: make(chan *rlspb.RateLimitRequest, 1)}
	rlspb.RegisterRateLimitServiceServer(srv, e)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	client := rlspb.NewRateLimitServiceClient(conn)
	for _, req := range requests() {
		e.sent <- req
		resp, err := client.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatalf("ShouldRateLimit(%v): %v", req, err)
		}
		if want := responses()[len(req.GetDescriptors())%len(responses())]; !proto.Equal(resp, want) {
			t.Fatalf("ShouldRateLimit(%v) = %v, the service answered %v", req, resp, want)
		}
	}
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health check through Codec: %v", err)
	}
	for _, bad := range [][]byte{{0x0a, 0x05, 'a'}, {0x12, 0x03, 0x0a, 0x05, 'a'}} {
		var out []byte
		err := conn.Invoke(ctx, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", &bad, &out, grpc.ForceCodecV2(rawCodec{}))
		if status.Code(err) != codes.Internal {
			t.Fatalf("request %x: error %v, want INTERNAL", bad, err)
		}
	}
}

// TestCodecKeepsInvalidUTF8 sends, over a real gRPC connection to a
// server with ServerOptions, requests whose domain, entry keys and values
// are not UTF-8, as Envoy's C++ protobuf sends them (it copies a header's
// bytes into a descriptor): each reaches the service byte for byte and is
// answered. They were refused with INTERNAL ("string field ... contains
// invalid UTF-8"), and Envoy let such requests through unlimited.
func TestCodecKeepsInvalidUTF8(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(ServerOptions(0)...)
	e := &echo{t: t, sent: make(chan *rlspb.RateLimitRequest, 1)}
	rlspb.RegisterRateLimitServiceServer(srv, e)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	entry := func(k, v string) *ratelimitpb.RateLimitDescriptor_Entry {
		return &ratelimitpb.RateLimitDescriptor_Entry{Key: k, Value: v}
	}
	for _, req := range []*rlspb.RateLimitRequest{
		{Domain: "api", Descriptors: []*ratelimitpb.RateLimitDescriptor{{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{entry("x-api-key", "\xff\xfe")}}}},
		{Domain: "api", Descriptors: []*ratelimitpb.RateLimitDescriptor{{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{
			entry("path", "/a\xed\xa0\x80b"), entry("k\xc3", "\xc0\xaf")}}}},
		{Domain: "\xff" + strings.Repeat("d", 2000), Descriptors: []*ratelimitpb.RateLimitDescriptor{{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{entry("user", "\x80")}}}},
	} {
		if _, err := proto.Marshal(req); err == nil {
			t.Fatalf("proto.Marshal took %v: the request must not be UTF-8", req)
		}
		b := appendRequest(nil, req)
		e.sent <- req
		var out []byte
		if err := conn.Invoke(ctx, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", &b, &out, grpc.ForceCodecV2(rawCodec{})); err != nil {
			t.Fatalf("request %q: %v", b, err)
		}
		resp := &rlspb.RateLimitResponse{}
		if err := proto.Unmarshal(out, resp); err != nil || !proto.Equal(resp, responses()[len(req.GetDescriptors())%len(responses())]) {
			t.Fatalf("request %q: answer %v, %v", b, resp, err)
		}
	}
}

// appendRequest appends req's wire format to b as proto.Marshal would,
// but for its strings, written as they are, UTF-8 or not (proto.Marshal
// refuses them).
func appendRequest(b []byte, req *rlspb.RateLimitRequest) []byte {
	str := func(b []byte, num protowire.Number, s string) []byte {
		if s == "" {
			return b
		}
		return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
	}
	b = str(b, 1, req.GetDomain())
	for _, d := range req.GetDescriptors() {
		var db []byte
		for _, e := range d.GetEntries() {
			db = protowire.AppendBytes(protowire.AppendTag(db, 1, protowire.BytesType), str(str(nil, 1, e.GetKey()), 2, e.GetValue()))
		}
		b = protowire.AppendBytes(protowire.AppendTag(b, 2, protowire.BytesType), db)
	}
	return b
}
