package loadgen

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// PreflightError is the failure of the request Preflight sends, one that
// every request of the run would meet as well: the target refused it as
// a client error (an HTTP status 4xx but 408 and 429; a gRPC status
// INVALID_ARGUMENT, UNIMPLEMENTED, UNAUTHENTICATED or PERMISSION_DENIED),
// nothing listens at its address (connection refused, or no such host),
// a gRPC target does not speak HTTP/2 (RawGRPC client only), or the
// request got no answer for another reason of transport: the connection
// reset or closed unanswered (an http:// target that is a gRPC port, a
// grpc:// one that speaks TLS), TLS failed (an https:// or grpcs:// target
// that does not speak it, a certificate not trusted, a client certificate
// required).
type PreflightError struct {
	// Target is Options.Target; Mode the API spoken.
	Target string
	Mode   Mode
	// HTTPStatus is the status of an HTTP answer refused; 0 otherwise.
	HTTPStatus int
	// ProblemType is the "type" of an HTTP answer's problem document
	// (RFC 9457), such as "urn:floodgate:problem:unknown-policy"; "" when
	// it has none.
	ProblemType string
	// GRPCCode is the status code of a gRPC call refused; codes.OK
	// otherwise.
	GRPCCode codes.Code
	// Detail is what the service said: the "detail" of a problem
	// document, else the start of the answer's body, or the gRPC status
	// message. "" when nothing answered.
	Detail string
	// Unreachable is set when nothing answered: the connection was
	// refused or the host does not exist.
	Unreachable bool
	// NotHTTP2 is set when a GRPC target does not speak HTTP/2 (an
	// HTTP/1 server, say), as the RawGRPC client found.
	NotHTTP2 bool
	// Transport is set when the request got no answer for another reason
	// of transport (see PreflightError); Err says which.
	Transport bool
	// Err is the request's (or the connection's) error.
	Err error
}

// Error is "loadgen: the request sent before the run failed: " and Err.
func (e *PreflightError) Error() string {
	return "loadgen: the request sent before the run failed: " + e.Err.Error()
}

// Unwrap returns Err.
func (e *PreflightError) Unwrap() error { return e.Err }

// Preflight sends one request as a run of opts would, for an identity no
// run's request uses: opts.IdentityPrefix, "preflight-" and a random
// number below 10^9 (a run's identities are the prefix and a number
// alone). It returns a *PreflightError when the request fails in a way
// every request of the run would too: a bad target, an unknown policy or domain, a service
// that is not running. A run against such a target would only hammer it
// with requests bound to fail (9,952 HTTP 400s in a second, in an outside
// walk). It returns nil when the request is allowed or denied, and when
// it fails otherwise (a timeout, a 5xx, gRPC UNAVAILABLE sent by the service: a service
// whose store is down may recover, and that is what a run measures). It
// returns an error wrapping ErrInvalidOptions for bad options, and ctx's
// error when ctx ends first. The request is bounded by opts.Timeout.
func Preflight(ctx context.Context, opts Options) error {
	o, err := opts.withDefaults()
	if err != nil {
		return err
	}
	o.Concurrency, o.Connections = 1, 1 // one worker
	var id int
	o.IdentityPrefix, id = preflightIdentity(o.IdentityPrefix)
	o.Identities = 1 // none formatted ahead but the first, unused
	u, err := url.Parse(o.Target)
	if err != nil {
		return fmt.Errorf("%w: target %q: %v", ErrInvalidOptions, o.Target, err)
	}
	pe := &PreflightError{Target: o.Target, Mode: o.Mode}
	rctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	// A connection first: grpc-go's client reports a refused one as
	// UNAVAILABLE, as it does a service that is down for a while.
	if u.Port() != "" {
		var d net.Dialer
		conn, err := d.DialContext(rctx, "tcp", u.Host)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if unreachable(err) {
				pe.Unreachable, pe.Err = true, err
				return pe
			}
			return nil // a timeout, say: the run will tell
		}
		conn.Close()
	}
	snd, err := newSender(o)
	if err != nil {
		return err
	}
	defer snd.close()
	w := snd.worker()
	defer w.close()
	_, err = w.send(rctx, id)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case unreachable(err):
		pe.Unreachable, pe.Err = true, err
		return pe
	}
	pe.Err = err
	if errors.Is(err, errNotHTTP2) {
		pe.NotHTTP2 = true
		return pe
	}
	if transportError(err) {
		pe.Transport = true
		return pe
	}
	var se *statusError
	if errors.As(err, &se) {
		if se.status < 400 || se.status > 499 || se.status == http.StatusRequestTimeout || se.status == http.StatusTooManyRequests {
			return nil
		}
		pe.HTTPStatus, pe.Detail = se.status, clip(se.body)
		var problem struct {
			Type   string `json:"type"`
			Detail string `json:"detail"`
		}
		if json.Unmarshal(se.body, &problem) == nil {
			pe.ProblemType = problem.Type
			if problem.Detail != "" {
				pe.Detail = problem.Detail
			}
		}
		return pe
	}
	if st, ok := status.FromError(err); ok {
		if st.Code() == codes.Unavailable && o.Mode == GRPC && o.GRPCClient != RawGRPC {
			// grpc-go connects lazily: a call can fail on the connection
			// the server is closing ("write: broken pipe" under TLS 1.3,
			// whose server refuses a client certificate after the
			// client's handshake is done) without the reason, which
			// the next calls get. A connection of the service's own says
			// whether this is the service's UNAVAILABLE (a store down)
			// or a connection it refuses, as the RawGRPC client
			// tells (a TLS walk).
			if cerr := probeH2(rctx, u.Host, clientTLS(o, u)); cerr != nil && transportError(cerr) {
				pe.Transport, pe.Err = true, fmt.Errorf("%w; a new connection: %w", err, cerr)
				return pe
			}
		}
		switch st.Code() {
		case codes.InvalidArgument, codes.Unimplemented, codes.Unauthenticated, codes.PermissionDenied:
			pe.GRPCCode, pe.Detail = st.Code(), st.Message()
			return pe
		}
	}
	return nil
}

// preflightInfix follows Options.IdentityPrefix in the identity
// of Preflight's request, before a random number below 10^9: with prefix
// "fleetq-", "fleetq-preflight-482913377". A run's identities are the
// prefix and a number alone, so no run's requests, this one's or another's
// of the same prefix, use it: the decision it takes is counted by no
// report (a run sharing identities with another used to lose one of its
// decisions to the other's pre-run request).
const preflightInfix = "preflight-"

// preflightIdentity returns the prefix and number the senders format into
// the identity of Preflight's request (see preflightInfix).
func preflightIdentity(prefix string) (string, int) {
	return prefix + preflightInfix, rand.IntN(1_000_000_000)
}

// unreachable reports whether err says that nothing listens at the
// target's address: the connection was refused or the host has no
// address.
func unreachable(err error) bool {
	var dns *net.DNSError
	return errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &dns) && dns.IsNotFound
}

// probeH2 connects to addr as the RawGRPC client does (over TLS with
// tlsConf when set), exchanges prefaces and SETTINGS and closes the
// connection; it returns why that failed, or nil.
func probeH2(ctx context.Context, addr string, tlsConf *tls.Config) error {
	c, err := connectH2(ctx, addr, tlsConf, h2LastStreamID, nil)
	if err != nil {
		return err
	}
	return c.nc.Close()
}
