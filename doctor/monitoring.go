package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"

	"github.com/floodgate-rl/floodgate/internal/plural"
)

// ShippedAlerts are the alerting rules of deploy/prometheus/alerts.yml, which
// the monitoring check expects Prometheus to have loaded. A test keeps the
// list equal to the file.
var ShippedAlerts = []string{
	"RateLimit429Spike",
	"RateLimitDenyRatioHigh",
	"RateLimitRedisLatencyHigh",
	"RateLimitFallbackActive",
	"RateLimitDecisionErrors",
	"RateLimitBreakerOpen",
	"RateLimitClockSkew",
	"RateLimitMemoryStoreFull",
	"RateLimitConfigRejected",
	"RateLimitConfigUnreadable",
	"RateLimitNoConfiguration",
	"RateLimitConfigVersionRegressed",
	"RateLimitSplitReleaseFailed",
	"RateLimitEnvoyCompatErrors",
	"RateLimitEnvoyCompatRequestsRefused",
	"RateLimitEnvoyCompatConfigRejected",
	"RateLimitTLSCertificateExpiring",
	"RateLimitFleetCountMismatch",
	"RateLimitRedisRestarted",
	"RateLimitRedisFailedOver",
	"RateLimitSentinelsNoMajority",
	"RateLimitSentinelsUnknownMaster",
}

// floodgateSeries selects every series of Floodgate's metrics.
const floodgateSeries = `{__name__=~"rate_limit_.+|floodgate_.+"}`

// promFix is the fix of a Prometheus API call that failed with err.
func promFix(err error) string {
	if errors.Is(err, errTooLarge) {
		return fmt.Sprintf("doctor reads at most %d MiB of an answer: check that the --prometheus URL is a Prometheus's, and whether it holds that many series or rules", maxBody>>20)
	}
	return "check the --prometheus URL and that this host can reach it"
}

// promGet calls a Prometheus HTTP API path and decodes its data into out.
func (r *run) promGet(ctx context.Context, path string, out any) error {
	body, _, code, _, err := r.get(ctx, strings.TrimRight(r.opts.PrometheusURL, "/")+path)
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("GET %s: HTTP %d, not a Prometheus API answer: %v", path, code, err)
	}
	if env.Status != "success" {
		return fmt.Errorf("GET %s: %s", path, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}

func (r *run) monitoringChecks(ctx context.Context) {
	if r.opts.PrometheusURL == "" {
		r.check(GroupMonitoring, "prometheus", func(c *Check) {
			c.Status, c.Summary, c.Read = Info, "no Prometheus URL given (--prometheus): skipped", "nothing"
		})
		return
	}
	r.check(GroupMonitoring, "scraped", func(c *Check) {
		q := "count by (job, instance) (" + floodgateSeries + ")"
		c.Read = "Prometheus query " + q
		var data struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
			} `json:"result"`
		}
		if err := r.promGet(ctx, "/api/v1/query?query="+url.QueryEscape(q), &data); err != nil {
			c.Status, c.Summary = Fail, "cannot query Prometheus: "+err.Error()
			c.Fix = promFix(err)
			return
		}
		scraped := map[string]bool{}
		for _, s := range data.Result {
			scraped[s.Metric["instance"]] = true
			c.Evidence = append(c.Evidence, fmt.Sprintf("job %q instance %q exports Floodgate metrics", s.Metric["job"], s.Metric["instance"]))
		}
		sort.Strings(c.Evidence)
		var missing []string
		for _, in := range r.scrapeTargets(c) {
			u, err := url.Parse(in)
			if err == nil && !scraped[u.Host] {
				missing = append(missing, u.Host)
			}
		}
		switch {
		case len(data.Result) == 0:
			c.Status = Fail
			c.Summary = "Prometheus has no Floodgate metric (rate_limit_*, floodgate_*): nothing alerts on denials, latency or fallbacks"
			c.Fix = "add a scrape job for every instance's /metrics (see deploy/prometheus and docs/operations.md)"
		case len(missing) > 0:
			r.unscraped = missing
			c.Status = Warn
			c.Summary = "some given instances are not scraped: " + strings.Join(missing, ", ")
			c.Fix = "add them to the scrape configuration (the instance label must be their host:port); if doctor reaches them by another address than Prometheus does (kubectl port-forward, a Service or DNS name), this is expected, and the alerts check counts every alert"
		default:
			c.Status = Pass
			c.Summary = "Floodgate metrics scraped from " + plural.Count(len(data.Result), "target", "targets")
		}
	})
	var groups struct {
		Groups []struct {
			Name  string `json:"name"`
			File  string `json:"file"`
			Rules []struct {
				Name      string            `json:"name"`
				State     string            `json:"state"`
				Health    string            `json:"health"`
				LastError string            `json:"lastError"`
				Type      string            `json:"type"`
				Labels    map[string]string `json:"labels"`
				Alerts    []struct {
					Labels map[string]string `json:"labels"`
					State  string            `json:"state"`
				} `json:"alerts"`
			} `json:"rules"`
		} `json:"groups"`
	}
	rulesErr := r.promGet(ctx, "/api/v1/rules?type=alert", &groups)
	r.check(GroupMonitoring, "alert-rules", func(c *Check) {
		c.Read = "Prometheus GET /api/v1/rules?type=alert"
		if rulesErr != nil {
			c.Status, c.Summary = Fail, "cannot read the rules: "+rulesErr.Error()
			c.Fix = promFix(rulesErr)
			return
		}
		loaded := map[string]bool{}
		var unhealthy []string
		for _, g := range groups.Groups {
			for _, rule := range g.Rules {
				loaded[rule.Name] = true
				if rule.Health != "" && rule.Health != "ok" && rule.Health != "unknown" {
					unhealthy = append(unhealthy, fmt.Sprintf("%s: %s %s", rule.Name, rule.Health, rule.LastError))
				}
			}
		}
		var missing []string
		for _, a := range ShippedAlerts {
			if !loaded[a] {
				missing = append(missing, a)
			}
		}
		c.Evidence = firstN(unhealthy, 5)
		switch {
		case len(missing) == len(ShippedAlerts):
			c.Status = Fail
			c.Summary = "none of the shipped alert rules is loaded: a Redis outage, a latency spike or a 429 wave would go unnoticed"
			c.Fix = "add deploy/prometheus/alerts.yml to rule_files in prometheus.yml and reload Prometheus (promtool check rules first)"
		case len(missing) > 0:
			c.Status = Warn
			c.Summary = "shipped alert rules missing: " + strings.Join(missing, ", ")
			c.Fix = "load the current deploy/prometheus/alerts.yml"
		case len(unhealthy) > 0:
			c.Status = Warn
			c.Summary = "some rules fail to evaluate"
			c.Fix = "read each rule's lastError in Prometheus (Status > Rules)"
		default:
			c.Status = Pass
			c.Summary = fmt.Sprintf("all %d shipped alert rules are loaded and evaluate", len(ShippedAlerts))
		}
	})
	r.check(GroupMonitoring, "alerts", func(c *Check) {
		c.Read = "the rules' states read above (no extra request)"
		if rulesErr != nil {
			c.Status, c.Summary = Warn, "the rules could not be read"
			return
		}
		shipped := map[string]bool{}
		for _, a := range ShippedAlerts {
			shipped[a] = true
		}
		ours := r.alertScope(c)
		// notices are the alerts of severity info firing: expected
		// events (a planned failover), worth a look, not a failure.
		var firing, notices, pending, ignored []string
		for _, g := range groups.Groups {
			for _, rule := range g.Rules {
				if !shipped[rule.Name] {
					continue
				}
				// One rule has an alert per series (per instance, policy,
				// source...), each firing or pending on its own: a rule
				// firing for one instance can be pending for another.
				seen := false
				for _, a := range rule.Alerts {
					if (a.State == "firing" || a.State == "pending") && !ours(a.Labels["instance"]) {
						// Another deployment's instance, scraped by the
						// same Prometheus.
						ignored = append(ignored, a.State+": "+alertName(rule.Name, a.Labels))
						seen = true
						continue
					}
					switch a.State {
					case "firing":
						if informational(a.Labels, rule.Labels) {
							notices = append(notices, alertName(rule.Name, a.Labels))
						} else {
							firing = append(firing, alertName(rule.Name, a.Labels))
						}
						seen = true
					case "pending":
						pending = append(pending, alertName(rule.Name, a.Labels))
						seen = true
					}
				}
				if !seen {
					switch {
					case rule.State == "firing" && informational(nil, rule.Labels):
						notices = append(notices, rule.Name)
					case rule.State == "firing":
						firing = append(firing, rule.Name)
					case rule.State == "pending":
						pending = append(pending, rule.Name)
					}
				}
			}
		}
		sort.Strings(firing)
		sort.Strings(notices)
		sort.Strings(pending)
		for _, a := range firing {
			c.Evidence = append(c.Evidence, "firing: "+a)
		}
		for _, a := range notices {
			c.Evidence = append(c.Evidence, "firing, severity info: "+a)
		}
		for _, a := range pending {
			c.Evidence = append(c.Evidence, "pending (condition true, not yet for its for: duration): "+a)
		}
		c.Evidence = firstN(c.Evidence, 20)
		ignoredNote := ""
		if len(ignored) > 0 {
			sort.Strings(ignored)
			ignoredNote = fmt.Sprintf(" (%s of other instances than those given ignored)", plural.Count(len(ignored), "alert", "alerts"))
			c.Evidence = append(c.Evidence, fmt.Sprintf("ignored, %s whose instance label is none of the given instances' (another deployment scraped by this Prometheus):", plural.Count(len(ignored), "alert", "alerts")))
			for _, a := range firstN(ignored, 5) {
				c.Evidence = append(c.Evidence, "  "+a)
			}
			if len(ignored) > 5 {
				c.Evidence = append(c.Evidence, fmt.Sprintf("  … %d others", len(ignored)-5))
			}
		}
		var parts []string
		if len(firing) > 0 {
			parts = append(parts, "firing: "+strings.Join(firstN(firing, 5), ", "))
		}
		if len(notices) > 0 {
			parts = append(parts, "firing, severity info (expected after a planned change, such as a failover): "+strings.Join(firstN(notices, 5), ", "))
		}
		if len(pending) > 0 {
			parts = append(parts, "pending (condition true, not yet for its for: duration): "+strings.Join(firstN(pending, 5), ", "))
		}
		switch {
		case len(firing) > 0:
			c.Status = Fail
			c.Summary = strings.Join(parts, "; ") + ignoredNote
			c.Fix = "follow docs/operations.md, When an alert fires"
		case len(pending) > 0 || len(notices) > 0:
			c.Status = Warn
			c.Summary = strings.Join(parts, "; ") + ignoredNote
			c.Fix = "follow docs/operations.md, When an alert fires"
		case len(ignored) > 0:
			c.Status, c.Summary = Pass, "no Floodgate alert firing or pending for the given instances"+ignoredNote
		default:
			c.Status, c.Summary = Pass, "no Floodgate alert firing or pending"
		}
	})
}

// informational reports whether an alert whose labels are alert (nil
// for none) belongs to a rule of severity info, by its severity label or,
// without one, its rule's (ruleLabels): such an alert tells of an
// expected event (RateLimitRedisFailedOver after a planned failover) and
// warns, where any other firing alert fails the check.
func informational(alert, ruleLabels map[string]string) bool {
	sev, ok := alert["severity"]
	if !ok {
		sev = ruleLabels["severity"]
	}
	return sev == "info"
}

// alertLabels are the labels that tell one alert of a rule from another,
// in the order they are printed.
var alertLabels = []string{"instance", "policy", "source", "partition", "mode", "reason"}

// alertName names one alert of a rule with its identifying labels, e.g.
// RateLimitConfigRejected{instance="10.0.0.5:8080", source="redis"}.
func alertName(rule string, labels map[string]string) string {
	var parts []string
	for _, l := range alertLabels {
		if v, ok := labels[l]; ok && v != "" {
			parts = append(parts, fmt.Sprintf("%s=%q", l, v))
		}
	}
	if len(parts) == 0 {
		if v := labels["job"]; v != "" {
			parts = append(parts, fmt.Sprintf("job=%q", v))
		}
	}
	if len(parts) == 0 {
		return rule
	}
	return rule + "{" + strings.Join(parts, ", ") + "}"
}

// alertScope returns whether an alert whose instance label is instance
// concerns the deployment audited, for a Prometheus that may scrape
// several: without --instance URLs every alert does; with them, an alert
// without an instance label (an aggregate) does, and one with a label does
// when it is the host:port of a given URL or of the address doctor read
// an instance's /metrics from (its admin address, for an instance run
// with --metrics-admin-only), the scrape targets. For an instance whose
// /metrics is on an admin address doctor was not given, any label on its
// host counts, since its scrape target's port is unknown.
//
// When a given instance's address is no instance label in Prometheus
// (doctor reaches it through kubectl port-forward, or by a name where
// Prometheus scrapes the pod's IP), its alerts cannot be told from other
// deployments': every alert counts then, rather than letting the audited
// instance's own pass as another's.
func (r *run) alertScope(c *Check) func(instance string) bool {
	if len(r.opts.Instances) == 0 {
		return func(string) bool { return true }
	}
	if len(r.unscraped) > 0 {
		c.Evidence = append(c.Evidence, "every alert counted: "+strings.Join(r.unscraped, ", ")+" is no instance label in Prometheus (reached by another address than the scrape's, such as kubectl port-forward?), so its alerts cannot be told from another deployment's")
		return func(string) bool { return true }
	}
	addrs, hosts := map[string]bool{}, map[string]bool{}
	add := func(raw string) {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			return
		}
		addrs[u.Host] = true
		if u.Port() == "" {
			// Prometheus's instance label may carry the scheme's port.
			port := "80"
			if u.Scheme == "https" {
				port = "443"
			}
			addrs[net.JoinHostPort(u.Hostname(), port)] = true
		}
	}
	// The given URLs include the admin addresses given for instances run
	// with --metrics-admin-only: every metricsURL is one of them.
	for _, u := range r.opts.Instances {
		add(u)
	}
	for _, in := range r.instances {
		if in.metricsURL == "" && in.metrics404 {
			if u, err := url.Parse(in.url); err == nil {
				hosts[u.Hostname()] = true
				c.Evidence = append(c.Evidence, in.url+": serves no /metrics ("+in.noMetricsWhy()+") and its admin address was not given: alerts of any instance on "+u.Hostname()+" are counted as its")
			}
		}
	}
	return func(instance string) bool {
		if instance == "" || addrs[instance] {
			return true
		}
		h, _, err := net.SplitHostPort(instance)
		if err != nil {
			h = instance
		}
		return hosts[h]
	}
}

// scrapeTargets returns the base URLs whose /metrics Prometheus should
// scrape: each instance's, where doctor read them (its admin address when
// it was given for an instance run with --metrics-admin-only). An instance
// whose /metrics is on an admin address doctor was not given is left out,
// with an evidence line on c.
func (r *run) scrapeTargets(c *Check) []string {
	if r.instances == nil {
		return r.opts.Instances
	}
	var out []string
	for _, in := range r.instances {
		switch {
		case in.metricsURL != "":
			out = append(out, in.metricsURL)
		case in.metrics404:
			c.Evidence = append(c.Evidence, in.url+": serves no /metrics ("+in.noMetricsWhy()+"): the address Prometheus scrapes was not given, so whether it scrapes the instance is not checked")
		default:
			out = append(out, in.url)
		}
	}
	return out
}
