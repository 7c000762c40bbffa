package envoyrls

import (
	"errors"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

func FuzzParseConfig(f *testing.F) {
	for _, seed := range []string{
		upstreamExample, apiConfig, concurrentConfig,
		"domain: a\n",
		"domain: a\ndescriptors:\n  - key: k\n    value: 'v*'\n    rate_limit: {window: 250ms, requests_per_unit: 3, algorithm: gcra, burst: 9}\n",
		"domain: a\ndescriptors:\n  - key: k\n    descriptors: &x [{key: j, rate_limit: {unit: day, requests_per_unit: 1}}]\n  - key: l\n    descriptors: *x\n",
		"domain: [\n",
		"domain: a\n---\ndomain: b\n",
		"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: week, unit_multiplier: 57, requests_per_unit: 1}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig(data, "fuzz.yaml")
		if err != nil {
			var ce *ConfigError
			if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) {
				t.Fatalf("error %v is not a ConfigError", err)
			}
			return
		}
		again, err := ParseConfig(data, "fuzz.yaml")
		if err != nil || len(again.Rules()) != len(cfg.Rules()) {
			t.Fatalf("second parse differs: %v", err)
		}
		names := map[string]bool{}
		for i, r := range cfg.Rules() {
			if !cfg.HasDomain(r.Domain) {
				t.Fatalf("rule %s.%s of an unknown domain", r.Domain, r.Path)
			}
			if again.Rules()[i].Policy != r.Policy {
				t.Fatalf("rule %d: policy %v then %v", i, r.Policy, again.Rules()[i].Policy)
			}
			if r.Unlimited || r.Policy.Limit == 0 {
				continue
			}
			if err := r.Policy.Validate(); err != nil {
				t.Fatalf("rule %s.%s: %v", r.Domain, r.Path, err)
			}
			if names[r.Policy.Name] {
				t.Fatalf("policy name %q used twice", r.Policy.Name)
			}
			names[r.Policy.Name] = true
			if r.Unit == rlspb.RateLimitResponse_RateLimit_UNKNOWN || r.RequestsPerUnit == 0 {
				t.Fatalf("rule %s.%s reported as %d per %v", r.Domain, r.Path, r.RequestsPerUnit, r.Unit)
			}
		}
	})
}

// fuzzConfig has exact, key-only, wildcard, nested, shadow, unlimited,
// zero and replacing rules, under every algorithm.
const fuzzConfig = `
domain: f
descriptors:
  - key: a
    rate_limit: {name: base, unit: second, requests_per_unit: 5}
  - key: a
    value: x
    rate_limit: {unit: minute, requests_per_unit: 7, algorithm: sliding_window}
  - key: a
    value: "pre*"
    shadow_mode: true
    rate_limit: {window: 1500ms, requests_per_unit: 3, algorithm: token_bucket, burst: 6}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: sliding_log, replaces: [{name: base}]}
    descriptors:
      - key: c
        rate_limit: {unit: day, requests_per_unit: 9, algorithm: gcra}
      - key: c
        value: z
        rate_limit: {unlimited: true}
  - key: d
    rate_limit: {unit: second, requests_per_unit: 0}
`

// FuzzRequestLayers checks the request → layers mapping: any request
// either fails with ErrInvalidRequest or yields layers that floodgate
// accepts and decides.
func FuzzRequestLayers(f *testing.F) {
	f.Add("f", "a", "x", "b", "q", "c", "z", uint32(0), int64(-1), uint8(2), false, uint32(0))
	f.Add("f", "a", "prefix", "a", "prefix", "", "", uint32(3), int64(0), uint8(4), false, uint32(0))
	f.Add("f", "b", "1", "c", "2", "d", "", uint32(1), int64(5), uint8(17), true, uint32(5))
	f.Add("", "a", "", "", "", "", "", uint32(4294967295), int64(1<<40), uint8(1), true, uint32(0))
	f.Add("f", "a/b=c", "%2F", "a", "x", "b", "y", uint32(2), int64(2), uint8(3), false, uint32(1))
	cfg, err := ParseConfig([]byte(fuzzConfig), "fuzz.yaml")
	if err != nil {
		f.Fatal(err)
	}
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		f.Fatal(err)
	}
	lim, err := floodgate.New(st, floodgate.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2, k3, v3 string, hits uint32, dhits int64, n uint8, override bool, unit uint32) {
		pairs := []Entry{{k1, v1}, {k2, v2}, {k3, v3}}
		req := &rlspb.RateLimitRequest{Domain: domain, HitsAddend: hits}
		for i := range int(n % 20) {
			d := &ratelimitv3.RateLimitDescriptor{}
			for j := 0; j <= i%3; j++ {
				e := pairs[(i+j)%3]
				d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
			}
			if dhits >= 0 && i%2 == 0 {
				d.HitsAddend = wrapperspb.UInt64(uint64(dhits))
			}
			if override && i%3 == 1 {
				d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: hits % 7, Unit: typev3.RateLimitUnit(unit % 8)}
			}
			req.Descriptors = append(req.Descriptors, d)
		}
		p, err := cfg.plan(req, limits{maxHits: DefaultMaxHitsAddend})
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("error %v does not wrap ErrInvalidRequest", err)
			}
			return
		}
		if len(p.descs) != len(req.Descriptors) || len(p.layers) > floodgate.MaxLayers {
			t.Fatalf("%d descs, %d layers for %d descriptors", len(p.descs), len(p.layers), len(req.Descriptors))
		}
		used := make([]bool, len(p.layers))
		for i, dp := range p.descs {
			if dp.layer < 0 {
				continue
			}
			used[dp.layer] = true
			l := p.layers[dp.layer]
			if want := Identity(entriesOf(req.Descriptors[i])); l.spec.Identity != want {
				t.Fatalf("descriptor %d: identity %q, want %q", i, l.spec.Identity, want)
			}
			if dp.limit == nil {
				t.Fatalf("descriptor %d is decided but reports no current_limit", i)
			}
		}
		specs := make([]floodgate.LayerSpec, len(p.layers))
		for i, l := range p.layers {
			if !used[i] {
				t.Fatalf("layer %d belongs to no descriptor", i)
			}
			if strings.ContainsAny(l.spec.Policy.Name, ":{}") {
				t.Fatalf("policy name %q", l.spec.Policy.Name)
			}
			specs[i] = l.spec
		}
		if len(specs) == 0 {
			return
		}
		if _, err := lim.LayersAt(t0, p.cost, specs...); err != nil {
			t.Fatalf("floodgate refuses the layers: %v", err)
		}
		if _, err := lim.AllowLayersAt(t.Context(), t0, p.cost, specs...); err != nil {
			t.Fatalf("decision: %v", err)
		}
	})
}

func entriesOf(d *ratelimitv3.RateLimitDescriptor) []Entry {
	var es []Entry
	for _, e := range d.GetEntries() {
		es = append(es, Entry{e.GetKey(), e.GetValue()})
	}
	return es
}

func TestPlanMatching(t *testing.T) {
	cfg, err := ParseConfig([]byte(fuzzConfig), "fuzz.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rule := func(path string) *Rule {
		for _, r := range cfg.Rules() {
			if r.Path == path {
				return r
			}
		}
		t.Fatalf("no rule %s", path)
		return nil
	}
	tests := []struct {
		name    string
		entries []string
		want    *Rule
	}{
		{"exact value wins", []string{"a=x"}, rule("a_x")},
		{"wildcard prefix", []string{"a=prefix-1"}, rule("a_pre*")},
		{"key only", []string{"a=other"}, rule("a")},
		{"empty value is key only", []string{"a="}, rule("a")},
		{"nested key only", []string{"b=1", "c=2"}, rule("b.c")},
		{"nested exact", []string{"b=1", "c=z"}, rule("b.c_z")},
		{"deeper than config", []string{"a=x", "c=1"}, nil},
		{"unknown key", []string{"e=1"}, nil},
		{"unknown nested", []string{"b=1", "e=1"}, nil},
	}
	for _, tt := range tests {
		d := desc(tt.entries...)
		got := cfg.domains["f"].match(d.GetEntries())
		if got != tt.want {
			t.Errorf("%s: matched %v, want %v", tt.name, got, tt.want)
		}
	}
	// A nil descriptor (possible only in-process) is refused, not a panic.
	_, err = cfg.plan(&rlspb.RateLimitRequest{Domain: "f", Descriptors: []*ratelimitv3.RateLimitDescriptor{nil}}, limits{maxHits: 10})
	if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "descriptor 0 is null") {
		t.Errorf("nil descriptor: %v", err)
	}
	// replaces: a matching "b" drops the rule named base.
	p, err := cfg.plan(request("f", desc("a=q"), desc("b=1")), limits{maxHits: 10})
	if err != nil {
		t.Fatal(err)
	}
	if p.descs[0].layer != -1 || p.descs[1].layer != 0 || len(p.layers) != 1 {
		t.Errorf("replaces: descs %+v, %d layers", p.descs, len(p.layers))
	}
}
