package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/metrics"
)

// Problem is an RFC 9457 problem details body (application/problem+json).
type Problem struct {
	// Type identifies the kind of problem, e.g.
	// "urn:floodgate:problem:unknown-policy".
	Type string `json:"type"`
	// Title is a short summary of the kind of problem.
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail says exactly what was wrong with this request.
	Detail string `json:"detail"`
}

// ProblemTypePrefix starts every Problem.Type.
const ProblemTypePrefix = "urn:floodgate:problem:"

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeProblem(w http.ResponseWriter, p *problemError) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.status)
	_ = json.NewEncoder(w).Encode(p.problem())
}

func (p *problemError) problem() Problem {
	return Problem{Type: ProblemTypePrefix + p.kind, Title: http.StatusText(p.status), Status: p.status, Detail: p.detail}
}

// readBody reads at most the configured body size.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, &problemError{status: http.StatusRequestEntityTooLarge, kind: "body-too-large",
				detail: "the request body is larger than " + strconv.FormatInt(s.opts.MaxBodyBytes, 10) + " bytes"}
		}
		return nil, badRequest("unreadable-body", "reading the request body: %v", err)
	}
	return body, nil
}

// fail writes err: a problemError as is, a decision failure as 503 or 500.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var p *problemError
	if errors.As(err, &p) {
		s.metrics.rejected.WithLabelValues(p.kind).Inc()
		writeProblem(w, p)
		return
	}
	p = s.decisionProblem(r.Context(), err)
	if p.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeProblem(w, p)
}

// decisionProblem classifies a store failure, counts and logs it. The
// problem's detail says what kind of failure it was, never the store's own
// error (addresses, keys, server messages): that goes to the log only.
func (s *Server) decisionProblem(ctx context.Context, err error) *problemError {
	reason, p := "internal", &problemError{status: http.StatusInternalServerError, kind: "internal", detail: "the decision failed; the service log has the details"}
	switch {
	case errors.Is(err, floodgate.ErrIndeterminate):
		reason = "indeterminate"
		p = &problemError{status: http.StatusServiceUnavailable, kind: "store-indeterminate",
			detail: "the rate limit store failed after the request was sent; it may have been counted"}
	case errors.Is(err, floodgate.ErrStoreUnavailable), errors.Is(err, floodgate.ErrStoreFull), errors.Is(err, fallback.ErrBreakerOpen):
		reason = "store_unavailable"
		p = &problemError{status: http.StatusServiceUnavailable, kind: "store-unavailable",
			detail: "the rate limit store is unavailable; nothing was counted"}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		reason = "timeout"
		p = &problemError{status: http.StatusServiceUnavailable, kind: "store-timeout",
			detail: "the decision did not finish in time"}
	case errors.Is(err, floodgate.ErrInvalidLayers):
		p.detail = "the policy cannot be decided by this store (on Redis Cluster, all layers of a policy must key on the same identity)"
	}
	s.metrics.errors.WithLabelValues(reason).Inc()
	s.log.ErrorContext(ctx, "decision failed", "reason", reason, "error", err)
	return p
}

// record counts a decided (non-peek) outcome; route is the API endpoint
// that decided it.
func (s *Server) record(o outcome, route string) {
	if o.check.peek {
		return
	}
	p := o.check.policy
	for i, hit := range o.shadowHit {
		if hit {
			s.metrics.shadowDenied.WithLabelValues(p.Name, p.Layers[i].Name).Inc()
		}
	}
	// The top-K key names the layer that denied and its identity, e.g.
	// "api/per-user:42"; it is never a metric label.
	var key string
	if !o.allowed {
		key = p.Name + "/" + p.Layers[o.binding].Name + ":" + o.identity[o.binding]
	}
	s.decided.Decision(metrics.Labels{Policy: p.Name, Route: route, Tier: o.tier}, key, o.allowed)
}

// setHeaders writes the X-RateLimit-* headers (and Retry-After when
// denied) of a decision.
func setHeaders(h http.Header, resp CheckResponse) {
	setRateHeaders(h, resp.Limit, resp.Remaining, resp.Reset, resp.Allowed, resp.RetryAfterMS)
	if resp.Degraded {
		h.Set(DegradedHeader, resp.FailureMode+"; reason="+resp.DegradedReason)
	}
}

// DegradedHeader is set on a decision taken by the policy's failure mode
// instead of Redis, to "MODE; reason=REASON", e.g. "local;
// reason=breaker_open" (see CheckResponse.Degraded).
const DegradedHeader = "X-Floodgate-Degraded"

// setRateHeaders writes X-RateLimit-Limit, X-RateLimit-Remaining,
// X-RateLimit-Reset (Unix seconds; omitted when reset is 0) and, when
// denied with a retry hint, Retry-After in whole seconds rounded up.
func setRateHeaders(h http.Header, limit, remaining, reset int64, allowed bool, retryAfterMS int64) {
	h.Set("X-RateLimit-Limit", strconv.FormatInt(limit, 10))
	h.Set("X-RateLimit-Remaining", strconv.FormatInt(remaining, 10))
	if reset > 0 {
		h.Set("X-RateLimit-Reset", strconv.FormatInt(reset, 10))
	}
	if !allowed && retryAfterMS > 0 {
		h.Set("Retry-After", strconv.FormatInt((retryAfterMS+999)/1000, 10))
	}
}

func (s *Server) handleCheck(w http.ResponseWriter, r *http.Request) {
	s.single(w, r, decodeCheck)
}

func (s *Server) handlePeek(w http.ResponseWriter, r *http.Request) {
	s.single(w, r, decodePeek)
}

func (s *Server) single(w http.ResponseWriter, r *http.Request, decode func(*config.Config, []byte) (check, error)) {
	body, err := s.readBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	enforce, err := enforceParam(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	cfg := s.cfg.Load()
	c, err := decode(cfg, body)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.DecisionTimeout)
	defer cancel()
	o, err := s.decide(ctx, cfg, c)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.record(o, r.URL.Path)
	resp := o.response()
	setHeaders(w.Header(), resp)
	status := http.StatusOK
	if enforce && !resp.Allowed {
		status = http.StatusTooManyRequests
	}
	writeJSON(w, status, resp)
}

func enforceParam(r *http.Request) (bool, error) {
	v := r.URL.Query().Get("enforce")
	switch v {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, badRequest("invalid-parameter", "query parameter enforce=%q: want 1, true, 0 or false", clip(v, 40))
}

// BatchItem is one result of a batch: either a decision or the problem
// that kept it from being decided.
type BatchItem struct {
	*CheckResponse
	// Error is set, and the decision fields absent, when this item failed.
	Error *Problem `json:"error,omitempty"`
}

// BatchResponse is the body of POST /v1/check/batch.
type BatchResponse struct {
	// Results are in the order of the requests.
	Results []BatchItem `json:"results"`
}

func (s *Server) handleBatch(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	cfg := s.cfg.Load()
	checks, err := decodeBatch(cfg, body, s.opts.MaxBatch)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := BatchResponse{Results: make([]BatchItem, len(checks))}
	// One deadline for the whole batch: once it has passed, the remaining
	// checks are decided by their failure mode without calling Redis.
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.DecisionTimeout)
	defer cancel()
	for i, c := range checks {
		o, err := s.decide(ctx, cfg, c)
		if err != nil {
			var p *problemError
			if !errors.As(err, &p) {
				p = s.decisionProblem(r.Context(), err)
			}
			pr := p.problem()
			out.Results[i].Error = &pr
			continue
		}
		s.record(o, r.URL.Path)
		resp := o.response()
		out.Results[i].CheckResponse = &resp
	}
	writeJSON(w, http.StatusOK, out)
}
