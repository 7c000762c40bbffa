package envoycompat

import (
	"errors"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// The cases below are written from envoyproxy/ratelimit's own expectations
// (test/config/config_test.go on main, July 2026, and its README): each
// names the test or README section it follows. Their YAML files are not
// copied; each case writes the same construct with its own names.

// probe is one lookup and the limit it must find (rpu < 0: none).
type probe struct {
	domain  string
	entries string // "k=v,k2=v2"
	rpu     int64
	unit    rlspb.RateLimitResponse_RateLimit_Unit
	stat    string // the metric key, when checked
	flags   string // letters: u unlimited, s shadow, q quota
}

type loadCase struct {
	name    string
	files   []string
	merge   bool
	wantErr string // substring; "" = accepted
	probes  []probe
}

const (
	sec  = rlspb.RateLimitResponse_RateLimit_SECOND
	mins = rlspb.RateLimitResponse_RateLimit_MINUTE
	hour = rlspb.RateLimitResponse_RateLimit_HOUR
	day  = rlspb.RateLimitResponse_RateLimit_DAY
	week = rlspb.RateLimitResponse_RateLimit_WEEK
	mon  = rlspb.RateLimitResponse_RateLimit_MONTH
	year = rlspb.RateLimitResponse_RateLimit_YEAR
)

const basic = `
domain: shop
descriptors:
  - key: k1
    value: v1
    descriptors:
      - key: sub
        rate_limit: {unit: second, requests_per_unit: 5}
      - key: sub
        value: sv
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: k2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: k2
    value: v2
    rate_limit: {unit: minute, requests_per_unit: 30}
  - key: k3
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: k4
    rate_limit: {unit: day, requests_per_unit: 1, name: k4_limit}
  - key: k5
    value: v5
    descriptors:
      - key: sub5
        descriptors:
          - key: deeper
            rate_limit: {unit: second, requests_per_unit: 1}
  - key: k6
    rate_limit: {unlimited: true}
  - key: k7
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 70}
`

var loadCases = []loadCase{
	{name: "TestBasicConfig", files: []string{basic}, probes: []probe{
		{domain: "other", entries: "", rpu: -1},
		{domain: "shop", entries: "k1=something", rpu: -1},
		{domain: "shop", entries: "k1=v1", rpu: -1},        // node without limit
		{domain: "shop", entries: "k2=v2,sub=x", rpu: -1},  // deeper than the tree
		{domain: "shop", entries: "k5=v5,sub5=x", rpu: -1}, // shallower than the limit
		{domain: "shop", entries: "k1=v1,sub=other", rpu: 5, unit: sec, stat: "shop.k1_v1.sub"},
		{domain: "shop", entries: "k1=v1,sub=sv", rpu: 10, unit: sec, stat: "shop.k1_v1.sub_sv"},
		{domain: "shop", entries: "k2=anything", rpu: 20, unit: mins, stat: "shop.k2"},
		{domain: "shop", entries: "k2=v2", rpu: 30, unit: mins, stat: "shop.k2_v2"},
		{domain: "shop", entries: "k3=x", rpu: 1, unit: hour},
		{domain: "shop", entries: "k4=x", rpu: 1, unit: day},
		{domain: "shop", entries: "k6=x", rpu: 0, flags: "u"},
		{domain: "shop", entries: "k7=first", rpu: 70, unit: mins, stat: "shop.k7_first"},
		{domain: "shop", entries: "k7=second", rpu: 70, unit: mins, stat: "shop.k7_second"},
	}},
	{name: "TestDomainMerge", merge: true, files: []string{
		"domain: m\ndescriptors:\n  - key: a\n    value: x\n    rate_limit: {unit: second, requests_per_unit: 10}\n",
		"domain: m\ndescriptors:\n  - key: b\n    value: y\n    rate_limit: {unit: second, requests_per_unit: 20}\n",
	}, probes: []probe{{domain: "m", entries: "a=x", rpu: 10, unit: sec}, {domain: "m", entries: "b=y", rpu: 20, unit: sec}}},
	{name: "TestDuplicateDomain", wantErr: "duplicate domain 'm'", files: []string{
		"domain: m\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"domain: m\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
	}},
	{name: "TestDuplicateKeyDomainMerge", merge: true, wantErr: "duplicate descriptor composite key 'm.a'", files: []string{
		"domain: m\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"domain: m\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 2}\n",
	}},
	{name: "TestEmptyDomain", wantErr: "empty domain", files: []string{"descriptors:\n  - key: a\n"}},
	{name: "empty file", wantErr: "empty domain", files: []string{""}},
	{name: "TestEmptyKey", wantErr: "descriptor has empty key", files: []string{"domain: d\ndescriptors:\n  - value: a\n"}},
	{name: "TestDuplicateKey", wantErr: "duplicate descriptor composite key 'd.a_b'", files: []string{
		"domain: d\ndescriptors:\n  - key: a\n    value: b\n  - key: a\n    value: b\n"}},
	{name: "colliding composite keys", wantErr: "duplicate descriptor composite key 'd.a_b_c'", files: []string{
		"domain: d\ndescriptors:\n  - key: a\n    value: b_c\n  - key: a_b\n    value: c\n"}},
	{name: "composite keys match by their string", files: []string{
		"domain: d\ndescriptors:\n  - key: a\n    value: b_c\n    rate_limit: {unit: second, requests_per_unit: 7}\n"},
		probes: []probe{{domain: "d", entries: "a=b_c", rpu: 7, unit: sec}, {domain: "d", entries: "a_b=c", rpu: 7, unit: sec}}},
	{name: "TestBadLimitUnit", wantErr: "invalid rate limit unit 'decade'", files: []string{
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: decade, requests_per_unit: 1}\n"}},
	{name: "unit unknown", wantErr: "invalid rate limit unit 'unknown'", files: []string{
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: unknown, requests_per_unit: 1}\n"}},
	{name: "missing unit", wantErr: "invalid rate limit unit ''", files: []string{
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 1}\n"}},
	{name: "units any case, month and year", files: []string{
		"domain: d\ndescriptors:\n  - key: w\n    rate_limit: {unit: WEEK, requests_per_unit: 1}\n  - key: mo\n    rate_limit: {unit: Month, requests_per_unit: 2}\n  - key: y\n    rate_limit: {unit: year, requests_per_unit: 3}\n"},
		probes: []probe{{domain: "d", entries: "w=1", rpu: 1, unit: week}, {domain: "d", entries: "mo=1", rpu: 2, unit: mon}, {domain: "d", entries: "y=1", rpu: 3, unit: year}}},
	{name: "missing requests_per_unit is 0", files: []string{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second}\n"},
		probes: []probe{{domain: "d", entries: "a=1", rpu: 0, unit: sec}}},
	{name: "TestReplacesSelf", wantErr: "replaces should not contain name of same descriptor", files: []string{
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: n}]}\n"}},
	{name: "TestReplacesEmpty", wantErr: "should not have an empty replaces entry", files: []string{
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: ''}]}\n"}},
	{name: "TestBadYaml", wantErr: "error loading config file", files: []string{"domain: d\n  descriptors: [\n"}},
	{name: "TestMisspelledKey", wantErr: "unknown key 'ratelimit'", files: []string{
		"domain: d\ndescriptors:\n  - key: a\n    ratelimit: {unit: second, requests_per_unit: 1}\n"}},
	{name: "TestMisspelledKey2", wantErr: "unknown key 'requestsperunit'", files: []string{
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requestsperunit: 1}\n"}},
	{name: "TestNonStringKey", wantErr: "key is not of type string", files: []string{
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, 1: 1}\n"}},
	{name: "TestNonMapList", wantErr: "list of type other than map", files: []string{
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - just a string\n"}},
	{name: "TestUnlimitedWithRateLimitUnit", wantErr: "should not specify rate limit unit when unlimited", files: []string{
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, unlimited: true}\n"}},
	{name: "unlimited with requests_per_unit", files: []string{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, requests_per_unit: 5}\n"},
		probes: []probe{{domain: "d", entries: "a=1", rpu: 5, flags: "u"}}},
	{name: "unlimited with an invalid unit", files: []string{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: fortnight}\n"},
		probes: []probe{{domain: "d", entries: "a=1", rpu: 0, flags: "u"}}},
	{name: "value 1.5 is refused", wantErr: "float64", files: []string{"domain: d\ndescriptors:\n  - key: a\n    value: 1.5\n"}},
	{name: "integer and boolean values are strings", files: []string{
		"domain: d\ndescriptors:\n  - key: a\n    value: 10\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    value: true\n    rate_limit: {unit: second, requests_per_unit: 2}\n"},
		probes: []probe{{domain: "d", entries: "a=10", rpu: 1, unit: sec}, {domain: "d", entries: "b=true", rpu: 2, unit: sec}}},
	{name: "requests_per_unit as a string", wantErr: "cannot unmarshal", files: []string{
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: '5'}\n"}},
	{name: "requests_per_unit negative", wantErr: "cannot unmarshal", files: []string{
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n"}},
	{name: "requests_per_unit above uint32", wantErr: "cannot unmarshal", files: []string{
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n"}},
	{name: "only the first YAML document is read", files: []string{
		"domain: first\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n---\ndomain: second\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n"},
		probes: []probe{{domain: "first", entries: "a=1", rpu: 1, unit: sec}, {domain: "second", entries: "a=1", rpu: -1}}},
	{name: "a mapping key written twice: the last wins", files: []string{
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, requests_per_unit: 9}\n"},
		probes: []probe{{domain: "d", entries: "a=1", rpu: 9, unit: sec}}},
	{name: "valid key in an unexpected place is ignored", files: []string{
		"domain: d\ndescriptors:\n  - key: a\n    unit: hour\n    rate_limit: {unit: second, requests_per_unit: 3, shadow_mode: true}\n"},
		probes: []probe{{domain: "d", entries: "a=1", rpu: 3, unit: sec}}},
	{name: "TestShadowModeConfig", files: []string{
		"domain: d\ndescriptors:\n  - key: a\n    shadow_mode: true\n    rate_limit: {unit: second, requests_per_unit: 3}\n  - key: b\n    shadow_mode: true\n"},
		probes: []probe{{domain: "d", entries: "a=1", rpu: 3, unit: sec, flags: "s"}, {domain: "d", entries: "b=1", rpu: -1}}},
	{name: "quota_mode and metadata", files: []string{
		"domain: d\ndescriptors:\n  - key: svc\n    value: one\n    quota_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n    metadata:\n      owner: {name: one, 7: x}\n      tags: [a, 1, true]\n"},
		probes: []probe{{domain: "d", entries: "svc=one", rpu: 1, unit: mins, flags: "q"}}},
	{name: "TestWildcardConfig trailing", files: []string{wildcard}, probes: []probe{
		{domain: "w", entries: "path=/foo/bar", rpu: 10, unit: mins, stat: "w.path_/foo/*"},
		{domain: "w", entries: "path=/foo/", rpu: 10, unit: mins},
		{domain: "w", entries: "path=/foo", rpu: 20, unit: mins, stat: "w.path"},
		{domain: "w", entries: "path=/foo/exact", rpu: 1, unit: mins},
	}},
	{name: "TestWildcardConfig middle", files: []string{wildcard}, probes: []probe{
		{domain: "w", entries: "route=/api/v1/users", rpu: 5, unit: sec, stat: "w.route_/api/*/users"},
		{domain: "w", entries: "route=/api//users", rpu: 5, unit: sec},
		{domain: "w", entries: "route=/api/v1/orders", rpu: -1},
		{domain: "w", entries: "route=/api/users", rpu: -1},
		{domain: "w", entries: "multi=abXcdYef", rpu: 6, unit: sec},
		{domain: "w", entries: "multi=abcdef", rpu: 6, unit: sec},
		{domain: "w", entries: "multi=abef", rpu: -1},
		{domain: "w", entries: "multi=abcdeXf", rpu: -1},
	}},
	{name: "overlapping wildcards: first in file order wins", files: []string{
		"domain: o\ndescriptors:\n  - key: k\n    value: foo*\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: k\n    value: foobar*\n    rate_limit: {unit: second, requests_per_unit: 2}\n"},
		probes: []probe{{domain: "o", entries: "k=foobarbaz", rpu: 1, unit: sec}, {domain: "o", entries: "k=foobar", rpu: 1, unit: sec}}},
	{name: "an exact value beats a wildcard, a wildcard beats the bare key", files: []string{
		"domain: o\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 3}\n  - key: k\n    value: a*\n    rate_limit: {unit: second, requests_per_unit: 2}\n  - key: k\n    value: abc\n    rate_limit: {unit: second, requests_per_unit: 1}\n"},
		probes: []probe{{domain: "o", entries: "k=abc", rpu: 1, unit: sec}, {domain: "o", entries: "k=abd", rpu: 2, unit: sec}, {domain: "o", entries: "k=x", rpu: 3, unit: sec}}},
	{name: "TestShareThreshold", files: []string{shareThreshold}, probes: []probe{
		{domain: "s", entries: "files=/a/1", rpu: 10, unit: hour, stat: "s.files_/a/*"},
		{domain: "s", entries: "files=/a/2", rpu: 10, unit: hour, stat: "s.files_/a/*"},
	}},
	{name: "share_threshold without wildcard", wantErr: "share_threshold can only be used with wildcard values", files: []string{
		"domain: s\ndescriptors:\n  - key: files\n    value: /a\n    share_threshold: true\n    rate_limit: {unit: hour, requests_per_unit: 10}\n"}},
	{name: "TestValueToMetric", files: []string{
		"domain: v\ndescriptors:\n  - key: route\n    value_to_metric: true\n    descriptors:\n      - key: method\n        rate_limit: {unit: second, requests_per_unit: 4}\n"},
		probes: []probe{{domain: "v", entries: "route=/x,method=GET", rpu: 4, unit: sec, stat: "v.route_/x.method"}}},
	{name: "limit override", files: []string{basic}, probes: []probe{
		{domain: "shop", entries: "k2=v2;override=42/hour", rpu: 42, unit: hour, stat: "shop.k2_v2"},
	}},
}

const wildcard = `
domain: w
descriptors:
  - key: path
    value: /foo/*
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    value: /foo/exact
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: route
    value: /api/*/users
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: multi
    value: ab*cd*ef
    rate_limit: {unit: second, requests_per_unit: 6}
`

const shareThreshold = `
domain: s
descriptors:
  - key: files
    value: /a/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
`

// descriptorOf parses "k=v,k2=v2[;override=N/unit]".
func descriptorOf(t testing.TB, s string) *ratelimitv3.RateLimitDescriptor {
	t.Helper()
	d := &ratelimitv3.RateLimitDescriptor{}
	s, ov, hasOv := strings.Cut(s, ";override=")
	if s != "" {
		for _, kv := range strings.Split(s, ",") {
			k, v, _ := strings.Cut(kv, "=")
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
	}
	if hasOv {
		n, u, _ := strings.Cut(ov, "/")
		var rpu uint32
		for _, c := range n {
			rpu = rpu*10 + uint32(c-'0')
		}
		unit := rlspb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(u)]
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: typev3.RateLimitUnit(unit)}
	}
	return d
}

func loadStrings(t testing.TB, merge bool, docs ...string) (*Config, error) {
	t.Helper()
	files := make([]File, len(docs))
	for i, d := range docs {
		files[i] = File{Name: "config.f" + string(rune('0'+i)) + ".yaml", Data: []byte(d)}
	}
	return Load(files, merge)
}

func TestLoadCases(t *testing.T) {
	for _, tc := range loadCases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := loadStrings(t, tc.merge, tc.files...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrInvalidConfig) {
					t.Fatalf("Load: %v, want an ErrInvalidConfig containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			for _, p := range tc.probes {
				l := cfg.Match(p.domain, descriptorOf(t, p.entries))
				if p.rpu < 0 {
					if l != nil {
						t.Errorf("%s %s: got limit %v, want none", p.domain, p.entries, l.Proto)
					}
					continue
				}
				if l == nil {
					t.Errorf("%s %s: no limit, want %d per %s", p.domain, p.entries, p.rpu, p.unit)
					continue
				}
				if got := int64(l.Proto.GetRequestsPerUnit()); got != p.rpu || l.Proto.GetUnit() != p.unit {
					t.Errorf("%s %s: %d per %s, want %d per %s", p.domain, p.entries, got, l.Proto.GetUnit(), p.rpu, p.unit)
				}
				if p.stat != "" && l.MetricKey() != p.stat {
					t.Errorf("%s %s: stat key %q, want %q", p.domain, p.entries, l.MetricKey(), p.stat)
				}
				flags := ""
				if l.Unlimited {
					flags += "u"
				}
				if l.Shadow {
					flags += "s"
				}
				if l.Quota {
					flags += "q"
				}
				if flags != p.flags {
					t.Errorf("%s %s: flags %q, want %q", p.domain, p.entries, flags, p.flags)
				}
			}
		})
	}
}

// TestNonStringKeyErrorIsStable: a mapping with several keys YAML reads
// as other than strings (y, n, yes, no: booleans) gets the same error at
// every load (a fuzz walk: "true" at one load, "false" at the next, as
// the map's order varied).
func TestNonStringKeyErrorIsStable(t *testing.T) {
	for _, doc := range []string{"n: 1\ny: 1\n", "domain: d\ndescriptors:\n- key: a\n  yes: 1\n  no: 1\n  3: 1\n"} {
		seen := map[string]bool{}
		for range 50 {
			_, err := loadStrings(t, false, doc)
			if err == nil || !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("%q: %v, want an ErrInvalidConfig", doc, err)
			}
			seen[err.Error()] = true
		}
		if len(seen) != 1 {
			t.Errorf("%q: %d different errors over 50 loads: %v", doc, len(seen), seen)
		}
	}
}

func TestLoadWarnsAboutIgnoredKeys(t *testing.T) {
	cfg, err := loadStrings(t, false, "domain: d\ndescriptors:\n  - key: a\n    unit: hour\n    rate_limit: {unit: second, requests_per_unit: 3, shadow_mode: true}\n")
	if err != nil {
		t.Fatal(err)
	}
	w := strings.Join(cfg.Warnings(), "\n")
	for _, want := range []string{`key "unit" has no meaning in a descriptor`, `key "shadow_mode" has no meaning in a rate_limit`} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings %q lack %q", w, want)
		}
	}
}

func TestMetadataLoaded(t *testing.T) {
	cfg, err := loadStrings(t, false, "domain: d\ndescriptors:\n  - key: svc\n    rate_limit: {unit: minute, requests_per_unit: 1}\n    metadata:\n      owner: {name: one, 7: x}\n      tags: [a, 1, true]\n")
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Match("d", descriptorOf(t, "svc=x"))
	got := l.Metadata.AsMap()
	owner, _ := got["owner"].(map[string]any)
	tags, _ := got["tags"].([]any)
	if owner["name"] != "one" || owner["7"] != "x" || len(tags) != 3 || tags[1] != float64(1) || tags[2] != true {
		t.Fatalf("metadata %v", got)
	}
}

func TestWildcardMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"a*", "a", true}, {"a*", "abc", true}, {"a*", "b", false},
		{"*", "", true}, {"*b", "ab", true}, {"*b", "ba", false},
		{"a*b*c", "abc", true}, {"a*b*c", "aXbYc", true}, {"a*b*c", "ac", false},
		{"ab*ba", "aba", false}, {"ab*ba", "abba", true},
		{"a**b", "ab", true}, {"x", "x", true}, {"x", "xy", false},
	} {
		if got := wildcardMatch(strings.Split(tc.pattern, "*"), tc.s); got != tc.want {
			t.Errorf("%q ~ %q = %t, want %t", tc.pattern, tc.s, got, tc.want)
		}
	}
}

func FuzzLoad(f *testing.F) {
	for _, tc := range loadCases {
		f.Add(strings.Join(tc.files, "\n"))
	}
	f.Fuzz(func(t *testing.T, doc string) {
		cfg, err := loadStrings(t, true, doc)
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
			return
		}
		for _, d := range cfg.Domains() {
			_ = cfg.Match(d, descriptorOf(t, "a=b,c=d"))
		}
		_ = cfg.Dump()
	})
}
