package doctor_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocksync"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/fleet"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/tlsreload"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/metrics"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/sentinelfollow"
	"github.com/floodgate-rl/floodgate/server"
)

// instance is a real in-process Floodgate service (package server) on
// a real HTTP listener, deciding on client under prefix.
type instance struct {
	url      string
	adminURL string // the admin listener (server.AdminHandler): /metrics, no /readyz
	probeURL string // the probes' listener (server.HealthHandler): /readyz, no /metrics
	reloader *config.Reloader
	reg      *prometheus.Registry
	hbID     string // its member of <prefix>:instances ("" in memory)
}

// instanceOptions says how to start an instance.
type instanceOptions struct {
	doc string
	// clockAhead is how far the instance's local clock runs ahead of
	// the real time (negative: behind).
	clockAhead time.Duration
	// discipline syncs the instance's clock to Redis's TIME with
	// clocksync, as a production instance should.
	discipline bool
	// metricsAdminOnly serves no /metrics on the instance's URL, as
	// serve --metrics-admin-only does.
	metricsAdminOnly bool
	// memory decides in memory, as serve without --redis does.
	memory bool
	// dateFromClock sets the Date header of every answer from the
	// instance's local clock (clockAhead), as a server on a host whose
	// clock is that far ahead would; net/http's is the machine's clock.
	dateFromClock bool
	// tls serves the instance's URL over TLS as serve does with
	// --tls-cert-file and --tls-key-file (tls.Cert and tls.Key), and
	// --tls-client-ca-file tls.CA when tls.AuthClients; nil: plain HTTP.
	tls *redistest.TLSFiles
	// engine is the HTTP server of a TLS instance (serve --http-server).
	engine server.HTTPEngine
	// source is where the instance says it read doc (/readyz
	// config_source), e.g. "redis:<prefix>:config"; default
	// "instance.yaml".
	source string
	// divisor, if set, is exported as floodgate_fallback_instances, as
	// serve's local fallback does.
	divisor func() int
	// noHeartbeatID leaves heartbeat_id out of /readyz, as versions
	// before it did.
	noHeartbeatID bool
	// pending starts the instance with no configuration, as serve
	// --config-from-redis does when the document under source is
	// unusable at start (config.NewPendingHolder, here the key missing):
	// doc is unused, source must be given.
	pending bool
	// sentinels reports the instance's sentinels in /readyz, as serve
	// behind Sentinel does (its Follower's Status), of the master
	// sentinelMaster.
	sentinels      func() sentinelfollow.Status
	sentinelMaster string
}

func startInstance(t *testing.T, client redis.UniversalClient, prefix string, o instanceOptions) *instance {
	t.Helper()
	source := o.source
	if source == "" {
		source = "instance.yaml"
	}
	var holder *config.Holder
	if o.pending {
		holder = config.NewPendingHolder(source, fmt.Errorf("%w (key %q)", config.ErrNotFound, strings.TrimPrefix(source, "redis:")))
	} else {
		cfg, err := config.Parse([]byte(o.doc), source)
		if err != nil {
			t.Fatal(err)
		}
		if holder, err = config.NewHolder(cfg); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	rl, err := config.NewReloader(holder, config.ReloaderOptions{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	local := func() time.Time { return time.Now().Add(o.clockAhead) }
	now := local
	if o.discipline {
		clk, err := clocksync.New(client, clocksync.Options{Now: local, Observer: m})
		if err != nil {
			t.Fatal(err)
		}
		if err := clk.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		now = clk.Now
	}
	var store floodgate.Store
	kind, ready := "redis", func(ctx context.Context) error { return client.Ping(ctx).Err() }
	if o.memory {
		kind, ready = "memory", nil
		store, err = memstore.New(memstore.Options{})
	} else {
		store, err = redisstore.New(client, redisstore.Options{})
	}
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.New(store, floodgate.Options{Prefix: prefix, Clock: now})
	if err != nil {
		t.Fatal(err)
	}
	hbID := ""
	if !o.memory {
		hbID = fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
	}
	if o.divisor != nil {
		if err := metrics.RegisterFallbackInstances(reg, o.divisor); err != nil {
			t.Fatal(err)
		}
	}
	so := server.Options{Registerer: reg, Gatherer: reg, Metrics: m, MetricsAdminOnly: o.metricsAdminOnly,
		Ready: ready, Store: kind, HTTPEngine: o.engine, Sentinels: o.sentinels, SentinelMaster: o.sentinelMaster}
	if !o.noHeartbeatID {
		so.HeartbeatID = hbID
	}
	srv, err := server.New(lim, holder, so)
	if err != nil {
		t.Fatal(err)
	}
	var url string
	if o.tls != nil {
		url = serveTLS(t, srv, *o.tls)
	} else {
		var h http.Handler = srv
		if o.dateFromClock {
			h = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				w.Header().Set("Date", local().UTC().Format(http.TimeFormat))
				srv.ServeHTTP(w, req)
			})
		}
		hs := httptest.NewServer(h)
		t.Cleanup(hs.Close)
		url = hs.URL
	}
	if !o.memory {
		// Its heartbeats in <prefix>:instances, as serve's.
		hb, err := fleet.New(client, prefix+":instances", hbID, fleet.Options{Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := hb.Beat(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = hb.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	as := httptest.NewServer(srv.AdminHandler())
	t.Cleanup(as.Close)
	ps := httptest.NewServer(srv.HealthHandler())
	t.Cleanup(ps.Close)
	return &instance{url: url, adminURL: as.URL, probeURL: ps.URL, reloader: rl, reg: reg, hbID: hbID}
}

// serveTLS serves srv (with its engine) on a TLS listener configured as
// serve's (internal/tlsreload, f's server certificate, and f's CA for
// client certificates when f.AuthClients) until the test ends, and
// returns its https:// URL.
func serveTLS(t *testing.T, srv *server.Server, f redistest.TLSFiles) string {
	t.Helper()
	files := tlsreload.Files{Cert: f.Cert, Key: f.Key}
	if f.AuthClients {
		files.ClientCAs = f.CA
	}
	cert, err := tlsreload.Load(files, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, tls.NewListener(ln, cert.ServerConfig())) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "https://" + ln.Addr().String()
}

func TestInstancesHealthyPassClean(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	cfg := publish(t, client, "ih", testConfig)
	traffic(t, client, "ih", cfg)
	a := startInstance(t, client, "ih", instanceOptions{doc: testConfig, discipline: true})
	b := startInstance(t, client, "ih", instanceOptions{doc: testConfig, discipline: true})
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "ih",
		Instances: []string{a.url, b.url}, RateWindow: 200 * time.Millisecond})
	want(t, rep, doctor.GroupInstances, "ready", doctor.Pass, "all 2 instances ready")
	want(t, rep, doctor.GroupInstances, "config-version", doctor.Pass, `version "7"`)
	want(t, rep, doctor.GroupClocks, "instances", doctor.Pass, "disciplined to Redis")
	want(t, rep, doctor.GroupConfig, "failure-mode", doctor.Pass, "(login) fail closed")
	for _, c := range rep.Checks {
		if c.Status >= doctor.Warn {
			t.Fatalf("%s/%s is %v:\n%s", c.Group, c.Name, c.Status, text(rep))
		}
	}
}

func TestInstancesOnDifferentConfigVersionsFail(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	publish(t, client, "iv", testConfig)
	a := startInstance(t, client, "iv", instanceOptions{doc: testConfig, discipline: true})
	b := startInstance(t, client, "iv", instanceOptions{doc: strings.Replace(testConfig, `version: "7"`, `version: "6"`, 1), discipline: true})
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "iv",
		Instances: []string{a.url, b.url}, RateWindow: -1})
	c := want(t, rep, doctor.GroupInstances, "config-version", doctor.Fail, `version "6": `+b.url, `version "7": `+a.url)
	if c.Fix == "" || rep.Worst() != doctor.Fail {
		t.Fatalf("fix %q, worst %v", c.Fix, rep.Worst())
	}
}

func TestInstanceWithSkewedClock(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	publish(t, client, "ik", testConfig)
	good := startInstance(t, client, "ik", instanceOptions{doc: testConfig, discipline: true})
	// Disciplined, 5s behind: measured and corrected, but the host's NTP
	// is broken.
	behind := startInstance(t, client, "ik", instanceOptions{doc: testConfig, clockAhead: -5 * time.Second, discipline: true})
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "ik",
		Instances: []string{good.url, behind.url}, RateWindow: -1})
	c := want(t, rep, doctor.GroupClocks, "instances", doctor.Warn, behind.url+": disciplined to Redis, measured offset 5s")
	if strings.Contains(strings.Join(c.Evidence, "\n"), good.url+": disciplined to Redis, measured offset 5") {
		t.Fatalf("the good instance is reported skewed:\n%s", text(rep))
	}

	// Not disciplined: the instance exports the gauges but never measured.
	raw := startInstance(t, client, "ik", instanceOptions{doc: testConfig})
	rep = runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "ik",
		Instances: []string{raw.url}, RateWindow: -1})
	want(t, rep, doctor.GroupClocks, "instances", doctor.Warn, "no clock sync round measured")
}

func TestInstanceWithoutMetricsWarns(t *testing.T) {
	// An instance of a version without the clock metrics: doctor says so
	// and goes on.
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	publish(t, client, "im", testConfig)
	store, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.New(store, floodgate.Options{Prefix: "im"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := config.Parse([]byte(testConfig), "x.yaml")
	holder, _ := config.NewHolder(cfg)
	// /metrics serves a registry without the clock metrics.
	s, err := server.New(lim, holder, server.Options{Registerer: prometheus.NewRegistry(), Gatherer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "im",
		Instances: []string{hs.URL}, RateWindow: -1})
	want(t, rep, doctor.GroupClocks, "instances", doctor.Warn, "not exported by this version")
	if c := want(t, rep, doctor.GroupInstances, "ready", doctor.Pass); c.Summary != "1 instance ready" {
		t.Errorf("ready: %q, want %q", c.Summary, "1 instance ready")
	}
}

// TestInstancesWhoseMetricsCannotBeRead: an instance whose /metrics is not
// on its URL (serve --metrics-admin-only) and an unreachable one. Their
// clocks, breakers and fallback counts are unknown, and the report says so
// and why: it used to pass the clock and fallback checks for the
// unreachable one ("every instance disciplines its clock", "no fallback
// decisions") and to call the 404 "not exported by this version".
func TestInstancesWhoseMetricsCannotBeRead(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	publish(t, client, "mr", testConfig)
	a := startInstance(t, client, "mr", instanceOptions{doc: testConfig, discipline: true, metricsAdminOnly: true})
	gone := httptest.NewServer(nil)
	gone.Close()
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "mr",
		Instances: []string{a.url, gone.URL}, RateWindow: -1})
	want(t, rep, doctor.GroupClocks, "instances", doctor.Warn, a.url+": GET /metrics: status 404", "--metrics-admin-only", gone.URL+": unreachable")
	want(t, rep, doctor.GroupInstances, "ready", doctor.Fail, "1 of 2 instances not ready")
	want(t, rep, doctor.GroupInstances, "breakers", doctor.Warn, "the breakers of 2 instances are unknown: their /metrics could not be read",
		a.url+": GET /metrics: status 404", gone.URL+": unreachable")
	c := want(t, rep, doctor.GroupInstances, "fallback-and-denials", doctor.Warn, a.url+": GET /metrics: status 404", gone.URL+": unreachable")
	if strings.Contains(c.Summary, "fallback decisions since start") {
		t.Fatalf("fallback-and-denials blames fallback decisions it never read:\n%s", text(rep))
	}
	for _, ch := range rep.Checks {
		for _, e := range ch.Evidence {
			if strings.Contains(e, "not exported by this version") {
				t.Errorf("%s/%s: %q", ch.Group, ch.Name, e)
			}
		}
	}
}

// TestRatesUnknownWhenTheRunEndsFirst: a run whose time ends during the
// rate window says the current rates are unknown (warn) instead of passing
// with a read line that claims a second scrape that never happened.
func TestRatesUnknownWhenTheRunEndsFirst(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	cfg := publish(t, client, "ir", testConfig)
	traffic(t, client, "ir", cfg)
	a := startInstance(t, client, "ir", instanceOptions{doc: testConfig, discipline: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	rep, err := doctor.Run(ctx, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "ir",
		Instances: []string{a.url}, RateWindow: time.Hour, LatencySamples: 5, LatencyWarn: 5 * time.Second, LatencyFail: 10 * time.Second})
	if err != nil {
		t.Fatalf("doctor.Run: %v", err)
	}
	want(t, rep, doctor.GroupInstances, "fallback-and-denials", doctor.Warn, "current rates of 1 instance are unknown", "no second /metrics scrape")
}

// TestInstanceURLNotFloodgate: an --instance URL whose /readyz is not
// Floodgate's. The admin listener (no /readyz: a 404 problem) was
// reported "ready: http://...:  (HTTP 404) " with an empty reason, and
// config-version then claimed the instances run version "" while Redis
// holds another: a mismatch that does not exist. Now the ready check says
// the URL is an admin address (its /metrics has Floodgate's series) or
// not a Floodgate instance, and config-version says the version is
// unknown.
func TestInstanceURLNotFloodgate(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	doc := strings.Replace(testConfig, `version: "7"`, `version: "deploy-1"`, 1)
	publish(t, client, "nf", doc)
	a := startInstance(t, client, "nf", instanceOptions{doc: doc, discipline: true})
	other := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(other.Close)

	for _, tc := range []struct {
		url      string
		mentions []string
	}{
		{a.adminURL, []string{a.adminURL + ": GET /readyz answered HTTP 404, but /metrics has Floodgate's series: this is an instance's admin address (--admin-addr)"}},
		{other.URL, []string{other.URL + ": GET /readyz answered HTTP 404 (no /readyz there: is this an admin address, --admin-addr? give the instance's main --addr): this URL did not answer as a Floodgate instance"}},
	} {
		rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "nf",
			Instances: []string{tc.url}, RateWindow: -1})
		c := want(t, rep, doctor.GroupInstances, "ready", doctor.Fail, append(tc.mentions, "1 of 1 URL does not answer /readyz as a Floodgate instance")...)
		if !strings.Contains(c.Fix, "main address (serve --addr)") {
			t.Errorf("ready fix %q does not say to give the main --addr", c.Fix)
		}
		c = want(t, rep, doctor.GroupInstances, "config-version", doctor.Warn, "the configuration version of 1 URL is unknown", "version unknown (no Floodgate /readyz answer): "+tc.url)
		if strings.Contains(c.Summary, `version ""`) || strings.Contains(c.Fix, "have not applied") {
			t.Errorf("config-version claims a version mismatch for an unknown version:\n%s", text(rep))
		}
	}
	// With the main address too: the known version is reported, the
	// admin address's as unknown, not as a mismatch.
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "nf",
		Instances: []string{a.url, a.adminURL}, RateWindow: -1})
	want(t, rep, doctor.GroupInstances, "config-version", doctor.Warn, `every instance whose version is known runs configuration version "deploy-1"; the version of 1 URL is unknown`)
}

// TestMetricsAdminOnlyWithAdminURL: an instance run with
// --metrics-admin-only serves /readyz on its main address and /metrics on
// its admin address only. Given both, doctor reads each where it is, and
// every instance check passes; given the main one alone, the metrics
// checks say how to give the admin address.
func TestMetricsAdminOnlyWithAdminURL(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	publish(t, client, "ma", testConfig)
	a := startInstance(t, client, "ma", instanceOptions{doc: testConfig, discipline: true, metricsAdminOnly: true})
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "ma",
		Instances: []string{a.url, a.adminURL}, RateWindow: 200 * time.Millisecond})
	want(t, rep, doctor.GroupInstances, "ready", doctor.Pass, "1 instance ready", a.url+`: ready, config version "7"; /metrics read on its admin address `+a.adminURL)
	want(t, rep, doctor.GroupInstances, "config-version", doctor.Pass, `every instance runs configuration version "7"`)
	want(t, rep, doctor.GroupClocks, "instances", doctor.Pass, a.url+": disciplined to Redis")
	want(t, rep, doctor.GroupInstances, "breakers", doctor.Info)
	want(t, rep, doctor.GroupInstances, "fallback-and-denials", doctor.Pass, a.url+" since start")

	rep = runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "ma",
		Instances: []string{a.url}, RateWindow: -1})
	c := want(t, rep, doctor.GroupClocks, "instances", doctor.Warn, "give that address too, as another --instance (same host)")
	if !strings.Contains(c.Fix, "--admin-addr") {
		t.Errorf("fix %q does not name the admin address", c.Fix)
	}
}

// TestProbesAddressGiven: an instance's probes' address (serve
// --health-addr) given as the instance answers its /readyz but serves no
// /metrics. Doctor says which address it is and to give the main one; it
// told a walk the instance ran with --metrics-admin-only (it did not) and
// to give its admin address.
func TestProbesAddressGiven(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	publish(t, client, "pa", testConfig)
	a := startInstance(t, client, "pa", instanceOptions{doc: testConfig, discipline: true})
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "pa",
		Instances: []string{a.probeURL}, RateWindow: -1})
	want(t, rep, doctor.GroupInstances, "ready", doctor.Pass, "1 instance ready")
	c := want(t, rep, doctor.GroupClocks, "instances", doctor.Warn, a.probeURL+": GET /metrics: status 404: this is the instance's probes' address (serve --health-addr)")
	if !strings.Contains(c.Fix, a.probeURL+" is an instance's probes' address") || !strings.Contains(c.Fix, "main address (--addr) instead") {
		t.Errorf("fix %q does not say to give the main address instead of the probes' one", c.Fix)
	}
	for _, ch := range rep.Checks {
		for _, e := range append(ch.Evidence, ch.Fix) {
			if strings.Contains(e, metricsAdminOnlyText) {
				t.Errorf("%s/%s blames --metrics-admin-only for a probes' address: %q", ch.Group, ch.Name, e)
			}
		}
	}
}

// metricsAdminOnlyText is in doctor's advice for an instance run with
// --metrics-admin-only.
const metricsAdminOnlyText = "an instance run with --metrics-admin-only serves /metrics"

// TestInstanceInMemoryFails: an instance that runs in memory (serve
// without --redis) among a Redis deployment's is ready, but decides
// alone: the ready check fails it and says so (it passed as "1 instance
// ready", with only a clock warning to hint at it). The clock check warns
// too, naming it: its clock is not disciplined to Redis (an outside walk
// saw it pass, "every instance disciplines its clock to Redis", over a
// line saying this one does not).
func TestInstanceInMemoryFails(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	publish(t, client, "mm", testConfig)
	a := startInstance(t, client, "mm", instanceOptions{doc: testConfig, discipline: true})
	b := startInstance(t, client, "mm", instanceOptions{doc: testConfig, memory: true})
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "mm",
		Instances: []string{a.url, b.url}, RateWindow: -1})
	want(t, rep, doctor.GroupInstances, "ready", doctor.Fail, "1 of 2 instances run in memory", b.url+": runs in memory")
	c := want(t, rep, doctor.GroupClocks, "instances", doctor.Warn, "is not disciplined to Redis", b.url+": runs in memory, its clock is not disciplined to Redis")
	if !strings.Contains(c.Fix, "1 instance runs in memory: run it with --redis") {
		t.Errorf("the clock check's fix does not say to run the instance with --redis: %q", c.Fix)
	}
}
