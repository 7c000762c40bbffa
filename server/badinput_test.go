package server_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/server"
)

// TestBadInput: every malformed request gets a specific 4xx problem and
// consumes nothing.
func TestBadInput(t *testing.T) {
	e := start(t, layered, memStore(t), func(o *server.Options) { o.MaxBatch = 3 })
	item := `{"policy":"fifty","identity":{"user":"victim"}}`
	tests := []struct {
		name, path, body string
		status           int
		kind, detail     string
	}{
		{"empty body", "/v1/check", "", 400, "malformed-json", "empty"},
		{"not JSON", "/v1/check", "policy=fifty", 400, "malformed-json", "malformed JSON at byte"},
		{"truncated", "/v1/check", `{"policy":"fifty","identity":{"user":"victim"}`, 400, "malformed-json", "ends in the middle"},
		{"array", "/v1/check", `[1,2]`, 400, "malformed-json", "must be a JSON object"},
		{"trailing data", "/v1/check", item + `{"x":1}`, 400, "malformed-json", "unexpected data after"},
		{"unknown field", "/v1/check", `{"policy":"fifty","identity":{"user":"victim"},"cots":1}`, 400, "unknown-field", `unknown field "cots"`},
		{"missing policy", "/v1/check", `{"identity":{"user":"victim"}}`, 400, "missing-policy", `"policy" is required`},
		{"unknown policy", "/v1/check", `{"policy":"nope","identity":{"user":"victim"}}`, 400, "unknown-policy", `unknown policy "nope": the service's configuration lists its policies (its --config file; GET /admin/v1/config when the admin API is on)`},
		{"missing identity", "/v1/check", `{"policy":"fifty"}`, 400, "missing-identity", `needs identity value "user"`},
		{"wrong dimension", "/v1/check", `{"policy":"fifty","identity":{"ip":"1.2.3.4"}}`, 400, "missing-identity", `needs identity value "user"`},
		{"empty value", "/v1/check", `{"policy":"fifty","identity":{"user":""}}`, 400, "invalid-identity", "is empty"},
		{"null value", "/v1/check", `{"policy":"fifty","identity":{"user":null}}`, 400, "invalid-identity", `identity value "user" is empty or null`},
		{"bad dimension name", "/v1/check", `{"policy":"fifty","identity":{"user":"victim","Bad Name":"x"}}`, 400, "invalid-identity", "not in [a-z0-9_-]"},
		{"huge value", "/v1/check", `{"policy":"fifty","identity":{"user":"` + strings.Repeat("v", 2000) + `"}}`, 400, "invalid-identity", "2000 bytes (max 1024)"},
		{"numeric value", "/v1/check", `{"policy":"fifty","identity":{"user":42}}`, 400, "malformed-json", `identity values must be strings, got a JSON number`},
		{"identity not object", "/v1/check", `{"policy":"fifty","identity":"victim"}`, 400, "malformed-json", `"identity" must be an object`},
		{"negative cost", "/v1/check", `{"policy":"fifty","identity":{"user":"victim"},"cost":-1}`, 400, "invalid-cost", "cost -1 out of range"},
		{"zero cost", "/v1/check", `{"policy":"fifty","identity":{"user":"victim"},"cost":0}`, 400, "invalid-cost", "use /v1/peek"},
		{"huge cost", "/v1/check", `{"policy":"fifty","identity":{"user":"victim"},"cost":9007199254740993}`, 400, "invalid-cost", "out of range 1..1099511627776"},
		{"overflowing cost", "/v1/check", `{"policy":"fifty","identity":{"user":"victim"},"cost":1e30}`, 400, "malformed-json", `"cost" must be a whole number`},
		{"fractional cost", "/v1/check", `{"policy":"fifty","identity":{"user":"victim"},"cost":1.5}`, 400, "malformed-json", `"cost" must be a whole number`},
		{"string cost", "/v1/check", `{"policy":"fifty","identity":{"user":"victim"},"cost":"1"}`, 400, "malformed-json", `"cost" must be a whole number`},
		{"oversized body", "/v1/check", `{"policy":"fifty","identity":{"user":"victim","pad":"` + strings.Repeat("x", 70<<10) + `"}}`, 413, "body-too-large", "larger than 65536 bytes"},
		{"bad enforce", "/v1/check?enforce=yes", item, 400, "invalid-parameter", `enforce="yes"`},
		{"cost on peek", "/v1/peek", `{"policy":"fifty","identity":{"user":"victim"},"cost":1}`, 400, "unknown-field", `unknown field "cost"`},
		{"empty batch", "/v1/check/batch", `{"requests":[]}`, 400, "invalid-batch", "at least one"},
		{"unknown field in a batch item", "/v1/check/batch", `{"requests":[` + item + `,{"policy":"fifty","identity":{"user":"victim"},"bogus":1}]}`, 400, "unknown-field", `requests[1]: unknown field "bogus" (known fields: policy, identity, cost)`},
		{"unknown field beside the items", "/v1/check/batch", `{"requests":[` + item + `],"bogus":1}`, 400, "unknown-field", `unknown field "bogus" (known fields: requests)`},
		{"items not an array", "/v1/check/batch", `{"requests":{}}`, 400, "malformed-json", `field "requests" must be an array of checks ({"policy", "identity", "cost"} objects), got a JSON object`},
		{"item not an object", "/v1/check/batch", `{"requests":[1]}`, 400, "malformed-json", `field "requests" must be a check object ({"policy", "identity", "cost"}), got a JSON number`},
		{"enforce on a batch", "/v1/check/batch?enforce=1", `{"requests":[` + item + `]}`, 400, "invalid-parameter", `enforce: not taken by /v1/check/batch`},
		{"bad enforce on a batch", "/v1/check/batch?enforce=yes", `{"requests":[` + item + `]}`, 400, "invalid-parameter", `enforce="yes": want 1, true, 0 or false`},
		{"too many batch items", "/v1/check/batch", `{"requests":[` + strings.Repeat(item+",", 3) + item + `]}`, 400, "batch-too-large", "4 checks (max 3)"},
		{"one bad batch item", "/v1/check/batch", `{"requests":[` + item + `,{"policy":"fifty","identity":{"user":"victim"},"cost":-5}]}`, 400, "invalid-cost", "requests[1]: cost -5"},
		{"cost past 2^64", "/v1/check", `{"policy":"fifty","identity":{"user":"victim"},"cost":18446744073709551616}`, 400, "invalid-cost", `cost 18446744073709551616 out of range 1..1099511627776 (use /v1/peek`},
		{"cost in exponent form", "/v1/check", `{"policy":"fifty","identity":{"user":"victim"},"cost":1e3}`, 400, "malformed-json", `field "cost" must be a whole number, got a JSON number 1e3`},
		{"field in upper case", "/v1/check", `{"POLICY":"fifty","identity":{"user":"victim"}}`, 400, "unknown-field", `unknown field "POLICY": field names are lower case (did you mean "policy"?)`},
		{"field with a long s", "/v1/check", `{"policy":"fifty","identity":{"user":"victim"},"co\u017ft":1}`, 400, "unknown-field", `unknown field "coſt"`},
		{"field in a batch item in mixed case", "/v1/check/batch", `{"requests":[{"policy":"fifty","Identity":{"user":"victim"}}]}`, 400, "unknown-field", `unknown field "Identity"`},
		{"a long unknown field is clipped", "/v1/check", `{"policy":"fifty","identity":{"user":"victim"},"` + strings.Repeat("x", 5000) + `":1}`, 400, "unknown-field", `unknown field "` + strings.Repeat("x", 79) + `...`},
		{"policy twice", "/v1/check", `{"policy":"nope","identity":{"user":"victim"},"policy":"fifty"}`, 400, "duplicate-field", `field "policy" appears twice`},
		{"policy twice in two cases", "/v1/check", `{"policy":"nope","identity":{"user":"victim"},"Policy":"fifty"}`, 400, "duplicate-field", `field "Policy" appears twice`},
		{"identity value twice", "/v1/check", `{"policy":"fifty","identity":{"user":"someone","user":"victim"}}`, 400, "duplicate-field", `field "identity.user" appears twice`},
		{"cost twice", "/v1/check", `{"policy":"fifty","identity":{"user":"victim"},"cost":1,"cost":2}`, 400, "duplicate-field", `field "cost" appears twice`},
		{"identity twice on peek", "/v1/peek", `{"policy":"fifty","identity":{"user":"a"},"identity":{"user":"victim"}}`, 400, "duplicate-field", `field "identity" appears twice`},
		{"duplicate in a batch item", "/v1/check/batch", `{"requests":[` + item + `,{"policy":"fifty","identity":{"user":"x","user":"victim"}}]}`, 400, "duplicate-field", `field "requests[1].identity.user" appears twice`},
		{"requests twice", "/v1/check/batch", `{"requests":[` + item + `],"requests":[` + item + `]}`, 400, "duplicate-field", `field "requests" appears twice`},
		{"identity not UTF-8", "/v1/check", "{\"policy\":\"fifty\",\"identity\":{\"user\":\"victim\xff\"}}", 400, "malformed-json", "not UTF-8 text (invalid byte 0xff at byte 44)"},
		{"quota identity not UTF-8", "/v1/quota/check", "{\"quota\":\"q\",\"identity\":{\"user\":\"\xe9\"}}", 400, "malformed-json", "not UTF-8 text"},
		{"lone high surrogate", "/v1/check", `{"policy":"fifty","identity":{"user":"victim\ud800"}}`, 400, "malformed-json", `escape \ud800 at byte 44 is half of a UTF-16 surrogate pair`},
		{"lone low surrogate", "/v1/check", `{"policy":"fifty","identity":{"user":"\udc00victim"}}`, 400, "malformed-json", `escape \udc00 at byte 38`},
		{"surrogates reversed", "/v1/check", `{"policy":"fifty","identity":{"user":"\uDC00\uD800"}}`, 400, "malformed-json", `escape \uDC00`},
		{"high surrogate then a character", "/v1/check/batch", `{"requests":[{"policy":"fifty","identity":{"user":"\ud83dx"}}]}`, 400, "malformed-json", `escape \ud83d`},
		{"empty dimension name", "/v1/check", `{"policy":"fifty","identity":{"user":"victim","":"1"}}`, 400, "invalid-identity", `identity dimension name "" (0 bytes) must be 1..32 characters`},
		{"huge dimension name is clipped", "/v1/check", `{"policy":"fifty","identity":{"user":"victim","` + strings.Repeat("u", 60000) + `":"1"}}`, 400, "invalid-identity", strings.Repeat("u", 80) + `..." (60000 bytes) must be 1..32`},
		{"too many identity values", "/v1/check", `{"policy":"fifty","identity":{` + manyValues(17) + `}}`, 400, "invalid-identity", "17 values (max 16)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.post(tc.path, tc.body)
			p := problemOf(t, r)
			if r.status != tc.status || p.Type != server.ProblemTypePrefix+tc.kind || !strings.Contains(p.Detail, tc.detail) {
				t.Fatalf("got %d %s %q\nwant %d %s containing %q", r.status, p.Type, p.Detail, tc.status, tc.kind, tc.detail)
			}
		})
	}
	// None of it consumed anything: the first valid batch item of the
	// rejected batch included.
	if p := e.peek("fifty", id("user", "victim")); p.Remaining != 50 {
		t.Fatalf("bad requests consumed: remaining %d of 50", p.Remaining)
	}
}

// TestIdentityTextNotFolded: identity values that encoding/json would all
// read as U+FFFD (bytes that are not UTF-8, lone surrogate escapes) are
// refused rather than counted on one shared counter, while real text,
// escaped or not, is counted under its own value.
func TestIdentityTextNotFolded(t *testing.T) {
	e := start(t, layered, memStore(t), nil)
	body := func(v string) string { return `{"policy":"fifty","identity":{"user":"` + v + `"}}` }
	// An attacker's spellings that would land on U+FFFD.
	for _, v := range []string{"\xff", "\xfe", "\xc3", `\ud800`, `\udbff`, `\udfff`} {
		if r := e.post("/v1/check", body(v)); r.status != 400 {
			t.Fatalf("%q: status %d %s, want 400", v, r.status, r.body)
		}
	}
	if p := e.peek("fifty", id("user", "\ufffd")); p.Remaining != 50 {
		t.Fatalf("U+FFFD's counter was spent by refused values: remaining %d of 50", p.Remaining)
	}
	// Text: a pair escaped, the same character raw, an escaped backslash
	// before "u", and U+FFFD itself are each accepted.
	for _, tc := range []struct{ raw, value string }{
		{`\ud83d\ude00`, "\U0001F600"},
		{"\U0001F600", "\U0001F600"},
		{`a\\ud800`, `a\ud800`},
		{`\ufffd`, "\ufffd"},
		{`\u00e9`, "\u00e9"},
	} {
		if r := e.post("/v1/check", body(tc.raw)); r.status != 200 {
			t.Fatalf("%s: status %d %s, want 200", tc.raw, r.status, r.body)
		}
	}
	for v, want := range map[string]int64{"\U0001F600": 48, `a\ud800`: 49, "\ufffd": 49, "\u00e9": 49} {
		if p := e.peek("fifty", id("user", v)); p.Remaining != want {
			t.Fatalf("%q: remaining %d, want %d", v, p.Remaining, want)
		}
	}
}

func manyValues(n int) string {
	parts := []string{`"user":"victim"`}
	for i := 1; i < n; i++ {
		parts = append(parts, fmt.Sprintf(`"d%d":"v"`, i))
	}
	return strings.Join(parts, ",")
}

func TestWrongMethodAndPath(t *testing.T) {
	e := start(t, layered, memStore(t), nil)
	if r := e.do("GET", "/v1/check", "", nil); r.status != 405 {
		t.Fatalf("GET /v1/check: %d", r.status)
	}
	if r := e.do("POST", "/v2/check", "", "{}"); r.status != 404 {
		t.Fatalf("POST /v2/check: %d", r.status)
	}
}
