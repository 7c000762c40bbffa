package server

import (
	"bytes"
	"encoding/json"
	"maps"
	"testing"
)

// FuzzDecodeCheckFast checks that whatever body decodeCheckFast accepts,
// encoding/json (decodeJSON, the path for every other body) accepts too,
// with the same request.
func FuzzDecodeCheckFast(f *testing.F) {
	for _, s := range []string{
		`{"policy":"api","identity":{"user":"u1"},"cost":1}`,
		` { "policy" : "api" , "identity" : { "user" : "42", "ip": "203.0.113.7" } } `,
		`{"identity":{},"policy":""}`,
		`{}`,
		`{"cost":-5}`,
		`{"cost":007}`,
		`{"cost":1.0}`,
		`{"cost":1e3}`,
		`{"cost":123456789012345678}`,
		`{"Policy":"api"}`,
		`{"policy":"a","policy":"b"}`,
		`{"identity":{"a":"1","a":"2"}}`,
		`{"policy":"a\"b"}`,
		`{"policy":"é"}`,
		`{"policy":"api",}`,
		`{"policy":"api"} x`,
		`{"policy":"api"}{}`,
		`{"policy":null}`,
		`{"identity":{"user":1}}`,
		`[]`,
		`{"policy":"api","unknown":1}`,
		`{"cost":-}`,
		`{"cost":-0}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fast, ok := decodeCheckFast(body)
		if !ok {
			return
		}
		var slow CheckRequest
		if err := decodeJSON(body, &slow, "policy, identity, cost"); err != nil {
			t.Fatalf("%q: fast path accepted %+v, encoding/json refused: %v", body, fast, err)
		}
		if fast.Policy != slow.Policy || !maps.Equal(fast.Identity, slow.Identity) || (fast.Identity == nil) != (slow.Identity == nil) ||
			(fast.Cost == nil) != (slow.Cost == nil) || (fast.Cost != nil && *fast.Cost != *slow.Cost) {
			t.Fatalf("%q: fast path %+v, encoding/json %+v", body, fast, slow)
		}
	})
}

// FuzzAppendCheckResponse checks that appendCheckResponse writes what
// encoding/json's Encoder (writeJSON) writes.
func FuzzAppendCheckResponse(f *testing.F) {
	f.Add(true, "api", "free", int64(100), int64(99), "per-user", "user", "2030-01-02T03:04:05Z", false, "", false)
	f.Add(false, "a<b>&\"c\\", "t\u2028\x01", int64(-1), int64(1<<62), "\xff", "", "", true, "local", true)
	f.Fuzz(func(t *testing.T, allowed bool, policy, tier string, limit, remaining int64, name, dim, resetAt string, degraded bool, mode string, shadow bool) {
		resp := CheckResponse{Allowed: allowed, Policy: policy, Tier: tier, Limit: limit, Remaining: remaining, Reset: limit ^ remaining,
			ResetAt: resetAt, RetryAfterMS: remaining / 3, DelayMS: limit / 7, Binding: name, Reason: dim,
			Degraded: degraded, FailureMode: mode, DegradedReason: tier + mode}
		if !shadow {
			resp.Layers = []LayerResult{
				{Name: name, Dimension: dim, Algorithm: policy, Allowed: !allowed, Limit: limit, Remaining: remaining, Reset: 1, ResetAt: resetAt, Reason: mode, Shadow: shadow},
				{Name: tier, Shadow: true, RetryAfterMS: -limit, DelayMS: remaining},
			}
		}
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(resp); err != nil {
			t.Fatal(err)
		}
		if got := appendCheckResponse(nil, &resp); !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("appendCheckResponse:\n%s\nencoding/json:\n%s", got, want.Bytes())
		}
	})
}
