package server_test

import (
	"net/http"
	"testing"
)

// httpRejected returns floodgate_http_rejected_total{problem}, or -1 when
// the series does not exist.
func httpRejected(t *testing.T, e *env, problem string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "floodgate_http_rejected_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == problem {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

// TestHTTPRejectedSeriesFromTheStart: floodgate_http_rejected_total had
// a problem's series only from its first rejection, at 1, so increase()
// missed that rejection (floodgate_grpc_rejected_total had every reason at
// 0 from the start). Every problem type is at 0 before any request now.
func TestHTTPRejectedSeriesFromTheStart(t *testing.T) {
	e := start(t, layered, memStore(t), nil)
	for _, problem := range []string{"missing-identity", "unknown-policy", "malformed-json", "body-too-large", "host-not-allowed", "unauthorized"} {
		if got := httpRejected(t, e, problem); got != 0 {
			t.Errorf("before any request: floodgate_http_rejected_total{problem=%q} = %v, want 0", problem, got)
		}
	}
	r := e.post("/v1/check", map[string]any{"policy": "nope", "identity": map[string]string{"user": "u"}})
	if r.status != http.StatusBadRequest {
		t.Fatalf("unknown policy: status %d", r.status)
	}
	if got := httpRejected(t, e, "unknown-policy"); got != 1 {
		t.Errorf("after one: floodgate_http_rejected_total{problem=\"unknown-policy\"} = %v, want 1", got)
	}
}
