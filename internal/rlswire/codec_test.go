package rlswire

import (
	"context"
	"net"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
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
// codec (INTERNAL), without reaching the service.
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
	for _, bad := range [][]byte{{0x0a, 0x01, 0xff}, {0x0a, 0x05, 'a'}} {
		var out []byte
		err := conn.Invoke(ctx, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", &bad, &out, grpc.ForceCodecV2(rawCodec{}))
		if status.Code(err) != codes.Internal {
			t.Fatalf("request %x: error %v, want INTERNAL", bad, err)
		}
	}
}
