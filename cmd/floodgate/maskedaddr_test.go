package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// maskedConfig limits each masked client network (Envoy's
// masked_remote_address action, as deploy/envoy/envoy.yaml uses it) to 2
// requests a minute.
const maskedConfig = "domain: edge\ndescriptors:\n  - key: masked_remote_address\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"

// TestMaskedRemoteAddressOverGRPC: the values Envoy's
// masked_remote_address action sends, an address in CIDR form with '/'
// and ':' in it ("2001:db8:5::/64"), are decided by both floodgate serve
// and floodgate envoy-compat over gRPC against a real Redis: three
// requests from one /64 get OK, OK, OVER_LIMIT, while another /64 and an
// IPv4 /32 keep counters of their own.
func TestMaskedRemoteAddressOverGRPC(t *testing.T) {
	rdb := redistest.Start(t)

	serveDir := t.TempDir()
	writeFileAtomic(t, filepath.Join(serveDir, "edge.yaml"), maskedConfig)
	svc := startService(t, "--redis", "redis://"+rdb.Addr, "--prefix", "mra", "--grpc-addr", "127.0.0.1:0", "--envoy-config", serveDir)

	_, rt := compatRuntime(t, maskedConfig)
	compat := startCompat(t, append(rt, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+rdb.Addr, "CACHE_KEY_PREFIX=mrc_")...)
	waitFor(t, "envoy-compat healthcheck OK", func() bool {
		code, body := httpGet(t, "http://"+compat.http+"/healthcheck")
		return code == 200 && body == "OK"
	})

	for _, s := range []struct{ name, addr string }{
		{"serve", svc.addr(t, grpcListening)},
		{"envoy-compat", compat.grpc},
	} {
		conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		client := rlspb.NewRateLimitServiceClient(conn)
		call := func(value string) string {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
				{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "masked_remote_address", Value: value}}}}})
			if err != nil {
				t.Fatalf("%s: ShouldRateLimit %s: %v", s.name, value, err)
			}
			if resp.GetStatuses()[0].GetCurrentLimit() == nil {
				t.Errorf("%s: %s matched no limit", s.name, value)
			}
			return resp.GetOverallCode().String()
		}
		clearOfMinuteTurn(t)
		var got []string
		for _, v := range []string{"2001:db8:5::/64", "2001:db8:5::/64", "2001:db8:5::/64", "2001:db8:6::/64", "10.9.9.8/32"} {
			got = append(got, call(v))
		}
		if got, want := fmt.Sprint(got), "[OK OK OVER_LIMIT OK OK]"; got != want {
			t.Errorf("%s: /64 ×3, another /64, an IPv4 /32: %s, want %s", s.name, got, want)
		}
	}
}
