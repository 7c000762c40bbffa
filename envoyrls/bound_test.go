package envoyrls

import (
	"context"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestRequestDescriptorBound: more than 16 distinct limited descriptors
// were refused, but any number of repeats of one were decided (a
// grpcbounds walk: 6 requests of 150,000 repeats took serve from 31 to
// 422 MB). A request of more than MaxRequestDescriptors descriptors,
// repeats and unlimited ones included, is INVALID_ARGUMENT now, reported
// as RejectDescriptors, and writes nothing to Redis; one of exactly
// MaxRequestDescriptors is decided.
func TestRequestDescriptorBound(t *testing.T) {
	rejected := make(chan Rejection, 8)
	r, srv := newRedisRig(t, apiConfig, Options{OnRejected: func(why Rejection) { rejected <- why }})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range []int{MaxRequestDescriptors + 1, 20_000} {
		req := request("api")
		one := desc("user=kim")
		req.Descriptors = make([]*ratelimitv3.RateLimitDescriptor, n)
		for i := range req.Descriptors {
			req.Descriptors[i] = one
		}
		_, err := r.client.ShouldRateLimit(ctx, req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "a request carries at most 256") {
			t.Fatalf("%d repeats of one descriptor: %v, want INVALID_ARGUMENT saying the bound", n, err)
		}
		if why := <-rejected; why != RejectDescriptors {
			t.Errorf("%d descriptors rejected as %q, want %q", n, why, RejectDescriptors)
		}
	}
	if n := srv.Client(t).DBSize(ctx).Val(); n != 0 {
		t.Errorf("the refused requests left %d keys in Redis, want none", n)
	}
	req := request("api")
	for range MaxRequestDescriptors {
		req.Descriptors = append(req.Descriptors, desc("route=/other"))
	}
	if resp := r.call(t, req); len(resp.GetStatuses()) != MaxRequestDescriptors {
		t.Errorf("%d descriptors: %d statuses", MaxRequestDescriptors, len(resp.GetStatuses()))
	}
}
