package envoyrls

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// t0 is the frozen clock of the service tests: 10 s into a minute, so a
// one-minute fixed window resets in 50 s.
var t0 = time.Date(2030, 1, 2, 3, 4, 10, 0, time.UTC)

// rig is a Service on a real gRPC listener on 127.0.0.1 with a client.
type rig struct {
	client rlspb.RateLimitServiceClient
	svc    *Service
	cfg    atomic.Pointer[Config]
	addr   string
}

var prefixSeq atomic.Int64

// uniquePrefix returns a key prefix no other test or run uses.
func uniquePrefix(t testing.TB) string {
	t.Helper()
	name := strings.Map(func(r rune) rune {
		if nameByte(byte(r)) && r < 128 && r != '.' {
			return r
		}
		return '_'
	}, t.Name())
	if len(name) > 30 {
		name = name[len(name)-30:]
	}
	p := fmt.Sprintf("rlst:%s:%x.%d", name, time.Now().UnixNano()&0xffffffffff, prefixSeq.Add(1))
	if err := floodgate.ValidatePrefix(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustConfig(t testing.TB, yaml string) *Config {
	t.Helper()
	cfg, err := ParseConfig([]byte(yaml), t.Name()+".yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// newMemRig serves yaml from a fresh memstore.
func newMemRig(t testing.TB, yaml string, opts Options) *rig {
	t.Helper()
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return newRig(t, st, yaml, opts)
}

// newRig serves yaml from store, with the clock frozen at t0 unless opts
// has one, on a gRPC server that is stopped at cleanup.
func newRig(t testing.TB, store floodgate.Store, yaml string, opts Options) *rig {
	t.Helper()
	lim, err := floodgate.New(store, floodgate.Options{Prefix: uniquePrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{}
	r.cfg.Store(mustConfig(t, yaml))
	if opts.Clock == nil {
		opts.Clock = func() time.Time { return t0 }
	}
	r.svc, err = NewService(lim, r.cfg.Load, opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	r.svc.Register(srv)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("grpc Serve: %v", err)
		}
	})
	r.addr = ln.Addr().String()
	conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r.client = rlspb.NewRateLimitServiceClient(conn)
	return r
}

// call sends a request and fails the test on a transport error.
func (r *rig) call(t testing.TB, req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := r.client.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	if len(resp.GetStatuses()) != len(req.GetDescriptors()) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(req.GetDescriptors()))
	}
	return resp
}

// desc builds a descriptor from "key=value" pairs.
func desc(pairs ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

func request(domain string, descs ...*ratelimitv3.RateLimitDescriptor) *rlspb.RateLimitRequest {
	return &rlspb.RateLimitRequest{Domain: domain, Descriptors: descs}
}

// wantStatus checks one descriptor status: code, remaining and, when
// limit > 0, the reported requests_per_unit.
func wantStatus(t testing.TB, what string, st *rlspb.RateLimitResponse_DescriptorStatus, code rlspb.RateLimitResponse_Code, remaining uint32, limit uint32) {
	t.Helper()
	if st.GetCode() != code || st.GetLimitRemaining() != remaining {
		t.Errorf("%s: code %v remaining %d, want %v remaining %d", what, st.GetCode(), st.GetLimitRemaining(), code, remaining)
	}
	if got := st.GetCurrentLimit().GetRequestsPerUnit(); got != limit {
		t.Errorf("%s: current_limit requests_per_unit %d, want %d", what, got, limit)
	}
}

// headers returns response_headers_to_add as a map.
func headers(resp *rlspb.RateLimitResponse) map[string]string {
	h := map[string]string{}
	for _, hv := range resp.GetResponseHeadersToAdd() {
		h[hv.GetKey()] = hv.GetValue()
	}
	return h
}
