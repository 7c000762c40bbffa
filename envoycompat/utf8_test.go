package envoycompat

import (
	"context"
	"net"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-rl/floodgate/internal/rawrls"
	"github.com/floodgate-rl/floodgate/internal/rlswire"
)

// TestInvalidUTF8OverGRPC serves, as envoy-compat does (rlswire's server
// options), requests whose domain and descriptor values are not UTF-8, as
// Envoy's C++ protobuf sends them: each is decided, under a counter of
// its own bytes ("\xff", "\xfe" and U+FFFD, which replacing the bytes
// would merge, count apart), with detailed_metric putting the value in
// a label and dynamic metadata describing the request, and an unknown
// such domain is counted. They were refused with INTERNAL while decoding
// (and Envoy let them through unlimited); accepted without more, the
// metric labels would panic and the metadata fail to encode.
func TestInvalidUTF8OverGRPC(t *testing.T) {
	cfg := "domain: d\ndescriptors:\n" +
		"  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 1}\n" +
		"  - key: path\n    detailed_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := NewService(Options{Store: &MemoryStore{Now: func() time.Time { return fixedNow }}, Metrics: m,
		Now: func() time.Time { return fixedNow }, NearLimitRatio: 0.8, DynamicMetadata: true})
	if err != nil {
		t.Fatal(err)
	}
	c, err := loadStrings(t, false, cfg)
	if err != nil {
		t.Fatal(err)
	}
	svc.SetConfig(c)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(rlswire.ServerOptions(0)...)
	svc.Register(gs)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	call := func(req []byte) *rlspb.RateLimitResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var out []byte
		if err := conn.Invoke(ctx, rawrls.Method, &req, &out, grpc.ForceCodecV2(rawrls.Codec{})); err != nil {
			t.Fatalf("request %q: %v", req, err)
		}
		resp := &rlspb.RateLimitResponse{}
		if err := proto.Unmarshal(out, resp); err != nil {
			t.Fatalf("request %q: answer %v", req, err)
		}
		return resp
	}
	for _, step := range []struct {
		name    string
		req     []byte
		want    rlspb.RateLimitResponse_Code
		entries []any
	}{
		{"0xff", rawrls.Request("d", "api_key", "\xff"), rlspb.RateLimitResponse_OK, []any{"api_key=\uFFFD"}},
		{"0xfe, a counter of its own", rawrls.Request("d", "api_key", "\xfe"), rlspb.RateLimitResponse_OK, nil},
		{"U+FFFD, a counter of its own", rawrls.Request("d", "api_key", "\uFFFD"), rlspb.RateLimitResponse_OK, nil},
		{"0xff again, over its limit", rawrls.Request("d", "api_key", "\xff"), rlspb.RateLimitResponse_OVER_LIMIT, nil},
		{"detailed_metric", rawrls.Request("d", "path", "/a\xffb"), rlspb.RateLimitResponse_OK, []any{"path=/a\uFFFDb"}},
		{"unknown domain", rawrls.Request("\xff\xfe", "api_key", "k"), rlspb.RateLimitResponse_OK, nil},
	} {
		resp := call(step.req)
		if resp.GetOverallCode() != step.want {
			t.Fatalf("%s: %v, want %v", step.name, resp.GetOverallCode(), step.want)
		}
		md := resp.GetDynamicMetadata().AsMap()
		descs, _ := md["descriptors"].([]any)
		if len(descs) != 1 {
			t.Fatalf("%s: metadata %v", step.name, md)
		}
		if step.entries != nil {
			got, _ := descs[0].(map[string]any)["entries"].([]any)
			if len(got) != 1 || got[0] != step.entries[0] {
				t.Errorf("%s: metadata entries %q, want %q", step.name, got, step.entries)
			}
		}
	}
	if got := testutil.ToFloat64(m.perLimit.WithLabelValues("d", "path_/a\uFFFDb", statTotalHits)); got != 1 {
		t.Errorf("detailed_metric's total_hits %v, want 1", got)
	}
	// One U+FFFD for the run of two bytes.
	if got := testutil.ToFloat64(m.notFound.WithLabelValues("\uFFFD")); got != 1 {
		t.Errorf("domain not found %v, want 1", got)
	}
}
