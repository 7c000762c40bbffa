package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/clip"
	"github.com/floodgate-rl/floodgate/internal/deadline"
	"github.com/floodgate-rl/floodgate/metrics"
	"github.com/floodgate-rl/floodgate/replicawait"
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
	// LeaseID is, on a 503 store-not-replicated answering a lease acquire,
	// the lease the Redis primary gave and the service could not release
	// again: release it (POST /v1/concurrency/release), or its slot stays
	// taken until its lease_ttl ends. Empty otherwise.
	LeaseID string `json:"lease_id,omitempty"`
}

// ProblemTypePrefix starts every Problem.Type.
const ProblemTypePrefix = "urn:floodgate:problem:"

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	encodeJSON(w, v)
}

// encodeJSON writes v as every JSON answer is written.
func encodeJSON(w io.Writer, v any) {
	_ = json.NewEncoder(w).Encode(v)
}

func writeProblem(w http.ResponseWriter, p *problemError) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.status)
	encodeProblem(w, p)
}

// encodeProblem writes p's body, as every transport sends it.
func encodeProblem(w io.Writer, p *problemError) {
	encodeJSON(w, p.problem())
}

func (p *problemError) problem() Problem {
	return Problem{Type: ProblemTypePrefix + p.kind, Title: http.StatusText(p.status), Status: p.status, Detail: p.detail, LeaseID: p.leaseID}
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
	// Every line of the header: "identity" then "gzip" on two lines is
	// "identity, gzip".
	if err := contentEncoding(strings.Join(r.Header.Values("Content-Encoding"), ",")); err != nil {
		return err
	}
	if r.ContentLength > s.opts.MaxBodyBytes {
		// Announced too large: answered at once, not after reading
		// MaxBodyBytes of it, and the rest is not waited for.
		w.Header().Set("Connection", "close")
		return s.bodyTooLarge()
	}
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return s.bodyTooLarge()
		}
		return unreadableBody(err)
	}
	return nil
}

// contentEncoding refuses a request body sent compressed (or in any
// coding but identity): it was read as JSON as it came, a gzip body
// failing as "malformed JSON at byte 1" and plain JSON labelled gzip
// decided as if unlabelled.
func contentEncoding(v string) error {
	if v == "" {
		return nil
	}
	ok := true
	for c := range strings.SplitSeq(v, ",") {
		if !strings.EqualFold(strings.TrimSpace(c), "identity") {
			ok = false // another coding, or an empty element
		}
	}
	if ok {
		return nil
	}
	return &problemError{status: http.StatusUnsupportedMediaType, kind: "unsupported-content-encoding",
		detail: fmt.Sprintf("Content-Encoding %q: send the body uncompressed (no Content-Encoding, or identity)", clip.Text(v, 40))}
}

// unreadableBody is the problem of a body that could not be read: it says
// why without the connection's addresses, which the errors of a failed
// read carry.
func unreadableBody(err error) *problemError {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return &problemError{status: http.StatusRequestTimeout, kind: "body-timeout",
			detail: "the request body did not arrive within the server's read timeout"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("unreadable-body", "the request body ended before its announced length")
	case errors.As(err, new(*net.OpError)):
		return badRequest("unreadable-body", "reading the request body: the connection failed")
	}
	// A malformed chunked encoding, say: net/http's own words.
	return badRequest("unreadable-body", "reading the request body: %v", err)
}

// bodyTooLarge is the problem of a body over MaxBodyBytes.
func (s *Server) bodyTooLarge() *problemError {
	return &problemError{status: http.StatusRequestEntityTooLarge, kind: "body-too-large",
		detail: "the request body is larger than " + strconv.FormatInt(s.opts.MaxBodyBytes, 10) + " bytes"}
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

// configured is h while the service has a configuration; before its first
// one (config.NewPendingHolder) it answers 503 no-configuration with
// Retry-After, deciding and counting nothing.
func (s *Server) configured(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := s.noConfiguration(); err != nil {
			s.fail(w, r, err)
			return
		}
		h(w, r)
	}
}

// noConfiguration returns nil while the service has a configuration, and
// the 503 no-configuration problem, saying why it has none, before its
// first one: nothing may be decided under a configuration nobody gave.
func (s *Server) noConfiguration() error {
	why := s.cfg.NotLoaded()
	if why == nil {
		return nil
	}
	return &problemError{status: http.StatusServiceUnavailable, kind: "no-configuration", retry: true,
		detail: "this instance has no configuration yet, so nothing was decided or counted (" + why.Error() + "); it answers once the source holds a valid document"}
}

// fail writes err: a problemError as is, a decision failure as 503 or 500.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	p, retry := s.failure(r.Context(), err)
	if retry {
		w.Header().Set("Retry-After", "1")
	}
	writeProblem(w, p)
}

// failure returns the problem answering err (a problemError as is, counted
// as a rejection; a decision failure classified, counted and logged by
// decisionProblem) and whether the answer carries Retry-After: 1 (a
// decision failure answered with 503, or a problemError that asks for it).
func (s *Server) failure(ctx context.Context, err error) (p *problemError, retry bool) {
	if errors.As(err, &p) {
		s.metrics.rejected.WithLabelValues(p.kind).Inc()
		return p, p.retry
	}
	op := opRequest
	if f := (*storeFailure)(nil); errors.As(err, &f) {
		op, err = f.op, f.err
	}
	p = s.decisionProblem(ctx, op, err)
	return p, p.status == http.StatusServiceUnavailable
}

// decisionProblem classifies a store failure of op, counts and logs it
// (at most once per WarnEvery for each kind of failure). The problem's
// detail says what kind of failure it was and what op may have done,
// never the store's own error (addresses, keys, server messages): that
// goes to the log only.
func (s *Server) decisionProblem(ctx context.Context, op operation, err error) *problemError {
	reason, p := reasonInternal, &problemError{status: http.StatusInternalServerError, kind: "internal", detail: "the " + op.name + " failed; the service log has the details"}
	switch {
	case errors.Is(err, replicawait.ErrNotReplicated):
		reason = reasonIndeterminate
		p = &problemError{status: http.StatusServiceUnavailable, kind: "store-not-replicated",
			detail: "the Redis primary applied the operation, but fewer of its replicas than --redis-wait-replicas confirmed it in time, so a failover could still lose it; a reserve or settle retried with the same request_id is applied once, a check retried is counted again"}
		if op.notReplicated != "" {
			p.detail = op.notReplicated
		}
	case errors.Is(err, replicawait.ErrBusy):
		reason = reasonStoreUnavailable
		p = &problemError{status: http.StatusServiceUnavailable, kind: "store-not-replicated",
			detail: "nothing was applied: the operations already waiting for the Redis replicas to confirm them held every place, or too little time was left to wait for the replicas (--redis-wait-replicas); retry later"}
	case errors.Is(err, floodgate.ErrIndeterminate) && op.readOnly():
		// The call was sent and its answer lost (the metric says so),
		// but a read consumed nothing either way: for the client that
		// is an unavailable store, not an indeterminate outcome.
		reason = reasonIndeterminate
		p = &problemError{status: http.StatusServiceUnavailable, kind: "store-unavailable",
			detail: "the rate limit store failed while the " + op.name + " was being sent or answered; a " + op.name + " consumes nothing, so nothing was counted: send it again"}
	case errors.Is(err, floodgate.ErrIndeterminate):
		reason = reasonIndeterminate
		p = &problemError{status: http.StatusServiceUnavailable, kind: "store-indeterminate",
			detail: "the rate limit store failed while the " + op.name + " was being sent or answered, so it may or may not have been applied (often it was not: a new connection whose handshake timed out never sent it); " + op.mayHave}
	case errors.Is(err, floodgate.ErrStoreFull):
		// The client could not tell a full store from a down one (a
		// re-walk): the type stays, the detail says which.
		reason = reasonStoreUnavailable
		p = &problemError{status: http.StatusServiceUnavailable, kind: "store-unavailable",
			detail: "the in-memory store is full (serve's --memory-max-quota-periods, --memory-max-quota-records or --memory-max-leases bound it), so the " + op.name + " was not applied and " + op.nothingDone() + "; room comes back as entries expire"}
	case (ctx.Err() != nil || deadline.Gone(ctx) != nil) && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
		// The caller's own deadline ended (or it went) before the store
		// answered: the store's error then wraps "store unavailable"
		// (nothing was sent or applied), which counted a caller's short
		// deadline as Redis being down (an outside walk: 18 gRPC calls
		// with a 3 ms deadline on a stalled Redis).
		reason = reasonTimeout
		p = timeoutProblem(op)
	case errors.Is(err, floodgate.ErrForeignValue):
		// One key is unusable, not the store: saying "unavailable" sent
		// an operator to Redis's health, where nothing was wrong (the
		// mixed walk). The detail names the key as the client knows it;
		// the log names it in full.
		reason = reasonForeignValue
		p = &problemError{status: http.StatusServiceUnavailable, kind: "store-unavailable",
			detail: "a Redis key this identity's " + op.name + " needs holds a value floodgate did not write (left by another program, or by an instance writing another state format), so nothing was applied or counted; it fails the same way until an operator deletes that key (the service log names it)"}
	case errors.Is(err, floodgate.ErrStoreUnavailable) && errors.Is(err, context.DeadlineExceeded):
		// A deadline ended before the call was sent (a store error after
		// it was sent is indeterminate, above): the decision's own
		// (--decision-timeout), which the caller's ctx above does not
		// see. Counted as store_unavailable, a slow decision looked like
		// Redis being down (the diff2 walk: 1 MiB Envoy requests
		// under load, in memory mode).
		reason = reasonTimeout
		p = timeoutProblem(op)
	case errors.Is(err, floodgate.ErrStoreUnavailable), errors.Is(err, fallback.ErrBreakerOpen):
		reason = reasonStoreUnavailable
		detail := "the rate limit store is unavailable; the " + op.name + " was not applied, so " + op.nothingDone()
		if op.readOnly() {
			// A read counts nothing whether or not it runs.
			detail = "the rate limit store is unavailable, so the " + op.name + " could not be read (it counts nothing): send it again later"
		}
		p = &problemError{status: http.StatusServiceUnavailable, kind: "store-unavailable", detail: detail}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		reason = reasonTimeout
		p = timeoutProblem(op)
	case errors.Is(err, floodgate.ErrInvalidLayers):
		p.detail = "the policy cannot be decided by this store (on Redis Cluster, all layers of a policy must key on the same identity)"
	}
	s.metrics.errors.WithLabelValues(reason).Inc()
	if errors.Is(err, context.Canceled) && (ctx.Err() != nil || deadline.Gone(ctx) != nil) {
		// The client has gone and its decision was dropped unsent:
		// nobody reads the answer, and the count above says it. Logged
		// at error level, every hang-up in a burst was a "decision
		// failed" line (hangupwalk: suppressed=1024 in one run).
		return p
	}
	if reason == reasonForeignValue {
		s.warnForeignValue(ctx, slog.LevelError, op.name, err)
		return p
	}
	// Logged at most once per WarnEvery for each reason: in a store
	// outage every request fails.
	s.warn.Error(ctx, "decision failed: "+reason, "decision failed", "reason", reason, "operation", op.name, "error", err)
	return p
}

// timeoutProblem is the 503 store-timeout answering op: its deadline (the
// caller's, or --decision-timeout) ended before the store took it (while
// it waited for a pooled connection, a dial, or a place among the
// operations waiting for replicas), so it was not applied. One sent and
// then cut off is store-indeterminate instead: the store's error says
// which (an outside walk saw 10 of 10 lease releases answered
// store-timeout not applied, and released by a retry).
func timeoutProblem(op operation) *problemError {
	detail := "the " + op.name + " did not finish in time: its deadline ended before the store took it, so it was not applied and " + op.nothingDone()
	if !strings.Contains(op.nothingDone(), " again") {
		// What a lease release or renewal leaves says already to send
		// it again (the release's detail ended "release it again later;
		// send it again").
		detail += "; send it again"
	}
	if op.readOnly() {
		detail = "the " + op.name + " did not finish in time: its deadline ended before the store took it (it counts nothing): send it again"
	}
	return &problemError{status: http.StatusServiceUnavailable, kind: "store-timeout", detail: detail}
}

// warnForeignValue logs, at most once per WarnEvery, that op met a Redis
// key holding a value floodgate did not write (err, which names the key,
// clipped): nothing else names it above debug level, and one without a
// TTL never expires, so its identity stays failed or decided by the
// fallback for good. level is warn for a decision the fallback took,
// error for an operation that failed.
func (s *Server) warnForeignValue(ctx context.Context, level slog.Level, op string, err error) {
	s.warn.Log(ctx, level, "foreign-value", "a Redis key holds a value floodgate did not write: delete it, or find the instance writing another state format (a build of another version, a rollback; docs/operations.md, state formats)",
		"reason", reasonForeignValue, "operation", op, "error", clip.Text(err.Error(), maxForeignLog))
}

// maxForeignLog bounds the error quoted by warnForeignValue: it names the
// decision's keys first, then Redis's message.
const maxForeignLog = 1000

// routeOf returns the path of the endpoint serving r, for metrics labels:
// the path of the pattern it was routed by, a string of the server's own.
// (On fasthttp, r.URL.Path is a view of a buffer that the next request on
// the connection overwrites: kept in a label, it changed under it.)
func routeOf(r *http.Request) string {
	if _, path, ok := strings.Cut(r.Pattern, " "); ok {
		return path
	}
	return strings.Clone(r.URL.Path)
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
		h.Set(DegradedHeader, resp.degradedHeader())
	}
}

// degradedHeader is the value of DegradedHeader on a degraded answer.
func (r *CheckResponse) degradedHeader() string {
	return r.FailureMode + "; reason=" + r.DegradedReason
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

// rateHeaderNames are the headers of rateHeaderValues' segments.
var rateHeaderNames = [4]string{hdrLimit, hdrRemaining, hdrReset, hdrRetryAfter}

// appendRateHeaders appends the values of X-RateLimit-Limit,
// X-RateLimit-Remaining, X-RateLimit-Reset (Unix seconds; empty, so
// omitted, when reset is 0) and, when denied with a retry hint,
// Retry-After in whole seconds rounded up (empty otherwise) to b; the
// value of rateHeaderNames[i] is b[ends[i-1]:ends[i]] (from 0 for i = 0).
func appendRateHeaders(b []byte, limit, remaining, reset int64, allowed bool, retryAfterMS int64) (_ []byte, ends [4]int) {
	b = strconv.AppendInt(b, limit, 10)
	ends[0] = len(b)
	b = strconv.AppendInt(b, remaining, 10)
	ends[1] = len(b)
	if reset > 0 {
		b = strconv.AppendInt(b, reset, 10)
	}
	ends[2] = len(b)
	if !allowed && retryAfterMS > 0 {
		b = strconv.AppendInt(b, (retryAfterMS+999)/1000, 10)
	}
	ends[3] = len(b)
	return b, ends
}

// setRateHeaders sets the headers of appendRateHeaders on h.
func setRateHeaders(h http.Header, limit, remaining, reset int64, allowed bool, retryAfterMS int64) {
	// One string holds every value and one array every header's slice.
	var buf [4 * 20]byte
	b, ends := appendRateHeaders(buf[:0], limit, remaining, reset, allowed, retryAfterMS)
	str := string(b)
	vals := make([]string, 4)
	start := 0
	for i, end := range ends {
		if end > start {
			vals[i] = str[start:end]
			h[rateHeaderNames[i]] = vals[i : i+1 : i+1]
		}
		start = end
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
	// The answer is written before the handler returns: its layers can
	// live on the stack (a policy has few).
	var layers [4]LayerResult
	resp, status, err := s.decideOne(r.Context(), buf.Bytes(), r.URL.RawQuery, routeOf(r), decode, layers[:])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	setHeaders(w.Header(), resp)
	out := appendCheckResponse(buf.AvailableBuffer(), &resp)
	h := w.Header()
	h[hdrContentType] = contentTypeJSON
	w.WriteHeader(status)
	_, _ = w.Write(out)
}

// decideOne is POST /v1/check and /v1/peek whatever the transport: it
// decodes body (a request read in full, within MaxBodyBytes) with decode,
// reads enforce from rawQuery (the request target's query, undecoded),
// decides, records the decision under route and returns the answer and
// its status, or the error to answer with (s.failure). The answer's
// layers are in layers when they fit (a policy has few), so that a caller
// writing it before it returns can keep them on its stack. ctx gives the
// decision's context its values (not its cancellation).
func (s *Server) decideOne(ctx context.Context, body []byte, rawQuery, route string, decode func(*config.Config, []byte) (check, error), layers []LayerResult) (CheckResponse, int, error) {
	enforce, err := enforceParam(rawQuery)
	if err != nil {
		return CheckResponse{}, 0, err
	}
	cfg := s.cfg.Load()
	c, err := decode(cfg, body) // keeps no reference to the bytes
	if err != nil {
		return CheckResponse{}, 0, err
	}
	dctx, cancel := s.decisionContext(ctx)
	defer cancel()
	dctx, fo := fallback.NewRequestContext(dctx)
	o, err := s.decide(dctx, fo, cfg, c)
	if err != nil {
		op := opCheck
		if c.peek {
			op = opPeek
		}
		return CheckResponse{}, 0, op.failed(err)
	}
	s.record(o, route)
	var resp CheckResponse
	if len(o.layers) <= len(layers) {
		resp = o.responseIn(layers[:len(o.layers)])
	} else {
		resp = o.response()
	}
	status := http.StatusOK
	if enforce && !resp.Allowed {
		status = http.StatusTooManyRequests
	}
	return resp, status, nil
}

var (
	hdrContentType  = textproto.CanonicalMIMEHeaderKey("Content-Type")
	contentTypeJSON = []string{"application/json"} // never modified
)

// enforceParam reads the enforce parameter of rawQuery.
func enforceParam(rawQuery string) (bool, error) {
	v, err := queryParam(rawQuery, "enforce")
	if err != nil {
		return false, err
	}
	switch v {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, badRequest("invalid-parameter", "query parameter enforce=%q: want 1, true, 0 or false", clip.Text(v, 40))
}

// queryParam returns the value of the parameter name in q, a request
// target's query (undecoded): what url.ParseQuery(q).Get(name) returns
// (an http.Request's URL.Query().Get(name)), without parsing the whole
// query when it holds nothing to unescape. A parameter given more than
// once is an invalid-parameter problem, as a repeated JSON field is: Go
// reads the first of its values, other servers and proxies the last, so
// "?enforce=1&enforce=0" was enforced here and not where it was checked.
func queryParam(q, name string) (string, error) {
	if strings.ContainsAny(q, "%+;") {
		vs, _ := url.ParseQuery(q)
		if n := len(vs[name]); n > 1 {
			return "", repeatedParam(name, n)
		}
		return vs.Get(name), nil
	}
	var v string
	n := 0
	for q != "" {
		var pair string
		pair, q, _ = strings.Cut(q, "&")
		if k, val, _ := strings.Cut(pair, "="); k == name {
			if n == 0 {
				v = val
			}
			n++
		}
	}
	if n > 1 {
		return "", repeatedParam(name, n)
	}
	return v, nil
}

// repeatedParam is the problem of a query parameter given n times.
func repeatedParam(name string, n int) error {
	return badRequest("invalid-parameter", "query parameter %s is given %d times; give it once", name, n)
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
	if err := batchQuery(r.URL.RawQuery); err != nil {
		s.fail(w, r, err)
		return
	}
	out, err := s.decideBatch(r.Context(), body, routeOf(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// batchQuery refuses ?enforce=1 (or true) on POST /v1/check/batch, which
// answers 200 with each check's own "allowed" (there is no one 429 for a
// batch whose checks went different ways): ignored, it let a client
// believe denied checks were enforced.
func batchQuery(rawQuery string) error {
	enforce, err := enforceParam(rawQuery)
	if err != nil {
		return err
	}
	if enforce {
		return badRequest("invalid-parameter", "query parameter enforce: not taken by /v1/check/batch, which answers 200 with each check's \"allowed\"; use /v1/check?enforce=1 for a 429")
	}
	return nil
}

// decideBatch is POST /v1/check/batch whatever the transport: it decodes
// body (read in full, within MaxBodyBytes), decides every check and
// records them under route, and returns the answer (HTTP 200) or the
// error to answer with (s.failure). ctx gives the decisions' context its
// values (not its cancellation).
func (s *Server) decideBatch(ctx context.Context, body []byte, route string) (BatchResponse, error) {
	cfg := s.cfg.Load()
	checks, err := decodeBatch(cfg, body, s.opts.MaxBatch)
	if err != nil {
		return BatchResponse{}, err
	}
	out := BatchResponse{Results: make([]BatchItem, len(checks))}
	// One deadline for the whole batch: once it has passed, the remaining
	// checks are decided by their failure mode without calling Redis. One
	// fallback budget too: once a Redis call of the batch has timed out
	// (Redis stalled), the remaining checks are decided by their failure
	// mode at once, so that the batch waits one budget, not one per
	// check, and counts one failure toward the breaker.
	dctx, cancel := s.decisionContext(ctx)
	defer cancel()
	dctx, fo := fallback.NewRequestContext(dctx)
	for i, c := range checks {
		o, err := s.decide(dctx, fo, cfg, c)
		if err != nil {
			var p *problemError
			if !errors.As(err, &p) {
				p = s.decisionProblem(ctx, opCheck, err)
			}
			pr := p.problem()
			out.Results[i].Error = &pr
			continue
		}
		s.record(o, route)
		resp := o.response()
		out.Results[i].CheckResponse = &resp
	}
	return out, nil
}
