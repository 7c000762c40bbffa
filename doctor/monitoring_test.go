package doctor_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// shippedRules is the path of the shipped alert rules, from this package.
const shippedRules = "../deploy/prometheus/alerts.yml"

func TestShippedAlertsMatchTheRulesFile(t *testing.T) {
	data, err := os.ReadFile(shippedRules)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				names = append(names, r.Alert)
			}
		}
	}
	got := slices.Sorted(slices.Values(doctor.ShippedAlerts))
	slices.Sort(names)
	if !slices.Equal(got, names) {
		t.Fatalf("doctor.ShippedAlerts = %v, %s has %v", got, shippedRules, names)
	}
}

// requirePrometheus returns the path of the prometheus binary (Debian's
// prometheus package, which CI installs for promtool); it skips the test
// outside CI when there is none.
func requirePrometheus(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("prometheus not found; CI installs the prometheus package: %v", err)
		}
		t.Skipf("prometheus not installed: %v", err)
	}
	return p
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startPrometheus runs a real Prometheus on a free port, scraping targets
// every second and evaluating rules every second, and returns its URL.
func startPrometheus(t *testing.T, rules []string, targets []string) string {
	t.Helper()
	bin := requirePrometheus(t)
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n")
	if len(rules) > 0 {
		b.WriteString("rule_files:\n")
		for _, r := range rules {
			abs, err := filepath.Abs(r)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "  - %q\n", abs)
		}
	}
	if len(targets) > 0 {
		b.WriteString("scrape_configs:\n  - job_name: floodgate\n    static_configs:\n      - targets: [")
		for i, tg := range targets {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%q", tg)
		}
		b.WriteString("]\n")
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var base string
	for attempt := 0; attempt < 3; attempt++ {
		port := freePort(t)
		base = fmt.Sprintf("http://127.0.0.1:%d", port)
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("prometheus-%d.log", attempt)))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
			fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port), "--log.level=warn")
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill() // the pid this test started
			<-done
			logf.Close()
		})
		if waitFor(60*time.Second, done, func() bool {
			resp, err := http.Get(base + "/-/ready")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}) {
			return base
		}
		_ = cmd.Process.Kill()
	}
	t.Fatalf("prometheus did not become ready (logs in %s)", dir)
	return ""
}

// waitFor polls cond every 200ms until it holds, the timeout passes or
// stop closes.
func waitFor(timeout time.Duration, stop <-chan struct{}, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		select {
		case <-stop:
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
	return false
}

// promQuery returns how many series a query on Prometheus answers.
func promQuery(base, q string) int {
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var out struct {
		Data struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if json.NewDecoder(resp.Body).Decode(&out) != nil {
		return 0
	}
	return len(out.Data.Result)
}

// alertState returns the state of the alerting rule name on Prometheus.
func alertState(base, name string) string {
	resp, err := http.Get(base + "/api/v1/rules?type=alert")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var out struct {
		Data struct {
			Groups []struct {
				Rules []struct{ Name, State string } `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if json.NewDecoder(resp.Body).Decode(&out) != nil {
		return ""
	}
	for _, g := range out.Data.Groups {
		for _, r := range g.Rules {
			if r.Name == name {
				return r.State
			}
		}
	}
	return ""
}

func TestMonitoringWithRealPrometheus(t *testing.T) {
	requirePrometheus(t)
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	publish(t, client, "pm", testConfig)
	in := startInstance(t, client, "pm", instanceOptions{doc: testConfig, discipline: true})
	u, _ := url.Parse(in.url)
	prom := startPrometheus(t, []string{shippedRules}, []string{u.Host})
	if !waitFor(60*time.Second, nil, func() bool { return promQuery(prom, `floodgate_config_reload_total`) > 0 }) {
		t.Fatal("prometheus never scraped the instance")
	}
	opts := doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "pm",
		Instances: []string{in.url}, PrometheusURL: prom, RateWindow: -1}
	rep := runDoctor(t, opts)
	want(t, rep, doctor.GroupMonitoring, "scraped", doctor.Pass, u.Host)
	want(t, rep, doctor.GroupMonitoring, "alert-rules", doctor.Pass, fmt.Sprintf("all %d shipped alert rules", len(doctor.ShippedAlerts)))
	want(t, rep, doctor.GroupMonitoring, "alerts", doctor.Pass)

	// A configuration change rejected: RateLimitConfigRejected fires
	// (after its minute), and resolves once the source holds the active
	// configuration again: the walk's doctor failed on it for 15 minutes
	// after the fix.
	if _, err := in.reloader.Apply([]byte("version: [broken"), "test"); err == nil {
		t.Fatal("a broken document was accepted")
	}
	if !waitFor(120*time.Second, nil, func() bool { return alertState(prom, "RateLimitConfigRejected") == "firing" }) {
		t.Fatal("RateLimitConfigRejected never fired")
	}
	rep = runDoctor(t, opts)
	want(t, rep, doctor.GroupMonitoring, "alerts", doctor.Fail, "RateLimitConfigRejected")
	if _, err := in.reloader.Apply([]byte(testConfig), "test"); err != nil {
		t.Fatalf("restoring the active configuration: %v", err)
	}
	if !waitFor(30*time.Second, nil, func() bool { return alertState(prom, "RateLimitConfigRejected") == "inactive" }) {
		t.Fatalf("RateLimitConfigRejected still %s after the source holds the active configuration again", alertState(prom, "RateLimitConfigRejected"))
	}
	rep = runDoctor(t, opts)
	want(t, rep, doctor.GroupMonitoring, "alerts", doctor.Pass)

	// A Prometheus with no rules and no scrape of Floodgate.
	bare := startPrometheus(t, nil, nil)
	opts.PrometheusURL = bare
	rep = runDoctor(t, opts)
	want(t, rep, doctor.GroupMonitoring, "scraped", doctor.Fail, "no Floodgate metric")
	want(t, rep, doctor.GroupMonitoring, "alert-rules", doctor.Fail, "none of the shipped alert rules")
}

// TestAlertsListedWithLabels: the alerts check printed "firing:
// RateLimitDenyRatioHigh, RateLimitConfigRejected" without labels, and
// left out an alert pending at the same time. A real Prometheus with
// rules named as the shipped ones (one firing on a rejected reload, one
// pending for an hour) shows both, with their identifying labels.
func TestAlertsListedWithLabels(t *testing.T) {
	requirePrometheus(t)
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	publish(t, client, "pl", testConfig)
	in := startInstance(t, client, "pl", instanceOptions{doc: testConfig, discipline: true})
	u, _ := url.Parse(in.url)
	if _, err := in.reloader.Apply([]byte("version: [broken"), "test"); err == nil {
		t.Fatal("a broken document was accepted")
	}
	rules := filepath.Join(t.TempDir(), "rules.yml")
	if err := os.WriteFile(rules, []byte(`groups:
  - name: test
    rules:
      - alert: RateLimitConfigRejected
        expr: floodgate_config_reload_total{result="invalid"} > 0
      - alert: RateLimitDenyRatioHigh
        expr: up{job="floodgate"} == 1
        for: 1h
`), 0o644); err != nil {
		t.Fatal(err)
	}
	prom := startPrometheus(t, []string{rules}, []string{u.Host})
	if !waitFor(60*time.Second, nil, func() bool {
		return alertState(prom, "RateLimitConfigRejected") == "firing" && alertState(prom, "RateLimitDenyRatioHigh") == "pending"
	}) {
		t.Fatal("the test alerts never fired and pended")
	}
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "pl",
		Instances: []string{in.url}, PrometheusURL: prom, RateWindow: -1})
	firing := fmt.Sprintf(`RateLimitConfigRejected{instance=%q, source=`, u.Host)
	pending := fmt.Sprintf(`RateLimitDenyRatioHigh{instance=%q}`, u.Host)
	c := want(t, rep, doctor.GroupMonitoring, "alerts", doctor.Fail, "firing: "+firing, "pending (condition true, not yet for its for: duration): "+pending)
	if !strings.Contains(c.Summary, pending) {
		t.Errorf("the summary leaves out the pending alert: %q", c.Summary)
	}
}
