package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// compatDrain is how long envoy-compat drains after SIGTERM at most: its
// HTTP servers, then its gRPC server, under one 10 s deadline
// (cmd/floodgate envoycompat.go). It has no shutdown delay: its listeners
// close at the signal.
const compatDrain = 10 * time.Second

// checkCompatTermination checks how the envoy-compat Deployment stops: a
// preStop sleep keeps the pod serving while the endpoints are updated
// (envoy-compat closes its listeners at SIGTERM, and Envoy's calls to a
// pod still in the endpoints would fail, or pass unlimited with
// failure_mode_deny: false), as a sleep action (the image has no sleep
// binary for an exec hook), and the grace period, which counts from the
// start of preStop, holds the sleep and the drain.
func checkCompatTermination(t *testing.T, where string, d *appsv1.Deployment, c corev1.Container) {
	t.Helper()
	var hook *corev1.LifecycleHandler
	if c.Lifecycle != nil {
		hook = c.Lifecycle.PreStop
	}
	if hook == nil || hook.Sleep == nil {
		t.Fatalf("%s: no preStop sleep: envoy-compat's listeners close at SIGTERM, before the endpoints drop the pod", where)
	}
	if hook.Exec != nil || hook.HTTPGet != nil || hook.TCPSocket != nil {
		t.Errorf("%s: preStop %+v: the sleep action only (the image has no sleep binary)", where, hook)
	}
	sleep := time.Duration(hook.Sleep.Seconds) * time.Second
	if sleep < 5*time.Second {
		t.Errorf("%s: preStop sleeps %v, want at least serve's --shutdown-delay of the floodgate Deployment, 5s", where, sleep)
	}
	gp := d.Spec.Template.Spec.TerminationGracePeriodSeconds
	if gp == nil {
		t.Fatalf("%s: no terminationGracePeriodSeconds (the default 30s is not what the comment says)", where)
	}
	if grace, need := time.Duration(*gp)*time.Second, sleep+compatDrain; grace < need {
		t.Errorf("%s: terminationGracePeriodSeconds %v < preStop %v + drain %v = %v: the kubelet would kill it mid-drain", where, grace, sleep, compatDrain, need)
	}
	// The sleep action needs Kubernetes 1.30 (on by default from then):
	// the manifest and docs/deploy.md say so.
	for _, f := range []string{"kubernetes/envoy-compat/deployment.yaml", "../docs/deploy.md"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "Kubernetes 1.30") {
			t.Errorf("%s does not say that the preStop sleep action needs Kubernetes 1.30", f)
		}
	}
}

// checkCompatHardening checks what the kit adds to an envoyproxy/ratelimit
// Deployment besides probes and security contexts: a GOMEMLIMIT at about
// 85 % of the memory limit (80-90 %, and above the memory request: the
// resident size under load), and a PodDisruptionBudget that lets one pod
// go at a time.
func checkCompatHardening(t *testing.T, where string, m *manifests, d *appsv1.Deployment, c corev1.Container) {
	t.Helper()
	limit := c.Resources.Limits.Memory().Value()
	soft := goMemLimit(t, where, c)
	switch {
	case soft == 0:
		t.Errorf("%s: no GOMEMLIMIT", where)
	case soft < limit*8/10 || soft > limit*9/10:
		t.Errorf("%s: GOMEMLIMIT %d bytes is not 80-90 %% of the %d-byte limit", where, soft, limit)
	case soft < c.Resources.Requests.Memory().Value():
		t.Errorf("%s: GOMEMLIMIT %d bytes is below the memory request, the resident size under load: the collector would run without end", where, soft)
	}
	if len(m.pdbs) != 1 {
		t.Fatalf("%s: want one PodDisruptionBudget, have %d", where, len(m.pdbs))
	}
	p := m.pdbs[0]
	sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("%s: PodDisruptionBudget %s does not select its pods (%v)", where, p.Name, err)
	}
	if p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.IntValue() != 1 || p.Spec.MinAvailable != nil {
		t.Errorf("%s: PodDisruptionBudget %s: maxUnavailable %v, minAvailable %v; want maxUnavailable 1", where, p.Name, p.Spec.MaxUnavailable, p.Spec.MinAvailable)
	}
}

// goMemLimit returns the bytes of the container's GOMEMLIMIT, 0 when it
// has none; a value from a reference, or one that does not parse, fails
// t.
func goMemLimit(t *testing.T, where string, c corev1.Container) int64 {
	t.Helper()
	for _, e := range c.Env {
		if e.Name != "GOMEMLIMIT" {
			continue
		}
		if e.Value == "" {
			t.Fatalf("%s: GOMEMLIMIT from %v, want a value below the limit (the limit itself leaves the runtime no room)", where, e.ValueFrom)
		}
		q, err := resource.ParseQuantity(strings.TrimSuffix(e.Value, "B")) // Go's "320MiB" is Kubernetes' "320Mi"
		if err != nil {
			t.Fatalf("%s: GOMEMLIMIT=%q: %v", where, e.Value, err)
		}
		return q.Value()
	}
	return 0
}

// compatHitsSelector finds the selectors of floodgate_envoy_hits_total in
// a query and their stat matcher, if any.
var compatHitsSelector = regexp.MustCompile(`floodgate_envoy_hits_total\{([^}]*)\}`)

// checkDashboardCompatSeries checks the dashboard's queries of
// floodgate_envoy_hits_total against a scrape of a running envoy-compat
// (its debug port's /metrics, after both allowed and refused decisions):
// each stat they select has a series there, labelled with every label
// they sum by.
func checkDashboardCompatSeries(t *testing.T, where, scrape string) {
	t.Helper()
	data, err := os.ReadFile("grafana/floodgate.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	by := regexp.MustCompile(`by \(([^)]*)\)`)
	stat := regexp.MustCompile(`stat="([^"]*)"`)
	checked := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, sm := range compatHitsSelector.FindAllStringSubmatch(tg.Expr, -1) {
				checked++
				want := []string{}
				if s := stat.FindStringSubmatch(sm[1]); s != nil {
					want = append(want, `stat="`+s[1]+`"`)
				}
				if b := by.FindStringSubmatch(tg.Expr); b != nil {
					for _, l := range strings.Split(b[1], ",") {
						want = append(want, strings.TrimSpace(l)+`="`)
					}
				}
				found := false
				for line := range strings.Lines(scrape) {
					if !strings.HasPrefix(line, "floodgate_envoy_hits_total{") {
						continue
					}
					found = true
					for _, w := range want {
						if !strings.Contains(line, w) {
							found = false
						}
					}
					if found {
						break
					}
				}
				if !found {
					t.Errorf("%s: dashboard panel %q queries %s, but the scrape has no floodgate_envoy_hits_total series with %q", where, p.Title, tg.Expr, want)
				}
			}
		}
	}
	if checked == 0 {
		t.Errorf("the dashboard has no panel of floodgate_envoy_hits_total, envoy-compat's decisions")
	}
}
