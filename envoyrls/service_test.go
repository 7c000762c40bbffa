package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

const (
	ok   = rlspb.RateLimitResponse_OK
	over = rlspb.RateLimitResponse_OVER_LIMIT
)

const apiConfig = `
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: route
    value: /search
    rate_limit: {unit: minute, requests_per_unit: 2}
    descriptors:
      - key: method
        value: POST
        rate_limit: {unit: hour, requests_per_unit: 100}
  - key: health
    rate_limit: {unlimited: true}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: bucket
    rate_limit: {window: 1h, requests_per_unit: 1, algorithm: token_bucket, burst: 4}
  - key: ten
    rate_limit: {unit: minute, requests_per_unit: 10}
`

func TestStatusesOverallCodeAndHeaders(t *testing.T) {
	r := newMemRig(t, apiConfig, Options{ResponseHeaders: true})
	req := request("api",
		desc("user=alice"),             // limited 3/min
		desc("remote_address=1.2.3.4"), // no rule
		desc("health=check"),           // unlimited
		desc("route=/search", "method=POST"),
	)
	resp := r.call(t, req)
	if resp.GetOverallCode() != ok {
		t.Fatalf("overall %v, want OK", resp.GetOverallCode())
	}
	st := resp.GetStatuses()
	wantStatus(t, "user", st[0], ok, 2, 3)
	if got := st[0].GetCurrentLimit().GetUnit(); got != rlspb.RateLimitResponse_RateLimit_MINUTE {
		t.Errorf("user unit %v", got)
	}
	if got := st[0].GetDurationUntilReset().AsDuration(); got != 50*time.Second {
		t.Errorf("user duration_until_reset %v, want 50s", got)
	}
	wantStatus(t, "unmatched", st[1], ok, 0, 0)
	if st[1].GetCurrentLimit() != nil {
		t.Errorf("unmatched descriptor has a current_limit")
	}
	wantStatus(t, "unlimited", st[2], ok, math.MaxUint32, 0)
	wantStatus(t, "route+method", st[3], ok, 99, 100)
	if got := st[3].GetCurrentLimit().GetUnit(); got != rlspb.RateLimitResponse_RateLimit_HOUR {
		t.Errorf("nested unit %v", got)
	}
	// Headers describe the descriptor closest to its limit: user, 2 of 3.
	h := headers(resp)
	if h["X-RateLimit-Limit"] != "3" || h["X-RateLimit-Remaining"] != "2" || h["X-RateLimit-Reset"] != "50" {
		t.Errorf("headers %v", h)
	}

	for range 2 {
		r.call(t, request("api", desc("user=alice")))
	}
	resp = r.call(t, req)
	if resp.GetOverallCode() != over {
		t.Fatalf("fourth request: overall %v, want OVER_LIMIT", resp.GetOverallCode())
	}
	wantStatus(t, "user over", resp.GetStatuses()[0], over, 0, 3)
	// All or nothing: the nested limit was not charged for the denied request.
	wantStatus(t, "route+method after denial", resp.GetStatuses()[3], ok, 99, 100)
	if h := headers(resp); h["X-RateLimit-Remaining"] != "0" || h["X-RateLimit-Limit"] != "3" {
		t.Errorf("headers when over: %v", h)
	}
	// Another user is unaffected.
	wantStatus(t, "bob", r.call(t, request("api", desc("user=bob"))).GetStatuses()[0], ok, 2, 3)
}

// TestShadowDescriptorSetsNoHeaders: a shadow descriptor over its limit,
// in a request another descriptor admits, does not give the client its
// limit in the headers (it is watched, not enforced); the enforced one
// does. (An outside walk: X-RateLimit-Limit 1, Remaining 0 on an allowed
// request.)
func TestShadowDescriptorSetsNoHeaders(t *testing.T) {
	r := newMemRig(t, apiConfig, Options{ResponseHeaders: true})
	r.call(t, request("api", desc("shadow=s1"), desc("ten=t1")))
	resp := r.call(t, request("api", desc("shadow=s1"), desc("ten=t1")))
	if resp.GetOverallCode() != ok || resp.GetStatuses()[0].GetCode() != over {
		t.Fatalf("second request: overall %v, shadow %v; want OK with the shadow descriptor over", resp.GetOverallCode(), resp.GetStatuses()[0].GetCode())
	}
	if h := headers(resp); h["X-RateLimit-Limit"] != "10" || h["X-RateLimit-Remaining"] != "8" {
		t.Errorf("headers %v, want the enforced descriptor's (10, 8 left)", h)
	}
	// A request of shadow descriptors only gets no headers.
	if h := r.call(t, request("api", desc("shadow=s2"))).GetResponseHeadersToAdd(); len(h) != 0 {
		t.Errorf("headers of a shadow-only request: %v", h)
	}
}

func TestHeadersOffByDefaultAndRenamed(t *testing.T) {
	r := newMemRig(t, apiConfig, Options{})
	if h := r.call(t, request("api", desc("user=a"))).GetResponseHeadersToAdd(); len(h) != 0 {
		t.Errorf("headers without ResponseHeaders: %v", h)
	}
	r = newMemRig(t, apiConfig, Options{ResponseHeaders: true, LimitHeader: "RateLimit-Limit", RemainingHeader: "RateLimit-Remaining", ResetHeader: "RateLimit-Reset"})
	if h := headers(r.call(t, request("api", desc("user=a")))); h["RateLimit-Limit"] != "3" || h["RateLimit-Remaining"] != "2" || h["RateLimit-Reset"] != "50" {
		t.Errorf("renamed headers %v", h)
	}
	// A request matching no limit gets no headers.
	if h := r.call(t, request("api", desc("nothing=here"))).GetResponseHeadersToAdd(); len(h) != 0 {
		t.Errorf("headers with no limit: %v", h)
	}
}

// TestAllOrNothing shows the difference with envoyproxy/ratelimit: a
// request denied by one descriptor consumes nothing in the others.
func TestAllOrNothing(t *testing.T) {
	allOrNothing(t, newMemRig(t, apiConfig, Options{}))
}

func allOrNothing(t *testing.T, r *rig) {
	t.Helper()
	both := request("api", desc("tenant=acme"), desc("route=/search"))
	for i := range 2 {
		resp := r.call(t, both)
		if resp.GetOverallCode() != ok {
			t.Fatalf("request %d: %v", i, resp.GetOverallCode())
		}
	}
	for i := range 3 {
		resp := r.call(t, both)
		if resp.GetOverallCode() != over {
			t.Fatalf("denied request %d: %v", i, resp.GetOverallCode())
		}
		wantStatus(t, "tenant", resp.GetStatuses()[0], ok, 3, 5)
		wantStatus(t, "route", resp.GetStatuses()[1], over, 0, 2)
	}
	// The tenant still has 3 of 5: three denied requests cost it nothing.
	wantStatus(t, "tenant alone", r.call(t, request("api", desc("tenant=acme"))).GetStatuses()[0], ok, 2, 5)
}

func TestShadowModeNeverDenies(t *testing.T) {
	shadowNeverDenies(t, newMemRig(t, apiConfig, Options{}))
}

func shadowNeverDenies(t *testing.T, r *rig) {
	t.Helper()
	req := request("api", desc("shadow=s"), desc("user=carol"))
	resp := r.call(t, req)
	wantStatus(t, "shadow first", resp.GetStatuses()[0], ok, 0, 1)
	wantStatus(t, "user first", resp.GetStatuses()[1], ok, 2, 3)
	for i, wantRemaining := range []uint32{1, 0} {
		resp = r.call(t, req)
		if resp.GetOverallCode() != ok {
			t.Fatalf("request %d: overall %v; a shadow descriptor must not deny", i+2, resp.GetOverallCode())
		}
		wantStatus(t, "shadow over", resp.GetStatuses()[0], over, 0, 1)
		// The enforced descriptor still counted the request.
		wantStatus(t, "user counted", resp.GetStatuses()[1], ok, wantRemaining, 3)
	}
	resp = r.call(t, req)
	if resp.GetOverallCode() != over {
		t.Fatalf("enforced limit exhausted: overall %v", resp.GetOverallCode())
	}
	wantStatus(t, "user over", resp.GetStatuses()[1], over, 0, 3)
}

func TestHitsAddend(t *testing.T) {
	r := newMemRig(t, apiConfig, Options{})
	ten := func(hits uint32, d *ratelimitv3.RateLimitDescriptor) *rlspb.RateLimitResponse_DescriptorStatus {
		req := request("api", d)
		req.HitsAddend = hits
		return r.call(t, req).GetStatuses()[0]
	}
	wantStatus(t, "hits 4", ten(4, desc("ten=x")), ok, 6, 10)
	peek := desc("ten=x")
	peek.HitsAddend = wrapperspb.UInt64(0)
	wantStatus(t, "descriptor hits 0 peeks", ten(9, peek), ok, 6, 10)
	wantStatus(t, "hits 7 over", ten(7, desc("ten=x")), over, 6, 10)
	six := desc("ten=x")
	six.HitsAddend = wrapperspb.UInt64(6)
	wantStatus(t, "descriptor hits 6 overrides request's 1", ten(1, six), ok, 0, 10)
	wantStatus(t, "exhausted", ten(0, desc("ten=x")), over, 0, 10)
}

func TestDuplicateDescriptorsShareOneCounter(t *testing.T) {
	r := newMemRig(t, apiConfig, Options{})
	resp := r.call(t, request("api", desc("user=dave"), desc("user=dave")))
	wantStatus(t, "first copy", resp.GetStatuses()[0], ok, 1, 3)
	wantStatus(t, "second copy", resp.GetStatuses()[1], ok, 1, 3)
	resp = r.call(t, request("api", desc("user=dave"), desc("user=dave")))
	if resp.GetOverallCode() != over {
		t.Fatalf("2 hits with 1 left: %v", resp.GetOverallCode())
	}
	wantStatus(t, "one left", r.call(t, request("api", desc("user=dave"))).GetStatuses()[0], ok, 0, 3)
}

func TestReplaces(t *testing.T) {
	r := newMemRig(t, `
domain: r
descriptors:
  - key: user
    rate_limit: {name: default_user, unit: minute, requests_per_unit: 1}
  - key: plan
    value: gold
    rate_limit:
      unit: minute
      requests_per_unit: 3
      replaces: [{name: default_user}]
`, Options{})
	req := request("r", desc("user=erin"), desc("plan=gold"))
	for i, rem := range []uint32{2, 1, 0} {
		resp := r.call(t, req)
		if resp.GetOverallCode() != ok {
			t.Fatalf("gold request %d denied", i)
		}
		if resp.GetStatuses()[0].GetCurrentLimit() != nil {
			t.Errorf("replaced limit still reported")
		}
		wantStatus(t, "gold", resp.GetStatuses()[1], ok, rem, 3)
	}
	// Without the gold plan the default applies.
	wantStatus(t, "default", r.call(t, request("r", desc("user=erin"))).GetStatuses()[0], ok, 0, 1)
}

// TestReplacedUnlimited: a rule that replaces an unlimited one leaves it
// unlimited, as envoyproxy/ratelimit does (its unlimited descriptors are
// set aside before the replaced ones are dropped): OK with limit_remaining
// 4294967295, where it was answered OK with 0 (a differential walk). A
// replaced limited or shadow rule is answered OK with no current_limit and
// 0 remaining, as theirs, in both modes.
func TestReplacedUnlimited(t *testing.T) {
	const yaml = `
domain: u
descriptors:
  - key: free
    rate_limit: {name: u1, unlimited: true}
  - key: watched
    rate_limit: {name: s1, unit: minute, requests_per_unit: 1}
    shadow_mode: true
  - key: lim
    rate_limit:
      unit: hour
      requests_per_unit: 5
      replaces: [{name: u1}, {name: s1}]
`
	for _, each := range []bool{false, true} {
		r := newMemRig(t, yaml, Options{CountEachDescriptor: each})
		for i, rem := range []uint32{4, 3} {
			what := fmt.Sprintf("count each %v, request %d", each, i)
			resp := r.call(t, request("u", desc("free=x"), desc("watched=x"), desc("lim=x")))
			if resp.GetOverallCode() != ok {
				t.Fatalf("%s: overall %v", what, resp.GetOverallCode())
			}
			wantStatus(t, what+": replaced unlimited", resp.GetStatuses()[0], ok, math.MaxUint32, 0)
			wantStatus(t, what+": replaced shadow", resp.GetStatuses()[1], ok, 0, 0)
			wantStatus(t, what+": replacing", resp.GetStatuses()[2], ok, rem, 5)
		}
	}
}

func TestLimitOverride(t *testing.T) {
	override := func() *ratelimitv3.RateLimitDescriptor {
		d := desc("user=frank")
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_MINUTE}
		return d
	}
	r := newMemRig(t, apiConfig, Options{})
	for i, want := range []rlspb.RateLimitResponse_Code{ok, ok, over} {
		st := r.call(t, request("api", override())).GetStatuses()[0]
		if st.GetCode() != want || st.GetCurrentLimit().GetRequestsPerUnit() != 2 {
			t.Errorf("override request %d: %v", i, st)
		}
	}
	r = newMemRig(t, apiConfig, Options{IgnoreLimitOverrides: true})
	wantStatus(t, "ignored override", r.call(t, request("api", override())).GetStatuses()[0], ok, 2, 3)
}

func TestZeroLimitDeniesWithoutConsuming(t *testing.T) {
	r := newMemRig(t, apiConfig, Options{})
	resp := r.call(t, request("api", desc("user=gina"), desc("blocked=yes")))
	if resp.GetOverallCode() != over {
		t.Fatalf("requests_per_unit 0: overall %v", resp.GetOverallCode())
	}
	wantStatus(t, "user peeked", resp.GetStatuses()[0], ok, 3, 3)
	wantStatus(t, "blocked", resp.GetStatuses()[1], over, 0, 0)
	wantStatus(t, "user untouched", r.call(t, request("api", desc("user=gina"))).GetStatuses()[0], ok, 2, 3)

	// Its reset is the end of the unit's window (a second here), as
	// envoyproxy/ratelimit answers, not zero ("retry now, for ever").
	at := t0.Add(250 * time.Millisecond)
	r = newMemRig(t, apiConfig, Options{ResponseHeaders: true, Clock: func() time.Time { return at }})
	resp = r.call(t, request("api", desc("blocked=yes")))
	if got := resp.GetStatuses()[0].GetDurationUntilReset().AsDuration(); got != 750*time.Millisecond {
		t.Errorf("blocked duration_until_reset %v, want 750ms (the rest of the second)", got)
	}
	if h := headers(resp); h["X-RateLimit-Reset"] != "1" || h["X-RateLimit-Limit"] != "0" {
		t.Errorf("blocked headers %v, want reset 1, limit 0", h)
	}
}

func TestAlgorithmFromConfig(t *testing.T) {
	r := newMemRig(t, apiConfig, Options{})
	// token_bucket, 1 per hour, burst 4: four pass at once, then none.
	for i, want := range []rlspb.RateLimitResponse_Code{ok, ok, ok, ok, over} {
		st := r.call(t, request("api", desc("bucket=b"))).GetStatuses()[0]
		if st.GetCode() != want {
			t.Fatalf("bucket request %d: %v", i, st.GetCode())
		}
		if want == over && st.GetDurationUntilReset().AsDuration() != time.Hour {
			t.Errorf("retry after %v, want 1h (one token per hour)", st.GetDurationUntilReset().AsDuration())
		}
	}
}

func TestInvalidRequestsConsumeNothing(t *testing.T) {
	r := newMemRig(t, apiConfig, Options{MaxHitsAddend: 1000})
	negative := desc("user=hal")
	negative.IsNegativeHits = true
	negative.HitsAddend = wrapperspb.UInt64(1)
	many := []*ratelimitv3.RateLimitDescriptor{desc("user=hal")}
	for i := range MaxDescriptors {
		many = append(many, desc(fmt.Sprintf("user=hal%d", i)))
	}
	badUnit := desc("user=hal")
	badUnit.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_MONTH}
	tests := []struct {
		name string
		req  *rlspb.RateLimitRequest
		want string
	}{
		{"empty domain", request("", desc("user=hal")), "domain is empty"},
		{"unknown domain", request("nope", desc("user=hal")), `unknown domain "nope"`},
		{"long unknown domain, clipped", request(strings.Repeat("é", 100_000), desc("user=hal")), `unknown domain "` + strings.Repeat("é", 40) + `..."`},
		{"no descriptors", request("api"), "no descriptors"},
		{"too many limited counters", request("api", many...), "more than 16 distinct limited counters"},
		{"negative hits", request("api", desc("user=hal"), negative), "descriptor 1: is_negative_hits"},
		{"no entries", request("api", desc("user=hal"), desc()), "descriptor 1 has no entries"},
		{"month override", request("api", desc("user=hal"), badUnit), "limit override unit MONTH is not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := r.client.ShouldRateLimit(context.Background(), tt.req)
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("code %v (%v), want InvalidArgument", status.Code(err), err)
			}
			if msg := status.Convert(err).Message(); !strings.Contains(msg, tt.want) {
				t.Errorf("message %q does not say %q", msg, tt.want)
			}
		})
	}
	wantStatus(t, "after bad requests", r.call(t, request("api", desc("user=hal"))).GetStatuses()[0], ok, 2, 3)
}

func TestConfigReloadAndMissingConfig(t *testing.T) {
	r := newMemRig(t, apiConfig, Options{})
	wantStatus(t, "before", r.call(t, request("api", desc("user=ivy"))).GetStatuses()[0], ok, 2, 3)
	r.cfg.Store(mustConfig(t, "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 10}\n"))
	// Same node, same policy name: the counter carries over under the new limit.
	wantStatus(t, "after reload", r.call(t, request("api", desc("user=ivy"))).GetStatuses()[0], ok, 8, 10)
	r.cfg.Store(nil)
	_, err := r.client.ShouldRateLimit(context.Background(), request("api", desc("user=ivy")))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("no config: %v, want Unavailable", err)
	}
}

func TestNewServiceValidatesOptions(t *testing.T) {
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.New(st, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := func() *Config { return nil }
	tests := []struct {
		name string
		lim  *floodgate.Limiter
		cfg  func() *Config
		opts Options
		want string
	}{
		{"nil limiter", nil, cfg, Options{}, "nil limiter"},
		{"nil config", lim, nil, Options{}, "nil config function"},
		{"negative hits", lim, cfg, Options{MaxHitsAddend: -1}, "max hits addend -1"},
		{"huge hits", lim, cfg, Options{MaxHitsAddend: floodgate.MaxCost}, "out of range"},
		{"bad header", lim, cfg, Options{LimitHeader: "X Limit"}, `header name "X Limit"`},
	}
	for _, tt := range tests {
		_, err := NewService(tt.lim, tt.cfg, tt.opts)
		if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}

// concurrentExactly sends n concurrent requests for one counter of limit
// 30 per minute and checks that exactly 30 are OK.
func concurrentExactly(t *testing.T, r *rig, n int) {
	t.Helper()
	var wg sync.WaitGroup
	codes := make(chan rlspb.RateLimitResponse_Code, n)
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			resp, err := r.client.ShouldRateLimit(context.Background(), request("c", desc("user=zed"), desc("route=/x")))
			if err != nil {
				errs <- err
				return
			}
			codes <- resp.GetOverallCode()
		})
	}
	wg.Wait()
	close(codes)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := map[rlspb.RateLimitResponse_Code]int{}
	for c := range codes {
		got[c]++
	}
	if got[ok] != 30 || got[over] != n-30 {
		t.Errorf("%d concurrent requests: %d OK, %d OVER_LIMIT; want exactly 30 OK", n, got[ok], got[over])
	}
	// The second descriptor (limit 1000) was charged only for the 30.
	resp := r.call(t, request("c", desc("route=/x")))
	wantStatus(t, "route after burst", resp.GetStatuses()[0], ok, 1000-30-1, 1000)
}

const concurrentConfig = `
domain: c
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 30}
  - key: route
    rate_limit: {unit: minute, requests_per_unit: 1000}
`

func TestConcurrentExactlyLimitMemstore(t *testing.T) {
	concurrentExactly(t, newMemRig(t, concurrentConfig, Options{}), 100)
}

func TestObserve(t *testing.T) {
	var mu sync.Mutex
	var got []Observation
	r := newMemRig(t, apiConfig, Options{Observe: func(o Observation) {
		mu.Lock()
		got = append(got, o)
		mu.Unlock()
	}})
	r.call(t, request("api", desc("user=obs"), desc("nothing=here"), desc("health=x"), desc("shadow=s")))
	r.call(t, request("api", desc("blocked=1"), desc("shadow=s")))
	mu.Lock()
	defer mu.Unlock()
	type seen struct {
		path, identity string
		code, overall  rlspb.RateLimitResponse_Code
		shadow         bool
	}
	var list []seen
	for _, o := range got {
		if o.Domain != "api" || o.Rule == nil || (o.Policy != o.Rule.Policy.Name) {
			t.Errorf("observation %+v", o)
			continue
		}
		list = append(list, seen{o.Rule.Path, o.Identity, o.Code, o.Overall, o.Shadow})
	}
	want := []seen{
		{"user", "user=obs", ok, ok, false},
		{"shadow", "shadow=s", ok, ok, true},
		{"blocked", "blocked=1", over, over, false},
		{"shadow", "shadow=s", over, over, true}, // peeked: its one unit is used
	}
	if len(list) != len(want) {
		t.Fatalf("observations %+v, want %+v", list, want)
	}
	for i := range want {
		if list[i] != want[i] {
			t.Errorf("observation %d: %+v, want %+v", i, list[i], want[i])
		}
	}
}

// TestCountEachDescriptor: with the switch, a request is counted in every
// descriptor whose own limit admits it, as envoyproxy/ratelimit counts.
func TestCountEachDescriptor(t *testing.T) {
	r := newMemRig(t, apiConfig, Options{CountEachDescriptor: true})
	both := request("api", desc("tenant=acme"), desc("route=/search"))
	for range 2 {
		if resp := r.call(t, both); resp.GetOverallCode() != ok {
			t.Fatalf("admitted request: %v", resp.GetOverallCode())
		}
	}
	resp := r.call(t, both)
	if resp.GetOverallCode() != over {
		t.Fatalf("third request: %v", resp.GetOverallCode())
	}
	// The tenant counted the denied request too: 5 - 3 = 2 left.
	wantStatus(t, "tenant", resp.GetStatuses()[0], ok, 2, 5)
	wantStatus(t, "route", resp.GetStatuses()[1], over, 0, 2)
	wantStatus(t, "tenant alone", r.call(t, request("api", desc("tenant=acme"))).GetStatuses()[0], ok, 1, 5)
}

// TestHeadersTellTheLongestWait: with two descriptors over their limits,
// the headers describe the one whose wait is longer, so that a client that
// waits X-RateLimit-Reset finds both admitting it again, not the first one
// (a retry-after walk: Reset 1 when the request could not pass for 3 s).
func TestHeadersTellTheLongestWait(t *testing.T) {
	r := newMemRig(t, apiConfig, Options{ResponseHeaders: true})
	for range 3 {
		r.call(t, request("api", desc("user=carol")))
	}
	for range 4 {
		r.call(t, request("api", desc("bucket=b1")))
	}
	resp := r.call(t, request("api", desc("user=carol"), desc("bucket=b1")))
	st := resp.GetStatuses()
	if resp.GetOverallCode() != over || st[0].GetCode() != over || st[1].GetCode() != over {
		t.Fatalf("both exhausted: overall %v, statuses %v", resp.GetOverallCode(), st)
	}
	user, bucket := st[0].GetDurationUntilReset().AsDuration(), st[1].GetDurationUntilReset().AsDuration()
	if bucket <= user {
		t.Fatalf("the bucket's wait %v is not longer than the user limit's %v: the test needs it to be", bucket, user)
	}
	h := headers(resp)
	if want := fmt.Sprint(ceilSeconds(bucket)); h["X-RateLimit-Reset"] != want || h["X-RateLimit-Limit"] != fmt.Sprint(st[1].GetCurrentLimit().GetRequestsPerUnit()) {
		t.Errorf("headers %v, want the bucket's (reset %s, limit %d); user's reset %v", h, want, st[1].GetCurrentLimit().GetRequestsPerUnit(), user)
	}
}
