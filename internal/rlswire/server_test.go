package rlswire

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
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
	gs := grpc.NewServer(ServerOptions()...)
	rlspb.RegisterRateLimitServiceServer(gs, okService{})
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
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
