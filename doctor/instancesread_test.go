package doctor_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/health"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/envoycompat"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestHungInstanceVersionUnknown: an instance that accepts connections and
// never answers was left out of config-version, which passed "every
// instance runs configuration version"; its version is now unknown, a
// warning.
func TestHungInstanceVersionUnknown(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	publish(t, client, "hv", testConfig)
	a := startInstance(t, client, "hv", instanceOptions{doc: testConfig, discipline: true})
	hung := "http://" + redistest.Mute(t)
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "hv",
		Instances: []string{a.url, hung}, RateWindow: -1, HTTPClient: &http.Client{Timeout: time.Second}})
	c := want(t, rep, doctor.GroupInstances, "config-version", doctor.Warn, "the version of 1 instance is unknown: it was not read", "version unknown (not read, see ready): "+hung)
	if !strings.Contains(c.Fix, hung) {
		t.Errorf("fix %q does not name %s", c.Fix, hung)
	}
}

// TestInstancesReadAtOnce: instances were read one after another, 5 s
// each for a hung one. Each of these two answers /readyz only once both
// requests have arrived: read one after the other, the first would wait
// for the second until the client's timeout.
func TestInstancesReadAtOnce(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	publish(t, client, "ra", testConfig)
	var arrived sync.WaitGroup
	arrived.Add(2)
	both := make(chan struct{})
	go func() { arrived.Wait(); close(both) }()
	var once [2]sync.Once
	var urls []string
	for i := range 2 {
		in := startInstance(t, client, "ra", instanceOptions{doc: testConfig, discipline: true})
		u, _ := url.Parse(in.url)
		proxy := httputil.NewSingleHostReverseProxy(u)
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/readyz" {
				once[i].Do(arrived.Done)
				select {
				case <-both:
				case <-r.Context().Done():
					return
				}
			}
			proxy.ServeHTTP(w, r)
		}))
		t.Cleanup(hs.Close)
		urls = append(urls, hs.URL)
	}
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "ra",
		Instances: urls, RateWindow: -1, HTTPClient: &http.Client{Timeout: 2 * time.Second}})
	want(t, rep, doctor.GroupInstances, "ready", doctor.Pass, "all 2 instances ready", urls[0]+": ready", urls[1]+": ready")
	// The report keeps the order given.
	c, _ := rep.Find(doctor.GroupInstances, "ready")
	if !strings.HasPrefix(c.Evidence[0], urls[0]) {
		t.Errorf("evidence out of order: %q", c.Evidence)
	}
}

// TestEnvoyCompatGivenAsInstance: envoy-compat's HTTP port (no /readyz)
// and debug port (/metrics with floodgate_envoy_* series, taken for an
// admin address) given as instances: fallback-and-denials passed on its
// zero counts. Both are now named as envoy-compat's ports, with what
// doctor can audit of it, and nothing passes on them.
func TestEnvoyCompatGivenAsInstance(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	reg := prometheus.NewRegistry()
	m, err := envoycompat.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := envoycompat.NewService(envoycompat.Options{Store: &envoycompat.MemoryStore{}, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	h := envoycompat.NewHealth(health.NewServer(), false)
	h.Set(envoycompat.ComponentRedis, true)
	httpPort := httptest.NewServer(svc.HTTPHandler(h))
	t.Cleanup(httpPort.Close)
	debugPort := httptest.NewServer(svc.DebugHandler(reg))
	t.Cleanup(debugPort.Close)
	for _, u := range []string{httpPort.URL, debugPort.URL} {
		rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "ec", Instances: []string{u}, RateWindow: -1})
		c := want(t, rep, doctor.GroupInstances, "ready", doctor.Fail, "floodgate envoy-compat's")
		if !strings.Contains(c.Fix, "instance checks are for floodgate serve") || !strings.Contains(c.Fix, "/healthcheck") {
			t.Errorf("%s: ready fix %q", u, c.Fix)
		}
		for _, ch := range rep.Checks {
			if ch.Group == doctor.GroupInstances && ch.Status == doctor.Pass {
				t.Errorf("%s: %s passes on envoy-compat:\n%s", u, ch.Name, text(rep))
			}
		}
		want(t, rep, doctor.GroupInstances, "fallback-and-denials", doctor.Warn)
		// Its counters are under no Floodgate prefix: no key under the
		// prefix is no hint that the prefix is wrong (a re-walk).
		for _, ch := range rep.Checks {
			if ch.Group == doctor.GroupKeys && ch.Name == "scan" && strings.Contains(ch.Summary, "the prefix may be wrong") {
				t.Errorf("%s: scan says the prefix may be wrong for envoy-compat's port: %s", u, ch.Summary)
			}
		}
	}
}
