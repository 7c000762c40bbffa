package envoyrls

import (
	"context"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestFractionalWindowReportedExactly: a window that is not a whole number
// of seconds is reported as the shortest whole number of seconds that is a
// multiple of it, the limit scaled with it, so that current_limit says the
// rate the rule enforces (docs/envoy.md). It was reported as the rate per
// second rounded down, at least 1: 1 per 1.5 s as 1 per SECOND (0.67/s
// enforced), 4 per 1.5 s as 2 per SECOND (2.67/s), and requests_per_unit 0
// as 1 per SECOND (envoydoc walk).
func TestFractionalWindowReportedExactly(t *testing.T) {
	S, M := rlspb.RateLimitResponse_RateLimit_SECOND, rlspb.RateLimitResponse_RateLimit_MINUTE
	tests := []struct {
		limit  int64
		window time.Duration
		rpu    uint32
		unit   rlspb.RateLimitResponse_RateLimit_Unit
		mult   uint32
	}{
		{1, 1500 * time.Millisecond, 2, S, 3},
		{1, 2500 * time.Millisecond, 2, S, 5},
		{4, 1500 * time.Millisecond, 8, S, 3},
		{10, 250 * time.Millisecond, 40, S, 1},
		{3, 1500 * time.Microsecond, 6000, S, 3},
		{5, 22*time.Minute + 30500*time.Millisecond, 10, S, 2701},
		{0, 1500 * time.Millisecond, 0, S, 3},
		// Whole seconds, as before: the limit per the window, in the
		// largest unit that divides it.
		{10, 90 * time.Second, 10, S, 90},
		{5, 22*time.Minute + 30*time.Second, 5, S, 1350},
		{3, 30 * time.Minute, 3, M, 30},
		{7, 2 * time.Hour, 7, rlspb.RateLimitResponse_RateLimit_HOUR, 2},
		// The exact numbers overflow Envoy's uint32 fields: the closest
		// rate that fits. 4e9 per 1.5 s is 8e9 per 3 s, 2666666666.67 per s.
		{4_000_000_000, 1500 * time.Millisecond, 2_666_666_667, S, 1},
		// 1 per (399 days + 1 ms): 1000 per 34473600001 s; the closest
		// fitting rate is 1 per 34473600 s (399 days, 57 weeks).
		{1, 399*24*time.Hour + time.Millisecond, 1, rlspb.RateLimitResponse_RateLimit_WEEK, 57},
		// Above 2^32-1 per second: the largest rate that fits.
		{4_000_000_000, time.Millisecond, 1<<32 - 1, S, 1},
	}
	for _, tt := range tests {
		rpu, unit, mult := describeWindow(tt.limit, tt.window)
		if rpu != tt.rpu || unit != tt.unit || mult != tt.mult {
			t.Errorf("%d per %v reported as %d per %v×%d, want %d per %v×%d", tt.limit, tt.window, rpu, unit, mult, tt.rpu, tt.unit, tt.mult)
		}
	}

	// Whenever the exact numbers fit, rpu per unit×mult is limit per window.
	for _, w := range []time.Duration{time.Millisecond, 1001 * time.Microsecond, 333 * time.Millisecond, 1500 * time.Millisecond, 7*time.Second + 3*time.Microsecond, 36*time.Hour + 250*time.Millisecond} {
		for _, limit := range []int64{0, 1, 3, 7, 1000} {
			rpu, unit, mult := describeWindow(limit, w)
			length, _ := unitLength(unit)
			reported := new(big.Rat).SetFrac64(int64(rpu), int64(mult)*int64(length))
			if want := new(big.Rat).SetFrac64(limit, int64(w)); reported.Cmp(want) != 0 {
				t.Errorf("%d per %v reported as %d per %v×%d", limit, w, rpu, unit, mult)
			}
		}
	}

	// Through the service: current_limit and X-RateLimit-Limit.
	r := newMemRig(t, `domain: f
descriptors:
  - key: k
    rate_limit: {requests_per_unit: 4, window: 1500ms}
`, Options{ResponseHeaders: true})
	resp := r.call(t, request("f", desc("k=a")))
	l := resp.GetStatuses()[0].GetCurrentLimit()
	if l.GetRequestsPerUnit() != 8 || l.GetUnit() != S || l.GetUnitMultiplier().GetValue() != 3 {
		t.Errorf("current_limit %v, want 8 per 3 × SECOND", l)
	}
	if h := headers(resp); h["X-RateLimit-Limit"] != "8" || h["X-RateLimit-Remaining"] != "3" {
		t.Errorf("headers %v, want limit 8 (per 3 s), remaining 3", h)
	}
}

// TestWeekOverrideNamed: a limit override in WEEK, which the override's
// enum (envoy.type.v3.RateLimitUnit) does not name, is refused with the
// unit's name from the response's enum; it said "unit 7" (envoydoc walk).
func TestWeekOverrideNamed(t *testing.T) {
	r := newMemRig(t, apiConfig, Options{})
	for _, tt := range []struct {
		unit typev3.RateLimitUnit
		want string
	}{
		{typev3.RateLimitUnit(rlspb.RateLimitResponse_RateLimit_WEEK), "limit override unit WEEK (7) is not supported (want SECOND, MINUTE, HOUR or DAY)"},
		{typev3.RateLimitUnit_YEAR, "limit override unit YEAR is not supported"},
		{typev3.RateLimitUnit(99), "limit override unit 99 is not supported"},
	} {
		d := desc("user=hal")
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: tt.unit}
		_, err := r.client.ShouldRateLimit(context.Background(), request("api", d))
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tt.want) {
			t.Errorf("unit %d: %v, want InvalidArgument saying %q", tt.unit, err, tt.want)
		}
	}
}

// TestNullIsAbsent: a key written without a value (YAML null: "value:",
// "value: ~", "shadow_mode:") is read as if it were absent, as
// envoyproxy/ratelimit and envoy-compat read it (a Go zero value): a null
// value matches any value, a null shadow_mode is false, and so on. serve
// refused such a file ("value must be a string, got null") that theirs
// loads (envoydoc walk).
func TestNullIsAbsent(t *testing.T) {
	cfg := mustConfig(t, `domain: n
algorithm:
descriptors:
  - key: ip
    value:
    shadow_mode:
    detailed_metric: ~
    value_to_metric: null
    share_threshold:
    quota_mode:
    metadata:
    descriptors:
  - key: user
    value: ~
    shadow_mode: ~
    rate_limit:
      name:
      replaces:
      unlimited:
      unit: minute
      requests_per_unit: 2
  - key: tool
    rate_limit: {unlimited: true, unit: ~}
  - key: nothing
    rate_limit:
`)
	rules := map[string]*Rule{}
	for _, r := range cfg.Rules() {
		rules[r.Path] = r
	}
	if len(rules) != 2 {
		t.Errorf("rules %v, want user and tool (a null rate_limit is no limit, as theirs)", rules)
	}
	u := rules["user"]
	if u == nil || u.Shadow || u.Unlimited || u.Name != "" || len(u.Replaces) != 0 || u.Policy.Limit != 2 {
		t.Fatalf("user rule %+v, want 2 per minute, enforced, unnamed", u)
	}
	if tool := rules["tool"]; tool == nil || !tool.Unlimited {
		t.Errorf("tool rule %+v, want unlimited", tool)
	}
	d := cfg.domains["n"]
	for _, v := range []string{"alice", "bob"} {
		if got := d.match(desc("user=" + v).GetEntries()); got != u {
			t.Errorf("user=%s matched %+v, want the value-less rule", v, got)
		}
	}
	// Required keys stay required: null is as if absent.
	for _, tt := range []struct{ yaml, want string }{
		{"domain:\n", "missing domain"},
		{"domain: a\ndescriptors:\n  - key:\n", "descriptor has no key"},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: ~}\n", "missing requests_per_unit"},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: ~, requests_per_unit: 1}\n", "missing unit"},
	} {
		if _, err := ParseConfig([]byte(tt.yaml), "n.yaml"); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want %q", tt.yaml, err, tt.want)
		}
	}
}

// TestDenialSaysWhatIsLeft: a descriptor denied because its cost is above
// what is left is OVER_LIMIT with limit_remaining (and
// X-RateLimit-Remaining) what is left, as docs/envoy.md says: a smaller
// request would still pass. Theirs says 0 (envoydoc walk).
func TestDenialSaysWhatIsLeft(t *testing.T) {
	r := newMemRig(t, apiConfig, Options{ResponseHeaders: true})
	r.call(t, withCost(request("api", desc("user=dee")), 2))
	for _, req := range []*rlspb.RateLimitRequest{
		withCost(request("api", desc("user=dee")), 2),
		request("api", desc("user=dee"), desc("user=dee")),
	} {
		resp := r.call(t, req)
		if resp.GetOverallCode() != over {
			t.Errorf("%v: overall %v, want OVER_LIMIT", req, resp.GetOverallCode())
		}
		for i, st := range resp.GetStatuses() {
			wantStatus(t, fmt.Sprintf("%v: status %d", req, i), st, over, 1, 3)
		}
		if h := headers(resp); h["X-RateLimit-Remaining"] != "1" {
			t.Errorf("%v: headers %v, want remaining 1", req, h)
		}
	}
	wantStatus(t, "cost 1 after", r.call(t, request("api", desc("user=dee"))).GetStatuses()[0], ok, 0, 3)
	// The doc's example of numbers too large for Envoy's fields loads.
	cfg := mustConfig(t, "domain: big\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 4000000000, window: 1500ms}\n")
	if rl := cfg.Rules()[0]; rl.RequestsPerUnit != 2_666_666_667 || rl.UnitMultiplier != 1 {
		t.Errorf("4e9 per 1.5 s reported as %d per %v×%d", rl.RequestsPerUnit, rl.Unit, rl.UnitMultiplier)
	}
}
