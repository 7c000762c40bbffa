package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-rl/floodgate/envoyrls"
	"github.com/floodgate-rl/floodgate/internal/rawrls"
)

// rawShouldRateLimit sends the request of one descriptor with one entry,
// its strings written as they are, UTF-8 or not, and returns the answer.
func rawShouldRateLimit(t *testing.T, conn *grpc.ClientConn, domain, key, value string) (*rlspb.RateLimitResponse, error) {
	t.Helper()
	req := rawrls.Request(domain, key, value)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []byte
	if err := conn.Invoke(ctx, rawrls.Method, &req, &out, grpc.ForceCodecV2(rawrls.Codec{})); err != nil {
		return nil, err
	}
	resp := &rlspb.RateLimitResponse{}
	if err := proto.Unmarshal(out, resp); err != nil {
		t.Fatalf("answer to %q: %v", req, err)
	}
	return resp, nil
}

// envoyMetadata is the metadata of a call of Envoy's rate limit filter
// with tracing on, besides the pseudo-headers and grpc-go's own.
var envoyMetadata = []string{"user-agent", "envoy/1.31.2/Clean/RELEASE/BoringSSL", "x-envoy-internal", "true",
	"x-forwarded-for", "10.0.0.7", "x-envoy-expected-rq-timeout-ms", "20",
	"x-request-id", "6f1f7c1e-0a8b-4a4e-9b1c-6c1f0e6a3b2d",
	"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
	"tracestate", "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7",
	"x-b3-traceid", "80f198ee56343ba864fe8b2a57d3eff7", "x-b3-spanid", "e457b5a2e4d86bd1", "x-b3-sampled", "1"}

// checkGRPCInput calls the gRPC listener at addr of domain "edge", whose
// descriptor api_key is limited to 1 request a minute: a value that is
// not UTF-8 is decided under a counter of its own bytes ("\xff", "\xfe"
// and U+FFFD, which replacing the bytes would merge, count apart), was
// INTERNAL ("string field ... contains invalid UTF-8"), which Envoy
// answers by letting the request through; a call with Envoy's metadata
// and 16 KiB more is served, one with 128 KiB of metadata is refused
// (gRPC's default bound is 16 MiB; a walk held 214 MB with 16 calls of
// 15 MiB).
func checkGRPCInput(t *testing.T, addr string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	clearOfMinuteTurn(t)
	for _, step := range []struct {
		value string
		want  rlspb.RateLimitResponse_Code
	}{
		{"\xff", rlspb.RateLimitResponse_OK},
		{"\xfe", rlspb.RateLimitResponse_OK},
		{"\uFFFD", rlspb.RateLimitResponse_OK},
		{"\xff", rlspb.RateLimitResponse_OVER_LIMIT},
	} {
		resp, err := rawShouldRateLimit(t, conn, "edge", "api_key", step.value)
		if err != nil || resp.GetOverallCode() != step.want {
			t.Fatalf("api_key %q: %v, %v; want %v", step.value, resp.GetOverallCode(), err, step.want)
		}
	}

	client := rlspb.NewRateLimitServiceClient(conn)
	call := func(md ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
		_, err := client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "api_key", Value: "k1"}}}}})
		return err
	}
	if err := call(append(envoyMetadata, "x-padding", strings.Repeat("p", 16<<10))...); err != nil {
		t.Fatalf("Envoy's metadata and 16 KiB: %v", err)
	}
	if err := call("x-padding", strings.Repeat("p", 128<<10)); err == nil {
		t.Fatal("128 KiB of metadata: served, want refused")
	}
	if err := call(envoyMetadata...); err != nil {
		t.Fatalf("Envoy's metadata after a refused call: %v", err)
	}
}

const grpcInputConfig = "domain: edge\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"

// TestServeGRPCInput runs checkGRPCInput against floodgate serve.
func TestServeGRPCInput(t *testing.T) {
	dir := t.TempDir()
	writeFileAtomic(t, filepath.Join(dir, "edge.yaml"), grpcInputConfig)
	svc := startService(t, "--grpc-addr", "127.0.0.1:0", "--envoy-config", dir)
	checkGRPCInput(t, svc.addr(t, grpcListening))
}

// TestEnvoyCompatGRPCInput runs checkGRPCInput against floodgate
// envoy-compat.
func TestEnvoyCompatGRPCInput(t *testing.T) {
	_, rt := compatRuntime(t, grpcInputConfig)
	p := startCompat(t, append(rt, "BACKEND_TYPE=memory")...)
	checkGRPCInput(t, p.grpc)
}

// TestServeGRPCRejectedCounted: the calls serve's gRPC API refuses before
// any decision are counted in floodgate_grpc_rejected_total by reason, as
// the HTTP API's in floodgate_http_rejected_total; they were counted
// nowhere (an empty domain, 20,000 descriptors). Calls a client can shape
// through Envoy (256 descriptors of one counter, a hits_addend above the
// maximum) are decided, not refused, and not counted there; 20,000
// repeats of one descriptor, more than envoyrls.MaxRequestDescriptors,
// are refused as "descriptors".
func TestServeGRPCRejectedCounted(t *testing.T) {
	dir := t.TempDir()
	writeFileAtomic(t, filepath.Join(dir, "edge.yaml"), grpcInputConfig)
	svc := startService(t, "--grpc-addr", "127.0.0.1:0", "--envoy-config", dir)
	series := func(reason string) string { return `floodgate_grpc_rejected_total{reason="` + reason + `"}` }
	for _, r := range []string{"no_config", "domain", "descriptors", "descriptor", "hits_addend", "limit_override"} {
		if got := metricValue(t, svc.url, series(r)); got != 0 {
			t.Fatalf("%s = %v at start, want 0", series(r), got)
		}
	}
	conn, err := grpc.NewClient(svc.addr(t, grpcListening), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlspb.NewRateLimitServiceClient(conn)
	entry := []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "api_key", Value: "k"}}
	many := make([]*ratelimitv3.RateLimitDescriptor, 20000)
	for i := range many {
		many[i] = &ratelimitv3.RateLimitDescriptor{Entries: entry}
	}
	distinct := make([]*ratelimitv3.RateLimitDescriptor, 17) // one counter more than a decision takes
	for i := range distinct {
		distinct[i] = &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "api_key", Value: fmt.Sprint(i)}}}
	}
	negative := &ratelimitv3.RateLimitDescriptor{Entries: entry, IsNegativeHits: true}
	for _, req := range []*rlspb.RateLimitRequest{
		{Descriptors: many[:1]},
		{Domain: "nope", Descriptors: many[:1]},
		{Domain: "edge", Descriptors: distinct},
		{Domain: "edge", Descriptors: many},
		{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{}}},
		{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{negative}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := client.ShouldRateLimit(ctx, req)
		cancel()
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("domain %q, %d descriptors: %v, want INVALID_ARGUMENT", req.GetDomain(), len(req.GetDescriptors()), err)
		}
	}
	for _, req := range []*rlspb.RateLimitRequest{
		{Domain: "edge", Descriptors: many[:envoyrls.MaxRequestDescriptors]},
		{Domain: "edge", HitsAddend: 2_000_000_000, Descriptors: many[:1]},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := client.ShouldRateLimit(ctx, req)
		cancel()
		if err != nil || resp.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("%d descriptors, hits_addend %d: %v, %v; want OVER_LIMIT (a cost no limit admits)", len(req.GetDescriptors()), req.GetHitsAddend(), resp.GetOverallCode(), err)
		}
	}
	for r, want := range map[string]float64{"no_config": 0, "domain": 2, "descriptors": 2, "descriptor": 1, "hits_addend": 1, "limit_override": 0} {
		if got := metricValue(t, svc.url, series(r)); got != want {
			t.Errorf("%s = %v, want %v", series(r), got, want)
		}
	}
}
