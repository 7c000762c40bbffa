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

// TestValidateWarnsOfTierDimensionWithoutTiers: config validate warns of
// a policy naming a tier_dimension while none of its layers has per-tier
// limits: its decisions all use the default tier, so a check for an
// identity assigned pro answered "tier": "free" with nothing saying why
// (the admin walk). A policy with per-tier limits gets no such warning.
func TestValidateWarnsOfTierDimensionWithoutTiers(t *testing.T) {
	const doc = `version: "1"
tiers: [free, pro]
policies:
  - name: api
    tier_dimension: user
    layers:
      - {name: per-user, algorithm: fixed_window, limit: 10, window: 1h, dimension: user%s}
`
	dir := t.TempDir()
	flat, tiered := filepath.Join(dir, "flat.yaml"), filepath.Join(dir, "tiered.yaml")
	if err := os.WriteFile(flat, []byte(strings.Replace(doc, "%s", "", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tiered, []byte(strings.Replace(doc, "%s", ", tiers: {pro: {limit: 30}}", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli("config", "validate", flat)
	if code != 0 || !strings.Contains(out, "flat.yaml: OK") ||
		!strings.Contains(errOut, `flat.yaml: warning: policy "api" has tier_dimension "user" but no layer with per-tier limits (tiers): its decisions all use the default tier "free", whatever tier is assigned`) {
		t.Fatalf("validate of a tier_dimension without per-tier limits: exit %d, %q, %q; want OK and the warning", code, out, errOut)
	}
	if code, out, errOut := cli("config", "validate", tiered); code != 0 || strings.Contains(out+errOut, "warning") {
		t.Fatalf("validate of a tiered policy: exit %d, %q, %q; want OK without a warning", code, out, errOut)
	}
}
