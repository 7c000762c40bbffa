package envoyrls

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate"
)

// upstreamExample is a configuration written for envoyproxy/ratelimit,
// using every key of its format; it must load unchanged.
const upstreamExample = `
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
---
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      name: per_ip
      unit: second
      requests_per_unit: 10
  - key: remote_address
    value: 50.0.0.5
    detailed_metric: true
    rate_limit:
      unit: second
      requests_per_unit: 25
  - key: destination_cluster
    value: mock
    descriptors:
      - key: source_cluster
        value: proxy
        shadow_mode: true
        rate_limit:
          unit: minute
          requests_per_unit: 0
      - key: source_cluster
        rate_limit:
          unlimited: true
  - key: key1
    value: "value*"
    rate_limit:
      name: wild
      unit: hour
      unit_multiplier: 2
      requests_per_unit: 7
      replaces:
        - name: per_ip
`

func TestParseConfigUpstreamFormat(t *testing.T) {
	cfg, err := ParseConfig([]byte(upstreamExample), "upstream.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(cfg.Domains(), ","), "edge_proxy_per_ip,mongo_cps"; got != want {
		t.Fatalf("domains %q, want %q", got, want)
	}
	rules := map[string]*Rule{}
	for _, r := range cfg.Rules() {
		rules[r.Domain+"."+r.Path] = r
	}
	tests := []struct {
		path      string
		rpu       uint32
		unit      rlspb.RateLimitResponse_RateLimit_Unit
		mult      uint32
		window    time.Duration
		unlimited bool
		shadow    bool
	}{
		{"mongo_cps.database_users", 500, rlspb.RateLimitResponse_RateLimit_SECOND, 1, time.Second, false, false},
		{"edge_proxy_per_ip.remote_address", 10, rlspb.RateLimitResponse_RateLimit_SECOND, 1, time.Second, false, false},
		{"edge_proxy_per_ip.remote_address_50.0.0.5", 25, rlspb.RateLimitResponse_RateLimit_SECOND, 1, time.Second, false, false},
		{"edge_proxy_per_ip.destination_cluster_mock.source_cluster_proxy", 0, rlspb.RateLimitResponse_RateLimit_MINUTE, 1, 0, false, true},
		{"edge_proxy_per_ip.destination_cluster_mock.source_cluster", 0, 0, 0, 0, true, false},
		{"edge_proxy_per_ip.key1_value*", 7, rlspb.RateLimitResponse_RateLimit_HOUR, 2, 2 * time.Hour, false, false},
	}
	for _, tt := range tests {
		r := rules[tt.path]
		if r == nil {
			t.Errorf("%s: no rule", tt.path)
			continue
		}
		if r.RequestsPerUnit != tt.rpu || r.Unit != tt.unit || r.UnitMultiplier != tt.mult || r.Policy.Window != tt.window || r.Unlimited != tt.unlimited || r.Shadow != tt.shadow {
			t.Errorf("%s: got rpu %d unit %v×%d window %v unlimited %v shadow %v", tt.path, r.RequestsPerUnit, r.Unit, r.UnitMultiplier, r.Policy.Window, r.Unlimited, r.Shadow)
		}
		if tt.window != 0 && r.Policy.Algorithm != floodgate.FixedWindow {
			t.Errorf("%s: algorithm %v, want the fixed_window default", tt.path, r.Policy.Algorithm)
		}
	}
	if got := rules["edge_proxy_per_ip.key1_value*"].Replaces; len(got) != 1 || got[0] != "per_ip" {
		t.Errorf("replaces %q", got)
	}
}

func TestParseConfigExtensions(t *testing.T) {
	cfg, err := ParseConfig([]byte(`
domain: api
algorithm: sliding_window
descriptors:
  - key: user
    rate_limit: {requests_per_unit: 100, unit: minute}
  - key: api_key
    rate_limit: {requests_per_unit: 10, window: 1500ms, algorithm: token_bucket, burst: 40}
  - key: tenant
    rate_limit: {requests_per_unit: 5, window: 90s, algorithm: leaky_bucket}
`), "ext.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]floodgate.Policy{
		"user":    {Algorithm: floodgate.SlidingWindow, Limit: 100, Window: time.Minute},
		"api_key": {Algorithm: floodgate.TokenBucket, Limit: 10, Window: 1500 * time.Millisecond, Burst: 40},
		"tenant":  {Algorithm: floodgate.GCRA, Limit: 5, Window: 90 * time.Second},
	}
	for _, r := range cfg.Rules() {
		w := want[r.Path]
		w.Name = PolicyName("api", Entry{Key: r.Path})
		if r.Policy != w {
			t.Errorf("%s: policy %+v, want %+v", r.Path, r.Policy, w)
		}
		if err := r.Policy.Validate(); err != nil {
			t.Errorf("%s: %v", r.Path, err)
		}
	}
	// Envoy's API has no millisecond unit: 10 per 1.5s is reported as 20
	// per 3 seconds; 90s as 90 seconds.
	for _, r := range cfg.Rules() {
		switch r.Path {
		case "api_key":
			if r.RequestsPerUnit != 20 || r.Unit != rlspb.RateLimitResponse_RateLimit_SECOND || r.UnitMultiplier != 3 {
				t.Errorf("api_key reported as %d per %v×%d", r.RequestsPerUnit, r.Unit, r.UnitMultiplier)
			}
		case "tenant":
			if r.RequestsPerUnit != 5 || r.Unit != rlspb.RateLimitResponse_RateLimit_SECOND || r.UnitMultiplier != 90 {
				t.Errorf("tenant reported as %d per %v×%d", r.RequestsPerUnit, r.Unit, r.UnitMultiplier)
			}
		}
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		line       int
		want       string
	}{
		{"empty file", "", 0, "no domain"},
		{"syntax", "domain: a\ndescriptors: [\n", 2, "YAML syntax"},
		{"indentation", "domain: a\n---\ndomain: b\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n     requests_per_unit: 1\n", 8,
			"YAML syntax: did not find expected key (check the indentation; the block starts at line 4)"},
		{"not a mapping", "- a\n- b\n", 1, "configuration must be a mapping"},
		{"no domain", "descriptors: []\n", 1, "missing domain"},
		{"empty domain", "domain: ''\n", 1, "domain is empty"},
		{"unknown top key", "domain: a\nlimits: []\n", 2, `unknown key "limits"`},
		{"unknown descriptor key", "domain: a\ndescriptors:\n  - key: k\n    vaule: x\n", 4, `unknown key "vaule"`},
		{"unknown rate_limit key", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, per: 2}\n", 4, `unknown key "per"`},
		{"empty key", "domain: a\ndescriptors:\n  - key: ''\n", 3, "empty key"},
		{"missing key", "domain: a\ndescriptors:\n  - value: v\n", 3, "descriptor has no key"},
		{"duplicate", "domain: a\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n", 5, `duplicate descriptor key "k" value "v" (first at line 3)`},
		{"duplicate domain", "domain: a\n---\ndomain: a\n", 3, `domain "a" is already defined at line 1`},
		{"bad unit", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", 4, `unknown unit "fortnight"`},
		{"month", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: month, requests_per_unit: 1}\n", 4, "calendar period"},
		{"no unit", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n", 4, "missing unit"},
		{"unit and window", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, window: 2s, requests_per_unit: 1}\n", 4, "not both"},
		{"no rpu", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n", 4, "missing requests_per_unit"},
		{"negative rpu", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n", 4, "requests_per_unit -1 out of range"},
		{"huge rpu", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n", 4, "out of range 0..4294967295"},
		{"string rpu", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: many}\n", 4, "must be an integer"},
		{"bad window", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {window: soon, requests_per_unit: 1}\n", 4, `window "soon"`},
		{"window too long", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {window: 10000h, requests_per_unit: 1}\n", 4, "window 10000h0m0s out of range"},
		{"window too long to hold", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {window: 2562048h, requests_per_unit: 1}\n", 4, "window 2562048h out of range 1ms..400d"},
		{"bad algorithm", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: magic}\n", 4, `unknown algorithm "magic"`},
		{"burst on fixed window", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 5}\n", 4, "burst applies to token_bucket and gcra only"},
		{"sliding log too big", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: sliding_log}\n", 4, "sliding_log limit 1000000"},
		{"unlimited with unit", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n", 4, "unit given for an unlimited rate_limit"},
		{"bad bool", "domain: a\ndescriptors:\n  - key: k\n    shadow_mode: perhaps\n", 4, "shadow_mode must be true or false"},
		{"value with a fraction", "domain: a\ndescriptors:\n  - key: k\n    value: 1.5\n", 4, "value 1.5 is a floating-point number"},
		{"value with an exponent", "domain: a\ndescriptors:\n  - key: k\n    value: 1e3\n", 4, "value 1e3 is a floating-point number,"},
		{"colliding composite keys", "domain: a\ndescriptors:\n  - key: a\n    value: b_c\n  - key: a_b\n    value: c\n", 5, `same composite key "a_b_c"`},
		{"share_threshold", "domain: a\ndescriptors:\n  - key: k\n    value: x*\n    share_threshold: true\n", 5, "share_threshold is not supported by serve --envoy-config; floodgate envoy-compat honours it"},
		{"quota_mode", "domain: a\ndescriptors:\n  - key: k\n    quota_mode: true\n", 4, "quota_mode is not supported"},
		{"replaces self", "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      name: x\n      unit: second\n      requests_per_unit: 1\n      replaces: [{name: x}]\n", 8, `"x" replaces itself`},
		{"replaces empty", "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces: [{name: ''}]\n", 7, "empty name"},
		{"descriptors not a list", "domain: a\ndescriptors: {key: k}\n", 2, "descriptors must be a list"},
		{"multiplier with window", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {window: 2s, unit_multiplier: 2, requests_per_unit: 1}\n", 4, "unit_multiplier applies to unit"},
		{"key twice", "domain: a\ndomain: b\n", 2, `key "domain" given twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseConfig([]byte(tt.yaml), "rls.yaml")
			if err == nil {
				t.Fatalf("parsed %+v, want an error", cfg)
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error %v does not wrap ErrInvalidConfig", err)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %T is not a *ConfigError", err)
			}
			if ce.File != "rls.yaml" || ce.Line != tt.line {
				t.Errorf("error at %s:%d, want rls.yaml:%d (%v)", ce.File, ce.Line, tt.line, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
		})
	}
}

func TestParseConfigLimits(t *testing.T) {
	deep := "domain: a\ndescriptors:\n"
	indent := ""
	for i := 0; i <= MaxDepth; i++ {
		deep += indent + "  - key: k\n" + indent + "    descriptors:\n"
		indent += "    "
	}
	if _, err := ParseConfig([]byte(deep), "deep.yaml"); err == nil || !strings.Contains(err.Error(), "deeper than") {
		t.Errorf("deep nesting: %v", err)
	}
	big := make([]byte, MaxConfigSize+1)
	if _, err := ParseConfig(big, "big.yaml"); err == nil || !strings.Contains(err.Error(), "max") {
		t.Errorf("big file: %v", err)
	}
	// Aliases are followed, but a file whose aliases expand to millions
	// of descriptors is refused.
	var bomb strings.Builder
	bomb.WriteString("domain: x\ndescriptors:\n  - key: a0\n    descriptors: &l0 [")
	for i := range 10 {
		fmt.Fprintf(&bomb, "{key: k%d}, ", i)
	}
	bomb.WriteString("]\n")
	for lvl := 1; lvl <= 6; lvl++ {
		fmt.Fprintf(&bomb, "  - key: a%d\n    descriptors: &l%d [", lvl, lvl)
		for i := range 10 {
			fmt.Fprintf(&bomb, "{key: k%d, descriptors: *l%d}, ", i, lvl-1)
		}
		bomb.WriteString("]\n")
	}
	if _, err := ParseConfig([]byte(bomb.String()), "bomb.yaml"); err == nil || !strings.Contains(err.Error(), "aliases add more than 200000 nodes when expanded") {
		t.Errorf("alias bomb: %v", err)
	}
	// A modest use of aliases is fine.
	shared := "domain: x\ndescriptors:\n  - key: a\n    descriptors: &s [{key: u, rate_limit: {unit: second, requests_per_unit: 1}}]\n  - key: b\n    descriptors: *s\n"
	cfg, err := ParseConfig([]byte(shared), "alias.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Rules()) != 2 || cfg.Rules()[0].Policy.Name == cfg.Rules()[1].Policy.Name {
		t.Errorf("aliased descriptors: %d rules", len(cfg.Rules()))
	}
}

// bigEnvoyFile is an Envoy descriptor file of one domain, without aliases,
// of about size bytes: tenants, each with two routes of two users.
func bigEnvoyFile(size int) []byte {
	var b strings.Builder
	b.WriteString("domain: big\ndescriptors:\n")
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "  - key: tenant\n    value: t%05d\n    rate_limit: {unit: minute, requests_per_unit: %d}\n    descriptors:\n", i, 100+i)
		for j := range 2 {
			fmt.Fprintf(&b, "      - key: route\n        value: r%d\n        rate_limit: {unit: second, requests_per_unit: %d}\n        descriptors:\n", j, 10+j)
			for m := range 2 {
				fmt.Fprintf(&b, "          - key: user\n            value: u%d\n            rate_limit: {unit: hour, requests_per_unit: 1000}\n", m)
			}
		}
	}
	return []byte(b.String())
}

// TestLargeFileWithoutAliases: a 3 MiB file without aliases
// loads (it was refused as "more than 200000 nodes (aliases expanded)"
// from about 27,000 descriptors, 3 MB, on); the alias bound applies to
// the nodes aliases add, and an alias inside its own anchor is refused.
func TestLargeFileWithoutAliases(t *testing.T) {
	data := bigEnvoyFile(3 << 20)
	cfg, err := ParseConfig(data, "big.yaml")
	if err != nil {
		t.Fatalf("%d bytes without aliases: %v", len(data), err)
	}
	if got, want := len(cfg.Rules()), strings.Count(string(data), "rate_limit:"); got != want {
		t.Errorf("rules: got %d, want %d", got, want)
	}
	// The same file with one alias adding a few nodes still loads.
	aliased := append([]byte(nil), data...)
	aliased = append(aliased, "  - key: shared\n    descriptors: &s [{key: u, rate_limit: {unit: second, requests_per_unit: 1}}]\n  - key: again\n    descriptors: *s\n"...)
	if _, err := ParseConfig(aliased, "big.yaml"); err != nil {
		t.Errorf("big file with one alias: %v", err)
	}
	self := "domain: x\ndescriptors: &d\n  - key: a\n    descriptors: *d\n"
	if _, err := ParseConfig([]byte(self), "self.yaml"); err == nil || !strings.Contains(err.Error(), "aliases add more than") {
		t.Errorf("alias inside its anchor: %v", err)
	}
}

func TestPolicyNamesAreValidAndDistinct(t *testing.T) {
	paths := [][]Entry{
		{{"a", "b"}},
		{{"a_b", ""}},
		{{"a", ""}, {"b", ""}},
		{{"a.b", ""}},
		{{"a", "b*"}},
		{{"a", "b"}, {"c", strings.Repeat("x", 500)}},
		{{"a", "b"}, {"c", strings.Repeat("x", 501)}},
		{{"ключ", "значение/=%"}},
	}
	seen := map[string]bool{}
	for _, domain := range []string{"d", "d.a", strings.Repeat("long", 30)} {
		for _, p := range paths {
			name := PolicyName(domain, p...)
			if _, err := floodgate.NewFixedWindow(name, 1, time.Second); err != nil {
				t.Errorf("%q %v: %v", domain, p, err)
			}
			if seen[name] {
				t.Errorf("%q %v: name %q already used", domain, p, name)
			}
			seen[name] = true
		}
	}
	if got := PolicyName("edge", Entry{Key: "remote_address"}); !strings.HasPrefix(got, "edge.remote_address-") {
		t.Errorf("readable part lost: %q", got)
	}
}

// TestOverrideWindow: the policy names of limit overrides are read back
// to their domain and window, for domains whose name is cut from the
// readable part (the window then guessed) or has bytes replaced; names
// of descriptors, of unconfigured domains and with another hash are not
// overrides.
func TestOverrideWindow(t *testing.T) {
	long := strings.Repeat("d", 45)   // readable part cut inside ".override."
	longer := strings.Repeat("e", 60) // cut inside the domain
	doc := ""
	for _, d := range []string{"edge", "edge/v2", "edge.override.1m0s", long, longer} {
		doc += "---\ndomain: " + d + "\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"
	}
	cfg, err := ParseConfig([]byte(doc), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	windows := []time.Duration{time.Second, 90 * time.Second, time.Minute, 2 * time.Hour, 24 * time.Hour, 7 * 24 * time.Hour, floodgate.MaxWindow}
	for _, d := range cfg.Domains() {
		for _, w := range windows {
			name := overridePolicyName(d, w)
			gotD, gotW, ok := cfg.OverrideWindow(name)
			if !ok || gotD != d || gotW != w {
				t.Errorf("OverrideWindow(%q) (domain %q, window %v): %q, %v, %v", name, d, w, gotD, gotW, ok)
			}
		}
	}
	// A window of 1001 seconds is no multiplier up to 1000 of any unit:
	// read back only while the name shows it.
	if _, w, ok := cfg.OverrideWindow(overridePolicyName("edge", 1001*time.Second)); !ok || w != 1001*time.Second {
		t.Errorf("1001s in edge: %v, %v", w, ok)
	}
	// A readable part that fills its 51 bytes exactly, not cut: the
	// window it shows is read, though no multiplier up to 1000 of a unit
	// gives it.
	exact := strings.Repeat("f", readableLen-len(".override.")-len((5000*time.Second).String()))
	cfg2, err := ParseConfig([]byte("domain: "+exact+"\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"), "t2.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, w, ok := cfg2.OverrideWindow(overridePolicyName(exact, 5000*time.Second)); !ok || w != 5000*time.Second {
		t.Errorf("5000s in a domain of %d bytes (the readable part just fits): %v, %v", len(exact), w, ok)
	}
	good := overridePolicyName("edge", time.Minute)
	for _, name := range []string{
		PolicyName("edge", Entry{Key: "user"}),
		PolicyName("edge.override.1m0s", Entry{Key: "user"}),
		overridePolicyName("other", time.Minute),
		good[:len(good)-1] + "x",
		good[:len(good)-13],
		"edge.override.1m0s",
		"",
		"-0123456789ab",
	} {
		if d, w, ok := cfg.OverrideWindow(name); ok {
			t.Errorf("OverrideWindow(%q): %q, %v, want not an override", name, d, w)
		}
	}
}

func TestIdentityIsInjective(t *testing.T) {
	cases := [][]Entry{
		{{"user", "alice"}},
		{{"user", "alice/x=y"}},
		{{"user", "alice"}, {"x", "y"}},
		{{"user=alice", ""}},
		{{"user", "=alice"}},
		{{"user", "alice%2Fx%3Dy"}},
		{{"user", ""}},
		{{"user", ""}, {"", ""}},
	}
	seen := map[string][]Entry{}
	for _, c := range cases {
		id := Identity(c)
		var es []*ratelimitv3.RateLimitDescriptor_Entry
		for _, e := range c {
			es = append(es, &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
		}
		if got := entriesIdentity(es); got != id {
			t.Errorf("%v: identity of the request's entries %q, Identity %q", c, got, id)
		}
		if o, ok := seen[id]; ok {
			t.Errorf("%v and %v share identity %q", o, c, id)
		}
		seen[id] = c
	}
	if got, want := Identity([]Entry{{"user", "alice"}}), "user=alice"; got != want {
		t.Errorf("Identity = %q, want %q", got, want)
	}
}

func TestMergeConfigs(t *testing.T) {
	a, err := ParseConfig([]byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), "a.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseConfig([]byte("domain: b\n"), "b.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m, err := MergeConfigs(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(m.Domains(), ","); got != "a,b" || len(m.Rules()) != 1 {
		t.Errorf("merged domains %q, %d rules", got, len(m.Rules()))
	}
	// Both places as file:line:column, as every other configuration error.
	if _, err := MergeConfigs(a, a); err == nil || !strings.Contains(err.Error(), `a.yaml:1:9: domain "a" is already defined in a.yaml:1:9`) {
		t.Errorf("merging a domain twice: %v", err)
	}
}

// TestParseConfigAcceptsWhatTheirsAccepts covers constructs
// envoyproxy/ratelimit accepts that ParseConfig once refused.
func TestParseConfigAcceptsWhatTheirsAccepts(t *testing.T) {
	for _, y := range []string{
		"domain: a\ndescriptors:\n  - key: k\n    shadow_mode: true\n",
		"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, requests_per_unit: 5}\n",
		"domain: a\ndescriptors:\n  - key: k\n    metadata: {owner: {team: x}}\n    share_threshold: false\n    quota_mode: false\n    rate_limit: {unit: second, requests_per_unit: 5}\n",
		"domain: a\ndescriptors:\n  - key: k\n    value: 10\n  - key: j\n    value: true\n",
	} {
		if _, err := ParseConfig([]byte(y), "rls.yaml"); err != nil {
			t.Errorf("%s: %v", y, err)
		}
	}
}

// TestWildcardsAsTheirs: a "*" anywhere matches any run of bytes (their
// README's "/api/*/action"), and overlapping wildcards match in file
// order, the first one winning, as in envoyproxy/ratelimit's config tests.
func TestWildcardsAsTheirs(t *testing.T) {
	cfg := mustConfig(t, `domain: w
descriptors:
  - key: path
    value: /api/*/action
    rate_limit: {name: mid, unit: second, requests_per_unit: 1}
  - key: path
    value: foo*
    rate_limit: {name: foo, unit: second, requests_per_unit: 2}
  - key: path
    value: foobar*
    rate_limit: {name: foobar, unit: second, requests_per_unit: 3}
  - key: path
    value: a*b*c
    rate_limit: {name: abc, unit: second, requests_per_unit: 4}
  - key: path
    rate_limit: {name: any, unit: second, requests_per_unit: 5}
`)
	for value, want := range map[string]string{
		"/api/v1/action": "mid", "/api//action": "mid", "/api/v1/other": "any",
		"foobarbaz": "foo", "foobar": "foo", "fo": "any",
		"aXbYc": "abc", "abc": "abc", "acb": "any",
	} {
		r := cfg.domains["w"].match(desc("path=" + value).GetEntries())
		if r == nil || r.Name != want {
			t.Errorf("path=%s matched %+v, want %s", value, r, want)
		}
	}
}
