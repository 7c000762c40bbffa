package envoyrls

import (
	"context"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// The native mode (serve --envoy-config) against envoyproxy/ratelimit's
// integration sequence (test/integration/integration_test.go,
// testBasicBaseConfig): where it answers as theirs and, step by step,
// where it differs on purpose (docs/envoy.md lists each difference;
// envoy-compat has none of them).

const theirIntegration = `
domain: another
descriptors:
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`

func nativeRigs(t *testing.T, opts Options, f func(t *testing.T, r *rig)) {
	t.Run("memory", func(t *testing.T) { f(t, newMemRig(t, theirIntegration, opts)) })
	t.Run("redis", func(t *testing.T) {
		st, err := redisstore.New(redistest.Start(t).Client(t), redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		f(t, newRig(t, st, theirIntegration, opts))
	})
}

func withCost(r *rlspb.RateLimitRequest, cost uint32) *rlspb.RateLimitRequest {
	r.HitsAddend = cost
	return r
}

func TestTheirSequenceNative(t *testing.T) {
	nativeRigs(t, Options{}, func(t *testing.T, r *rig) {
		// Same as theirs: one fixed-window descriptor, 25 requests against 20 per minute.
		for i := range 25 {
			resp := r.call(t, request("another", desc("key2=alone")))
			code, rem := ok, uint32(20-(i+1))
			if i >= 20 {
				code, rem = over, 0
			}
			wantStatus(t, "key2 alone", resp.GetStatuses()[0], code, rem, 20)
		}
		// Differs on purpose: all-or-nothing. Once key3 is over, key2
		// is not charged (theirs goes on counting key2: 9, 8, ..., 5).
		for i := range 15 {
			resp := r.call(t, request("another", desc("key2=pair"), desc("key3=pair")))
			rem1, rem2, code := uint32(20-(i+1)), uint32(10-(i+1)), ok
			if i >= 10 {
				rem1, rem2, code = 10, 0, over
			}
			wantStatus(t, "key2 of the pair", resp.GetStatuses()[0], ok, rem1, 20)
			wantStatus(t, "key3 of the pair", resp.GetStatuses()[1], code, rem2, 10)
		}
		// Differs on purpose: a cost above what is left is denied and
		// consumes nothing (theirs: OVER_LIMIT, counted, next one denied).
		r.call(t, withCost(request("another", desc("key2=cost")), 5))
		wantStatus(t, "cost 16 with 15 left", r.call(t, withCost(request("another", desc("key2=cost")), 16)).GetStatuses()[0], over, 15, 20)
		wantStatus(t, "cost 1 after", r.call(t, request("another", desc("key2=cost"))).GetStatuses()[0], ok, 14, 20)
		// Differs on purpose: a descriptor hits_addend 0 at the limit is
		// OVER_LIMIT (theirs: OK).
		r.call(t, withCost(request("another", desc("key2=zero")), 20))
		zero := desc("key2=zero")
		zero.HitsAddend = wrapperspb.UInt64(0)
		wantStatus(t, "descriptor cost 0 at the limit", r.call(t, request("another", zero)).GetStatuses()[0], over, 0, 20)
		// Differs on purpose: a shadow descriptor over its limit says
		// OVER_LIMIT in its own status (theirs: OK); the request passes.
		r.call(t, request("another", desc("shadow=s")))
		resp := r.call(t, request("another", desc("shadow=s")))
		if resp.GetOverallCode() != ok {
			t.Errorf("shadow: overall %v", resp.GetOverallCode())
		}
		wantStatus(t, "shadow over its limit", resp.GetStatuses()[0], over, 0, 1)
		// Differs on purpose: an unknown domain is refused (theirs: OK).
		_, err := r.client.ShouldRateLimit(context.Background(), request("nowhere", desc("hello=world")))
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("unknown domain: %v, want InvalidArgument", err)
		}
	})
}

// TestTheirPairSequenceCountEachDescriptor: with
// --envoy-count-each-descriptor the pair sequence is theirs.
func TestTheirPairSequenceCountEachDescriptor(t *testing.T) {
	nativeRigs(t, Options{CountEachDescriptor: true}, func(t *testing.T, r *rig) {
		for i := range 15 {
			resp := r.call(t, request("another", desc("key2=pair"), desc("key3=pair")))
			rem2, code := uint32(max(10-(i+1), 0)), ok
			if i >= 10 {
				code = over
			}
			wantStatus(t, "key2 of the pair", resp.GetStatuses()[0], ok, uint32(20-(i+1)), 20)
			wantStatus(t, "key3 of the pair", resp.GetStatuses()[1], code, rem2, 10)
		}
	})
}
