package envoyside

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	theirconfig "github.com/envoyproxy/ratelimit/src/config"
	theirsettings "github.com/envoyproxy/ratelimit/src/settings"
	theirstats "github.com/envoyproxy/ratelimit/src/stats"
	gostats "github.com/lyft/gostats"

	"github.com/floodgate-rl/floodgate/envoycompat"
)

// theirModuleDir is where the go command keeps envoyproxy/ratelimit's
// module (its test/config files are read from there, not copied).
func theirModuleDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/envoyproxy/ratelimit").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func statsManager() theirstats.Manager {
	return theirstats.NewStatManager(gostats.NewStore(gostats.NewNullSink(), false), theirsettings.NewSettings())
}

// theirLoad runs their loader; a panic (their way to refuse) is an error.
func theirLoad(files []envoycompat.File, merge bool) (cfg theirconfig.RateLimitConfig, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	var in []theirconfig.RateLimitConfigToLoad
	for _, f := range files {
		in = append(in, theirconfig.RateLimitConfigToLoad{Name: f.Name, ConfigYaml: theirconfig.ConfigFileContentToYaml(f.Name, string(f.Data))})
	}
	return theirconfig.NewRateLimitConfigImpl(in, statsManager(), merge), nil
}

// theirLimit looks a descriptor up with their loader, recovering panics.
func theirLimit(cfg theirconfig.RateLimitConfig, domain string, d *ratelimitv3.RateLimitDescriptor) (l *theirconfig.RateLimit, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return cfg.GetLimit(context.TODO(), domain, d), nil
}

// loaderInput is one configuration to load with both loaders.
type loaderInput struct {
	name  string
	files []envoycompat.File
	merge bool
}

// edgeCases are constructs their tests and README exercise, written here.
var edgeCases = map[string]string{
	"fraction value":        "domain: d\ndescriptors:\n  - key: a\n    value: 1.5\n",
	"int and bool values":   "domain: d\ndescriptors:\n  - key: a\n    value: 10\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    value: true\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
	"colliding composite":   "domain: d\ndescriptors:\n  - key: a\n    value: b_c\n  - key: a_b\n    value: c\n",
	"composite lookup":      "domain: d\ndescriptors:\n  - key: a\n    value: b_c\n    rate_limit: {unit: second, requests_per_unit: 7}\n",
	"month and year":        "domain: d\ndescriptors:\n  - key: m\n    rate_limit: {unit: month, requests_per_unit: 2}\n  - key: y\n    rate_limit: {unit: YEAR, requests_per_unit: 3}\n",
	"missing rpu":           "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second}\n",
	"missing unit":          "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 1}\n",
	"unknown unit":          "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: unknown, requests_per_unit: 1}\n",
	"unlimited with rpu":    "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, requests_per_unit: 5}\n",
	"unlimited bad unit":    "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: fortnight}\n",
	"unlimited with unit":   "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n",
	"shadow without limit":  "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: true\n",
	"key twice":             "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, requests_per_unit: 9}\n",
	"misplaced keys":        "domain: d\ndescriptors:\n  - key: a\n    unit: hour\n    rate_limit: {unit: second, requests_per_unit: 3, shadow_mode: true}\n",
	"two documents":         "domain: first\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n---\ndomain: second\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
	"rpu string":            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: '5'}\n",
	"rpu negative":          "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
	"rpu too big":           "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n",
	"rpu float":             "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 2.5}\n",
	"overlapping wildcards": "domain: o\ndescriptors:\n  - key: k\n    value: foo*\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: k\n    value: foobar*\n    rate_limit: {unit: second, requests_per_unit: 2}\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 3}\n  - key: k\n    value: foobarx\n    rate_limit: {unit: second, requests_per_unit: 4}\n",
	"share threshold":       "domain: s\ndescriptors:\n  - key: files\n    value: /a/*\n    share_threshold: true\n    detailed_metric: true\n    rate_limit: {unit: hour, requests_per_unit: 10}\n",
	"share no wildcard":     "domain: s\ndescriptors:\n  - key: files\n    value: /a\n    share_threshold: true\n",
	"value_to_metric":       "domain: v\ndescriptors:\n  - key: route\n    value_to_metric: true\n    descriptors:\n      - key: method\n        rate_limit: {unit: second, requests_per_unit: 4}\n",
	"detailed nested":       "domain: v\ndescriptors:\n  - key: route\n    descriptors:\n      - key: method\n        detailed_metric: true\n        rate_limit: {unit: second, requests_per_unit: 4}\n",
	"quota and metadata":    "domain: q\ndescriptors:\n  - key: svc\n    value: one\n    quota_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n    metadata:\n      owner: {name: one, 7: x}\n      tags: [a, 1, true]\n",
	"list of strings":       "domain: d\ndescriptors:\n  - key: a\n  - oops\n",
	"top-level list":        "- domain: d\n",
	"empty":                 "",
	"replaces":              "domain: r\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: x, replaces: [{name: y}]}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1, name: y}\n",
	"nested limits":         "domain: n\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n    descriptors:\n      - key: b\n        rate_limit: {unit: second, requests_per_unit: 2}\n",
}

// middleWildcard reports a configuration using a "*" before the end of a
// value: their module on the proxy (January 2026) matches such a value
// literally; their main (July 2026), which Floodgate follows, as a
// pattern. Those inputs are compared on accept/refuse only.
func middleWildcard(files []envoycompat.File) bool {
	for _, f := range files {
		for _, line := range strings.Split(string(f.Data), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "value:"); ok {
				v = strings.Trim(strings.TrimSpace(v), `"'`)
				if i := strings.Index(v, "*"); i >= 0 && i < len(v)-1 {
					return true
				}
			}
		}
	}
	return false
}

// usesMetadata reports a configuration with a metadata key.
func usesMetadata(files []envoycompat.File) bool {
	for _, f := range files {
		if strings.Contains(string(f.Data), "metadata:") {
			return true
		}
	}
	return false
}

func loaderInputs(t *testing.T) []loaderInput {
	dir := theirModuleDir(t)
	var in []loaderInput
	paths, _ := filepath.Glob(filepath.Join(dir, "test", "config", "*.yaml"))
	more, _ := filepath.Glob(filepath.Join(dir, "test", "integration", "runtime", "current", "ratelimit", "config", "*.yaml"))
	paths = append(paths, more...)
	more, _ = filepath.Glob(filepath.Join(dir, "examples", "ratelimit", "config", "*.yaml"))
	paths = append(paths, more...)
	if len(paths) < 20 {
		t.Fatalf("only %d of their YAML files found under %s", len(paths), dir)
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, p)
		in = append(in, loaderInput{name: rel, files: []envoycompat.File{{Name: "config." + filepath.Base(p), Data: data}}})
	}
	read := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join(dir, "test", "config", name))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	merge := []envoycompat.File{{Name: "config.m1.yaml", Data: read("merge_domain_key1.yaml")}, {Name: "config.m2.yaml", Data: read("merge_domain_key2.yaml")}}
	in = append(in, loaderInput{name: "merge files, MERGE_DOMAIN_CONFIG", files: merge, merge: true},
		loaderInput{name: "merge files, no merge", files: merge},
		loaderInput{name: "duplicate key across merged files", merge: true, files: []envoycompat.File{
			{Name: "config.a.yaml", Data: read("basic_config.yaml")}, {Name: "config.b.yaml", Data: read("basic_config.yaml")}}})
	// Every YAML example of their README that is a whole configuration.
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	examples := 0
	for i, block := range strings.Split(string(readme), "```yaml")[1:] {
		body, _, _ := strings.Cut(block, "```")
		if !strings.Contains(body, "\ndomain:") {
			continue
		}
		examples++
		in = append(in, loaderInput{name: fmt.Sprintf("README yaml block %d", i+1), files: []envoycompat.File{{Name: "config.readme.yaml", Data: []byte(body)}}})
	}
	if examples < 10 {
		t.Fatalf("only %d configuration examples found in their README", examples)
	}
	names := make([]string, 0, len(edgeCases))
	for n := range edgeCases {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		in = append(in, loaderInput{name: n, files: []envoycompat.File{{Name: "config.case.yaml", Data: []byte(edgeCases[n])}}})
	}
	return in
}

// probes lists descriptors to look up in a configuration: for every
// configured path, its values (a "*" standing for "x", an absent value for
// "any") and the same path with the last value replaced, and one entry
// longer and shorter.
func probes(cfg theirconfig.RateLimitConfig, files []envoycompat.File) map[string][][2]string {
	out := map[string][][2]string{}
	var walk func(domain string, path [][2]string, ds []theirconfig.YamlDescriptor)
	walk = func(domain string, path [][2]string, ds []theirconfig.YamlDescriptor) {
		for _, d := range ds {
			v := strings.ReplaceAll(d.Value, "*", "x")
			if v == "" {
				v = "any"
			}
			p := append(append([][2]string{}, path...), [2]string{d.Key, v})
			alt := append(append([][2]string{}, path...), [2]string{d.Key, v + "-other"})
			exact := append(append([][2]string{}, path...), [2]string{d.Key, d.Value})
			for _, q := range [][][2]string{p, alt, exact, append(append([][2]string{}, p...), [2]string{"extra", "e"})} {
				out[key(domain, q)] = q
			}
			walk(domain, p, d.Descriptors)
		}
	}
	for _, f := range files {
		root, err := func() (r *theirconfig.YamlRoot, err error) {
			defer func() {
				if recover() != nil {
					err = fmt.Errorf("unparsable")
				}
			}()
			return theirconfig.ConfigFileContentToYaml(f.Name, string(f.Data)), nil
		}()
		if err == nil {
			walk(root.Domain, nil, root.Descriptors)
		}
	}
	return out
}

func key(domain string, entries [][2]string) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteString("|" + e[0] + "=" + e[1])
	}
	return b.String()
}

func descriptor(entries [][2]string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for _, e := range entries {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
	}
	return d
}

// TestLoaderAgreesWithTheirs loads every YAML file of their module's tests
// and examples, and the edge cases above, with their loader and with
// envoycompat.Load, and requires the same accept/refuse and, for every
// probe, the same limit (requests_per_unit, unit, name, unlimited, shadow,
// quota) and the same stats key.
func TestLoaderAgreesWithTheirs(t *testing.T) {
	compared, probed := 0, 0
	for _, in := range loaderInputs(t) {
		t.Run(in.name, func(t *testing.T) {
			tc, terr := theirLoad(in.files, in.merge)
			oc, oerr := envoycompat.Load(in.files, in.merge)
			if usesMetadata(in.files) && terr != nil && strings.Contains(terr.Error(), "unknown key 'metadata'") && oerr == nil {
				t.Skip("metadata is newer than their module on the proxy; main accepts it, as envoycompat does")
			}
			if (terr == nil) != (oerr == nil) {
				t.Fatalf("theirs: %v; ours: %v", terr, oerr)
			}
			compared++
			if terr != nil || middleWildcard(in.files) {
				return
			}
			for k, entries := range probes(tc, in.files) {
				domain := strings.SplitN(k, "|", 2)[0]
				d := descriptor(entries)
				tl, err := theirLimit(tc, domain, d)
				if err != nil {
					continue
				}
				ol := oc.Match(domain, d)
				probed++
				if (tl == nil) != (ol == nil) {
					t.Errorf("%s: theirs %v, ours %v", k, tl, ol)
					continue
				}
				if tl == nil {
					continue
				}
				if tl.Limit.GetRequestsPerUnit() != ol.Proto.GetRequestsPerUnit() || tl.Limit.GetUnit() != ol.Proto.GetUnit() ||
					tl.Limit.GetName() != ol.Proto.GetName() || tl.Unlimited != ol.Unlimited || tl.ShadowMode != ol.Shadow || tl.QuotaMode != ol.Quota {
					t.Errorf("%s: theirs %v unlimited=%t shadow=%t quota=%t; ours %v unlimited=%t shadow=%t quota=%t",
						k, tl.Limit, tl.Unlimited, tl.ShadowMode, tl.QuotaMode, ol.Proto, ol.Unlimited, ol.Shadow, ol.Quota)
				}
				if tl.FullKey != ol.MetricKey() {
					t.Errorf("%s: stats key theirs %q, ours %q", k, tl.FullKey, ol.MetricKey())
				}
			}
		})
	}
	t.Logf("%d configurations compared, %d lookups agreed", compared, probed)
}
