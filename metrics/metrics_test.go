package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/denycache"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/metrics"
	"github.com/floodgate-rl/floodgate/sentinelfollow"
	"github.com/floodgate-rl/floodgate/topk"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func newMetrics(t *testing.T, opts metrics.Options) (*metrics.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

func TestDecisionsAndTopDenied(t *testing.T) {
	m, reg := newMetrics(t, metrics.Options{})
	l := metrics.Labels{Policy: "api", Route: "/v1/chat", Tier: "free"}
	for i := range 10 {
		m.Decision(l, "user-1", i < 3)
	}
	for range 4 {
		m.Decision(l, "user-2", false)
	}
	m.Decision(metrics.Labels{Policy: "api"}, "user-3", false)

	if got := value(t, reg, "rate_limit_allowed_total", "api", "/v1/chat", "free"); got != 3 {
		t.Fatalf("allowed %v, want 3", got)
	}
	if got := value(t, reg, "rate_limit_denied_total", "api", "/v1/chat", "free"); got != 11 {
		t.Fatalf("denied %v, want 11", got)
	}
	if got := value(t, reg, "rate_limit_denied_total", "api", "none", "none"); got != 1 {
		t.Fatalf("denied with empty labels %v, want 1 under none", got)
	}
	top := m.TopDenied(2)
	want := []topk.Item{{Key: "user-1", Count: 7}, {Key: "user-2", Count: 4}}
	if fmt.Sprint(top) != fmt.Sprint(want) {
		t.Fatalf("TopDenied(2) = %v, want %v", top, want)
	}
	// No identity ever becomes a label value.
	out := scrape(t, reg)
	if strings.Contains(out, "user-1") {
		t.Fatal("an identity appears in the exposition")
	}
}

// value returns the value of the counter name whose label values are
// values (in label-name order), failing the test if there is none.
func value(t *testing.T, reg *prometheus.Registry, name string, values ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			var got []string
			for _, lp := range mt.GetLabel() {
				got = append(got, lp.GetValue())
			}
			if fmt.Sprint(got) == fmt.Sprint(values) {
				return mt.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s%v", name, values)
	return 0
}

func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

func TestLabelValuesAreCapped(t *testing.T) {
	m, reg := newMetrics(t, metrics.Options{MaxLabelValues: 3})
	for i := range 10 {
		m.Decision(metrics.Labels{Policy: fmt.Sprint("p", i), Route: "/r", Tier: "free"}, "x", true)
	}
	if n := testutil.CollectAndCount(reg, "rate_limit_allowed_total"); n != 4 {
		t.Fatalf("%d allowed series for 10 policies with a cap of 3, want 3 + other", n)
	}
	if got := value(t, reg, "rate_limit_allowed_total", "other", "/r", "free"); got != 7 {
		t.Fatalf("other %v, want 7", got)
	}
	// A value seen before the cap keeps its own series.
	m.Decision(metrics.Labels{Policy: "p1", Route: "/r", Tier: "free"}, "x", true)
	if got := value(t, reg, "rate_limit_allowed_total", "p1", "/r", "free"); got != 2 {
		t.Fatalf("p1 %v, want 2", got)
	}
}

// TestObservesFallbackStore wires Metrics as a fallback.Store's Observer and
// checks the exposition an operator's Prometheus would scrape over HTTP.
func TestObservesFallbackStore(t *testing.T) {
	m, reg := newMetrics(t, metrics.Options{ConstLabels: prometheus.Labels{"service": "test"}})
	local, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := fallback.New(down{}, local, fallback.Options{Observer: m, Breaker: fallback.BreakerOptions{FailureThreshold: 2, OpenFor: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.New(st, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := floodgate.NewFixedWindow("api", 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := lim.Allow(context.Background(), p, "u"); err != nil {
			t.Fatal(err)
		}
	}
	m.ObserveClock(-1500*time.Microsecond, 300*time.Microsecond)
	out := scrape(t, reg)
	for _, want := range []string{
		`rate_limit_fallback_total{mode="local",reason="unavailable",service="test"} 2`,
		`rate_limit_fallback_total{mode="local",reason="breaker_open",service="test"} 3`,
		`rate_limit_fallback_total{mode="closed",reason="timeout",service="test"} 0`,
		`rate_limit_breaker_state{partition="primary",service="test"} 2`,
		`rate_limit_redis_latency_seconds_count{service="test"} 2`,
		`rate_limit_redis_latency_seconds_bucket{service="test",le="0.05"} 2`,
		`rate_limit_redis_errors_total{service="test"} 2`,
		`rate_limit_clock_skew_seconds{service="test"} -0.0015`,
		`rate_limit_clock_sync_rtt_seconds{service="test"} 0.0003`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("exposition lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
}

// down is a primary store that is always unreachable.
type down struct{}

func (down) Decide(context.Context, int64, []floodgate.Layer, []floodgate.Result) error {
	return fmt.Errorf("%w: connection refused", floodgate.ErrStoreUnavailable)
}

func TestNewRejects(t *testing.T) {
	if _, err := metrics.New(nil, metrics.Options{}); !errors.Is(err, metrics.ErrInvalidOptions) {
		t.Fatalf("nil registerer: %v", err)
	}
	reg := prometheus.NewRegistry()
	for _, opts := range []metrics.Options{
		{MaxLabelValues: -1},
		{LatencyBuckets: []float64{0.1, 0.05}},
		{LatencyBuckets: []float64{0}},
		{TopK: topk.Options{Capacity: -1}},
	} {
		if _, err := metrics.New(reg, opts); !errors.Is(err, metrics.ErrInvalidOptions) {
			t.Fatalf("New(%+v) = %v, want ErrInvalidOptions", opts, err)
		}
	}
	if _, err := metrics.New(reg, metrics.Options{}); err != nil {
		t.Fatalf("first registration: %v", err)
	}
	// A second Metrics on the same registry collides, and leaves it intact.
	before := testutil.CollectAndCount(reg)
	if _, err := metrics.New(reg, metrics.Options{}); !errors.Is(err, metrics.ErrInvalidOptions) {
		t.Fatalf("duplicate registration: %v", err)
	}
	if after := testutil.CollectAndCount(reg); after != before {
		t.Fatalf("failed New changed the registry: %d series, then %d", before, after)
	}
}

// TestRegisterMemoryStore: each store's entries (read at the scrape) and
// bound are exported under its store label, the rate limit store's too.
func TestRegisterMemoryStore(t *testing.T) {
	reg := prometheus.NewRegistry()
	held := 3
	for _, s := range []struct {
		name string
		most int
	}{{"ratelimit", 640}, {"leases", 100}} {
		if err := metrics.RegisterMemoryStore(reg, s.name, s.most, func() int { return held }); err != nil {
			t.Fatal(err)
		}
	}
	held = 7
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`floodgate_memory_store_entries{store="ratelimit"} 7`,
		`floodgate_memory_store_entries_max{store="ratelimit"} 640`,
		`floodgate_memory_store_entries{store="leases"} 7`,
		`floodgate_memory_store_entries_max{store="leases"} 100`,
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("no %s in:\n%s", want, body)
		}
	}
	if err := metrics.RegisterMemoryStore(reg, "", 1, func() int { return 0 }); !errors.Is(err, metrics.ErrInvalidOptions) {
		t.Errorf("no store name: %v, want ErrInvalidOptions", err)
	}
}

// TestRegisterFallbackInstances: the fallback's divisor is read at each
// scrape; nil arguments are refused.
func TestRegisterFallbackInstances(t *testing.T) {
	reg := prometheus.NewRegistry()
	n := 1
	if err := metrics.RegisterFallbackInstances(reg, func() int { return n }); err != nil {
		t.Fatal(err)
	}
	n = 4
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != metrics.FallbackInstancesMetric || mfs[0].GetMetric()[0].GetGauge().GetValue() != 4 {
		t.Fatalf("gathered %v, want %s 4", mfs, metrics.FallbackInstancesMetric)
	}
	if err := metrics.RegisterFallbackInstances(nil, func() int { return 1 }); !errors.Is(err, metrics.ErrInvalidOptions) {
		t.Errorf("nil registerer: %v, want ErrInvalidOptions", err)
	}
	if err := metrics.RegisterFallbackInstances(reg, nil); !errors.Is(err, metrics.ErrInvalidOptions) {
		t.Errorf("nil divisor: %v, want ErrInvalidOptions", err)
	}
}

// TestRegisterDenyCache: the deny cache's answers, evictions and entries
// are read from the cache at each scrape; a nil or typed-nil cache and a
// nil registerer are refused.
func TestRegisterDenyCache(t *testing.T) {
	mem, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dc, err := denycache.New(mem, denycache.Options{MaxEntries: 1, Shards: 1, MaxTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := metrics.RegisterDenyCache(reg, dc, 1); err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.New(dc, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := floodgate.Must(floodgate.NewFixedWindow("api", 1, time.Hour))
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, id := range []string{"a", "a", "a", "b", "b"} {
		if _, err := lim.AllowAt(context.Background(), at, p, id, 1); err != nil {
			t.Fatal(err)
		}
	}
	// a admitted, denied by the store (cached), denied by the cache; b
	// admitted, denied by the store: its entry evicts a's, still live.
	want := map[string]float64{
		metrics.DenyCacheAnswersMetric:    1,
		metrics.DenyCacheEvictionsMetric:  1,
		metrics.DenyCacheEntriesMetric:    1,
		metrics.DenyCacheEntriesMaxMetric: 1,
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
		if w, ok := want[mf.GetName()]; !ok || v != w {
			t.Errorf("%s = %v, want %v", mf.GetName(), v, w)
		}
		delete(want, mf.GetName())
	}
	if len(want) != 0 {
		t.Errorf("not gathered: %v", want)
	}
	var none *denycache.Store
	for name, c := range map[string]metrics.DenyCache{"nil": nil, "typed nil": none} {
		if err := metrics.RegisterDenyCache(prometheus.NewRegistry(), c, 1); !errors.Is(err, metrics.ErrInvalidOptions) {
			t.Errorf("%s cache: %v, want ErrInvalidOptions", name, err)
		}
	}
	if err := metrics.RegisterDenyCache(nil, dc, 1); !errors.Is(err, metrics.ErrInvalidOptions) {
		t.Errorf("nil registerer: %v, want ErrInvalidOptions", err)
	}
}

// TestRegisterSplitReleaseFailures: the count is read at each scrape, as
// a counter; nil arguments are refused.
func TestRegisterSplitReleaseFailures(t *testing.T) {
	reg := prometheus.NewRegistry()
	var n int64
	if err := metrics.RegisterSplitReleaseFailures(reg, func() int64 { return n }); err != nil {
		t.Fatal(err)
	}
	n = 3
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != metrics.SplitReleaseFailuresMetric || mfs[0].GetMetric()[0].GetCounter().GetValue() != 3 {
		t.Fatalf("gathered %v, want %s 3", mfs, metrics.SplitReleaseFailuresMetric)
	}
	if err := metrics.RegisterSplitReleaseFailures(nil, func() int64 { return 0 }); !errors.Is(err, metrics.ErrInvalidOptions) {
		t.Errorf("nil registerer: %v, want ErrInvalidOptions", err)
	}
	if err := metrics.RegisterSplitReleaseFailures(reg, nil); !errors.Is(err, metrics.ErrInvalidOptions) {
		t.Errorf("nil count: %v, want ErrInvalidOptions", err)
	}
}

// TestRegisterSentinels: the sentinels' gauges are read at each scrape,
// labelled by client; missing arguments are refused.
func TestRegisterSentinels(t *testing.T) {
	reg := prometheus.NewRegistry()
	st := sentinelfollow.Status{Sentinels: 3, Answering: 3, Majority: true}
	if err := metrics.RegisterSentinels(reg, "redis", func() sentinelfollow.Status { return st }); err != nil {
		t.Fatal(err)
	}
	st = sentinelfollow.Status{Sentinels: 3}
	want := `
# HELP floodgate_sentinel_majority 1 when a majority of the sentinels named one primary at the client's last question (every second), 0 otherwise: while they do not answer, decisions go on with the primary named last, and a failover is not followed until a majority answers again; while floodgate_sentinel_unknown_master is 1, see it.
# TYPE floodgate_sentinel_majority gauge
floodgate_sentinel_majority{client="redis"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metrics.SentinelMajorityMetric); err != nil {
		t.Error(err)
	}
	for name, v := range map[string]float64{metrics.SentinelsMetric: 3, metrics.SentinelsAnsweringMetric: 0, metrics.SentinelUnknownMasterMetric: 0} {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, mf := range mfs {
			if mf.GetName() == name {
				found = true
				if got := mf.GetMetric()[0].GetGauge().GetValue(); got != v {
					t.Errorf("%s = %v, want %v", name, got, v)
				}
			}
		}
		if !found {
			t.Errorf("%s not gathered", name)
		}
	}
	if err := metrics.RegisterSentinels(nil, "redis", func() sentinelfollow.Status { return st }); !errors.Is(err, metrics.ErrInvalidOptions) {
		t.Errorf("nil registerer: %v, want ErrInvalidOptions", err)
	}
	if err := metrics.RegisterSentinels(reg, "", func() sentinelfollow.Status { return st }); !errors.Is(err, metrics.ErrInvalidOptions) {
		t.Errorf("no client: %v, want ErrInvalidOptions", err)
	}
	if err := metrics.RegisterSentinels(reg, "redis", nil); !errors.Is(err, metrics.ErrInvalidOptions) {
		t.Errorf("nil status: %v, want ErrInvalidOptions", err)
	}
}
