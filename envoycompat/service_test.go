package envoycompat

import (
	"context"
	"errors"
	"math"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// The sequences below follow envoyproxy/ratelimit's integration test
// (test/integration/integration_test.go, testBasicBaseConfig), its service
// tests (test/service/ratelimit_test.go) and its fixed window cache tests
// (test/redis/fixed_cache_impl_test.go), run over real gRPC against the
// in-memory store and a real redis-server.

// fixedNow is a fixed instant, 12 s into a minute, 1,212 s into an hour.
var fixedNow = time.Unix(1_800_001_212, 0)

type rig struct {
	svc     *Service
	client  rlspb.RateLimitServiceClient
	metrics *Metrics
	reg     *prometheus.Registry
}

// newRig serves docs (one file each) over gRPC on a loopback port.
func newRig(t *testing.T, store Store, opts Options, docs ...string) *rig {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	opts.Store, opts.Metrics = store, m
	if opts.Now == nil {
		opts.Now = func() time.Time { return fixedNow }
	}
	if opts.NearLimitRatio == 0 {
		opts.NearLimitRatio = 0.8
	}
	svc, err := NewService(opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) > 0 {
		cfg, err := loadStrings(t, false, docs...)
		if err != nil {
			t.Fatal(err)
		}
		svc.SetConfig(cfg)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	svc.Register(gs)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rig{svc: svc, client: rlspb.NewRateLimitServiceClient(conn), metrics: m, reg: reg}
}

// stores runs f on the in-memory store and on a private redis-server.
func stores(t *testing.T, f func(t *testing.T, mk func() Store)) {
	t.Run("memory", func(t *testing.T) {
		f(t, func() Store { return &MemoryStore{Now: func() time.Time { return fixedNow }} })
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		c := srv.Client(t)
		f(t, func() Store { return &RedisStore{Client: c} })
	})
}

func (r *rig) call(t *testing.T, req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
	t.Helper()
	resp, err := r.client.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// req builds a request of descriptors "k=v,k2=v2" (see descriptorOf);
// a descriptor ending in "+N" carries its own hits_addend N.
func req(t *testing.T, domain string, hits uint32, descs ...string) *rlspb.RateLimitRequest {
	t.Helper()
	r := &rlspb.RateLimitRequest{Domain: domain, HitsAddend: hits}
	for _, d := range descs {
		var own *wrapperspb.UInt64Value
		if s, n, ok := strings.Cut(d, "+"); ok {
			var v uint64
			for _, c := range n {
				v = v*10 + uint64(c-'0')
			}
			own, d = wrapperspb.UInt64(v), s
		}
		rd := descriptorOf(t, d)
		rd.HitsAddend = own
		r.Descriptors = append(r.Descriptors, rd)
	}
	return r
}

// st is an expected status: code, limit (rpu/unit, rpu 0 = no
// current_limit) and remaining.
type st struct {
	code      rlspb.RateLimitResponse_Code
	rpu       uint32
	unit      rlspb.RateLimitResponse_RateLimit_Unit
	remaining uint32
}

const (
	okc  = rlspb.RateLimitResponse_OK
	over = rlspb.RateLimitResponse_OVER_LIMIT
)

func check(t *testing.T, step string, resp *rlspb.RateLimitResponse, overall rlspb.RateLimitResponse_Code, want ...st) {
	t.Helper()
	if resp.GetOverallCode() != overall {
		t.Errorf("%s: overall %s, want %s", step, resp.GetOverallCode(), overall)
	}
	if len(resp.GetStatuses()) != len(want) {
		t.Fatalf("%s: %d statuses, want %d", step, len(resp.GetStatuses()), len(want))
	}
	for i, w := range want {
		g := resp.GetStatuses()[i]
		if g.GetCode() != w.code || g.GetLimitRemaining() != w.remaining {
			t.Errorf("%s: status %d = %s remaining %d, want %s remaining %d", step, i, g.GetCode(), g.GetLimitRemaining(), w.code, w.remaining)
		}
		if w.unit == rlspb.RateLimitResponse_RateLimit_UNKNOWN {
			if g.GetCurrentLimit() != nil || g.GetDurationUntilReset() != nil {
				t.Errorf("%s: status %d has current_limit %v, want none", step, i, g.GetCurrentLimit())
			}
			continue
		}
		if g.GetCurrentLimit().GetRequestsPerUnit() != w.rpu || g.GetCurrentLimit().GetUnit() != w.unit {
			t.Errorf("%s: status %d limit %v, want %d per %s", step, i, g.GetCurrentLimit(), w.rpu, w.unit)
		}
		if want := wantReset(w.unit); g.GetDurationUntilReset().GetSeconds() != want || g.GetDurationUntilReset().GetNanos() != 0 {
			t.Errorf("%s: status %d reset %v, want %ds", step, i, g.GetDurationUntilReset().AsDuration(), want)
		}
	}
}

const integrationConfig = `
domain: another
descriptors:
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 10}
`

const basicIntegration = `
domain: basic
descriptors:
  - key: key1
    rate_limit: {unit: second, requests_per_unit: 50}
`

func TestIntegrationSequence(t *testing.T) {
	for _, stop := range []bool{false, true} {
		name := "count-every-descriptor"
		if stop {
			name = "stop-increment-when-over-limit"
		}
		t.Run(name, func(t *testing.T) {
			stores(t, func(t *testing.T, mk func() Store) {
				r := newRig(t, mk(), Options{StopIncrementWhenOverLimit: stop}, basicIntegration, integrationConfig)
				check(t, "unknown domain", r.call(t, req(t, "foo", 1, "hello=world")), okc, st{code: okc})
				check(t, "key1", r.call(t, req(t, "basic", 1, "key1=foo")), okc, st{okc, 50, sec, 49})
				for i := range 25 {
					code, rem := okc, uint32(20-(i+1))
					if i >= 20 {
						code, rem = over, 0
					}
					check(t, "key2 alone", r.call(t, req(t, "another", 1, "key2=alone")), code, st{code, 20, mins, rem})
				}
				for i := range 15 {
					code, rem1, rem2 := okc, uint32(20-(i+1)), uint32(10-(i+1))
					if i >= 10 {
						code, rem2 = over, 0
						if stop {
							rem1 = 10
						}
					}
					check(t, "key2 and key3", r.call(t, req(t, "another", 1, "key2=pair", "key3=pair")), code,
						st{okc, 20, mins, rem1}, st{code, 10, hour, rem2})
				}
				if got := testutil.ToFloat64(r.metrics.perLimit.WithLabelValues("another", "key2", statTotalHits)); got != 40 {
					t.Errorf("total_hits of another.key2 = %v, want 40", got)
				}
				for stat, want := range map[string]float64{statOverLimit: 5, statNearLimit: 4, statWithinLimit: 35} {
					// near: the hits that took key2=alone from 16 (0.8 × 20) to 20
					if got := testutil.ToFloat64(r.metrics.perLimit.WithLabelValues("another", "key2", stat)); got != want {
						t.Errorf("%s of another.key2 = %v, want %v", stat, got, want)
					}
				}
			})
		})
	}
}

// TestNearLimitRatioOutsideRange: a NEAR_LIMIT_RATIO above 1 or below 0
// counts no hit as near_limit, within or over the limit; the subtraction
// of the over-limit path used to wrap around for a threshold above the
// limit.
func TestNearLimitRatioOutsideRange(t *testing.T) {
	for _, ratio := range []float32{1.5, -1} {
		r := newRig(t, &MemoryStore{}, Options{NearLimitRatio: ratio}, basicIntegration, integrationConfig)
		for range 25 {
			r.call(t, req(t, "another", 1, "key2=alone"))
		}
		for stat, want := range map[string]float64{statOverLimit: 5, statNearLimit: 0, statWithinLimit: 20} {
			if got := testutil.ToFloat64(r.metrics.perLimit.WithLabelValues("another", "key2", stat)); got != want {
				t.Errorf("ratio %v: %s of another.key2 = %v, want %v", ratio, stat, got, want)
			}
		}
	}
}

const costConfig = `
domain: cost
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: free
    rate_limit: {unlimited: true}
  - key: never
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: q
    value: a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: q
    value: b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: monthly
    rate_limit: {unit: month, requests_per_unit: 3}
`

func TestHitsAddendSemantics(t *testing.T) {
	stores(t, func(t *testing.T, mk func() Store) {
		r := newRig(t, mk(), Options{}, costConfig)
		check(t, "cost 5", r.call(t, req(t, "cost", 5, "user=a")), okc, st{okc, 20, mins, 15})
		// A cost above what is left: over the limit, remaining 0, and counted.
		check(t, "cost 16 with 15 left", r.call(t, req(t, "cost", 16, "user=a")), over, st{over, 20, mins, 0})
		check(t, "cost 1 after", r.call(t, req(t, "cost", 1, "user=a")), over, st{over, 20, mins, 0})
		// Request hits_addend 0 means 1.
		check(t, "request cost 0 is 1", r.call(t, req(t, "cost", 0, "user=b")), okc, st{okc, 20, mins, 19})
		// Descriptor hits_addend 0 counts nothing; at the limit it is OK.
		check(t, "fill", r.call(t, req(t, "cost", 19, "user=b")), okc, st{okc, 20, mins, 0})
		check(t, "descriptor cost 0 at the limit", r.call(t, req(t, "cost", 7, "user=b+0")), okc, st{okc, 20, mins, 0})
		check(t, "descriptor cost 1 over", r.call(t, req(t, "cost", 0, "user=b+1")), over, st{over, 20, mins, 0})
	})
}

func TestShadowUnlimitedZeroQuotaMonth(t *testing.T) {
	stores(t, func(t *testing.T, mk func() Store) {
		r := newRig(t, mk(), Options{}, costConfig)
		for i := range 3 {
			rem := uint32(max(1-i, 0))
			// shadow_mode: the descriptor's own status is OK even over its limit
			check(t, "shadow", r.call(t, req(t, "cost", 1, "shadow=s")), okc, st{okc, 2, mins, rem})
		}
		check(t, "unlimited", r.call(t, req(t, "cost", 1, "free=x")), okc, st{code: okc, remaining: math.MaxUint32})
		check(t, "requests_per_unit 0", r.call(t, req(t, "cost", 1, "never=x", "user=z")), over, st{over, 0, sec, 0}, st{okc, 20, mins, 19})
		// quota_mode: over only when every quota descriptor is over.
		check(t, "quota a", r.call(t, req(t, "cost", 1, "q=a", "q=b")), okc, st{okc, 1, mins, 0}, st{okc, 2, mins, 1})
		check(t, "quota a over, b not", r.call(t, req(t, "cost", 1, "q=a", "q=b")), okc, st{over, 1, mins, 0}, st{okc, 2, mins, 0})
		check(t, "quota both over", r.call(t, req(t, "cost", 1, "q=a", "q=b")), over, st{over, 1, mins, 0}, st{over, 2, mins, 0})
		check(t, "month", r.call(t, req(t, "cost", 1, "monthly=m")), okc, st{okc, 3, mon, 2})
	})
}

func TestGlobalShadowAndHeaders(t *testing.T) {
	r := newRig(t, &MemoryStore{}, Options{GlobalShadowMode: true}, costConfig)
	r.call(t, req(t, "cost", 20, "user=h"))
	resp := r.call(t, req(t, "cost", 1, "user=h"))
	check(t, "global shadow", resp, okc, st{over, 20, mins, 0})
	if len(resp.GetResponseHeadersToAdd()) != 0 {
		t.Errorf("headers %v, want none by default", resp.GetResponseHeadersToAdd())
	}
	if got := testutil.ToFloat64(r.metrics.globalShadow); got != 1 {
		t.Errorf("global shadow counted %v, want 1", got)
	}

	r = newRig(t, &MemoryStore{}, Options{ResponseHeaders: true, LimitHeader: "RateLimit-Limit", RemainingHeader: "RateLimit-Remaining", ResetHeader: "RateLimit-Reset"}, costConfig)
	resp = r.call(t, req(t, "cost", 3, "user=h", "monthly=h"))
	got := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		got[h.GetKey()] = h.GetValue()
	}
	want := map[string]string{"RateLimit-Limit": "3", "RateLimit-Remaining": "0", "RateLimit-Reset": "1438788"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("header %s = %q, want %q (all %v)", k, got[k], v, got)
		}
	}
}

const exampleReplaces = `
domain: rl
descriptors:
  - key: category
    value: account
    rate_limit:
      replaces: [{name: per_user}]
      unit: minute
      requests_per_unit: 4
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 1}
`

func TestReplaces(t *testing.T) {
	r := newRig(t, &MemoryStore{}, Options{}, exampleReplaces)
	check(t, "alone", r.call(t, req(t, "rl", 1, "user=u")), okc, st{okc, 1, mins, 0})
	check(t, "alone again", r.call(t, req(t, "rl", 1, "user=u")), over, st{over, 1, mins, 0})
	check(t, "replaced", r.call(t, req(t, "rl", 1, "user=u", "category=account")), okc, st{code: okc}, st{okc, 4, mins, 3})
}

func TestRequestErrors(t *testing.T) {
	r := newRig(t, &MemoryStore{}, Options{})
	_, err := r.client.ShouldRateLimit(context.Background(), req(t, "x", 1, "a=b"))
	if status.Code(err) != codes.Unknown || !strings.Contains(err.Error(), "no rate limit configuration loaded") {
		t.Fatalf("without configuration: %v", err)
	}
	cfg, _ := loadStrings(t, false, costConfig)
	r.svc.SetConfig(cfg)
	for _, tc := range []struct {
		req  *rlspb.RateLimitRequest
		want string
	}{
		{&rlspb.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{{}}}, "domain must not be empty"},
		{&rlspb.RateLimitRequest{Domain: "cost"}, "descriptor list must not be empty"},
	} {
		_, err := r.client.ShouldRateLimit(context.Background(), tc.req)
		if status.Code(err) != codes.Unknown || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want Unknown %q", tc.req, err, tc.want)
		}
	}
	// A limit override without a unit: theirs panics; here it is an error.
	unknown := req(t, "cost", 1, "user=o")
	unknown.Descriptors[0].Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5}
	if _, err := r.client.ShouldRateLimit(context.Background(), unknown); status.Code(err) != codes.Unknown || !strings.Contains(err.Error(), "has no length") {
		t.Errorf("override with unit UNKNOWN: %v", err)
	}
	if got := testutil.ToFloat64(r.metrics.serviceError); got != 4 {
		t.Errorf("service errors %v, want 4", got)
	}
}

func TestRedisKeysAreTheirs(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	r := newRig(t, &RedisStore{Client: c}, Options{CacheKeyPrefix: "pre:", ExpirationJitterMax: 5 * time.Second}, basicIntegration, integrationConfig, shareThreshold)
	r.call(t, req(t, "another", 3, "key2=v", "key3=w"))
	r.call(t, req(t, "s", 1, "files=/a/1"))
	r.call(t, req(t, "s", 1, "files=/a/2"))
	ctx := context.Background()
	minute := fixedNow.Unix() / 60 * 60
	hourStart := fixedNow.Unix() / 3600 * 3600
	for key, want := range map[string]string{
		"pre:another_key2_v_" + itoa(minute):    "3",
		"pre:another_key3_w_" + itoa(hourStart): "3",
		"pre:s_files_/a/*_" + itoa(hourStart):   "2", // share_threshold: one counter for the wildcard
	} {
		got, err := c.Get(ctx, key).Result()
		if err != nil || got != want {
			t.Errorf("GET %s = %q, %v; want %q", key, got, err, want)
		}
		ttl, err := c.TTL(ctx, key).Result()
		if err != nil || ttl <= 0 {
			t.Errorf("TTL %s = %v, %v; want a time to live", key, ttl, err)
		}
	}
	if ttl := c.TTL(ctx, "pre:another_key2_v_"+itoa(minute)).Val(); ttl > 65*time.Second || ttl < 55*time.Second {
		t.Errorf("minute counter TTL %v, want 60 s plus up to 5 s of jitter", ttl)
	}
}

func TestLocalCacheAnswersWithoutStore(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	r := newRig(t, &RedisStore{Client: c}, Options{LocalCacheBytes: 1 << 20}, integrationConfig)
	for range 21 {
		r.call(t, req(t, "another", 1, "key2=lc"))
	}
	key := "another_key2_lc_" + itoa(fixedNow.Unix()/60*60)
	if got := c.Get(context.Background(), key).Val(); got != "21" {
		t.Fatalf("counter %q, want 21", got)
	}
	check(t, "cached over limit", r.call(t, req(t, "another", 1, "key2=lc")), over, st{over, 20, mins, 0})
	if got := c.Get(context.Background(), key).Val(); got != "21" {
		t.Errorf("counter %q after a cached answer, want 21 (not asked)", got)
	}
	if got := testutil.ToFloat64(r.metrics.perLimit.WithLabelValues("another", "key2", statOverLimitLocal)); got != 1 {
		t.Errorf("over_limit_with_local_cache %v, want 1", got)
	}
}

func TestDynamicMetadata(t *testing.T) {
	cfg := "domain: d\ndescriptors:\n  - key: svc\n    rate_limit: {unit: minute, requests_per_unit: 5}\n    metadata:\n      owner: {name: one}\n"
	r := newRig(t, &MemoryStore{}, Options{DynamicMetadata: true}, cfg)
	md := r.call(t, req(t, "d", 2, "svc=x")).GetDynamicMetadata().AsMap()
	if md["domain"] != "d" || md["hitsAddend"] != float64(2) {
		t.Errorf("metadata %v", md)
	}
	owner, _ := md["metadata"].(map[string]any)["owner"].(map[string]any)
	if owner["name"] != "one" {
		t.Errorf("metadata of the passed descriptor missing: %v", md)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// wantReset is the whole seconds left in the window of unit at fixedNow,
// written out apart from the code under test.
func wantReset(unit rlspb.RateLimitResponse_RateLimit_Unit) int64 {
	secs := map[rlspb.RateLimitResponse_RateLimit_Unit]int64{sec: 1, mins: 60, hour: 3600, day: 86400, week: 604800, mon: 2592000, year: 31536000}[unit]
	return secs - fixedNow.Unix()%secs
}

// TestPerSecondRedis: with REDIS_PERSECOND, counters of per-second limits
// live on the second Redis, the others on the first.
func TestPerSecondRedis(t *testing.T) {
	main, perSecond := redistest.Start(t), redistest.Start(t)
	mc, pc := main.Client(t), perSecond.Client(t)
	r := newRig(t, &RedisStore{Client: mc, PerSecond: pc}, Options{}, basicIntegration, integrationConfig)
	check(t, "both", r.call(t, req(t, "basic", 1, "key1=s")), okc, st{okc, 50, sec, 49})
	check(t, "minute", r.call(t, req(t, "another", 1, "key2=m")), okc, st{okc, 20, mins, 19})
	ctx := context.Background()
	secKey := "basic_key1_s_" + itoa(fixedNow.Unix())
	minKey := "another_key2_m_" + itoa(fixedNow.Unix()/60*60)
	if pc.Get(ctx, secKey).Val() != "1" || mc.Exists(ctx, secKey).Val() != 0 {
		t.Errorf("per-second counter not (only) on the per-second Redis")
	}
	if mc.Get(ctx, minKey).Val() != "1" || pc.Exists(ctx, minKey).Val() != 0 {
		t.Errorf("per-minute counter not (only) on the main Redis")
	}
}

// TestHugeHitsAddend: a descriptor's hits_addend (a uint64) above the
// largest INCRBY takes (2^63-1) is a request error, counted as one, that
// changes no counter. Before, Redis refused it as a store error (logged and
// counted as a Redis error), and the in-memory store added it, wrapping
// its counter around past 2^64 so that the key admitted again.
func TestHugeHitsAddend(t *testing.T) {
	stores(t, func(t *testing.T, mk func() Store) {
		r := newRig(t, mk(), Options{}, costConfig)
		for _, d := range []string{"user=h+9223372036854775808", "user=h+18446744073709551615"} {
			_, err := r.client.ShouldRateLimit(context.Background(), req(t, "cost", 0, "user=g", d))
			if status.Code(err) != codes.Unknown || !strings.Contains(err.Error(), "descriptor 1: hits_addend") {
				t.Fatalf("%s: %v; want a request error naming descriptor 1's hits_addend", d, err)
			}
		}
		if got := testutil.ToFloat64(r.metrics.serviceError); got != 2 {
			t.Errorf("service errors %v, want 2", got)
		}
		if got := testutil.ToFloat64(r.metrics.redisError); got != 0 {
			t.Errorf("redis errors %v, want 0", got)
		}
		check(t, "untouched", r.call(t, req(t, "cost", 1, "user=g")), okc, st{okc, 20, mins, 19})
		check(t, "untouched", r.call(t, req(t, "cost", 1, "user=h")), okc, st{okc, 20, mins, 19})
	})
}

// TestLargestHitsAddendSaturates: the largest hits_addend accepted
// (2^63-1) counts as MaxHitsAddend, over the limit, and the requests
// after it are answered over the limit too; a counter saturates at
// MaxCounter. It used to take
// the Redis counter to 2^63-1, answered as a bad reply (Lua's doubles
// read it as -2^63), and every later request of the window failed, which
// Envoy's default failure_mode_deny: false turns into no limit at all.
func TestLargestHitsAddendSaturates(t *testing.T) {
	stores(t, func(t *testing.T, mk func() Store) {
		store := mk()
		r := newRig(t, store, Options{}, costConfig)
		check(t, "2^63-1", r.call(t, req(t, "cost", 0, "user=h+9223372036854775807")), over, st{over, 20, mins, 0})
		for i := range 3 {
			check(t, "after "+itoa(int64(i)), r.call(t, req(t, "cost", 1, "user=h")), over, st{over, 20, mins, 0})
		}
		check(t, "another user", r.call(t, req(t, "cost", 1, "user=g")), okc, st{okc, 20, mins, 19})
		key := "cost_user_h_" + itoa(fixedNow.Unix()/60*60)
		got, err := store.Get(context.Background(), []*Op{{Key: key}})
		if err != nil || got[0] != MaxHitsAddend+3 {
			t.Fatalf("counter %s = %v, %v; want %d", key, got, err, uint64(MaxHitsAddend+3))
		}
		// The store saturates at MaxCounter, whatever comes after.
		for i, n := range []uint64{MaxCounter - 1, 5, MaxHitsAddend, 0} {
			op := &Op{Key: "saturated", N: n, TTL: time.Minute}
			want := uint64(MaxCounter)
			if i == 0 {
				want = MaxCounter - 1
			}
			if err := store.Incr(context.Background(), []*Op{op}); err != nil || op.Result != want {
				t.Fatalf("increment %d by %d: %d, %v; want %d", i, n, op.Result, err, want)
			}
		}
		if got := testutil.ToFloat64(r.metrics.redisError) + testutil.ToFloat64(r.metrics.serviceError); got != 0 {
			t.Errorf("errors %v, want 0", got)
		}
	})
}

// TestMemoryCounterOverflow: the in-memory store refuses an increment that
// would take a counter past 2^63-1, as Redis's INCRBY does, and leaves it
// as it was (it wrapped around past 2^64 before); an increment that fits
// saturates at MaxCounter, as incr.lua does.
func TestMemoryCounterOverflow(t *testing.T) {
	s := &MemoryStore{Now: func() time.Time { return fixedNow }}
	ctx := context.Background()
	op := func(n uint64) *Op { return &Op{Key: "k", TTL: time.Minute, N: n} }
	if err := s.Incr(ctx, []*Op{op(math.MaxInt64)}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := s.Incr(ctx, []*Op{op(math.MaxInt64)}); !errors.Is(err, floodgate.ErrStoreUnavailable) {
			t.Fatalf("increment past 2^63-1: %v", err)
		}
	}
	o := op(0)
	if err := s.Incr(ctx, []*Op{o}); err != nil || o.Result != MaxCounter {
		t.Fatalf("counter %d, %v; want 2^52", o.Result, err)
	}
}

// TestNearThresholdNeverAboveLimit: float32 rounding took limit × 1 above
// a limit past 2^24 (16777219 → 16777220), and the over-limit path's
// subtraction wrapped (review).
func TestNearThresholdNeverAboveLimit(t *testing.T) {
	for _, limit := range []uint64{0, 1, 20, 1 << 24, 1<<24 + 3, 1<<32 - 1} {
		if got := nearThreshold(limit, 1); got > limit {
			t.Errorf("nearThreshold(%d, 1) = %d, above the limit", limit, got)
		}
	}
}
