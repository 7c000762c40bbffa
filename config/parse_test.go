package config_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
)

func TestDefaultIsTheExample(t *testing.T) {
	cfg, err := config.Default()
	if err != nil {
		t.Fatalf("built-in configuration invalid: %v", err)
	}
	example, err := os.ReadFile("../examples/floodgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(example, config.DefaultYAML()) {
		t.Fatal("examples/floodgate.yaml and config/default.yaml differ; keep them identical")
	}
	if got := strings.Join(cfg.Tiers(), ","); got != "free,pro,enterprise" || cfg.DefaultTier() != "free" {
		t.Fatalf("tiers %s default %s", got, cfg.DefaultTier())
	}
	api, ok := cfg.Policy("api")
	if !ok || len(api.Layers) != 3 || !api.Tiered() {
		t.Fatalf("api policy: %+v", api)
	}
	want := []struct {
		name, dim string
		alg       floodgate.Algorithm
		free, pro int64
		window    time.Duration
	}{
		{"edge", "global", floodgate.FixedWindow, 10_000, 10_000, time.Minute},
		{"per-user", "user", floodgate.SlidingWindow, 100, 1_000, time.Minute},
		{"monthly", "user", floodgate.Quota, 10_000, 1_000_000, 0},
	}
	for i, w := range want {
		l := api.Layers[i]
		free, pro := l.Policy("free"), l.Policy("pro")
		if l.Name != w.name || l.Dimension() != w.dim || free.Algorithm != w.alg || free.Limit != w.free ||
			pro.Limit != w.pro || free.Window != w.window || free.Name != "api."+w.name || pro.Name != free.Name {
			t.Errorf("layer %d: %s %s %v / %v", i, l.Name, l.Dimension(), free, pro)
		}
	}
	if cal := api.Layers[2].Policy("free").Calendar; cal.Unit != floodgate.PeriodMonth {
		t.Errorf("monthly calendar %+v", cal)
	}
	if login, _ := cfg.Policy("login"); login.OnRedisFailure != config.FailClosed || api.OnRedisFailure != "" {
		t.Errorf("on_redis_failure: login %q, api %q; want closed and unset", login.OnRedisFailure, api.OnRedisFailure)
	}
}

func TestParseQuotaLayer(t *testing.T) {
	cfg, err := config.Parse([]byte(`
version: 1
policies:
  - name: billing
    layers:
      - name: cycle
        algorithm: quota
        limit: 5000
        period: anchored_month
        anchor_day: 31
        timezone: America/New_York
        dimension: account
`), "q.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pol, _ := cfg.Policy("billing")
	got := pol.Layers[0].Policy("")
	if got.Algorithm != floodgate.Quota || got.Calendar.Unit != floodgate.PeriodAnchoredMonth || got.Calendar.AnchorDay != 31 || got.Calendar.Location.String() != "America/New_York" {
		t.Fatalf("policy %+v", got)
	}
	for _, tc := range []struct{ body, want string }{
		{"algorithm: quota\n        limit: 5\n        window: 1h", "set period"},
		{"algorithm: quota\n        limit: 5\n        period: fortnight", `unknown period "fortnight"`},
		{"algorithm: quota\n        limit: 5\n        period: day\n        timezone: Mars/Olympus", `unknown IANA time zone "Mars/Olympus"`},
		{"algorithm: quota\n        limit: 5\n        period: anchored_month", "needs anchor_day"},
		{"algorithm: quota\n        limit: 5\n        period: day\n        anchor_day: 3", "anchor_day applies to period anchored_month only"},
		{"algorithm: fixed_window\n        limit: 5\n        window: 1h\n        period: day", "period applies to algorithm quota only"},
	} {
		doc := "version: 1\npolicies:\n  - name: b\n    layers:\n      - name: l\n        dimension: user\n        " + tc.body + "\n"
		_, err := config.Parse([]byte(doc), "bad.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want it to mention %q", tc.body, err, tc.want)
		}
	}
}

func TestParseValidDetails(t *testing.T) {
	cfg, err := config.Parse([]byte(`
version: 7
tiers: [basic, gold]
default_tier: basic
policies:
  - name: p
    tier_dimension: key
    layers:
      - name: all
        algorithm: token_bucket
        limit: 1_000
        window: 1s
        burst: 400
        dimension: global
        shards: 4
        tiers: {gold: {limit: 2000}}
      - {name: pair, algorithm: leaky_bucket, limit: 10, window: 1s, max_delay: 250ms, dimension: key+ip, cost: 1, shadow: true}
`), "ok.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Version() != "7" || cfg.Source() != "ok.yaml" || len(cfg.Hash()) != 64 {
		t.Fatalf("version %q source %q hash %q", cfg.Version(), cfg.Source(), cfg.Hash())
	}
	p, _ := cfg.Policy("p")
	all, pair := p.Layers[0], p.Layers[1]
	if b := all.Policy("basic"); all.Shards != 4 || b.Limit != 250 || b.Burst != 100 || all.Policy("gold").Limit != 500 {
		t.Fatalf("sharded layer: %+v basic %v gold %v", all, b, all.Policy("gold"))
	}
	if g := pair.Policy("gold"); g.Algorithm != floodgate.GCRA || g.MaxDelay != 250*time.Millisecond || !pair.Shadow || pair.Cost != 1 || pair.Dimension() != "key+ip" {
		t.Fatalf("pair layer: %+v %v", pair, g)
	}
	specs, err := cfg.Specs(p, "gold", map[string]string{"key": "k1", "ip": "10.0.0.1"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if specs[0].Policy.Limit != 500 || !strings.HasPrefix(specs[0].Identity, "global/") || specs[1].Cost != 1 || specs[1].Identity != "2:k18:10.0.0.1" {
		t.Fatalf("specs %+v", specs)
	}
	if _, err := cfg.Specs(p, "", map[string]string{"key": "k1"}, false); !errors.Is(err, config.ErrMissingIdentity) {
		t.Fatalf("missing ip: %v", err)
	}
	if _, err := cfg.Specs(p, "platinum", map[string]string{"key": "k1", "ip": "x"}, false); !errors.Is(err, config.ErrUnknownTier) {
		t.Fatalf("unknown tier: %v", err)
	}
	if ids := all.ShardIdentities(); len(ids) != 4 || ids[3] != "global/3" {
		t.Fatalf("shard identities %v", ids)
	}
}

// TestSpecsNilPolicy: Specs of a nil policy (one Config.Policy did not
// find), or on a nil Config, is an error saying so; it used to panic.
func TestSpecsNilPolicy(t *testing.T) {
	cfg, err := config.Parse([]byte(`
policies:
  - name: p
    layers: [{name: all, algorithm: fixed_window, limit: 10, window: 1s, dimension: global}]
`), "nil.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if specs, err := cfg.Specs(nil, "", nil, false); specs != nil || err == nil || !strings.Contains(err.Error(), "nil policy") {
		t.Errorf("nil policy: %v, %v; want an error naming the nil policy", specs, err)
	}
	p, _ := cfg.Policy("p")
	var none *config.Config
	if specs, err := none.Specs(p, "", nil, false); specs != nil || err == nil || !strings.Contains(err.Error(), "nil configuration") {
		t.Errorf("nil configuration: %v, %v; want an error naming the nil configuration", specs, err)
	}
}

// TestCompositeIdentityNoCollision: value tuples that would collide when
// simply joined stay distinct.
func TestCompositeIdentityNoCollision(t *testing.T) {
	cfg, err := config.Parse([]byte("policies:\n- name: p\n  layers:\n  - {name: l, algorithm: fixed_window, limit: 1, window: 1s, dimension: a+b}\n"), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Policies()[0].Layers[0]
	seen := map[string][2]string{}
	for _, pair := range [][2]string{{"x+y", "z"}, {"x", "y+z"}, {"1:x", "y"}, {"1", "x1:y"}, {"x:", "y"}, {"x", ":y"}} {
		id, err := l.Identity(map[string]string{"a": pair[0], "b": pair[1]})
		if err != nil {
			t.Fatal(err)
		}
		if prev, dup := seen[id]; dup {
			t.Fatalf("%v and %v share identity %q", prev, pair, id)
		}
		seen[id] = pair
	}
}

func TestParseErrors(t *testing.T) {
	const head = "version: 1\npolicies:\n  - name: p\n    layers:\n"
	layer := func(fields string) string { return head + "      - {name: l, " + fields + "}\n" }
	ok := "algorithm: fixed_window, limit: 10, window: 1m, dimension: user"
	tests := []struct {
		name, doc, want string
	}{
		{"empty", "", "e.yaml: empty document"},
		{"syntax", "policies: [\n", "e.yaml:1: YAML syntax: did not find expected node content"},
		{"indentation", "version: 1\npolicies:\n  - name: api\n    layers:\n      - name: user\n     algorithm: gcra\n", "e.yaml:6: YAML syntax: did not find expected key (check the indentation; the block starts at line 2)"},
		{"two documents", head + "      - {name: l, " + ok + "}\n---\nversion: 2\n", "e.yaml:6:1: more than one YAML document"},
		{"not a mapping", "- a\n- b\n", "e.yaml:1:1: the configuration must be a mapping"},
		{"unknown top field", "polices: []\n", `e.yaml:1:1: unknown field "polices" in the configuration`},
		{"no policies", "version: 1\n", `e.yaml:1:1: missing field "policies"`},
		{"empty policies", "policies: []\n", "e.yaml:1:11: policies is empty"},
		{"layer named like an Envoy descriptor", head + "      - {name: user-f1a3c26b9ee4, " + ok + "}\n", `e.yaml:5:16: layer name "user-f1a3c26b9ee4" ends in '-' and 12 hex digits (letters and digits), the shape of the policy names derived for Envoy descriptors`},
		{"unknown layer field", layer(ok + ", limt: 5"), `e.yaml:5:84: unknown field "limt" in a layer of policy "p"`},
		{"bad algorithm", layer("algorithm: leaky, limit: 10, window: 1m, dimension: user"), `e.yaml:5:30: layer "l" of policy "p": unknown algorithm "leaky"`},
		{"zero limit", layer("algorithm: gcra, limit: 0, window: 1m, dimension: user"), `e.yaml:5:43: layer "l" of policy "p" limit 0 out of range 1..`},
		{"huge limit", layer("algorithm: gcra, limit: 99999999999999999999, window: 1m, dimension: user"), `e.yaml:5:43: layer "l" of policy "p" limit 99999999999999999999 out of range 1..1099511627776`},
		{"text limit", layer("algorithm: gcra, limit: lots, window: 1m, dimension: user"), `e.yaml:5:43: layer "l" of policy "p" limit must be a whole number, got "lots"`},
		{"bad window", layer("algorithm: gcra, limit: 5, window: 1 minute, dimension: user"), `e.yaml:5:54: layer "l" of policy "p" window: invalid duration "1 minute"`},
		{"negative window", layer("algorithm: gcra, limit: 5, window: -1m, dimension: user"), `e.yaml:5:54: layer "l" of policy "p" window: duration "-1m" must be positive`},
		{"window too long", layer("algorithm: fixed_window, limit: 5, window: 500d, dimension: user"), `e.yaml:5:62: layer "l" of policy "p" window 500d out of range 1ms..400d`},
		// An outside walk: a window too long for a Go duration was called
		// an invalid duration, with examples of the writing.
		{"window too long to hold", layer("algorithm: fixed_window, limit: 5, window: 2562048h, dimension: user"), `e.yaml:5:62: layer "l" of policy "p" window 2562048h out of range 1ms..400d`},
		{"window too long to hold, ns", layer("algorithm: fixed_window, limit: 5, window: 9999999999999999999ns, dimension: user"), `e.yaml:5:62: layer "l" of policy "p" window 9999999999999999999ns out of range 1ms..400d`},
		{"window of too many days", layer("algorithm: fixed_window, limit: 5, window: 99999d, dimension: user"), `e.yaml:5:62: layer "l" of policy "p" window 99999d out of range 1ms..400d`},
		// An outside walk: max_delay too long to be held was "duration ...
		// is too long", without the range the other fields state.
		{"max_delay too long to hold", layer("algorithm: gcra, limit: 5, window: 1s, max_delay: 2562048h, dimension: user"), `e.yaml:5:69: layer "l" of policy "p" max_delay 2562048h out of range 0s..13031d5h58m26.842624s`},
		{"max_delay of too many days to hold", layer("algorithm: gcra, limit: 5, window: 1s, max_delay: 106752d, dimension: user"), `e.yaml:5:69: layer "l" of policy "p" max_delay 106752d out of range 0s..13031d5h58m26.842624s`},
		{"hold of too many days to hold", "version: 1\nquotas:\n  - {name: q, limit: 5, period: month, dimension: user, hold: 106752d}\n", `quota "q" hold 106752d out of range 1ms..400d`},
		// Every problem of a layer at once: the window's range and a
		// quota's anchor_day are checked even when another field is bad.
		{"bad limit and window", layer("algorithm: fixed_window, limit: 0, window: 401d, dimension: user"), `e.yaml:5:62: layer "l" of policy "p" window 401d out of range 1ms..400d`},
		{"bad zone and anchor_day", layer("algorithm: quota, limit: 10, period: anchored_month, anchor_day: 32, dimension: user, timezone: Mars/Base"), `layer "l" of policy "p" anchor_day 32 out of range 1..31`},
		{"burst on fixed window", layer(ok + ", burst: 5"), `burst applies to token_bucket and gcra only`},
		{"max_delay on token bucket", layer("algorithm: token_bucket, limit: 5, window: 1s, max_delay: 1s, dimension: user"), `max_delay applies to gcra only`},
		{"no dimension", layer("algorithm: gcra, limit: 5, window: 1s"), `e.yaml:5:9: layer "l" of policy "p" has no dimension`},
		{"bad dimension", layer("algorithm: gcra, limit: 5, window: 1s, dimension: User"), `dimension name "User": character 'U' not in [a-z0-9_-]`},
		{"global combined", layer("algorithm: gcra, limit: 5, window: 1s, dimension: global+user"), `"global" cannot be combined`},
		{"shards per user", layer(ok + ", shards: 4"), `e.yaml:5:92: layer "l" of policy "p": shards applies to a "global" layer only`},
		{"fewer than shards", layer("algorithm: gcra, limit: 3, window: 1s, dimension: global, shards: 4"), "limit 3 is smaller than its 4 shards"},
		{"zero cost", layer(ok + ", cost: 0"), `cost 0 out of range 1..`},
		{"shadow not bool", layer(ok + ", shadow: maybe"), `shadow must be true or false, got "maybe"`},
		{"failure mode", "policies:\n  - name: p\n    on_redis_failure: deny\n    layers:\n      - {name: l, " + ok + "}\n", `e.yaml:3:23: policy "p" on_redis_failure "deny": want local, open or closed`},
		{"sliding log too big", layer("algorithm: sliding_log, limit: 200000, window: 1h, dimension: user"), "sliding_log limit 200000 above 100000"},
		{"policy name", "policies:\n  - name: a.b\n    layers: []\n", `e.yaml:2:11: policy name "a.b": character '.' not in`},
		{"long names", "policies:\n  - name: " + strings.Repeat("p", 40) + "\n    layers:\n      - {name: " + strings.Repeat("l", 30) + ", " + ok + "}\n", "policy and layer names with the dot between them must fit in 64"},
		{"long names by one", "policies:\n  - name: " + strings.Repeat("p", 62) + "\n    layers:\n      - {name: ll, " + ok + "}\n", `is 65 characters; policy and layer names with the dot between them must fit in 64`},
		{"cost above limit", layer(ok + ", cost: 11"), `e.yaml:5:90: layer "l" of policy "p": cost 11 exceeds the 10 its policy (p.l: fixed_window 10/1m0s) can ever admit at once, so every request would be denied`},
		{"cost above burst", layer("algorithm: token_bucket, limit: 10, burst: 5, window: 1s, dimension: user, cost: 6"), `cost 6 exceeds the 5 its policy`},
		{"cost above gcra shaping", layer("algorithm: gcra, limit: 10, window: 1s, max_delay: 300ms, dimension: user, cost: 14"), `cost 14 exceeds the 13 its policy`},
		{"cost above a shard", layer("algorithm: fixed_window, limit: 40, window: 1s, dimension: global, shards: 4, cost: 11"), `cost 11 exceeds the 10 its policy`},
		{"cost above a tier", "tiers: [free, pro]\ndefault_tier: pro\npolicies:\n  - name: p\n    tier_dimension: plan\n    layers:\n      - {name: l, " + ok + ", cost: 8, tiers: {free: {limit: 5}}}\n", `layer "l" of policy "p" tier "free": cost 8 exceeds the 5 its policy`},
		{"quoted limit", layer(`algorithm: gcra, limit: "10", window: 1m, dimension: user`), `e.yaml:5:43: layer "l" of policy "p" limit must be a whole number, got the quoted text "10": write it without quotes`},
		{"quoted shadow", layer(ok + ", shadow: 'false'"), `shadow must be true or false, got the quoted text "false"`},
		{"duplicate policy", head + "      - {name: l, " + ok + "}\n  - name: p\n    layers:\n      - {name: l, " + ok + "}\n", `e.yaml:6:5: policy "p" is defined twice`},
		{"duplicate layer", head + "      - {name: l, " + ok + "}\n      - {name: l, " + ok + "}\n", `e.yaml:6:9: policy "p": layer "l" is defined twice`},
		{"duplicate field", layer(ok + ", limit: 20"), `field "limit" appears twice`},
		{"no layers", "policies:\n  - name: p\n", `e.yaml:2:5: policy "p" has no layers`},
		{"too many layers", head + strings.Repeat("      - {name: l, "+ok+"}\n", 17), `has 17 layers (want 1..16)`},
		{"default tier not listed", "tiers: [a, b]\ndefault_tier: c\n" + head[11:] + "      - {name: l, " + ok + "}\n", `e.yaml:2:15: default_tier "c" is not one of the tiers (a, b)`},
		{"default tier needed", "tiers: [a, b]\n" + head[11:] + "      - {name: l, " + ok + "}\n", `e.yaml:1:1: default_tier is required`},
		{"duplicate tier", "tiers: [free, free]\n" + head[11:] + "      - {name: l, " + ok + "}\n", `e.yaml:1:15: tier "free" is listed twice`},
		{"override without tier_dimension", "tiers: [free, pro]\n" + head[11:] + "      - {name: l, " + ok + ", tiers: {pro: {limit: 5}}}\n", `has tier overrides but policy "p" has no tier_dimension`},
		{"override unknown tier", "tiers: [free, pro]\npolicies:\n  - name: p\n    tier_dimension: user\n    layers:\n      - {name: l, " + ok + ", tiers: {gold: {limit: 5}}}\n", `e.yaml:6:92: layer "l" of policy "p": tier "gold" is not defined (tiers: free, pro)`},
		{"override bad field", "tiers: [free, pro]\npolicies:\n  - name: p\n    tier_dimension: user\n    layers:\n      - {name: l, " + ok + ", tiers: {pro: {algorithm: gcra}}}\n", `unknown field "algorithm" in layer "l" of policy "p" tier "pro"`},
		{"override invalid", "tiers: [free, pro]\npolicies:\n  - name: p\n    tier_dimension: user\n    layers:\n      - {name: l, " + ok + ", tiers: {pro: {burst: 5}}}\n", `layer "l" of policy "p" tier "pro": burst applies to token_bucket and gcra only`},
		{"tier_dimension global", "policies:\n  - name: p\n    tier_dimension: global\n    layers:\n      - {name: l, " + ok + "}\n", `tier_dimension cannot be "global"`},
		{"alias to bad value", "x: &bad -3\n", `unknown field "x"`},
		// Tags were ignored: a "!!binary" version was applied as its text.
		{"binary tag", "version: !!binary aGVsbG8=\n" + head[11:] + "      - {name: l, " + ok + "}\n", `e.yaml:1:10: YAML tag !!binary is not supported`},
		{"float tag", layer("algorithm: gcra, limit: !!float 10, window: 1m, dimension: user"), `YAML tag !!float is not supported`},
		{"local tag", "version: 1\npolicies:\n  - name: !custom p\n    layers:\n      - {name: l, " + ok + "}\n", `e.yaml:3:11: YAML tag !custom is not supported`},
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

func TestParseReportsEveryProblemUpTo20(t *testing.T) {
	var b strings.Builder
	b.WriteString("policies:\n  - name: p\n    layers:\n")
	for range 16 {
		b.WriteString("      - {name: x, algorithm: nope, limit: 0, window: 1m, dimension: user}\n")
	}
	_, err := config.Parse([]byte(b.String()), "many.yaml")
	var errs interface{ Unwrap() []error }
	if !errors.As(err, &errs) {
		t.Fatalf("not a joined error: %v", err)
	}
	list := errs.Unwrap()
	if len(list) != 21 || !strings.Contains(list[20].Error(), "too many errors") {
		t.Fatalf("%d errors, last %v", len(list), list[len(list)-1])
	}
	var first *config.Error
	if !errors.As(list[0], &first) || first.File != "many.yaml" || first.Line != 4 || first.Column == 0 {
		t.Fatalf("first error %#v", list[0])
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"1ms": time.Millisecond, "90s": 90 * time.Second, "1m": time.Minute, "1h30m": 90 * time.Minute,
		"1d": 24 * time.Hour, "30d": 720 * time.Hour, "13031d": 13031 * 24 * time.Hour, "106751d": 106751 * 24 * time.Hour,
	} {
		if got, err := config.ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "1", "0s", "-1h", "1.5d", "106752d", "1w", "1d2h", "10 s"} {
		if got, err := config.ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", in, got)
		}
	}
}

// FuzzParse: any document either parses into layers that are valid for
// every tier, or fails with positioned ErrInvalid errors; never a panic.
//
// Run it with a bounded minimization, for example
//
//	go test -run '^$' -fuzz '^FuzzParse$' -fuzztime 60s -fuzzminimizetime 50x ./config
//
// Parsing walks maps, so the coverage of one input varies from run to run:
// with the default -fuzzminimizetime (60 s) the worker spends its time
// minimizing inputs whose new coverage does not come back, and the
// fuzzer reports a handful of executions (8 in 20 s, against about 2,200
// a second with 50x).
func FuzzParse(f *testing.F) {
	f.Add(config.DefaultYAML())
	f.Add([]byte("policies:\n- name: p\n  layers:\n  - {name: l, algorithm: gcra, limit: 5, window: 1s, dimension: a+b, shards: 2}\n"))
	f.Add([]byte("tiers: [a]\npolicies: [{name: p, tier_dimension: k, layers: [{name: l, algorithm: fixed_window, limit: 9, window: 2d, dimension: k, tiers: {a: {limit: 3}}}]}]\n"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte("policies: &p\n- *p\n"))
	f.Add([]byte("tiers: [a]\nquotas: [{name: q, limit: 9, period: anchored_month, anchor_day: 31, timezone: Asia/Tokyo, dimension: k+u, tier_dimension: k, soft_threshold: 0.25, hold: 1m, tiers: {a: {limit: 3}}}]\n"))
	f.Add([]byte("concurrency: [{name: c, limit: 2, lease_ttl: 1500ms, dimension: global}]\n"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		cfg, err := config.Parse(doc, "f.yaml")
		if err != nil {
			if !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			return
		}
		if len(cfg.Policies())+len(cfg.Quotas())+len(cfg.ConcurrencyLimits()) == 0 || !cfg.HasTier(cfg.DefaultTier()) {
			t.Fatal("accepted a configuration without policies, quotas or concurrency limits, or without a default tier")
		}
		for _, tier := range cfg.Tiers() {
			for _, q := range cfg.Quotas() {
				if err := q.Policy(tier).Validate(); err != nil || q.SoftThreshold <= 0 || q.SoftThreshold > 1 || q.Hold < time.Millisecond {
					t.Fatalf("accepted invalid quota %+v: %v", q, err)
				}
			}
			for _, l := range cfg.ConcurrencyLimits() {
				if err := l.Policy(tier).Validate(); err != nil {
					t.Fatalf("accepted invalid concurrency limit: %v", err)
				}
			}
		}
		for _, p := range cfg.Policies() {
			if len(p.Layers) == 0 || len(p.Layers) > floodgate.MaxLayers {
				t.Fatalf("policy %q has %d layers", p.Name, len(p.Layers))
			}
			for _, l := range p.Layers {
				for _, tier := range cfg.Tiers() {
					if err := l.Policy(tier).Validate(); err != nil {
						t.Fatalf("accepted invalid layer: %v", err)
					}
				}
			}
		}
	})
}

// TestDocumentedExample keeps the full example of docs/configuration.md
// valid.
func TestDocumentedExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "## A full example\n\n```yaml\n")
	example, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/configuration.md has no full example")
	}
	cfg, err := config.Parse([]byte(example), "docs/configuration.md")
	if err != nil {
		t.Fatalf("the documented example is invalid:\n%v", err)
	}
	if len(cfg.Policies()) != 4 || len(cfg.Quotas()) != 1 || len(cfg.ConcurrencyLimits()) != 1 || cfg.Version() != "2026-12-01.1" {
		t.Fatalf("example parsed to %d policies, %d quotas, %d concurrency limits, version %q",
			len(cfg.Policies()), len(cfg.Quotas()), len(cfg.ConcurrencyLimits()), cfg.Version())
	}
}

// TestParseReportsFieldAndPolicyProblemsTogether: a problem in a field the
// policy is not built from (here the dimension) does not hide a problem of
// the policy as a whole (a burst on a fixed window): both are reported in
// one pass.
func TestParseReportsFieldAndPolicyProblemsTogether(t *testing.T) {
	doc := "policies:\n  - name: p\n    layers:\n      - {name: l, algorithm: fixed_window, limit: 10, window: 1m, burst: 5, dimension: User}\n"
	_, err := config.Parse([]byte(doc), "two.yaml")
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`dimension name "User"`, "burst applies to token_bucket and gcra only"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors %q lack %q", err, want)
		}
	}
}

// TestNumericLayerNamesStillParse: a layer name ending in '-' and 12
// digits (a SKU, an account number) is not the shape of a derived Envoy
// name, which mixes hex letters and digits, and parses as before.
func TestNumericLayerNamesStillParse(t *testing.T) {
	for _, name := range []string{"sku-123456789012", "acct-000000000001", "user-abcdefabcdef"} {
		doc := "version: 1\npolicies:\n  - name: p\n    layers:\n      - {name: " + name + ", algorithm: fixed_window, limit: 10, window: 1m, dimension: user}\n"
		if _, err := config.Parse([]byte(doc), "n.yaml"); err != nil {
			t.Errorf("layer %s: %v", name, err)
		}
	}
}

// TestParseAliasErrorsOnce: a bad value reached through several aliases
// is reported once, not once per alias (ten identical lines, up to the cap
// of 20, hid any other problem).
func TestParseAliasErrorsOnce(t *testing.T) {
	doc := "version: 1\npolicies: [&bad [1], *bad, *bad, *bad, *bad]\nquotas: 3\n"
	_, err := config.Parse([]byte(doc), "a.yaml")
	if err == nil {
		t.Fatal("accepted")
	}
	if n := strings.Count(err.Error(), "policy must be a mapping"); n != 1 {
		t.Fatalf("the aliased bad policy reported %d times, want once:\n%v", n, err)
	}
	if !strings.Contains(err.Error(), "quotas") {
		t.Fatalf("the other problem is missing:\n%v", err)
	}
}

// TestParseAliasedLayerErrorsOnce: an aliased layer whose problem names
// the policy using it (layer "x" of policy "p7") is reported once, at its
// position, saying how many more uses have it, so that the document's
// other problems are shown. A new-user walk's 25 policies sharing a
// limit 0 layer gave 20 lines at one position, "too many errors;
// stopping", and never the quotas error.
func TestParseAliasedLayerErrorsOnce(t *testing.T) {
	var doc strings.Builder
	doc.WriteString("version: \"1\"\npolicies:\n  - { name: p0, layers: [ &b { name: x, algorithm: fixed_window, limit: 0, window: 1m, dimension: global } ] }\n")
	for i := 1; i < 25; i++ {
		fmt.Fprintf(&doc, "  - { name: p%d, layers: [ *b ] }\n", i)
	}
	doc.WriteString("quotas: 3\n")
	_, err := config.Parse([]byte(doc.String()), "ff.yaml")
	if err == nil {
		t.Fatal("accepted")
	}
	want := `ff.yaml:3:73: layer "x" of policy "p0" limit 0 out of range 1..1099511627776 (and 24 more uses of this value through an alias)` + "\n" +
		`ff.yaml:28:9: quotas must be a list, got "3"`
	if got := err.Error(); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

// TestParseRefusesMergeKeys: a YAML merge key (<<: *b) is refused as
// one, where it was refused as unknown field "<<", which did not say that
// merging is what is not supported.
func TestParseRefusesMergeKeys(t *testing.T) {
	doc := "version: \"1\"\npolicies:\n  - name: p0\n    layers:\n" +
		"      - &b {name: x, algorithm: fixed_window, limit: 5, window: 1m, dimension: user}\n" +
		"  - name: p1\n    layers:\n      - <<: *b\n        limit: 10\n"
	_, err := config.Parse([]byte(doc), "ff.yaml")
	want := `ff.yaml:8:9: YAML merge keys (<<) are not supported: write the mapping's fields out (an alias can stand for a whole value, such as a whole layer)`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}
