package main

import (
	"fmt"
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

// TestValidateWarnsOfRoundedRate: config validate warns of a bucket
// layer whose window/limit, rounded down to whole microseconds, admits
// more than 1% over its limit (an outside walk: 300,000 per second
// admitted 333,333 in both stores, nothing said so), naming the tier
// that sets such a rate; an exact or nearly exact rate gets no warning.
func TestValidateWarnsOfRoundedRate(t *testing.T) {
	const doc = `version: "1"
tiers: [free, pro]
policies:
  - name: api
    tier_dimension: user
    layers:
      - {name: per-user, algorithm: %s, limit: %s, window: 1s, dimension: user, tiers: {pro: {limit: %s}}}
`
	dir := t.TempDir()
	for i, tc := range []struct {
		algo, limit, pro string
		want             []string
	}{
		{"token_bucket", "300000", "300000", []string{`warning: layer "per-user" of policy "api": token_bucket 300000 per 1s refills one unit every 3µs (window/limit rounded down to whole microseconds), so it admits up to 333333 per 1s, 11.1% more than its limit`}},
		{"gcra", "1000", "700000", []string{`warning: layer "per-user" of policy "api" (tier "pro"): gcra 700000 per 1s refills one unit every 1µs`}},
		{"gcra", "3", "250000", nil},         // 333,333µs (0.0001% over) and 4µs (exact)
		{"fixed_window", "300000", "7", nil}, // not a bucket
	} {
		file := filepath.Join(dir, fmt.Sprintf("r%d.yaml", i))
		if err := os.WriteFile(file, fmt.Appendf(nil, doc, tc.algo, tc.limit, tc.pro), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := cli("config", "validate", file)
		if code != 0 || !strings.Contains(out, "OK") || strings.Count(errOut, "warning") != len(tc.want) {
			t.Errorf("%s %s/%s: exit %d, %q, %q; want OK and %d warnings", tc.algo, tc.limit, tc.pro, code, out, errOut, len(tc.want))
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%s %s/%s: stderr %q lacks %q", tc.algo, tc.limit, tc.pro, errOut, w)
			}
		}
	}
}
