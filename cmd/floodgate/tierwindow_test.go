package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateWarnsOfTierWindows: config validate warns of a tier that
// sets another window than the default tier's (the tiers share the
// layer's state: an identity moved between them counts afresh in a
// fixed window, the outside walk's 10/1h and 30/2h), and stays silent
// for tiers that override the limit only.
func TestValidateWarnsOfTierWindows(t *testing.T) {
	const doc = `version: "1"
tiers: [free, pro]
policies:
  - name: api
    tier_dimension: user
    layers:
      - name: per-user
        algorithm: fixed_window
        limit: 10
        window: 1h
        dimension: user
        tiers: {pro: {limit: 30%s}}
`
	dir := t.TempDir()
	windowed, limitOnly := filepath.Join(dir, "windowed.yaml"), filepath.Join(dir, "limit.yaml")
	if err := os.WriteFile(windowed, []byte(strings.Replace(doc, "%s", ", window: 2h", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(limitOnly, []byte(strings.Replace(doc, "%s", "", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli("config", "validate", windowed)
	if code != 0 || !strings.Contains(out, "windowed.yaml: OK") ||
		!strings.Contains(errOut, `windowed.yaml: warning: layer "per-user" of policy "api": tier "pro" sets window 2h0m0s, the default tier "free" has 1h0m0s`) ||
		!strings.Contains(errOut, "override limit or burst only") {
		t.Fatalf("validate of a tier with its own window: exit %d, %q, %q; want OK and the warning", code, out, errOut)
	}
	if code, out, errOut := cli("config", "validate", limitOnly); code != 0 || strings.Contains(out+errOut, "warning") {
		t.Fatalf("validate of a limit-only tier: exit %d, %q, %q; want OK without a warning", code, out, errOut)
	}
}
