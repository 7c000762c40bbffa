package server_test

import (
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/server"
)

// TestBodyNotAnObjectRefused: every JSON endpoint answers a body that is
// valid JSON but not an object with 400 malformed-json "must be a JSON
// object". null used to be decoded as an object with no fields: 400
// missing-policy on a check, missing-quota on a quota operation, and so
// on, where [] was already "must be a JSON object".
func TestBodyNotAnObjectRefused(t *testing.T) {
	e := start(t, limits, memStore(t), nil)
	endpoints := []struct{ path, token string }{
		{"/v1/check", ""}, {"/v1/peek", ""}, {"/v1/check/batch", ""},
		{"/v1/quota/check", ""}, {"/v1/quota/status", ""}, {"/v1/quota/reserve", ""}, {"/v1/quota/settle", ""},
		{"/v1/concurrency/acquire", ""}, {"/v1/concurrency/release", ""}, {"/v1/concurrency/renew", ""},
		{"/admin/v1/reset", testToken}, {"/admin/v1/tier", testToken}, {"/admin/v1/quota/restore", testToken},
	}
	bodies := map[string]string{"null": "null", " null\n": "null", "[]": "array", `"x"`: "string", "7": "number", "true": "bool"}
	for _, ep := range endpoints {
		for body, kind := range bodies {
			r := e.do("POST", ep.path, ep.token, body)
			p := problemOf(t, r)
			if want := "the body must be a JSON object, got a JSON " + kind; r.status != 400 || p.Type != server.ProblemTypePrefix+"malformed-json" || p.Detail != want {
				t.Errorf("%s %q: %d %s %q; want 400 malformed-json %q", ep.path, body, r.status, p.Type, p.Detail, want)
			}
		}
	}
}

// TestByteOrderMarkAccepted: a body that starts with the UTF-8 byte order
// mark (as Windows tools write UTF-8 files) is read as the JSON after it,
// as RFC 8259 lets a parser do; before, it was refused as "invalid
// character 'ï' at byte 1". Offsets in problems still count from the
// body's first byte, the mark's, and a mark anywhere else is not JSON.
func TestByteOrderMarkAccepted(t *testing.T) {
	e := start(t, limits, memStore(t), nil)
	const bom = "\xef\xbb\xbf"
	for _, x := range []struct{ path, body string }{
		{"/v1/check", bom + `{"policy":"api","identity":{"user":"bom"}}`},
		{"/v1/check/batch", bom + `{"requests":[{"policy":"api","identity":{"user":"bom"}}]}`},
		{"/v1/quota/check", bom + `{"quota":"hundred","identity":{"user":"bom"},"cost":3}`},
	} {
		if r := e.post(x.path, x.body); r.status != 200 {
			t.Fatalf("%s with a byte order mark: %d %s; want 200", x.path, r.status, r.body)
		}
	}
	if p := e.peek("api", id("user", "bom")); p.Remaining != 3 {
		t.Errorf("after two checks sent with a byte order mark: remaining %d of 5, want 3", p.Remaining)
	}
	if st := e.quotaStatus("hundred", id("user", "bom")); st.Used != 3 {
		t.Errorf("after a quota check of 3 sent with a byte order mark: used %d, want 3", st.Used)
	}
	for _, tc := range []struct{ name, body, kind, detail string }{
		{"only the mark", bom, "malformed-json", "the request body is empty"},
		{"the mark then null", bom + "null", "malformed-json", "must be a JSON object, got a JSON null"},
		{"a syntax error after the mark", bom + `{"policy":}`, "malformed-json", "malformed JSON at byte 14"},
		{"trailing data after the mark", bom + `{"policy":"api","identity":{"user":"bom"}}x`, "malformed-json", "(at byte 45)"},
		{"an unknown field in a batch item after the mark", bom + `{"requests":[{"policy":"api","identity":{"user":"bom"},"x":1}]}`, "unknown-field", `requests[0]: unknown field "x"`},
		{"the mark twice", bom + bom + `{}`, "malformed-json", "invalid character"},
		{"the mark after a space", " " + bom + `{}`, "malformed-json", "invalid character"},
	} {
		path := "/v1/check"
		if strings.Contains(tc.body, "requests") {
			path = "/v1/check/batch"
		}
		r := e.post(path, tc.body)
		if p := problemOf(t, r); r.status != 400 || p.Type != server.ProblemTypePrefix+tc.kind || !strings.Contains(p.Detail, tc.detail) {
			t.Errorf("%s: %d %s %q; want 400 %s containing %q", tc.name, r.status, p.Type, p.Detail, tc.kind, tc.detail)
		}
	}
}
