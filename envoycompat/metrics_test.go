package envoycompat

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestMetricsBounded: past the series cap, new (domain, key) pairs and
// unknown domains are counted under "_other" instead of growing the
// label space.
func TestMetricsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.max = 2
	for _, k := range []string{"d.a", "d.b", "d.c", "e.a", "d.a"} {
		m.add(&Limit{StatKey: k}, statTotalHits, 1)
	}
	for _, d := range []string{"x", "y", "z", "x"} {
		m.domainNotFound(d)
	}
	if got := testutil.ToFloat64(m.perLimit.WithLabelValues("d", "a", statTotalHits)); got != 2 {
		t.Errorf("d.a = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.perLimit.WithLabelValues("d", otherLabel, statTotalHits)); got != 1 {
		t.Errorf("d._other = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.perLimit.WithLabelValues("e", otherLabel, statTotalHits)); got != 1 {
		t.Errorf("e._other = %v, want 1", got)
	}
	if got := testutil.CollectAndCount(m.perLimit); got != 4 {
		t.Errorf("%d per-limit series, want 4 (2 pairs and 2 overflow)", got)
	}
	if got := testutil.ToFloat64(m.notFound.WithLabelValues(otherLabel)); got != 1 {
		t.Errorf("domain _other = %v, want 1", got)
	}
	if got := testutil.CollectAndCount(m.notFound); got != 3 {
		t.Errorf("%d domain series, want 3", got)
	}
}

// TestLongUnknownDomainsShareOneSeries: an unknown domain longer than
// MaxDomainLabel is counted under "_other" from the first request; ten
// 3 MB names used to make ten 3 MB series (and a 30 MB /metrics).
func TestLongUnknownDomainsShareOneSeries(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		m.domainNotFound(strings.Repeat("D", MaxDomainLabel+1+i))
	}
	m.domainNotFound(strings.Repeat("d", MaxDomainLabel))
	if got := testutil.ToFloat64(m.notFound.WithLabelValues(otherLabel)); got != 10 {
		t.Errorf("domain _other = %v, want 10", got)
	}
	if got := testutil.CollectAndCount(m.notFound); got != 2 {
		t.Errorf("%d domain series, want 2 (_other and the name of %d bytes)", got, MaxDomainLabel)
	}
}

// TestLongKeysShareOneSeries: a per-limit key longer than MaxKeyLabel
// (request values through detailed_metric, value_to_metric or a limit
// override) is counted under "_other" from the first request; 200 values
// of 1 MB made 200 series of 1 MB each (cardinality walk: RSS 30 → 527
// MB, /metrics 400 MB, never given back).
func TestLongKeysShareOneSeries(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		m.add(&Limit{StatKey: "walk.det_" + strings.Repeat("v", MaxKeyLabel+i)}, statTotalHits, 1)
	}
	short := "det_" + strings.Repeat("v", MaxKeyLabel-len("det_"))
	m.add(&Limit{StatKey: "walk." + short}, statTotalHits, 1)
	if got := testutil.ToFloat64(m.perLimit.WithLabelValues("walk", otherLabel, statTotalHits)); got != 10 {
		t.Errorf("walk._other = %v, want 10", got)
	}
	if got := testutil.ToFloat64(m.perLimit.WithLabelValues("walk", short, statTotalHits)); got != 1 {
		t.Errorf("the key of %d bytes = %v, want 1", MaxKeyLabel, got)
	}
	if got := testutil.CollectAndCount(m.perLimit); got != 2 {
		t.Errorf("%d per-limit series, want 2 (_other and the key of %d bytes)", got, MaxKeyLabel)
	}
}

// TestConfigLoadSeriesStartAtZero: /metrics shows
// floodgate_envoy_config_load_total{result="error"} at 0 before any load
// failed. It used to appear only at the first failure, at 1, so
// increase() over it stayed 0 and RateLimitEnvoyCompatConfigRejected
// (deploy/prometheus/alerts.yml) missed a process's first rejected
// configuration. floodgate_envoy_config_rejected, which the alert reads
// now, is there at 0 from the start too.
func TestConfigLoadSeriesStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := NewService(Options{Store: &MemoryStore{}, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.DebugHandler(reg))
	t.Cleanup(srv.Close)
	scrape := func() string {
		t.Helper()
		resp, err := http.Get(srv.URL + "/metrics")
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
	for _, tc := range []struct {
		name string
		load func()
		want []string
	}{
		{"before any load", func() {}, []string{
			`floodgate_envoy_config_load_total{result="error"} 0`,
			`floodgate_envoy_config_load_total{result="success"} 0`,
			`floodgate_envoy_config_rejected 0`,
		}},
		{"after a good load", func() { m.ConfigLoaded(true) }, []string{
			`floodgate_envoy_config_load_total{result="error"} 0`,
			`floodgate_envoy_config_load_total{result="success"} 1`,
		}},
		{"after a failed load", func() { m.ConfigLoaded(false) }, []string{
			`floodgate_envoy_config_load_total{result="error"} 1`,
			`floodgate_envoy_config_load_total{result="success"} 1`,
			`floodgate_envoy_config_rejected 1`,
		}},
	} {
		tc.load()
		got := scrape()
		for _, w := range tc.want {
			if !strings.Contains(got, w+"\n") {
				t.Errorf("%s: /metrics lacks %q:\n%s", tc.name, w, got)
			}
		}
	}
}

// TestMetricLabelsNamedAsTheirStats: the domain and key labels are their
// stat names (SanitizeStatName): ':' and '|' become '_', and so do the
// dots of an IPv4 address, so keys differing only there share one series
// as they share one statsd counter of theirs ("st.k_a:b" and "st.k_a_b"
// were two series).
func TestMetricLabelsNamedAsTheirStats(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"st.k_a:b", "st.k_a_b", "st.k_a|b", "other:dom.k", "st.remote_address_10.0.0.1", "st.v_1.2"} {
		m.add(&Limit{StatKey: k}, statTotalHits, 1)
	}
	m.domainNotFound("un:known|d")
	for _, tc := range []struct {
		domain, key string
		want        float64
	}{
		{"st", "k_a_b", 3},
		{"other_dom", "k", 1},
		{"st", "remote_address_10_0_0_1", 1},
		{"st", "v_1.2", 1},
	} {
		if got := testutil.ToFloat64(m.perLimit.WithLabelValues(tc.domain, tc.key, statTotalHits)); got != tc.want {
			t.Errorf("%s %s = %v, want %v", tc.domain, tc.key, got, tc.want)
		}
	}
	if got := testutil.CollectAndCount(m.perLimit); got != 4 {
		t.Errorf("%d per-limit series, want 4", got)
	}
	if got := testutil.ToFloat64(m.notFound.WithLabelValues("un_known_d")); got != 1 {
		t.Errorf("domain un_known_d = %v, want 1", got)
	}
}

// TestMetricLabelsKeepDottedDomains: a domain holding dots is the domain
// label whole, as domain_not_found names it, and the key label is the
// stats key without it, each named as theirs names a stat. The labels
// were cut at the stats key's first '.': domain api.example.com, key foo
// gave domain "api" and key "example.com.foo".
func TestMetricLabelsKeepDottedDomains(t *testing.T) {
	cfg, err := Load([]File{
		{Name: "a.yaml", Data: []byte("domain: api.example.com\ndescriptors:\n  - key: foo\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")},
		{Name: "b.yaml", Data: []byte("domain: 10.0.0.1\ndescriptors:\n  - key: remote_address\n    value_to_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")},
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		domain, key, value  string
		wantDomain, wantKey string
	}{
		{"api.example.com", "foo", "", "api.example.com", "foo"},
		{"10.0.0.1", "remote_address", "10.0.0.2", "10_0_0_1", "remote_address_10_0_0_2"},
	} {
		d := &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: tc.key, Value: tc.value}}}
		l := cfg.Match(tc.domain, d)
		if l == nil {
			t.Fatalf("%s %s: no limit", tc.domain, tc.key)
		}
		m.add(l, statTotalHits, 1)
		if got := testutil.ToFloat64(m.perLimit.WithLabelValues(tc.wantDomain, tc.wantKey, statTotalHits)); got != 1 {
			t.Errorf("%s %s: series domain=%q key=%q = %v, want 1", tc.domain, tc.key, tc.wantDomain, tc.wantKey, got)
		}
	}
	if got := testutil.CollectAndCount(m.perLimit); got != 2 {
		t.Errorf("%d per-limit series, want 2", got)
	}
	m.domainNotFound("api.example.com")
	if got := testutil.ToFloat64(m.notFound.WithLabelValues("api.example.com")); got != 1 {
		t.Errorf("domain_not_found api.example.com = %v, want 1", got)
	}
}
