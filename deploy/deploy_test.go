// Package deploy holds the operator's kit and its tests, in a module of its
// own (deploy/go.mod) so that the Kubernetes, Envoy and compose types the
// tests decode into stay out of Floodgate's module: the container image
// (Containerfile, build-image.sh), Prometheus alert rules
// (prometheus/alerts.yml, with promtool unit tests in alerts_test.yml) and
// a Grafana dashboard (grafana/floodgate.json). This file checks that the
// rules and the dashboard only query metrics that package metrics really
// exports, and runs promtool when it is installed.
package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/envoycompat"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/fleet"
	"github.com/floodgate-rl/floodgate/internal/buildinfo"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/metrics"
	"github.com/floodgate-rl/floodgate/sentinelfollow"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"gopkg.in/yaml.v3"
)

var metricName = regexp.MustCompile(`\b(rate_limit|floodgate)_[a-z_]+`)

// exported returns the names of the series serve and envoy-compat
// expose once each vector has a series, histogram series included.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	serve, compat := families(t, true)
	names := map[string]bool{}
	for _, m := range []map[string]bool{serve, compat} {
		for n := range m {
			names[n] = true
		}
	}
	return names
}

// families returns the names of the series each service exposes, from
// registries of its own as in the two processes: with traffic, after
// every vector has been touched (a series each); without, as a process
// that has decided nothing yet shows them.
func families(t *testing.T, traffic bool) (serve, compat map[string]bool) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if traffic {
		// Touch every vector so that each has a series to gather.
		m.Decision(metrics.Labels{Policy: "p"}, "id", true)
		m.Decision(metrics.Labels{Policy: "p"}, "id", false)
		m.ObservePrimary(time.Millisecond, errors.New("x"))
		m.ObserveBreaker(fallback.DefaultPartition, fallback.BreakerClosed)
		m.ObserveClock(0, time.Millisecond)
	}
	// The service's configuration reload metrics.
	def, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	h, err := config.NewHolder(def)
	if err != nil {
		t.Fatal(err)
	}
	r, err := config.NewReloader(h, config.ReloaderOptions{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if traffic {
		if _, err := r.Apply([]byte("not: [valid"), "test"); err == nil {
			t.Fatal("an invalid configuration was applied")
		}
	}
	// The HTTP API's own metrics (floodgate_decision_errors_total, ...).
	ms, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.New(ms, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// (serve registers the library's metrics with them: a registry of
	// their own)
	sreg := prometheus.NewRegistry()
	if _, err := server.New(lim, h, server.Options{Registerer: sreg}); err != nil {
		t.Fatal(err)
	}
	// serve's in-memory stores.
	if err := metrics.RegisterMemoryStore(reg, "ratelimit", 1_000_000, ms.Len); err != nil {
		t.Fatal(err)
	}
	// serve on Redis: its heartbeat's live count and its fallback's
	// divisor (New sends nothing).
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { rc.Close() })
	if _, err := fleet.New(rc, fleet.Key("fg"), "id", fleet.Options{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if err := metrics.RegisterFallbackInstances(reg, func() int { return 1 }); err != nil {
		t.Fatal(err)
	}
	// serve on Redis: its split decisions' failed releases.
	if err := metrics.RegisterSplitReleaseFailures(reg, func() int64 { return 0 }); err != nil {
		t.Fatal(err)
	}
	// serve on Redis with --deny-cache-entries: its cache of denials.
	if err := metrics.RegisterDenyCache(reg, noDenials{}, 1); err != nil {
		t.Fatal(err)
	}
	// serve on Redis: the Redis restarts (run_id changes) it noticed.
	if err := metrics.RegisterRedisRestarts(reg, func(string) int64 { return 0 }); err != nil {
		t.Fatal(err)
	}
	// serve behind Sentinel: what its client's sentinels answer.
	if err := metrics.RegisterSentinels(reg, "redis", func() sentinelfollow.Status { return sentinelfollow.Status{} }); err != nil {
		t.Fatal(err)
	}
	// serve's build (registerRuntime in cmd/floodgate).
	if err := buildinfo.Register(reg, buildinfo.Read("")); err != nil {
		t.Fatal(err)
	}
	// serve with --tls-cert-file.
	if err := metrics.RegisterTLSExpiry(reg, time.Now); err != nil {
		t.Fatal(err)
	}
	// envoy-compat's: another process, scraped by the same Prometheus.
	ereg := prometheus.NewRegistry()
	em, err := envoycompat.NewMetrics(ereg)
	if err != nil {
		t.Fatal(err)
	}
	// envoy-compat's build, as serve's.
	if err := buildinfo.Register(ereg, buildinfo.Read("")); err != nil {
		t.Fatal(err)
	}
	// envoy-compat behind Sentinel (REDIS_TYPE=sentinel).
	if err := metrics.RegisterSentinels(ereg, "redis", func() sentinelfollow.Status { return sentinelfollow.Status{} }); err != nil {
		t.Fatal(err)
	}
	if traffic {
		em.ConfigLoaded(false)
		compatTraffic(t, em)
	}
	return gathered(t, reg, sreg), gathered(t, ereg)
}

// compatTraffic decides two requests of one descriptor whose limit is 1
// a minute with envoy-compat's service, counting into m: one within the
// limit, one over it, so that the per-limit counters have series.
func compatTraffic(t *testing.T, m *envoycompat.Metrics) {
	t.Helper()
	cfg, err := envoycompat.Load([]envoycompat.File{{Name: "config.yaml", Data: []byte(
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")}}, false)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := envoycompat.NewService(envoycompat.Options{Store: &countStore{}, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	svc.SetConfig(cfg)
	req := &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	for range 2 {
		if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
}

// countStore is an envoycompat.Store in memory, without expiry.
type countStore struct {
	mu sync.Mutex
	n  map[string]uint64
}

func (s *countStore) Incr(_ context.Context, ops []*envoycompat.Op) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = map[string]uint64{}
	}
	for _, op := range ops {
		s.n[op.Key] += op.N
		op.Result = s.n[op.Key]
	}
	return nil
}

func (s *countStore) Get(_ context.Context, ops []*envoycompat.Op) ([]uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]uint64, len(ops))
	for i, op := range ops {
		out[i] = s.n[op.Key]
	}
	return out, nil
}

// gathered returns the names of the series the registries expose,
// histogram series included.
func gathered(t *testing.T, regs ...*prometheus.Registry) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, g := range regs {
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			names[mf.GetName()] = true
			if mf.GetType() == dto.MetricType_HISTOGRAM {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					names[mf.GetName()+s] = true
				}
			}
		}
	}
	return names
}

// checkNames fails t for any metric in expr that is not exported.
func checkNames(t *testing.T, where, expr string, names map[string]bool) {
	t.Helper()
	found := metricName.FindAllString(expr, -1)
	if len(found) == 0 {
		t.Errorf("%s: expression queries no Floodgate metric: %s", where, expr)
	}
	for _, n := range found {
		if !names[n] {
			t.Errorf("%s: %s is not a metric Floodgate exports", where, n)
		}
	}
}

func TestDashboardQueriesExportedMetrics(t *testing.T) {
	names := exported(t)
	data, err := os.ReadFile("grafana/floodgate.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID        string `json:"uid"`
		Title      string `json:"title"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Definition string `json:"definition"`
				// an object for a query variable, a string for a
				// data source variable
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("grafana/floodgate.json: %v", err)
	}
	if dash.UID == "" || dash.Title == "" {
		t.Fatal("dashboard without uid or title")
	}
	ids := map[int]bool{}
	queried := map[string]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d repeated", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			checkNames(t, "panel "+p.Title, tg.Expr, names)
			for _, n := range metricName.FindAllString(tg.Expr, -1) {
				queried[n] = true
			}
		}
	}
	// The job variable filters every panel: each service's job must be
	// among its values from the process's start, before any traffic, so
	// it must read a family each exports then (envoy-compat exports none
	// of rate_limit_*, and serve its decisions only once it decided).
	serve, compat := families(t, false)
	job := false
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: query: %v", v.Name, err)
		}
		if v.Definition != q.Query {
			t.Errorf("variable %s: definition %q differs from its query %q", v.Name, v.Definition, q.Query)
		}
		checkNames(t, "variable "+v.Name, q.Query, names)
		if v.Name != "job" {
			continue
		}
		job = true
		for _, svc := range []struct {
			name     string
			families map[string]bool
		}{{"serve", serve}, {"envoy-compat", compat}} {
			if !slices.ContainsFunc(metricName.FindAllString(q.Query, -1), func(n string) bool { return svc.families[n] }) {
				t.Errorf("variable job (%s) reads no family %s exports from its start: its job cannot be selected", q.Query, svc.name)
			}
		}
	}
	if !job {
		t.Error("the dashboard has no job variable")
	}
	for _, want := range []string{"rate_limit_allowed_total", "rate_limit_denied_total", "rate_limit_redis_latency_seconds_bucket",
		"rate_limit_fallback_total", "rate_limit_breaker_state", "rate_limit_clock_skew_seconds",
		"floodgate_decision_errors_total", "floodgate_envoy_should_rate_limit_errors_total", "floodgate_envoy_hits_total",
		"floodgate_instances_live", "floodgate_fallback_instances", "floodgate_build_info"} {
		if !queried[want] {
			t.Errorf("the dashboard shows no panel of %s", want)
		}
	}
}

func TestAlertsQueryExportedMetrics(t *testing.T) {
	names := exported(t)
	data, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatalf("prometheus/alerts.yml: %v", err)
	}
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			checkNames(t, "alert "+r.Alert, r.Expr, names)
		}
	}
	for _, want := range []string{"RateLimit429Spike", "RateLimitRedisLatencyHigh", "RateLimitFallbackActive"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("alert %s missing (have %v)", want, alerts)
		}
	}
}

// TestPromtool runs promtool's own checks: the rules are valid and their
// unit tests (alerts_test.yml) pass. promtool comes with Debian's
// prometheus package.
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool not found; CI must install it (apt-get install -y prometheus)")
		}
		t.Skip("promtool not installed (apt-get install -y prometheus); run: promtool check rules deploy/prometheus/alerts.yml && promtool test rules deploy/prometheus/alerts_test.yml")
	}
	for _, args := range [][]string{
		{"check", "rules", "prometheus/alerts.yml"},
		{"test", "rules", "prometheus/alerts_test.yml"},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

// noDenials is an empty deny cache, for the names RegisterDenyCache
// registers.
type noDenials struct{}

func (noDenials) Saved() uint64   { return 0 }
func (noDenials) Evicted() uint64 { return 0 }
func (noDenials) Len() int        { return 0 }
