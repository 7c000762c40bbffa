package doctor_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"gopkg.in/yaml.v3"
)

// fakeAlert is one alert of a rule on fakePrometheus.
type fakeAlert struct {
	rule, state string
	labels      map[string]string
}

// fakePrometheus answers doctor's two Prometheus requests: the scraped
// series (one per target) and the shipped alert rules, with the alerts
// set by set. As a real Prometheus does, each rule carries its labels
// from the shipped file (severity), and so does each of its alerts.
type fakePrometheus struct {
	URL        string
	mu         sync.Mutex
	targets    []string
	alerts     []fakeAlert
	severities map[string]string // rule -> its severity label
}

func startFakePrometheus(t *testing.T, targets ...string) *fakePrometheus {
	t.Helper()
	p := &fakePrometheus{targets: targets, severities: shippedSeverities(t)}
	hs := httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(hs.Close)
	p.URL = hs.URL
	return p
}

func (p *fakePrometheus) set(alerts ...fakeAlert) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.alerts = alerts
}

func (p *fakePrometheus) serve(w http.ResponseWriter, req *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var data any
	switch req.URL.Path {
	case "/api/v1/query":
		var result []any
		for _, tg := range p.targets {
			result = append(result, map[string]any{"metric": map[string]string{"job": "floodgate", "instance": tg}, "value": []any{0, "3"}})
		}
		data = map[string]any{"resultType": "vector", "result": result}
	case "/api/v1/rules":
		var rules []any
		for _, name := range doctor.ShippedAlerts {
			state, alerts := "inactive", []any{}
			for _, a := range p.alerts {
				if a.rule != name {
					continue
				}
				labels := map[string]string{"severity": p.severities[name]}
				maps.Copy(labels, a.labels)
				alerts = append(alerts, map[string]any{"labels": labels, "state": a.state})
				if state != "firing" {
					state = a.state
				}
			}
			rules = append(rules, map[string]any{"name": name, "state": state, "health": "ok", "type": "alerting",
				"labels": map[string]string{"severity": p.severities[name]}, "alerts": alerts})
		}
		data = map[string]any{"groups": []any{map[string]any{"name": "floodgate", "file": "alerts.yml", "rules": rules}}}
	default:
		http.NotFound(w, req)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": data})
}

// shippedSeverities reads each shipped alert rule's severity label.
func shippedSeverities(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(shippedRules)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Rules []struct {
				Alert  string            `yaml:"alert"`
				Labels map[string]string `yaml:"labels"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", shippedRules, err)
	}
	sev := map[string]string{}
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				sev[r.Alert] = r.Labels["severity"]
			}
		}
	}
	return sev
}

func host(t *testing.T, u string) string {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return pu.Host
}

// TestAlertsOfOtherInstancesIgnored: one Prometheus scraping several
// deployments, doctor --instance http://127.0.0.1:32630 failed with
// "firing: RateLimitBreakerOpen{instance="127.0.0.1:32610"...}", another
// deployment's alert. With --instance URLs, an alert counts when its
// instance label is a given URL's host:port (the admin address's, for an
// instance whose /metrics is there) or when it has none (an aggregate);
// the others are listed as ignored, with their count. Without --instance
// every alert counts, as before.
func TestAlertsOfOtherInstancesIgnored(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	publish(t, client, "as", testConfig)
	a := startInstance(t, client, "as", instanceOptions{doc: testConfig, discipline: true})
	// Run with --metrics-admin-only: Prometheus scrapes its admin address.
	b := startInstance(t, client, "as", instanceOptions{doc: testConfig, discipline: true, metricsAdminOnly: true})
	const other = "127.0.0.1:1" // another deployment's instance
	prom := startFakePrometheus(t, host(t, a.url), host(t, b.adminURL), other)
	opts := doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "as",
		Instances: []string{a.url, b.url, b.adminURL}, PrometheusURL: prom.URL, RateWindow: -1}
	otherOpen := fakeAlert{"RateLimitBreakerOpen", "firing", map[string]string{"instance": other, "partition": "primary"}}
	otherName := fmt.Sprintf(`RateLimitBreakerOpen{instance=%q, partition="primary"}`, other)

	// Only another instance's alerts: they are ignored, and counted.
	prom.set(otherOpen, fakeAlert{"RateLimitDenyRatioHigh", "pending", map[string]string{"instance": other}})
	rep := runDoctor(t, opts)
	c := want(t, rep, doctor.GroupMonitoring, "alerts", doctor.Pass, "no Floodgate alert firing or pending for the given instances",
		"2 alerts of other instances than those given ignored", "firing: "+otherName)
	if strings.Contains(c.Summary, "firing:") {
		t.Errorf("summary %q names another instance's alert as firing", c.Summary)
	}
	want(t, rep, doctor.GroupMonitoring, "scraped", doctor.Pass)

	// The given instances' alerts count: a's by its URL, b's by its admin
	// address, the scrape target.
	prom.set(otherOpen,
		fakeAlert{"RateLimitConfigRejected", "firing", map[string]string{"instance": host(t, b.adminURL), "source": "redis"}},
		fakeAlert{"RateLimitDenyRatioHigh", "pending", map[string]string{"instance": host(t, a.url)}})
	rep = runDoctor(t, opts)
	c = want(t, rep, doctor.GroupMonitoring, "alerts", doctor.Fail,
		fmt.Sprintf(`firing: RateLimitConfigRejected{instance=%q`, host(t, b.adminURL)),
		fmt.Sprintf(`pending (condition true, not yet for its for: duration): RateLimitDenyRatioHigh{instance=%q}`, host(t, a.url)),
		"1 alert of other instances than those given ignored")
	if strings.Contains(c.Summary, other) {
		t.Errorf("summary %q names another instance's alert", c.Summary)
	}

	// An alert without an instance label (an aggregate) counts.
	prom.set(otherOpen, fakeAlert{"RateLimit429Spike", "firing", map[string]string{"job": "floodgate"}})
	rep = runDoctor(t, opts)
	want(t, rep, doctor.GroupMonitoring, "alerts", doctor.Fail, `firing: RateLimit429Spike{job="floodgate"}`, "1 alert of other instances")

	// Without --instance, every alert counts, as before.
	prom.set(otherOpen)
	opts.Instances = nil
	rep = runDoctor(t, opts)
	c = want(t, rep, doctor.GroupMonitoring, "alerts", doctor.Fail, "firing: "+otherName)
	if strings.Contains(c.Summary, "ignored") {
		t.Errorf("summary %q ignores alerts without --instance", c.Summary)
	}
}

// TestAlertsOfAnUnpairedAdminOnlyInstance: an instance run with
// --metrics-admin-only whose admin address doctor was not given is scraped
// on a port doctor does not know: an alert of any instance on its host
// counts, rather than being ignored as another deployment's.
func TestAlertsOfAnUnpairedAdminOnlyInstance(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	publish(t, client, "au", testConfig)
	b := startInstance(t, client, "au", instanceOptions{doc: testConfig, discipline: true, metricsAdminOnly: true})
	prom := startFakePrometheus(t, host(t, b.adminURL))
	prom.set(fakeAlert{"RateLimitBreakerOpen", "firing", map[string]string{"instance": host(t, b.adminURL), "partition": "primary"}},
		fakeAlert{"RateLimitClockSkew", "firing", map[string]string{"instance": "10.9.9.9:8080"}})
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "au",
		Instances: []string{b.url}, PrometheusURL: prom.URL, RateWindow: -1})
	c := want(t, rep, doctor.GroupMonitoring, "alerts", doctor.Fail,
		fmt.Sprintf(`firing: RateLimitBreakerOpen{instance=%q`, host(t, b.adminURL)), "1 alert of other instances than those given ignored",
		"alerts of any instance on 127.0.0.1 are counted as its")
	if strings.Contains(c.Summary, "10.9.9.9") {
		t.Errorf("summary %q counts another host's alert", c.Summary)
	}
}

// TestAlertsOfAnInstanceReachedByAnotherAddress: doctor reaching an
// instance through kubectl port-forward (localhost:N) while Prometheus
// scrapes the pod's IP cannot tell its alerts from another deployment's;
// they used to be ignored as another's, and a pending breaker alert of
// the audited pod passed. Every alert counts then, and the evidence says
// why.
func TestAlertsOfAnInstanceReachedByAnotherAddress(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	publish(t, client, "pf", testConfig)
	a := startInstance(t, client, "pf", instanceOptions{doc: testConfig, discipline: true})
	const podIP = "10.1.2.3:8080" // the scrape target; doctor is given a's loopback URL
	prom := startFakePrometheus(t, podIP)
	prom.set(fakeAlert{"RateLimitBreakerOpen", "pending", map[string]string{"instance": podIP, "partition": "primary"}})
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "pf",
		Instances: []string{a.url}, PrometheusURL: prom.URL, RateWindow: -1})
	if sc := want(t, rep, doctor.GroupMonitoring, "scraped", doctor.Warn, host(t, a.url)); !strings.Contains(sc.Fix, "kubectl port-forward") {
		t.Errorf("scraped fix %q does not say a port-forward explains it", sc.Fix)
	}
	c := want(t, rep, doctor.GroupMonitoring, "alerts", doctor.Warn, fmt.Sprintf(`RateLimitBreakerOpen{instance=%q`, podIP))
	if strings.Contains(c.Summary, "ignored") {
		t.Errorf("summary %q ignores the audited instance's alert", c.Summary)
	}
}

// TestInfoAlertsWarn: RateLimitRedisFailedOver (severity info), firing
// for 10 minutes after a planned failover, failed the alerts check as a
// breaker open would: an alert of severity info firing warns, naming it
// as informational, and any other firing alert still fails the check.
// The severities are the shipped file's (fakePrometheus serves them as a
// real Prometheus does, on the rule and on each alert).
func TestInfoAlertsWarn(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	publish(t, client, "ia", testConfig)
	a := startInstance(t, client, "ia", instanceOptions{doc: testConfig, discipline: true})
	prom := startFakePrometheus(t, host(t, a.url))
	opts := doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "ia",
		Instances: []string{a.url}, PrometheusURL: prom.URL, RateWindow: -1}
	failedOver := fakeAlert{"RateLimitRedisFailedOver", "firing", map[string]string{"instance": host(t, a.url), "job": "floodgate"}}
	failedOverName := fmt.Sprintf(`RateLimitRedisFailedOver{instance=%q}`, host(t, a.url))

	prom.set(failedOver)
	rep := runDoctor(t, opts)
	c := want(t, rep, doctor.GroupMonitoring, "alerts", doctor.Warn, "firing, severity info", failedOverName)
	if strings.HasPrefix(c.Summary, "firing: ") {
		t.Errorf("summary %q names an alert of severity info as firing as any other", c.Summary)
	}

	prom.set(failedOver, fakeAlert{"RateLimitBreakerOpen", "firing", map[string]string{"instance": host(t, a.url), "partition": "primary"}})
	rep = runDoctor(t, opts)
	want(t, rep, doctor.GroupMonitoring, "alerts", doctor.Fail,
		fmt.Sprintf(`firing: RateLimitBreakerOpen{instance=%q`, host(t, a.url)), "firing, severity info: "+failedOverName)
}
