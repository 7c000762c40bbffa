package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigValidateSummary: the line config validate prints for a valid
// file counts in English ("1 policy", not "1 policies") and names a lone
// tier once ("tier default", not "tiers default, default default").
func TestConfigValidateSummary(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct{ yaml, want string }{
		"one.yaml": {
			yaml: "policies:\n  - name: p\n    layers:\n      - {name: l, algorithm: fixed_window, limit: 1, window: 1s, dimension: user}\n" +
				"quotas:\n  - {name: q, limit: 5, period: day, dimension: user}\n" +
				"concurrency:\n  - {name: c, limit: 5, dimension: user}\n",
			want: `one.yaml: OK (version "", 1 policy, 1 quota, 1 concurrency limit, tier default)`,
		},
		"two.yaml": {
			yaml: "version: \"7\"\ntiers: [free, pro]\npolicies:\n  - name: p\n    layers:\n      - {name: l, algorithm: fixed_window, limit: 1, window: 1s, dimension: user}\n" +
				"  - name: p2\n    layers:\n      - {name: l, algorithm: fixed_window, limit: 1, window: 1s, dimension: user}\n",
			want: `two.yaml: OK (version "7", 2 policies, 0 quotas, 0 concurrency limits, tiers free, pro, default free)`,
		},
	} {
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, []byte(c.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := cli("config", "validate", file)
		if code != 0 || strings.TrimSpace(out) != filepath.Join(dir, c.want) {
			t.Errorf("validate %s: exit %d, stdout %q, stderr %q; want %q", name, code, out, errOut, filepath.Join(dir, c.want))
		}
	}
}

// TestConfigValidateEnvoyFiles: config validate checks Envoy descriptor
// files as serve --envoy-config reads them (docs/operations.md points to it
// when RateLimitConfigRejected fires for source="envoy"); it used to read
// them as policies files and refuse every valid one ("unknown field
// domain").
func TestConfigValidateEnvoyFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	edge := write("edge.yaml", "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 50}\n")
	if code, out, errOut := cli("config", "validate", edge); code != 0 || !strings.Contains(out, `edge.yaml: OK (Envoy descriptors, domain "edge", 2 rules)`) {
		t.Fatalf("valid Envoy file: exit %d, %q %q", code, out, errOut)
	}
	bad := write("bad.yaml", "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minut, requests_per_unit: 5}\n")
	if code, _, errOut := cli("config", "validate", bad); code != 1 || !strings.Contains(errOut, `bad.yaml:4:24: unknown unit "minut"`) {
		t.Fatalf("invalid Envoy file: exit %d, %q", code, errOut)
	}
	again := write("again.yaml", "domain: edge\ndescriptors:\n  - key: path\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	if code, _, errOut := cli("config", "validate", edge, again); code != 1 || !strings.Contains(errOut, `domain "edge" is already defined`) ||
		!strings.Contains(errOut, "each file is valid, but the 2 Envoy descriptor files do not go together") || strings.Contains(errOut, "1 of 2 files invalid") {
		t.Fatalf("two files of one domain: exit %d, %q", code, errOut)
	}
	// A directory, as serve --envoy-config takes one (with or without
	// --envoy): its .yaml and .yml files, as Envoy descriptor files. It
	// said "read envoy: is a directory".
	sub := filepath.Join(dir, "envoy")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	write("envoy/a.yaml", "domain: a\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	write("envoy/b.yml", "domain: b\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	write("envoy/notes.txt", "not read")
	for _, args := range [][]string{{sub}, {"--envoy", sub + "/"}} {
		code, out, errOut := cli(append([]string{"config", "validate"}, args...)...)
		if code != 0 || !strings.Contains(out, `a.yaml: OK (Envoy descriptors, domain "a"`) || !strings.Contains(out, `b.yml: OK (Envoy descriptors, domain "b"`) || strings.Contains(out, "notes") {
			t.Fatalf("validate %v: exit %d, %q %q", args, code, out, errOut)
		}
	}
	if code, _, errOut := cli("config", "validate", sub, edge, again); code != 1 || !strings.Contains(errOut, `domain "edge" is already defined`) {
		t.Fatalf("a directory and two files of one domain: exit %d, %q", code, errOut)
	}
	// --envoy reads any file so, a policies file included.
	policies := write("p.yaml", "policies:\n  - name: p\n    layers:\n      - {name: l, algorithm: fixed_window, limit: 1, window: 1s, dimension: user}\n")
	if code, _, _ := cli("config", "validate", "--envoy", policies); code != 1 {
		t.Fatalf("a policies file with --envoy: exit %d, want 1", code)
	}
	if code, out, _ := cli("config", "validate", policies); code != 0 || !strings.Contains(out, "p.yaml: OK (version") {
		t.Fatalf("a policies file: exit %d, %q", code, out)
	}
}

// TestConfigValidateEnvoyDirSkipped: config validate on a directory warns
// of the entries serve --envoy-config skips there but envoyproxy/ratelimit
// and envoy-compat read (a subdirectory, a file named "limits"), as serve
// now does in its log: a migration walk found their domains unknown to
// serve with nothing said.
func TestConfigValidateEnvoyDirSkipped(t *testing.T) {
	dir := t.TempDir()
	doc := func(domain string) []byte {
		return []byte("domain: " + domain + "\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"a.yaml": doc("a"), "limits": doc("b"), "sub/extra.yaml": doc("c"), ".swp": []byte("x")} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := cli("config", "validate", dir)
	if code != 0 || !strings.Contains(out, `a.yaml: OK`) {
		t.Fatalf("exit %d, %q %q", code, out, errOut)
	}
	for _, want := range []string{"warning", filepath.Join(dir, "limits"), filepath.Join(dir, "sub") + "/", "envoy-compat", "name it *.yaml"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q: %q", want, errOut)
		}
	}
	if strings.Contains(errOut, ".swp") {
		t.Errorf("stderr names a dot file: %q", errOut)
	}
}
