package loadgen

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// The load generator shares the machine with the service it measures, so
// its own cost per request matters: each worker keeps its request (message
// or body buffer, HTTP request, response buffer) from one request to the
// next and only rewrites the identity in it, identities are formatted once,
// and answers are read without decoding them into maps or reflection.

// sender opens one worker per load-test worker.
type sender interface {
	worker() worker
	close() error
}

// worker sends one check at a time and says what the answer was. A
// worker is used by one goroutine; close releases what it holds.
type worker interface {
	send(ctx context.Context, id int) (verdict, error)
	close()
}

// verdict is what a worker read in an answer: allowed or denied, and
// whether the service marked it degraded (taken by its fallback instead
// of the shared count in Redis).
type verdict struct {
	allowed, degraded bool
}

// DegradedHeader is the header (HTTP) or response_headers_to_add entry
// (Envoy's gRPC and JSON APIs) with which floodgate serve marks an answer
// its fallback took instead of Redis, as server.DegradedHeader and
// envoyrls.Options.DegradedHeader name it by default.
const DegradedHeader = "X-Floodgate-Degraded"

// maxIdentityTable is the most identities formatted ahead of a run (about
// 20 bytes each); past it, each request formats its own.
const maxIdentityTable = 1 << 17

// identities formats identity numbers as IdentityPrefix + decimal number.
type identities struct {
	prefix string
	table  []string // nil when there are too many identities to keep
}

func newIdentities(o Options) *identities {
	ids := &identities{prefix: o.IdentityPrefix}
	if o.Identities <= maxIdentityTable {
		ids.table = make([]string, o.Identities)
		for i := range ids.table {
			ids.table[i] = o.IdentityPrefix + strconv.Itoa(i)
		}
	}
	return ids
}

func (ids *identities) string(id int) string {
	if id < len(ids.table) {
		return ids.table[id]
	}
	return ids.prefix + strconv.Itoa(id)
}

// clientTLS returns the TLS configuration of a client of o's target u:
// nil unless u is https or grpcs.
func clientTLS(o Options, u *url.URL) *tls.Config {
	if u.Scheme != "https" && u.Scheme != "grpcs" {
		return nil
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.TLS != nil {
		tlsConf = o.TLS.Clone()
	}
	if tlsConf.ServerName == "" {
		tlsConf.ServerName = u.Hostname()
	}
	return tlsConf
}

func newSender(o Options) (sender, error) {
	u, err := url.Parse(o.Target)
	if err != nil {
		return nil, fmt.Errorf("%w: target %q: %v", ErrInvalidOptions, o.Target, err)
	}
	ids := newIdentities(o)
	tlsConf := clientTLS(o, u)
	if o.Mode == GRPC && o.GRPCClient == RawGRPC {
		s, err := newRawGRPCSender(o, u.Host, ids, tlsConf)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	if o.Mode == GRPC {
		s := &grpcSender{opts: o, ids: ids}
		creds := insecure.NewCredentials()
		if tlsConf != nil {
			creds = credentials.NewTLS(tlsConf)
		}
		for range o.Connections {
			conn, err := grpc.NewClient(u.Host, grpc.WithTransportCredentials(creds))
			if err != nil {
				s.close()
				return nil, fmt.Errorf("loadgen: grpc client for %s: %w", u.Host, err)
			}
			s.conns = append(s.conns, conn)
		}
		return s, nil
	}
	client := o.HTTPClient
	if client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = tlsConf
		tr.MaxIdleConns = o.Concurrency
		tr.MaxIdleConnsPerHost = o.Concurrency
		client = &http.Client{Transport: tr}
	}
	s := &httpSender{client: client, opts: o, raw: o.HTTPClient == nil && u.Scheme == "http", host: u.Host}
	base := strings.TrimSuffix(o.Target, "/")
	// Each body is head + quoted identity + tail. The identity's JSON string
	// is the encoded prefix without its closing quote, the number (digits
	// need no escaping) and the quote.
	prefix := jsonString(o.IdentityPrefix)
	s.idHead = prefix[:len(prefix)-1]
	switch o.Mode {
	case EnvoyJSON:
		s.url, s.requestURI = base+"/json", "/json"
		s.head = `{"domain":` + jsonString(o.Domain) + `,"descriptors":[{"entries":[{"key":` + jsonString(o.IdentityKey) + `,"value":`
		s.tail = `}]}],"hitsAddend":` + strconv.FormatInt(o.Cost, 10) + `}`
		s.decide = envoyJSONAnswer
	default:
		s.url, s.requestURI = base+"/v1/check?enforce=1", "/v1/check?enforce=1"
		s.head = `{"policy":` + jsonString(o.Policy) + `,"identity":{` + jsonString(o.IdentityKey) + `:`
		s.tail = `},"cost":` + strconv.FormatInt(o.Cost, 10) + `}`
		s.decide = checkAnswer
	}
	if _, err := http.NewRequest(http.MethodPost, s.url, nil); err != nil {
		return nil, fmt.Errorf("%w: target %q: %v", ErrInvalidOptions, o.Target, err)
	}
	return s, nil
}

// jsonString returns s as a JSON string, quotes included.
func jsonString(s string) string {
	b, _ := json.Marshal(s) // a string always encodes
	return string(b)
}

// httpSender posts JSON bodies: Floodgate's /v1/check or Envoy's /json.
type httpSender struct {
	client     *http.Client
	url        string
	opts       Options
	head, tail string
	idHead     string
	decide     func(status int, body []byte) (verdict, error)
	// raw selects rawWorker (plain http, no HTTPClient given), which
	// connects to host and posts to requestURI.
	raw              bool
	host, requestURI string
}

func (s *httpSender) worker() worker {
	if s.raw {
		return newRawWorker(s, s.host, s.requestURI)
	}
	return &httpWorker{s: s}
}

func (s *httpSender) close() error {
	s.client.CloseIdleConnections()
	return nil
}

// httpWorker keeps one request, its body and a response buffer. The
// request is reused once its response body is closed, as net/http allows;
// after an error the transport may still hold the body, so the worker
// starts afresh.
type httpWorker struct {
	s      *httpSender
	ctx    context.Context // the context req was made with
	req    *http.Request
	body   []byte
	rd     bytes.Reader
	rc     io.ReadCloser // &rd that Close leaves alone
	answer bytes.Buffer
	lr     io.LimitedReader
}

func (w *httpWorker) send(ctx context.Context, id int) (verdict, error) {
	s := w.s
	w.body = append(w.body[:0], s.head...)
	w.body = append(w.body, s.idHead...)
	w.body = strconv.AppendInt(w.body, int64(id), 10)
	w.body = append(w.body, '"')
	w.body = append(w.body, s.tail...)
	if w.req == nil || w.ctx != ctx {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, nil)
		if err != nil {
			return verdict{}, err
		}
		req.Header.Set("Content-Type", "application/json")
		w.rc = io.NopCloser(&w.rd)
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(w.body)), nil }
		w.req, w.ctx = req, ctx
	}
	w.rd.Reset(w.body)
	w.req.Body, w.req.ContentLength = w.rc, int64(len(w.body))
	resp, err := s.client.Do(w.req)
	if err != nil {
		*w = httpWorker{s: s}
		return verdict{}, err
	}
	w.answer.Reset()
	w.lr = io.LimitedReader{R: resp.Body, N: 64 << 10}
	_, err = w.answer.ReadFrom(&w.lr)
	resp.Body.Close()
	w.lr.R = nil
	if err != nil {
		*w = httpWorker{s: s}
		return verdict{}, fmt.Errorf("reading the response: %w", err)
	}
	v, err := s.decide(resp.StatusCode, w.answer.Bytes())
	if err == nil && resp.Header.Get(DegradedHeader) != "" {
		v.degraded = true
	}
	return v, err
}

func (w *httpWorker) close() {}

// checkAnswer reads an answer of POST /v1/check: 200 with a boolean
// "allowed", or 429; either degraded when it holds "degraded": true.
// (The worker also takes the DegradedHeader header for degraded.)
func checkAnswer(status int, body []byte) (verdict, error) {
	switch status {
	case http.StatusOK, http.StatusTooManyRequests:
		var allowed, degraded []byte
		eachTopLevel(body, func(name, value []byte) bool {
			switch string(name) {
			case "allowed":
				allowed = value
			case "degraded":
				degraded = value
			}
			return true
		})
		v := verdict{degraded: string(degraded) == "true"}
		switch {
		case status == http.StatusTooManyRequests:
		case string(allowed) == "true":
			v.allowed = true
		case string(allowed) != "false":
			return verdict{}, fmt.Errorf("HTTP 200 without a boolean \"allowed\": %s", clip(body))
		}
		return v, nil
	}
	return verdict{}, newStatusError(status, body)
}

// statusError is an HTTP answer other than allowed or denied: its status
// and the start of its body (a copy: the worker reuses its buffer).
type statusError struct {
	status int
	body   []byte // at most maxStatusErrorBody bytes
}

// maxStatusErrorBody is the most of an answer's body a statusError keeps:
// enough for a problem document's detail.
const maxStatusErrorBody = 4 << 10

func newStatusError(status int, body []byte) *statusError {
	return &statusError{status: status, body: bytes.Clone(body[:min(len(body), maxStatusErrorBody)])}
}

// Error is "HTTP status: body", the body clipped to one short line.
func (e *statusError) Error() string {
	return fmt.Sprintf("HTTP %d: %s", e.status, clip(e.body))
}

// envoyJSONAnswer reads an answer of Envoy's POST /json: 200 with
// "overallCode": "OK", or 429 (OVER_LIMIT); either degraded when its
// "responseHeadersToAdd" hold DegradedHeader or its "dynamicMetadata"
// "degraded": true, as Envoy's gRPC answer of floodgate serve would be
// marked (envoy-compat and envoyproxy/ratelimit mark none).
func envoyJSONAnswer(status int, body []byte) (verdict, error) {
	switch status {
	case http.StatusOK, http.StatusTooManyRequests:
		var code []byte
		var v verdict
		eachTopLevel(body, func(name, value []byte) bool {
			switch string(name) {
			case "overallCode":
				code = value
			case "responseHeadersToAdd":
				v.degraded = v.degraded || holdsDegradedHeader(value)
			case "dynamicMetadata":
				v.degraded = v.degraded || string(topLevelValue(value, "degraded")) == "true"
			}
			return true
		})
		switch {
		case status == http.StatusTooManyRequests:
		case string(code) == `"OK"`:
			v.allowed = true
		default:
			return verdict{}, fmt.Errorf("HTTP 200 without \"overallCode\": \"OK\": %s", clip(body))
		}
		return v, nil
	}
	return verdict{}, newStatusError(status, body)
}

// holdsDegradedHeader reports whether list, a JSON array of Envoy's
// HeaderValue objects ({"key": ..., "value": ...}), has one whose key is
// DegradedHeader, in any case.
func holdsDegradedHeader(list []byte) bool {
	found := false
	eachElement(list, func(elem []byte) bool {
		key := topLevelValue(elem, "key")
		found = len(key) == len(DegradedHeader)+2 && asciiEqualFold(key[1:len(key)-1], DegradedHeader)
		return !found
	})
	return found
}

// clip keeps error messages short and on one line.
func clip(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

// grpcSender calls ShouldRateLimit over Options.Connections connections,
// worker i on connection i mod Connections.
type grpcSender struct {
	conns []*grpc.ClientConn
	next  int
	opts  Options
	ids   *identities
}

func (s *grpcSender) worker() worker {
	conn := s.conns[s.next%len(s.conns)]
	s.next++
	entry := &ratelimitv3.RateLimitDescriptor_Entry{Key: s.opts.IdentityKey}
	return &grpcWorker{
		deadline: s.opts.GRPCDeadline,
		conn:     conn,
		ids:      s.ids,
		entry:    entry,
		req: &rlspb.RateLimitRequest{
			Domain:      s.opts.Domain,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry}}},
			HitsAddend:  uint32(s.opts.Cost),
		},
		resp: new(rlspb.RateLimitResponse),
	}
}

func (w *grpcWorker) close() {}

func (s *grpcSender) close() error {
	var first error
	for _, c := range s.conns {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// grpcWorker keeps its request and response messages; a call rewrites
// the identity and decodes into the same response.
type grpcWorker struct {
	conn  *grpc.ClientConn
	ids   *identities
	entry *ratelimitv3.RateLimitDescriptor_Entry
	req   *rlspb.RateLimitRequest
	resp  *rlspb.RateLimitResponse
	// deadline is Options.GRPCDeadline: grpc-go sends the context's.
	deadline time.Duration
}

func (w *grpcWorker) send(ctx context.Context, id int) (verdict, error) {
	w.entry.Value = w.ids.string(id)
	if w.deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.deadline)
		defer cancel()
	}
	if err := w.conn.Invoke(ctx, rlspb.RateLimitService_ShouldRateLimit_FullMethodName, w.req, w.resp); err != nil {
		return verdict{}, err
	}
	var v verdict
	for _, h := range w.resp.GetResponseHeadersToAdd() {
		if strings.EqualFold(h.GetKey(), DegradedHeader) {
			v.degraded = true
		}
	}
	switch code := w.resp.GetOverallCode(); code {
	case rlspb.RateLimitResponse_OK:
		v.allowed = true
		return v, nil
	case rlspb.RateLimitResponse_OVER_LIMIT:
		return v, nil
	default:
		return verdict{}, fmt.Errorf("overall_code %v", code)
	}
}
