package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"

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
	var buf bytes.Buffer
	if err := s.readBodyInto(&buf, w, r); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// readBodyInto reads at most the configured body size into buf.
func (s *Server) readBodyInto(buf *bytes.Buffer, w http.ResponseWriter, r *http.Request) error {
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &problemError{status: http.StatusRequestEntityTooLarge, kind: "body-too-large",
				detail: "the request body is larger than " + strconv.FormatInt(s.opts.MaxBodyBytes, 10) + " bytes"}
		}
		return badRequest("unreadable-body", "reading the request body: %v", err)
	}
	return nil
}

// buffers recycles the request and answer buffers of the decision
// endpoints.
var buffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBuffer is the largest buffer put back for reuse.
const maxPooledBuffer = 64 << 10

func getBuffer() *bytes.Buffer {
	b := buffers.Get().(*bytes.Buffer)
	b.Reset()
	return b
}

func putBuffer(b *bytes.Buffer) {
	if b.Cap() <= maxPooledBuffer {
		buffers.Put(b)
	}
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
		key = p.Name + "/" + p.Layers[o.binding].Name + ":" + o.specs[o.binding].Identity
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

// The X-RateLimit-* header names in their canonical form (as
// http.Header.Set would store them), so that setting them costs no
// canonicalisation.
var (
	hdrLimit      = textproto.CanonicalMIMEHeaderKey("X-RateLimit-Limit")
	hdrRemaining  = textproto.CanonicalMIMEHeaderKey("X-RateLimit-Remaining")
	hdrReset      = textproto.CanonicalMIMEHeaderKey("X-RateLimit-Reset")
	hdrRetryAfter = textproto.CanonicalMIMEHeaderKey("Retry-After")
)

// setRateHeaders writes X-RateLimit-Limit, X-RateLimit-Remaining,
// X-RateLimit-Reset (Unix seconds; omitted when reset is 0) and, when
// denied with a retry hint, Retry-After in whole seconds rounded up.
func setRateHeaders(h http.Header, limit, remaining, reset int64, allowed bool, retryAfterMS int64) {
	// One string holds every value and one array every header's slice.
	var buf [4 * 20]byte
	b := strconv.AppendInt(buf[:0], limit, 10)
	nl := len(b)
	b = strconv.AppendInt(b, remaining, 10)
	nr := len(b)
	if reset > 0 {
		b = strconv.AppendInt(b, reset, 10)
	}
	nz := len(b)
	if !allowed && retryAfterMS > 0 {
		b = strconv.AppendInt(b, (retryAfterMS+999)/1000, 10)
	}
	str := string(b)
	vals := make([]string, 4)
	vals[0], vals[1], vals[2], vals[3] = str[:nl], str[nl:nr], str[nr:nz], str[nz:]
	h[hdrLimit] = vals[0:1:1]
	h[hdrRemaining] = vals[1:2:2]
	if reset > 0 {
		h[hdrReset] = vals[2:3:3]
	}
	if !allowed && retryAfterMS > 0 {
		h[hdrRetryAfter] = vals[3:4:4]
	}
}

func (s *Server) handleCheck(w http.ResponseWriter, r *http.Request) {
	s.single(w, r, decodeCheck)
}

func (s *Server) handlePeek(w http.ResponseWriter, r *http.Request) {
	s.single(w, r, decodePeek)
}

func (s *Server) single(w http.ResponseWriter, r *http.Request, decode func(*config.Config, []byte) (check, error)) {
	buf := getBuffer()
	defer putBuffer(buf)
	if err := s.readBodyInto(buf, w, r); err != nil {
		s.fail(w, r, err)
		return
	}
	enforce, err := enforceParam(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	cfg := s.cfg.Load()
	c, err := decode(cfg, buf.Bytes()) // keeps no reference to the bytes
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.decisionContext(r)
	defer cancel()
	o, err := s.decide(ctx, cfg, c)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.record(o, r.URL.Path)
	// The answer is written before the handler returns: its layers can
	// live on the stack (a policy has few).
	var layers [4]LayerResult
	var resp CheckResponse
	if len(o.layers) <= len(layers) {
		resp = o.responseIn(layers[:len(o.layers)])
	} else {
		resp = o.response()
	}
	setHeaders(w.Header(), resp)
	status := http.StatusOK
	if enforce && !resp.Allowed {
		status = http.StatusTooManyRequests
	}
	out := appendCheckResponse(buf.AvailableBuffer(), &resp)
	h := w.Header()
	h[hdrContentType] = contentTypeJSON
	w.WriteHeader(status)
	_, _ = w.Write(out)
}

var (
	hdrContentType  = textproto.CanonicalMIMEHeaderKey("Content-Type")
	contentTypeJSON = []string{"application/json"} // never modified
)

func enforceParam(r *http.Request) (bool, error) {
	v := queryParam(r, "enforce")
	switch v {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, badRequest("invalid-parameter", "query parameter enforce=%q: want 1, true, 0 or false", clip(v, 40))
}

// queryParam returns r.URL.Query().Get(name), without parsing the whole
// query when it holds nothing to unescape.
func queryParam(r *http.Request, name string) string {
	q := r.URL.RawQuery
	if strings.ContainsAny(q, "%+;") {
		return r.URL.Query().Get(name)
	}
	for q != "" {
		var pair string
		pair, q, _ = strings.Cut(q, "&")
		if k, v, _ := strings.Cut(pair, "="); k == name {
			return v
		}
	}
	return ""
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
	ctx, cancel := s.decisionContext(r)
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
