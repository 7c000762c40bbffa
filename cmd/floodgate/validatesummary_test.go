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
