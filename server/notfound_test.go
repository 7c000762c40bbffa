package server_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestUnknownRouteIsProblem: a path the API does not have (404) and a
// known path with the wrong method (405, with Allow) answer
// application/problem+json like every other error.
func TestUnknownRouteIsProblem(t *testing.T) {
	e := start(t, layered, memStore(t), nil)
	r := e.do("POST", "/v1/chekc", "", map[string]string{})
	if r.status != http.StatusNotFound {
		t.Fatalf("status %d, want 404", r.status)
	}
	if p := problemOf(t, r); !strings.HasSuffix(p.Type, "not-found") || !strings.Contains(p.Detail, "/v1/chekc") {
		t.Errorf("404 problem %+v", p)
	}
	r = e.do("GET", "/v1/check", "", nil)
	if r.status != http.StatusMethodNotAllowed {
		t.Fatalf("status %d, want 405", r.status)
	}
	if p := problemOf(t, r); !strings.HasSuffix(p.Type, "method-not-allowed") || !strings.Contains(p.Detail, "POST") {
		t.Errorf("405 problem %+v", p)
	}
	if got := r.header.Get("Allow"); !strings.Contains(got, "POST") {
		t.Errorf("Allow %q, want POST", got)
	}
	if r := e.do("GET", "/healthz", "", nil); r.status != http.StatusOK {
		t.Errorf("GET /healthz: %d", r.status)
	}
}
