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
