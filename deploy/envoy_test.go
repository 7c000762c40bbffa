package deploy

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/envoyrls"
	"github.com/floodgate-rl/floodgate/memstore"
)

// The typed configurations envoy.yaml may hold: importing their packages
// registers their types for the Any fields; any other type fails to decode.
var (
	_ = &hcmv3.HttpConnectionManager{}
	_ = &ratelimitfilterv3.RateLimit{}
	_ = &routerv3.Router{}
	_ = &upstreamhttpv3.HttpProtocolOptions{}
)

const (
	envoyFile       = "envoy/envoy.yaml"
	descriptorsFile = "config/ratelimit.yaml"
	// grpcPort is Floodgate's gRPC port throughout the kit: Envoy's
	// cluster, the compose file and the Kubernetes manifests.
	grpcPort = 8081
	// httpPort is Floodgate's HTTP port throughout the kit.
	httpPort = 8080
)

// loadBootstrap decodes an Envoy bootstrap file strictly (an unknown
// field, enum value or type fails) and runs the protobuf validation rules
// on it and on every typed configuration inside it.
func loadBootstrap(t *testing.T, path string) *bootstrapv3.Bootstrap {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var b bootstrapv3.Bootstrap
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(js, &b); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if err := validateTree(b.ProtoReflect()); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &b
}

// validateTree runs ValidateAll on m and, recursively, on every message
// in it, unpacking Any fields (whose contents the generated validation
// does not look into).
func validateTree(m protoreflect.Message) error {
	if v, ok := m.Interface().(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return fmt.Errorf("%s: %w", m.Descriptor().FullName(), err)
		}
	}
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			return fmt.Errorf("typed config %s: %w", a.GetTypeUrl(), err)
		}
		return validateTree(inner.ProtoReflect())
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = validateTree(l.Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				err = validateTree(mv.Message())
				return err == nil
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			err = validateTree(v.Message())
		}
		return err == nil
	})
	return err
}

// unpack returns the typed configuration in a.
func unpack[T proto.Message](t *testing.T, a *anypb.Any, into T) T {
	t.Helper()
	if err := a.UnmarshalTo(into); err != nil {
		t.Fatalf("typed config %s: %v", a.GetTypeUrl(), err)
	}
	return into
}

// ingress returns the HTTP connection manager of the listener named name
// and the configuration of its rate limit filter, checking that the filter
// runs before the router.
func ingress(t *testing.T, b *bootstrapv3.Bootstrap, name string) (*hcmv3.HttpConnectionManager, *ratelimitfilterv3.RateLimit) {
	t.Helper()
	for _, l := range b.GetStaticResources().GetListeners() {
		if l.GetName() != name {
			continue
		}
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm := unpack(t, f.GetTypedConfig(), &hcmv3.HttpConnectionManager{})
				var rl *ratelimitfilterv3.RateLimit
				for i, hf := range hcm.GetHttpFilters() {
					switch hf.GetTypedConfig().MessageName() {
					case "envoy.extensions.filters.http.ratelimit.v3.RateLimit":
						rl = unpack(t, hf.GetTypedConfig(), &ratelimitfilterv3.RateLimit{})
					case "envoy.extensions.filters.http.router.v3.Router":
						if rl == nil {
							t.Fatalf("listener %s: the router (filter %d) comes before the rate limit filter", name, i)
						}
						return hcm, rl
					}
				}
			}
		}
	}
	t.Fatalf("no listener %s with a rate limit filter and a router", name)
	return nil, nil
}

func cluster(t *testing.T, b *bootstrapv3.Bootstrap, name string) *clusterv3.Cluster {
	t.Helper()
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == name {
			return c
		}
	}
	t.Fatalf("no cluster %s", name)
	return nil
}

// TestEnvoyExample decodes envoy.yaml strictly into Envoy's bootstrap
// types and validates it, checks that its rate limit filter calls
// Floodgate's gRPC port over HTTP/2, and sends Floodgate (loaded with
// ratelimit.yaml, as --envoy-config does) the descriptors each route's
// actions build for a sample request: every one must match a configured
// limit, and the route must be refused after as many requests as its
// tightest limit allows. The compose and Kubernetes tests repeat the
// decisions over gRPC against the service their files start.
func TestEnvoyExample(t *testing.T) {
	b := loadBootstrap(t, envoyFile)
	_, rl := ingress(t, b, "ingress")
	cl := cluster(t, b, rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName())
	var opts upstreamhttpv3.HttpProtocolOptions
	a, ok := cl.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	if !ok || a.UnmarshalTo(&opts) != nil || opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Errorf("cluster %s does not speak HTTP/2 to Floodgate (gRPC needs it)", cl.GetName())
	}
	for _, e := range cl.GetLoadAssignment().GetEndpoints() {
		for _, lb := range e.GetLbEndpoints() {
			if p := lb.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue(); p != grpcPort {
				t.Errorf("cluster %s points at port %d, want Floodgate's gRPC port %d", cl.GetName(), p, grpcPort)
			}
		}
	}
	if rl.GetRateLimitService().GetTransportApiVersion().String() != "V3" {
		t.Errorf("rate limit service transport %v, want V3 (Floodgate serves envoy.service.ratelimit.v3)", rl.GetRateLimitService().GetTransportApiVersion())
	}

	svc := memService(t)
	checkEnvoyRoutes(t, "in process", svc.ShouldRateLimit)
}

// TestEnvoyRemoteAddressIsThePeer: every HTTP connection manager of
// envoy.yaml whose routes or virtual hosts send the client address
// (remote_address or masked_remote_address) sets use_remote_address.
// With Envoy's default (false) the address sent is the last one of
// X-Forwarded-For, which the client writes: rotating it would give each
// request a new per-address counter.
func TestEnvoyRemoteAddressIsThePeer(t *testing.T) {
	b := loadBootstrap(t, envoyFile)
	usesRemote := func(limits []*routev3.RateLimit) bool {
		for _, l := range limits {
			for _, a := range l.GetActions() {
				if a.GetRemoteAddress() != nil || a.GetMaskedRemoteAddress() != nil {
					return true
				}
			}
		}
		return false
	}
	checked := 0
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				if f.GetTypedConfig().MessageName() != "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager" {
					continue
				}
				hcm := unpack(t, f.GetTypedConfig(), &hcmv3.HttpConnectionManager{})
				remote := false
				for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
					remote = remote || usesRemote(vh.GetRateLimits())
					for _, r := range vh.GetRoutes() {
						remote = remote || usesRemote(r.GetRoute().GetRateLimits())
					}
				}
				if !remote {
					continue
				}
				checked++
				if !hcm.GetUseRemoteAddress().GetValue() {
					t.Errorf("listener %s: rate limits on the client address without use_remote_address: true (Envoy would send the client's own X-Forwarded-For)", l.GetName())
				}
			}
		}
	}
	if checked == 0 {
		t.Fatalf("no listener of %s sends the client address", envoyFile)
	}
}

// TestEnvoyPerAddressLimitsMasked: every action of envoy.yaml that sends
// the client address is masked_remote_address with v6_prefix_mask_len 64
// and an IPv4 mask of 32 (set, or Envoy's default), so that an IPv6
// client counts by its /64: with remote_address, Envoy sends each of the
// /64's addresses as its own value, and a client rotating through them
// never meets the per-address limit. Replayed on Floodgate loaded with
// ratelimit.yaml, six requests to / from six addresses of one /64 get
// five OKs and OVER_LIMIT.
func TestEnvoyPerAddressLimitsMasked(t *testing.T) {
	b := loadBootstrap(t, envoyFile)
	hcm, rl := ingress(t, b, "ingress")
	masked := 0
	check := func(where string, limits []*routev3.RateLimit) {
		for _, l := range limits {
			for _, a := range l.GetActions() {
				if a.GetRemoteAddress() != nil {
					t.Errorf("%s: remote_address sends every IPv6 address apart; want masked_remote_address with v6_prefix_mask_len 64", where)
				}
				m := a.GetMaskedRemoteAddress()
				if m == nil {
					continue
				}
				masked++
				if got := m.GetV6PrefixMaskLen(); got == nil || got.GetValue() != 64 {
					t.Errorf("%s: masked_remote_address v6_prefix_mask_len %v, want 64", where, got)
				}
				if got := m.GetV4PrefixMaskLen(); got != nil && got.GetValue() != 32 {
					t.Errorf("%s: masked_remote_address v4_prefix_mask_len %d, want 32", where, got.GetValue())
				}
			}
		}
	}
	var slash []*routev3.RateLimit
	for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
		check("virtual host "+vh.GetName(), vh.GetRateLimits())
		for i, r := range vh.GetRoutes() {
			check(fmt.Sprintf("%s route %d", vh.GetName(), i), r.GetRoute().GetRateLimits())
			if r.GetMatch().GetPrefix() == "/" {
				slash = r.GetRoute().GetRateLimits()
			}
		}
	}
	if masked == 0 {
		t.Fatalf("no action of %s sends masked_remote_address", envoyFile)
	}

	svc := memService(t)
	var got []string
	for i := range 6 {
		req := sampleRequest{remoteAddress: fmt.Sprintf("2001:db8:5::%d", i+1)}
		resp, err := svc.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{
			Domain: rl.GetDomain(), Descriptors: descriptorsFor(t, req, slash)})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, resp.GetOverallCode().String())
	}
	if got, want := fmt.Sprint(got), "[OK OK OK OK OK OVER_LIMIT]"; got != want {
		t.Errorf("6 requests to / from 2001:db8:5::1 to ::6: %s, want %s (one /64, one counter)", got, want)
	}
}

// maskAddress returns the value of Envoy's masked_remote_address action
// for addr: the address masked to the action's prefix length (IPv4 32
// and IPv6 128 when unset), in CIDR form, e.g. "2001:db8:5::/64" or
// "203.0.113.7/32".
func maskAddress(t *testing.T, addr string, m *routev3.RateLimit_Action_MaskedRemoteAddress) string {
	t.Helper()
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		t.Fatal(err)
	}
	bits := 32
	if v := m.GetV4PrefixMaskLen(); v != nil {
		bits = int(v.GetValue())
	}
	if ip.Is6() {
		bits = 128
		if v := m.GetV6PrefixMaskLen(); v != nil {
			bits = int(v.GetValue())
		}
	}
	p, err := ip.Prefix(bits)
	if err != nil {
		t.Fatal(err)
	}
	return p.String()
}

// memService returns Floodgate's Envoy service on an in-memory store,
// loaded with ratelimit.yaml as --envoy-config does, at a fixed instant in
// the middle of a minute so that no per-minute window turns during a test.
func memService(t *testing.T) *envoyrls.Service {
	t.Helper()
	descriptors, err := config.NewEnvoyReloader([]string{descriptorsFile}, config.ReloaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Minute).Add(30 * time.Second)
	clock := func() time.Time { return now }
	lim, err := floodgate.New(store, floodgate.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := envoyrls.NewService(lim, descriptors.Load, envoyrls.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// clearOfMinuteTurn waits, when the next minute starts within 10s, until
// it has started, so that the per-minute fixed windows of ratelimit.yaml
// cannot turn while a test counts requests against a service on the real
// clock.
func clearOfMinuteTurn() {
	now := time.Now()
	if next := now.Truncate(time.Minute).Add(time.Minute); next.Sub(now) < 10*time.Second {
		time.Sleep(next.Sub(now) + 100*time.Millisecond)
	}
}

// decideFunc is Envoy's rate limit call, in process or over gRPC.
type decideFunc func(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error)

// checkEnvoyRoutes sends decide the descriptors that each route of
// envoy.yaml with rate_limits builds for a sample request (a client
// address of its own, an x-api-key header), until the route is refused.
func checkEnvoyRoutes(t *testing.T, where string, decide decideFunc) {
	t.Helper()
	b := loadBootstrap(t, envoyFile)
	hcm, rl := ingress(t, b, "ingress")
	routes := 0
	for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
		for i, r := range vh.GetRoutes() {
			limits := r.GetRoute().GetRateLimits()
			if len(limits) == 0 {
				continue
			}
			routes++
			name := fmt.Sprintf("%s: %s route %d (%v)", where, vh.GetName(), i, r.GetMatch().GetPathSpecifier())
			req := sampleRequest{remoteAddress: fmt.Sprintf("203.0.113.%d", 10+routes), headers: map[string]string{"x-api-key": "key-1"}}
			checkRoute(t, decide, name, rl.GetDomain(), req, limits)
		}
	}
	if routes == 0 {
		t.Fatalf("%s: no route of %s has rate_limits", where, envoyFile)
	}
}

// sampleRequest is what the actions of the example read from a request.
type sampleRequest struct {
	remoteAddress string
	headers       map[string]string
}

// descriptorsFor builds the descriptors Envoy sends for req under the
// route's rate_limits, for the actions the example uses. As in Envoy, a
// descriptor with an action that produces nothing is not sent.
func descriptorsFor(t *testing.T, req sampleRequest, limits []*routev3.RateLimit) []*ratelimitv3.RateLimitDescriptor {
	t.Helper()
	var out []*ratelimitv3.RateLimitDescriptor
	for _, l := range limits {
		d := &ratelimitv3.RateLimitDescriptor{}
		complete := true
		for _, a := range l.GetActions() {
			switch {
			case a.GetRemoteAddress() != nil:
				d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "remote_address", Value: req.remoteAddress})
			case a.GetMaskedRemoteAddress() != nil:
				d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "masked_remote_address", Value: maskAddress(t, req.remoteAddress, a.GetMaskedRemoteAddress())})
			case a.GetGenericKey() != nil:
				key := a.GetGenericKey().GetDescriptorKey()
				if key == "" {
					key = "generic_key"
				}
				d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: key, Value: a.GetGenericKey().GetDescriptorValue()})
			case a.GetRequestHeaders() != nil:
				v, ok := req.headers[a.GetRequestHeaders().GetHeaderName()]
				if !ok {
					complete = false
					continue
				}
				d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: a.GetRequestHeaders().GetDescriptorKey(), Value: v})
			default:
				t.Fatalf("action %v: the test does not know what descriptor entry Envoy builds for it", a)
			}
		}
		if complete {
			out = append(out, d)
		}
	}
	return out
}

// checkRoute sends the route's descriptors until Floodgate says
// OVER_LIMIT, checking that each matched a configured limit and that the
// route was refused exactly after its tightest limit.
func checkRoute(t *testing.T, decide decideFunc, name, domain string, req sampleRequest, limits []*routev3.RateLimit) {
	t.Helper()
	descs := descriptorsFor(t, req, limits)
	if len(descs) != len(limits) {
		t.Fatalf("%s: the sample request builds %d descriptors of %d", name, len(descs), len(limits))
	}
	rreq := &rlspb.RateLimitRequest{Domain: domain, Descriptors: descs}
	var tightest uint32
	for n := uint32(1); ; n++ {
		resp, err := decide(context.Background(), rreq)
		if err != nil {
			t.Fatalf("%s: request %d: %v", name, n, err)
		}
		if n == 1 {
			for i, st := range resp.GetStatuses() {
				cl := st.GetCurrentLimit()
				if cl == nil {
					t.Fatalf("%s: descriptor %v matches no configured limit", name, descs[i].GetEntries())
				}
				if tightest == 0 || cl.GetRequestsPerUnit() < tightest {
					tightest = cl.GetRequestsPerUnit()
				}
			}
		}
		if resp.GetOverallCode() == rlspb.RateLimitResponse_OVER_LIMIT {
			if got := n - 1; got != tightest {
				t.Errorf("%s: %d requests allowed, want %d (the tightest limit)", name, got, tightest)
			}
			return
		}
		if n > tightest {
			t.Fatalf("%s: request %d still allowed, beyond the tightest limit %d", name, n, tightest)
		}
	}
}

// TestEnvoyDocsWalkthrough replays docs/deploy.md's quick start on
// Floodgate loaded with ratelimit.yaml: seven requests to / from one
// address get five OKs; in a new minute three requests to /search with
// one API key get OK, OK, OVER_LIMIT, and the refused one consumed
// nothing in the address's counter (three more requests to / pass, the
// fourth does not).
func TestEnvoyDocsWalkthrough(t *testing.T) {
	b := loadBootstrap(t, envoyFile)
	hcm, rl := ingress(t, b, "ingress")
	routeLimits := func(prefix string) []*routev3.RateLimit {
		for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				if r.GetMatch().GetPrefix() == prefix {
					return r.GetRoute().GetRateLimits()
				}
			}
		}
		t.Fatalf("no route for prefix %s", prefix)
		return nil
	}
	send := func(svc *envoyrls.Service, prefix string, headers map[string]string, n int) string {
		req := sampleRequest{remoteAddress: "172.18.0.1", headers: headers}
		var got []string
		for range n {
			resp, err := svc.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{
				Domain: rl.GetDomain(), Descriptors: descriptorsFor(t, req, routeLimits(prefix))})
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, resp.GetOverallCode().String())
		}
		return fmt.Sprint(got)
	}
	if got, want := send(memService(t), "/", nil, 7), "[OK OK OK OK OK OVER_LIMIT OVER_LIMIT]"; got != want {
		t.Errorf("7 requests to /: %s, want %s", got, want)
	}
	svc := memService(t) // the next minute: a new store
	if got, want := send(svc, "/search", map[string]string{"x-api-key": "k1"}, 3), "[OK OK OVER_LIMIT]"; got != want {
		t.Errorf("3 requests to /search: %s, want %s", got, want)
	}
	if got, want := send(svc, "/", nil, 4), "[OK OK OK OVER_LIMIT]"; got != want {
		t.Errorf("then 4 requests to /: %s, want %s (the refused /search request must not count)", got, want)
	}
}
