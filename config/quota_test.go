package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/concurrency"
	"github.com/floodgate-rl/floodgate/config"
)

func TestDefaultQuotaAndConcurrency(t *testing.T) {
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	q, ok := cfg.Quota("llm-tokens")
	if !ok || len(cfg.Quotas()) != 1 {
		t.Fatalf("quotas %v", cfg.Quotas())
	}
	free, pro := q.Policy("free"), q.Policy("pro")
	if free.Name != "llm-tokens" || free.Limit != 2_000_000 || pro.Limit != 20_000_000 || pro.Name != free.Name ||
		free.Calendar.Unit != floodgate.PeriodMonth || free.Calendar.Location.String() != "UTC" {
		t.Fatalf("llm-tokens: free %+v pro %+v", free, pro)
	}
	if q.Dimension() != "api_key" || q.TierDimension != "api_key" || !q.Tiered() || q.SoftThreshold != 0.8 || q.Hold != 10*time.Minute {
		t.Fatalf("llm-tokens: %+v", q)
	}
	if o := q.Options(); o.SoftThreshold != 0.8 || o.HoldTTL != 10*time.Minute {
		t.Fatalf("llm-tokens options %+v", o)
	}
	l, ok := cfg.ConcurrencyLimit("reports")
	if !ok || len(cfg.ConcurrencyLimits()) != 1 {
		t.Fatalf("concurrency limits %v", cfg.ConcurrencyLimits())
	}
	if p := l.Policy("free"); p.Name != "reports" || p.Limit != 5 || p.LeaseTTL != 30*time.Second || l.Policy("enterprise").Limit != 25 ||
		l.LeaseTTL() != 30*time.Second || l.Dimension() != "user" || !l.Tiered() {
		t.Fatalf("reports: %+v free %+v", l, p)
	}
}

func TestParseQuotasAndConcurrency(t *testing.T) {
	cfg, err := config.Parse([]byte(`
tiers: [free, gold]
quotas:
  - name: cents
    limit: 500
    period: anchored_month
    anchor_day: 31
    timezone: America/New_York
    dimension: tenant+region
    tier_dimension: tenant
    soft_threshold: 0.5
    hold: 2m
    tiers: {gold: {limit: 5000}}
  - {name: all, limit: 10, period: day, dimension: global}
concurrency:
  - {name: jobs, limit: 3, dimension: global}
`), "q.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Policies()) != 0 {
		t.Fatalf("policies %v", cfg.Policies())
	}
	q, _ := cfg.Quota("cents")
	cal := q.Policy("gold").Calendar
	if q.Policy("gold").Limit != 5000 || q.Policy("free").Limit != 500 || cal.Unit != floodgate.PeriodAnchoredMonth ||
		cal.AnchorDay != 31 || cal.Location.String() != "America/New_York" || q.SoftThreshold != 0.5 || q.Hold != 2*time.Minute {
		t.Fatalf("cents: %+v %+v", q, q.Policy("gold"))
	}
	id, err := q.Identity(map[string]string{"tenant": "t1", "region": "eu", "other": "x"})
	if err != nil || id != "2:t12:eu" {
		t.Fatalf("composite identity %q %v", id, err)
	}
	if _, err := q.Identity(map[string]string{"tenant": "t1"}); !errors.Is(err, config.ErrMissingIdentity) || !strings.Contains(err.Error(), `quota "cents" needs identity value "region"`) {
		t.Fatalf("missing region: %v", err)
	}
	all, _ := cfg.Quota("all")
	if id, err := all.Identity(nil); err != nil || id != "global" || all.TierDimension != "" || all.Tiered() || all.SoftThreshold != config.DefaultSoftThreshold || all.Hold != config.DefaultHold {
		t.Fatalf("global quota: %q %v %+v", id, err, all)
	}
	jobs, _ := cfg.ConcurrencyLimit("jobs")
	if jobs.LeaseTTL() != concurrency.DefaultLeaseTTL || jobs.Policy("gold").Limit != 3 {
		t.Fatalf("jobs: %+v", jobs)
	}
	if _, ok := cfg.Quota("jobs"); ok {
		t.Fatal("a concurrency limit is found as a quota")
	}
}

func TestParseQuotaAndConcurrencyErrors(t *testing.T) {
	const tiers = "tiers: [free, pro]\n"
	quota := func(fields string) string { return tiers + "quotas:\n  - {name: q, " + fields + "}\n" }
	conc := func(fields string) string { return tiers + "concurrency:\n  - {name: c, " + fields + "}\n" }
	okQ := "limit: 100, period: month, dimension: api_key"
	okC := "limit: 5, dimension: user"
	tests := []struct {
		name, doc, want string
	}{
		{"quoted soft threshold", quota(okQ + `, soft_threshold: "0.5"`), `soft_threshold must be a fraction, got the quoted text "0.5"`},
		{"unknown quota field", quota(okQ + ", window: 1h"), `e.yaml:3:62: unknown field "window" in a quota (known fields: name, limit, period, timezone, anchor_day, dimension, tier_dimension, soft_threshold, hold, tiers)`},
		{"quota no name", tiers + "quotas:\n  - {" + okQ + "}\n", `e.yaml:3:5: a quota has no name`},
		{"quota bad name", tiers + "quotas:\n  - {name: a.b, " + okQ + "}\n", `e.yaml:3:12: quota name "a.b": character '.' not in`},
		{"quota no limit", quota("period: month, dimension: user"), `e.yaml:3:5: quota "q" has no limit`},
		{"quota zero limit", quota("limit: 0, period: month, dimension: user"), `e.yaml:3:22: quota "q" limit 0 out of range 1..1099511627776`},
		{"quota no period", quota("limit: 5, dimension: user"), `e.yaml:3:5: quota "q" has no period (day, week, month or anchored_month)`},
		{"quota bad period", quota("limit: 5, period: year, dimension: user"), `e.yaml:3:33: quota "q": unknown period "year"`},
		{"quota bad timezone", quota(okQ + ", timezone: Mars/Base"), `e.yaml:3:72: quota "q": unknown IANA time zone "Mars/Base"`},
		{"quota anchor without anchored", quota(okQ + ", anchor_day: 3"), `anchor_day applies to period anchored_month only`},
		{"quota anchored without anchor", quota("limit: 5, period: anchored_month, dimension: user"), `period anchored_month needs anchor_day`},
		{"quota no dimension", quota("limit: 5, period: day"), `e.yaml:3:5: quota "q" has no dimension`},
		{"quota bad dimension", quota("limit: 5, period: day, dimension: API"), `quota "q" dimension name "API": character 'A' not in [a-z0-9_-]`},
		{"soft threshold zero", quota(okQ + ", soft_threshold: 0"), `e.yaml:3:78: quota "q" soft_threshold must be a fraction of the limit above 0 and at most 1 (e.g. 0.8), got "0"`},
		{"soft threshold percent", quota(okQ + ", soft_threshold: 80"), `got "80"`},
		{"soft threshold text", quota(okQ + ", soft_threshold: high"), `got "high"`},
		{"hold bad", quota(okQ + ", hold: soon"), `e.yaml:3:68: quota "q" hold: invalid duration "soon"`},
		{"hold too long", quota(okQ + ", hold: 500d"), `quota "q" hold 500d out of range 1ms..400d`},
		{"hold too long to hold", quota(okQ + ", hold: 2562048h"), `quota "q" hold 2562048h out of range 1ms..400d`},
		{"quota tier unknown", quota(okQ + ", tiers: {gold: {limit: 5}}"), `e.yaml:3:70: quota "q": tier "gold" is not defined (tiers: free, pro)`},
		{"quota tier bad field", quota(okQ + ", tiers: {pro: {period: day}}"), `unknown field "period" in quota "q" tier "pro" (known fields: limit)`},
		{"quota tier empty", quota(okQ + ", tiers: {pro: {}}"), `quota "q" tier "pro" overrides nothing (set limit)`},
		{"quota tier limit", quota(okQ + ", tiers: {pro: {limit: -3}}"), `quota "q" tier "pro" limit -3 out of range`},
		{"quota tiers composite", quota("limit: 5, period: day, dimension: a+b, tiers: {pro: {limit: 9}}"), `quota "q" has tier overrides but no tier_dimension`},
		{"quota tiers global", quota("limit: 5, period: day, dimension: global, tiers: {pro: {limit: 9}}"), `quota "q" has tier overrides but no tier_dimension`},
		{"quota tier_dimension global", quota(okQ + ", tier_dimension: global"), `quota "q" tier_dimension cannot be "global"`},
		{"duplicate quota", tiers + "quotas:\n  - {name: q, " + okQ + "}\n  - {name: q, " + okQ + "}\n", `e.yaml:4:5: quota "q" is defined twice`},
		{"empty quotas", "quotas: []\n", `e.yaml:1:9: quotas is empty`},
		{"quotas not a list", "quotas: {name: q}\n", `e.yaml:1:9: quotas must be a list`},
		{"unknown concurrency field", conc(okC + ", window: 1s"), `e.yaml:3:42: unknown field "window" in a concurrency limit (known fields: name, limit, lease_ttl, dimension, tier_dimension, tiers)`},
		{"concurrency no limit", conc("dimension: user"), `e.yaml:3:5: concurrency limit "c" has no limit`},
		{"concurrency limit too big", conc("limit: 2000000, dimension: user"), `e.yaml:3:22: concurrency limit "c" limit 2000000 out of range 1..1000000`},
		{"lease ttl too long", conc(okC + ", lease_ttl: 2d"), `e.yaml:3:53: concurrency limit "c" lease_ttl 2d out of range 1ms..1d`},
		{"lease ttl too long to hold", conc(okC + ", lease_ttl: 9999999999999999999ns"), `e.yaml:3:53: concurrency limit "c" lease_ttl 9999999999999999999ns out of range 1ms..1d`},
		{"lease ttl sub-ms", conc(okC + ", lease_ttl: 500us"), `lease_ttl 500µs out of range`},
		{"lease ttl bad", conc(okC + ", lease_ttl: forever"), `concurrency limit "c" lease_ttl: invalid duration "forever"`},
		{"concurrency tier unknown", conc(okC + ", tiers: {gold: {limit: 5}}"), `concurrency limit "c": tier "gold" is not defined`},
		{"duplicate concurrency", tiers + "concurrency:\n  - {name: c, " + okC + "}\n  - {name: c, " + okC + "}\n", `e.yaml:4:5: concurrency limit "c" is defined twice`},
		{"empty concurrency", "concurrency: []\n", `e.yaml:1:14: concurrency is empty`},
		{"nothing defined", "tiers: [free]\n", `missing field "policies"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tc.doc), "e.yaml")
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.doc)
			}
			if !errors.Is(err, config.ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error:\n%v\nwant it to contain:\n%s", err, tc.want)
			}
		})
	}
}
