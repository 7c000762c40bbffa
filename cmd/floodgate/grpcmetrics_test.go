package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-rl/floodgate/envoyrls"
)

// TestServeGRPCDecisionsCounted: the decisions serve takes on Envoy's gRPC
// API are counted in rate_limit_allowed_total and rate_limit_denied_total
// (under the descriptor's policy and the gRPC method as route), as the
// HTTP API's are. The deploy kit puts Envoy in front of Floodgate, and the
// shipped alerts (RateLimit429Spike, RateLimitDenyRatioHigh) and the
// dashboard's traffic panels read only these two counters: they used to
// count HTTP checks alone, so behind Envoy they stayed empty.
func TestServeGRPCDecisionsCounted(t *testing.T) {
	dir := t.TempDir()
	writeFileAtomic(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n"+
		"  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"+
		"  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 100}\n")
	svc := startService(t, "--grpc-addr", "127.0.0.1:0", "--envoy-config", dir)
	conn, err := grpc.NewClient(svc.addr(t, grpcListening), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlspb.NewRateLimitServiceClient(conn)
	call := func(entries ...*ratelimitv3.RateLimitDescriptor_Entry) rlspb.RateLimitResponse_Code {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var ds []*ratelimitv3.RateLimitDescriptor
		for _, e := range entries {
			ds = append(ds, &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{e}})
		}
		resp, err := client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: ds})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return resp.GetOverallCode()
	}
	addr := &ratelimitv3.RateLimitDescriptor_Entry{Key: "remote_address", Value: "192.0.2.7"}
	key := &ratelimitv3.RateLimitDescriptor_Entry{Key: "api_key", Value: "k1"}
	clearOfMinuteTurn(t)
	var codes []rlspb.RateLimitResponse_Code
	for range 3 {
		codes = append(codes, call(addr, key))
	}
	want := []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT}
	for i := range want {
		if codes[i] != want[i] {
			t.Fatalf("answers %v, want %v", codes, want)
		}
	}
	const route = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	series := func(name, policy string) string {
		return name + `{policy="` + policy + `",route="` + route + `",tier="none"}`
	}
	perAddr := envoyrls.PolicyName("edge", envoyrls.Entry{Key: "remote_address"})
	perKey := envoyrls.PolicyName("edge", envoyrls.Entry{Key: "api_key"})
	for _, c := range []struct {
		series string
		want   float64
	}{
		{series("rate_limit_allowed_total", perAddr), 2},
		{series("rate_limit_denied_total", perAddr), 1},
		// The API key's limit admitted the third request; another
		// descriptor denied it, so it was not admitted: not counted.
		{series("rate_limit_allowed_total", perKey), 2},
	} {
		if got := metricValue(t, svc.url, c.series); got != c.want {
			t.Errorf("%s = %v, want %v", c.series, got, c.want)
		}
	}
}

// clearOfMinuteTurn waits, if needed, until a minute's window has at
// least 10 seconds left, so that a few decisions fall in one window.
func clearOfMinuteTurn(t *testing.T) {
	t.Helper()
	if left := time.Minute - time.Duration(time.Now().Unix()%60)*time.Second; left < 10*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}
}
