package envoyrls

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// TestOversizedMessageRejected: a message over the gRPC server's receive
// limit (gRPC's default 4 MiB here) is refused by gRPC with
// RESOURCE_EXHAUSTED before the service decodes it; it was counted
// nowhere (a differential walk: serve's floodgate_grpc_rejected_total
// stayed 0 while Envoy let the request through unlimited). It is
// reported to Options.OnRejected as RejectMessageSize now, once, and a
// request within the limit is decided and reported nowhere.
func TestOversizedMessageRejected(t *testing.T) {
	rejected := make(chan Rejection, 4)
	r := newMemRig(t, apiConfig, Options{OnRejected: func(why Rejection) { rejected <- why }})
	long := func(n int) *rlspb.RateLimitRequest {
		return request("api", desc("user=kim"), desc("header="+strings.Repeat("x", n)))
	}

	// 2 MiB: over serve's old 1 MiB limit, within gRPC's: decided.
	resp := r.call(t, long(2<<20))
	wantStatus(t, "user beside a 2 MiB value", resp.GetStatuses()[0], ok, 2, 3)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := r.client.ShouldRateLimit(ctx, long(4<<20))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a request over 4 MiB: %v, want RESOURCE_EXHAUSTED", err)
	}
	// gRPC writes its status before the handler returns: wait for the
	// report rather than race it.
	select {
	case why := <-rejected:
		if why != RejectMessageSize {
			t.Errorf("rejected as %q, want %q", why, RejectMessageSize)
		}
	case <-ctx.Done():
		t.Fatal("the oversized request was never reported to OnRejected")
	}
	// The user's counter was not charged by the refused request.
	wantStatus(t, "user after the refusal", r.call(t, request("api", desc("user=kim"))).GetStatuses()[0], ok, 1, 3)
	if n := len(rejected); n != 0 {
		t.Errorf("%d more rejections reported, want none", n)
	}
}

// TestRegisterRunsInterceptors: the service's own method handler (see
// Register) runs a server's unary interceptor, as the generated one did,
// with the method's full name and the decoded request.
func TestRegisterRunsInterceptors(t *testing.T) {
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.New(st, floodgate.Options{Prefix: uniquePrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := mustConfig(t, apiConfig)
	svc, err := NewService(lim, func() *Config { return cfg }, Options{Clock: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 1)
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		r, _ := req.(*rlspb.RateLimitRequest) // another type: no domain, and the check below fails
		seen <- fmt.Sprintf("%s %s", info.FullMethod, r.GetDomain())
		return h(ctx, req)
	}))
	svc.Register(srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, request("api", desc("user=lee")))
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "through the interceptor", resp.GetStatuses()[0], ok, 2, 3)
	if got, want := <-seen, rlspb.RateLimitService_ShouldRateLimit_FullMethodName+" api"; got != want {
		t.Errorf("interceptor saw %q, want %q", got, want)
	}
}
