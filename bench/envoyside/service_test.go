package envoyside

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coocood/freecache"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	theirconfig "github.com/envoyproxy/ratelimit/src/config"
	theirprovider "github.com/envoyproxy/ratelimit/src/provider"
	theirredis "github.com/envoyproxy/ratelimit/src/redis"
	theirserver "github.com/envoyproxy/ratelimit/src/server"
	theirservice "github.com/envoyproxy/ratelimit/src/service"
	gostats "github.com/lyft/gostats"
	"google.golang.org/grpc/health"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate/envoycompat"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// fixedClock is both services' clock: 12 s into a minute, so no window
// ends during a test.
type fixedClock struct{}

func (fixedClock) UnixNow() int64 { return 1_800_001_212 }

func (fixedClock) now() time.Time { return time.Unix(1_800_001_212, 0) }

type oneConfig struct{ cfg theirconfig.RateLimitConfig }

func (o oneConfig) GetConfig() (theirconfig.RateLimitConfig, any) { return o.cfg, nil }

// provider hands their service one configuration.
type provider struct {
	ch chan theirprovider.ConfigUpdateEvent
}

func (p provider) ConfigUpdateEvent() <-chan theirprovider.ConfigUpdateEvent { return p.ch }

func (provider) Stop() {}

// settableClock is a clock a test moves, for both services.
type settableClock struct{ unix atomic.Int64 }

func (c *settableClock) UnixNow() int64 { return c.unix.Load() }

func (c *settableClock) now() time.Time { return time.Unix(c.unix.Load(), 0) }

// settings are the options both services run with.
type sideSettings struct {
	stop       bool
	localCache int
	headers    bool
	clock      *settableClock // nil: fixedClock
}

// theirService builds their service (their fixed window cache on Redis at
// addr, keys prefixed with prefix) over one configuration.
func theirService(t *testing.T, addr, prefix string, s sideSettings, doc string) rlspb.RateLimitServiceServer {
	t.Helper()
	if s.headers {
		t.Setenv("LIMIT_RESPONSE_HEADERS_ENABLED", "true")
	}
	store := gostats.NewStore(gostats.NewNullSink(), false)
	sm := statsManager()
	client := theirredis.NewClientImpl(store.Scope("redis"), false, "", "tcp", "single", addr, 4, 0, 0, nil, false, nil, 10*time.Second, "", "")
	t.Cleanup(func() { _ = client.Close() })
	var lc *freecache.Cache
	if s.localCache > 0 {
		lc = freecache.NewCache(s.localCache)
	}
	var clock interface{ UnixNow() int64 } = fixedClock{}
	if s.clock != nil {
		clock = s.clock
	}
	cache := theirredis.NewFixedRateLimitCacheImpl(client, nil, clock, rand.New(rand.NewSource(1)), 0, lc, 0.8, prefix, sm, s.stop)
	cfg, err := theirLoad([]envoycompat.File{{Name: "config.side.yaml", Data: []byte(doc)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan theirprovider.ConfigUpdateEvent, 1)
	ch <- oneConfig{cfg}
	hc := theirserver.NewHealthChecker(health.NewServer(), "ratelimit", false)
	return theirservice.NewService(cache, provider{ch}, sm, hc, clock, false, false, false)
}

// ourService builds envoycompat's service on the same Redis.
func ourService(t *testing.T, rdb *redistest.Server, prefix string, s sideSettings, doc string) *envoycompat.Service {
	t.Helper()
	opts := envoycompat.Options{
		Store: &envoycompat.RedisStore{Client: rdb.Client(t)}, CacheKeyPrefix: prefix, NearLimitRatio: 0.8,
		StopIncrementWhenOverLimit: s.stop, LocalCacheBytes: s.localCache, ResponseHeaders: s.headers,
		LimitHeader: "RateLimit-Limit", RemainingHeader: "RateLimit-Remaining", ResetHeader: "RateLimit-Reset",
		Now: fixedClock{}.now,
	}
	if s.clock != nil {
		opts.Now = s.clock.now
	}
	svc, err := envoycompat.NewService(opts)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := envoycompat.Load([]envoycompat.File{{Name: "config.side.yaml", Data: []byte(doc)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	svc.SetConfig(cfg)
	return svc
}

const sideConfig = `domain: side
descriptors:
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 10}
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
  - key: files
    value: /a/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: cat
    value: account
    rate_limit: {unit: minute, requests_per_unit: 4, replaces: [{name: per_user}]}
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 1}
  - key: route
    value: /api
    descriptors:
      - key: method
        rate_limit: {unit: second, requests_per_unit: 2}
`

// step is one request: domain, request hits_addend, descriptors
// ("k=v,k2=v2", "+N" for the descriptor's own hits_addend, then "@N/UNIT"
// for a limit override), repeated n
// times.
type step struct {
	domain string
	hits   uint32
	descs  []string
	n      int
}

var sideSteps = []step{
	{"nowhere", 1, []string{"hello=world"}, 1},
	{"side", 1, []string{"key2=alone"}, 25},
	{"side", 1, []string{"key2=pair", "key3=pair"}, 15},
	{"side", 5, []string{"key2=cost"}, 1},
	{"side", 16, []string{"key2=cost"}, 1},
	{"side", 1, []string{"key2=cost"}, 1},
	{"side", 0, []string{"key2=zero"}, 1},
	{"side", 19, []string{"key2=zero"}, 1},
	{"side", 7, []string{"key2=zero+0"}, 1},
	{"side", 0, []string{"key2=zero+1"}, 1},
	{"side", 1, []string{"shadow=s", "key2=sh"}, 4},
	{"side", 1, []string{"free=x", "never=y", "key2=n"}, 2},
	// quota_mode is not compared: their module on the proxy (January 2026)
	// answers a quota descriptor over its limit OK; main (July 2026), which
	// envoycompat follows, OVER_LIMIT, the request being over only when
	// every quota descriptor is (envoycompat's own tests cover it).
	{"side", 2, []string{"monthly=m"}, 2},
	{"side", 1, []string{"files=/a/1"}, 2},
	{"side", 1, []string{"files=/a/2"}, 2},
	{"side", 1, []string{"user=u"}, 2},
	{"side", 1, []string{"user=u", "cat=account"}, 2},
	{"side", 1, []string{"route=/api,method=GET"}, 3},
	{"side", 1, []string{"route=/api"}, 1},
	{"side", 1, []string{"route=/api,method=GET,extra=1"}, 1},
}

func request(s step) *rlspb.RateLimitRequest {
	r := &rlspb.RateLimitRequest{Domain: s.domain, HitsAddend: s.hits}
	for _, d := range s.descs {
		var own *wrapperspb.UInt64Value
		if base, n, ok := strings.Cut(d, "+"); ok {
			var v uint64
			fmt.Sscan(n, &v)
			own, d = wrapperspb.UInt64(v), base
		}
		rd := &ratelimitv3.RateLimitDescriptor{HitsAddend: own}
		if base, o, ok := strings.Cut(d, "@"); ok { // "@N/UNIT": a limit override
			n, unit, _ := strings.Cut(o, "/")
			var v uint32
			fmt.Sscan(n, &v)
			rd.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: v, Unit: typev3.RateLimitUnit(typev3.RateLimitUnit_value[unit])}
			d = base
		}
		for _, kv := range strings.Split(d, ",") {
			k, v, _ := strings.Cut(kv, "=")
			rd.Entries = append(rd.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		r.Descriptors = append(r.Descriptors, rd)
	}
	return r
}

// TestServiceAgreesWithTheirs sends the same requests to their service
// and to envoycompat's, each on its own keys of one redis-server, and
// requires identical answers (codes, statuses, limits, remaining, whole-
// second resets, headers), under each counting and cache setting.
func TestServiceAgreesWithTheirs(t *testing.T) {
	rdb := redistest.Start(t)
	for i, s := range []sideSettings{{}, {stop: true}, {localCache: 1 << 20}, {headers: true}} {
		t.Run(fmt.Sprintf("%+v", s), func(t *testing.T) {
			theirs := theirService(t, rdb.Addr, fmt.Sprintf("t%d_", i), s, sideConfig)
			ours := ourService(t, rdb, fmt.Sprintf("o%d_", i), s, sideConfig)
			answers := 0
			for _, st := range sideSteps {
				for k := range st.n {
					req := request(st)
					tr, terr := theirs.ShouldRateLimit(context.Background(), req)
					or, oerr := ours.ShouldRateLimit(context.Background(), req)
					if (terr == nil) != (oerr == nil) || !proto.Equal(tr, or) {
						t.Fatalf("%v #%d:\ntheirs %v %v\nours   %v %v", st, k, tr, terr, or, oerr)
					}
					answers++
				}
			}
			t.Logf("%d answers identical", answers)
		})
	}
}

// TestSharedCounters is a rolling migration: their service and
// envoycompat's answer alternately on the same keys of one Redis, and the
// fleet enforces one limit.
func TestSharedCounters(t *testing.T) {
	rdb := redistest.Start(t)
	theirs := theirService(t, rdb.Addr, "", sideSettings{}, sideConfig)
	ours := ourService(t, rdb, "", sideSettings{}, sideConfig)
	for i := range 24 {
		svc := rlspb.RateLimitServiceServer(theirs)
		if i%2 == 1 {
			svc = ours
		}
		resp, err := svc.ShouldRateLimit(context.Background(), request(step{"side", 1, []string{"key2=shared"}, 1}))
		if err != nil {
			t.Fatal(err)
		}
		wantCode, wantRem := rlspb.RateLimitResponse_OK, uint32(max(20-(i+1), 0))
		if i >= 20 {
			wantCode = rlspb.RateLimitResponse_OVER_LIMIT
		}
		if st := resp.GetStatuses()[0]; resp.GetOverallCode() != wantCode || st.GetLimitRemaining() != wantRem {
			t.Fatalf("request %d (%T): %v remaining %d, want %v remaining %d", i, svc, resp.GetOverallCode(), st.GetLimitRemaining(), wantCode, wantRem)
		}
	}
	keys := rdb.Client(t).Keys(context.Background(), "side_key2_shared_*").Val()
	if len(keys) != 1 || rdb.Client(t).Get(context.Background(), keys[0]).Val() != "24" {
		t.Fatalf("keys %v: want one counter holding 24", keys)
	}
}

// TestResetsAtWindowEdges moves both services' clock to the first and
// last seconds of windows of every unit and compares the answers: limits
// reached exactly, then passed, and the time until reset on each side of
// an edge (a request at the last second of a window, then at the first
// second of the next one, which starts a fresh counter).
func TestResetsAtWindowEdges(t *testing.T) {
	rdb := redistest.Start(t)
	const cfg = `domain: edge
descriptors:
  - key: s
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: m
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: h
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: d
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: mo
    rate_limit: {unit: month, requests_per_unit: 2}
  - key: y
    rate_limit: {unit: year, requests_per_unit: 2}
`
	units := map[string]int64{"s": 1, "m": 60, "h": 3600, "d": 86_400, "mo": 30 * 86_400, "y": 365 * 86_400}
	for i, s := range []sideSettings{{}, {stop: true}, {headers: true}} {
		clock := new(settableClock)
		s.clock = clock
		theirs := theirService(t, rdb.Addr, fmt.Sprintf("te%d_", i), s, cfg)
		ours := ourService(t, rdb, fmt.Sprintf("oe%d_", i), s, cfg)
		for _, base := range []int64{1_800_001_212, 1_900_000_000} {
			for unit, length := range units {
				start := (base/length + 1) * length                  // the first second of a window
				for _, at := range []int64{-1, -1, -1, 0, 0, 0, 1} { // seconds from an edge
					clock.unix.Store(start + at)
					req := request(step{"edge", 1, []string{fmt.Sprintf("%s=%d", unit, start), unit + "=x"}, 1})
					tr, terr := theirs.ShouldRateLimit(context.Background(), req)
					or, oerr := ours.ShouldRateLimit(context.Background(), req)
					if (terr == nil) != (oerr == nil) || !proto.Equal(tr, or) {
						t.Fatalf("settings %d, unit %s at %d%+d:\ntheirs %v %v\nours   %v %v", i, unit, start, at, tr, terr, or, oerr)
					}
				}
			}
		}
	}
}
