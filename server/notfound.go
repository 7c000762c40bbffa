package server

import (
	"net/http"
	"strings"
)

// withProblems serves mux, answering the requests it has no route for
// (404) or no route for with that method (405, with its Allow header) with
// an application/problem+json body like every other error of the API,
// instead of ServeMux's plain text. The detail names the path as the
// request sent it (escaped): decoded, /v1%2fcheck read "/v1/check", an
// endpoint that exists. endpoints lists what the listener serves, for the
// 404's detail (apiEndpoints, or adminEndpoints on the admin listener).
func withProblems(mux *http.ServeMux, endpoints string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		// ServeMux's own answer tells 404 from 405 (and redirects, such
		// as a path to clean): learn its status and headers, drop its body.
		rec := &headerRecorder{header: http.Header{}}
		h.ServeHTTP(rec, r)
		switch rec.status {
		case http.StatusNotFound:
			writeProblem(w, notFound(r.URL.EscapedPath(), endpoints))
		case http.StatusMethodNotAllowed:
			allow := rec.header.Get("Allow")
			w.Header().Set("Allow", allow)
			writeProblem(w, &problemError{status: http.StatusMethodNotAllowed, kind: "method-not-allowed",
				detail: r.Method + " " + r.URL.EscapedPath() + " is not allowed; use " + strings.ReplaceAll(allow, ",", " or")})
		default:
			mux.ServeHTTP(w, r)
		}
	})
}

// notFound is the problem of a request for path (escaped), which the
// listener serving endpoints has no endpoint for.
func notFound(path, endpoints string) *problemError {
	return &problemError{status: http.StatusNotFound, kind: "not-found", detail: "no endpoint " + path + "; " + endpoints}
}

// healthOnly serves mux, the routes of HealthHandler, and answers every
// other request, whatever its path or method, 404 with a problem body
// saying what that listener serves.
func healthOnly(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		writeProblem(w, &problemError{status: http.StatusNotFound, kind: "not-found",
			detail: "no endpoint " + r.Method + " " + r.URL.EscapedPath() + " on the health listener (floodgate serve --health-addr), " +
				"which serves GET and HEAD /healthz and /readyz only; the API, /metrics and the admin endpoints are on the other listeners"})
	})
}

// headerRecorder is a ResponseWriter that keeps the status and headers
// written to it and discards the body.
type headerRecorder struct {
	header http.Header
	status int
}

func (r *headerRecorder) Header() http.Header { return r.header }
func (r *headerRecorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}
func (r *headerRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return len(b), nil
}

// apiEndpoints lists the API's endpoints for a 404: "under /v1/" told
// nothing to a client that was already there.
const apiEndpoints = "the API's endpoints are POST /v1/check, /v1/check/batch, /v1/peek, " +
	"/v1/quota/{check,status,reserve,settle} and /v1/concurrency/{acquire,release,renew}, " +
	"GET /healthz and /readyz (see docs/configuration.md)"

// publicEndpoints is the public listener's list for a 404: apiEndpoints,
// and where the admin endpoints and /metrics went when they are on the
// admin listener only (a new user who followed the docs' curl of
// /admin/v1/tier on --addr, with --admin-addr set, got a 404 that named
// neither).
func publicEndpoints(separateAdmin, metricsAdminOnly bool) string {
	switch {
	case separateAdmin && metricsAdminOnly:
		return apiEndpoints + "; the admin endpoints (/admin/v1/...) and /metrics are on the admin listener (--admin-addr)"
	case separateAdmin:
		return apiEndpoints + "; the admin endpoints (/admin/v1/...) are on the admin listener (--admin-addr)"
	case metricsAdminOnly:
		return apiEndpoints + "; /metrics is on the admin listener (--admin-addr)"
	}
	return apiEndpoints
}

// adminEndpoints lists the admin listener's endpoints (floodgate serve
// --admin-addr) for a 404: it serves neither the API nor /readyz, which
// apiEndpoints names.
func adminEndpoints(metrics, profiling bool) string {
	get := "GET /admin/v1/tier, /admin/v1/top-denied, /admin/v1/config, /healthz"
	if metrics {
		get += ", /metrics"
	}
	if profiling {
		get += ", /debug/pprof/"
	}
	return "the admin listener's endpoints are POST /admin/v1/reset, /admin/v1/tier, /admin/v1/login/unlock, /admin/v1/quota/restore, " +
		get + "; the API and /readyz are on --addr (see docs/configuration.md, Admin endpoints)"
}
