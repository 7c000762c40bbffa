package server_test

import (
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/server"
)

// TestNumberTooLargeForInt64IsOutOfRange: on every endpoint with a
// whole-number field, a value too large (or too negative) for an int64
// gets the problem of a value just past the field's range: the same type
// (invalid-cost) and the same detail, the number aside. Before, "cost":
// 1099511627777 was invalid-cost "out of range 1..1099511627776" but
// 99999999999999999999999 was malformed-json "out of range
// 0..1099511627776", and a restore's "used" was given the range of a cost
// instead of its own (0..2^50).
func TestNumberTooLargeForInt64IsOutOfRange(t *testing.T) {
	e := start(t, limits, memStore(t), nil)
	const huge, hugeNegative = "99999999999999999999999", "-99999999999999999999999"
	u := `"identity":{"user":"victim"}`
	tests := []struct {
		name, path, token, body string // body has %s where the number goes
		past, want              string // a value just past the range; the detail with %s
	}{
		{"check cost", "/v1/check", "", `{"policy":"api",` + u + `,"cost":%s}`, "1099511627777",
			"cost %s out of range 1..1099511627776 (use /v1/peek to check without consuming)"},
		{"batch item cost", "/v1/check/batch", "", `{"requests":[{"policy":"api",` + u + `},{"policy":"api",` + u + `,"cost":%s}]}`, "1099511627777",
			"requests[1]: cost %s out of range 1..1099511627776 (use /v1/peek to check without consuming)"},
		{"quota check cost", "/v1/quota/check", "", `{"quota":"hundred",` + u + `,"cost":%s}`, "1099511627777",
			"cost %s out of range 1..1099511627776 (use /v1/quota/status to look without consuming)"},
		{"reserve estimate", "/v1/quota/reserve", "", `{"quota":"hundred",` + u + `,"request_id":"r","estimate":%s}`, "1099511627777",
			"estimate %s out of range 1..1099511627776 (the most the work may cost)"},
		{"settle actual", "/v1/quota/settle", "", `{"quota":"hundred",` + u + `,"request_id":"r","actual":%s}`, "1099511627777",
			"actual %s out of range 0..1099511627776 (the real cost; 0 cancels the reservation)"},
		{"restore used", "/admin/v1/quota/restore", testToken, `{"quota":"hundred",` + u + `,"used":%s}`, "1125899906842625",
			"used %s out of range 0..1125899906842624"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, n := range []string{tc.past, huge, hugeNegative} {
				r := e.do("POST", tc.path, tc.token, strings.Replace(tc.body, "%s", n, 1))
				p := problemOf(t, r)
				if want := strings.Replace(tc.want, "%s", n, 1); r.status != 400 || p.Type != server.ProblemTypePrefix+"invalid-cost" || p.Detail != want {
					t.Errorf("%s: %d %s %q\nwant 400 invalid-cost %q", n, r.status, p.Type, p.Detail, want)
				}
			}
		})
	}
	if st := e.quotaStatus("hundred", id("user", "victim")); st.Used != 0 || st.Reserved != 0 {
		t.Fatalf("refused requests changed the quota: %+v", st)
	}
	if p := e.peek("api", id("user", "victim")); p.Remaining != p.Limit {
		t.Fatalf("refused requests were counted: %+v", p)
	}
}

// TestNullNumberIsRefused: a whole-number field sent as JSON null is
// refused with a problem naming it, on every endpoint, and nothing is
// counted. encoding/json decodes null as if the field were absent: a
// quota check with "cost": null was charged the default cost of 1, and a
// reserve's null estimate was told the field was missing.
func TestNullNumberIsRefused(t *testing.T) {
	e := start(t, limits, memStore(t), nil)
	u := `"identity":{"user":"victim"}`
	tests := []struct {
		name, path, token, body, field string
	}{
		{"check cost", "/v1/check", "", `{"policy":"api",` + u + `,"cost":null}`, "cost"},
		{"batch item cost", "/v1/check/batch", "", `{"requests":[{"policy":"api",` + u + `},{"policy":"api",` + u + `,"cost":null}]}`, "requests[1].cost"},
		{"quota check cost", "/v1/quota/check", "", `{"quota":"hundred",` + u + `,"cost":null}`, "cost"},
		{"reserve estimate", "/v1/quota/reserve", "", `{"quota":"hundred",` + u + `,"request_id":"r","estimate":null}`, "estimate"},
		{"settle actual", "/v1/quota/settle", "", `{"quota":"hundred",` + u + `,"request_id":"r","actual":null}`, "actual"},
		{"restore used", "/admin/v1/quota/restore", testToken, `{"quota":"hundred",` + u + `,"used":null}`, "used"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", tc.path, tc.token, tc.body)
			p := problemOf(t, r)
			if want := `field "` + tc.field + `" is null: send a whole number`; r.status != 400 || p.Type != server.ProblemTypePrefix+"malformed-json" || !strings.HasPrefix(p.Detail, want) {
				t.Errorf("%d %s %q\nwant 400 malformed-json starting %q", r.status, p.Type, p.Detail, want)
			}
		})
	}
	// An identity value is the client's string, whatever its name: a null
	// one named "cost" is an identity problem, not a number's.
	r := e.do("POST", "/v1/check", "", `{"policy":"api","identity":{"user":"victim","cost":null}}`)
	if p := problemOf(t, r); r.status != 400 || p.Type != server.ProblemTypePrefix+"invalid-identity" {
		t.Errorf("identity value named cost: %d %s %q, want 400 invalid-identity", r.status, p.Type, p.Detail)
	}
	if st := e.quotaStatus("hundred", id("user", "victim")); st.Used != 0 || st.Reserved != 0 {
		t.Fatalf("refused requests changed the quota: %+v", st)
	}
	if p := e.peek("api", id("user", "victim")); p.Remaining != p.Limit {
		t.Fatalf("refused requests were counted: %+v", p)
	}
}
