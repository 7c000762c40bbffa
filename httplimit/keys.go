package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/floodgate-rl/floodgate/clientip"
)

// KeyFunc returns the identity a request is counted under. It fails with
// an error wrapping ErrNoKey when the request does not carry that identity;
// an empty identity with a nil error is taken as ErrNoKey too (a rule
// whose requests all share one budget has a nil Key instead), so that a
// KeyFunc that forgets the error cannot put every request without an
// identity in one bucket. The identity may be any other string: storage
// keys encode it safely (floodgate.EncodeIdentity), hashing anything long
// or unusual.
type KeyFunc func(r *http.Request) (string, error)

// Unmatched is the identity Route gives a request that matches no pattern,
// so that requests to unknown paths share one budget.
const Unmatched = "!unmatched"

// Header returns a KeyFunc reading the request header name, for example
// an API key in "X-API-Key". A missing or blank header is ErrNoKey; the
// value is used as is (after trimming spaces), so two spellings of one key
// are two identities. An empty name, or one that is not a valid header
// field name, makes New refuse the rule with ErrInvalidOptions (no request
// could carry it).
func Header(name string) KeyFunc {
	if !httpguts.ValidHeaderFieldName(name) {
		return badKey(fmt.Errorf("httplimit.Header: invalid header name %q", name))
	}
	canonical := http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		v := strings.TrimSpace(r.Header.Get(canonical))
		if v == "" {
			return "", &missingHeader{name: canonical}
		}
		return v, nil
	}
}

// missingHeader is ErrNoKey for a request without the header a Header
// key reads: the 400 names the header, which the client can then send.
type missingHeader struct{ name string }

func (e *missingHeader) Error() string { return ErrNoKey.Error() + ": header " + e.name + " missing" }
func (e *missingHeader) Unwrap() error { return ErrNoKey }

// User returns a KeyFunc reading the authenticated user that an earlier
// middleware stored in the request context; lookup returns the user id
// and whether there is one. No user is ErrNoKey. A nil lookup makes New
// refuse the rule with ErrInvalidOptions.
func User(lookup func(ctx context.Context) (string, bool)) KeyFunc {
	if lookup == nil {
		return badKey(errors.New("httplimit.User: nil lookup"))
	}
	return func(r *http.Request) (string, error) {
		u, ok := lookup(r.Context())
		if !ok || u == "" {
			return "", fmt.Errorf("%w: no authenticated user", ErrNoKey)
		}
		return u, nil
	}
}

// Route returns a KeyFunc giving the request's route pattern as Go 1.22+
// ServeMux patterns spell it ("GET /items/{id}"), never the raw path, so
// that /items/1 and /items/2 share one budget. Inside a ServeMux handler
// it reads r.Pattern. When the middleware wraps the mux itself, r.Pattern
// is not set yet; then, if mux is not nil, it asks mux which pattern the
// request will match. A request matching no pattern gets Unmatched.
func Route(mux *http.ServeMux) KeyFunc {
	return func(r *http.Request) (string, error) {
		if r.Pattern != "" {
			return r.Pattern, nil
		}
		if mux != nil {
			if _, pattern := mux.Handler(r); pattern != "" {
				return pattern, nil
			}
		}
		return Unmatched, nil
	}
}

// IP returns a KeyFunc giving the client address as res resolves it
// (trusted proxies; an IPv6 client's /64 network unless
// clientip.Options.IPv6Prefix says otherwise). A peer that is not an IP
// address is reported as an error that is not ErrNoKey (the server is
// misconfigured for a per-IP limit), answered with 500. A nil res makes
// New refuse the rule with ErrInvalidOptions.
func IP(res *clientip.Resolver) KeyFunc {
	if res == nil {
		return badKey(errors.New("httplimit.IP: nil resolver"))
	}
	return func(r *http.Request) (string, error) {
		return res.Key(r)
	}
}

// Join returns a KeyFunc combining several identities, for example route
// and client IP for a per-route per-client limit. The parts are length
// prefixed, so no two different tuples give the same identity. If any part
// fails, Join fails with that error. No parts, a nil part or a part New
// would refuse (such as IP(nil)) makes New refuse the rule with
// ErrInvalidOptions.
func Join(parts ...KeyFunc) KeyFunc {
	if len(parts) == 0 {
		return badKey(errors.New("httplimit.Join: no parts"))
	}
	for i, p := range parts {
		if p == nil {
			return badKey(fmt.Errorf("httplimit.Join: part %d is nil", i))
		}
		if err := keyError(p); err != nil {
			return badKey(fmt.Errorf("httplimit.Join: part %d: %w", i, err))
		}
	}
	return func(r *http.Request) (string, error) {
		var b strings.Builder
		for i, p := range parts {
			v, err := p(r)
			if err != nil {
				return "", err
			}
			if i > 0 {
				b.WriteByte('|')
			}
			b.WriteString(strconv.Itoa(len(v)))
			b.WriteByte(':')
			b.WriteString(v)
		}
		return b.String(), nil
	}
}

// badKey returns a KeyFunc that only fails with err: what a constructor
// above returns for an argument it cannot use, so that New refuses the
// rule (keyError) instead of every request failing or panicking. It is
// never inlined, so that every such KeyFunc shares one code pointer
// (badKeyCode) by which New recognises it.
//
//go:noinline
func badKey(err error) KeyFunc {
	return func(*http.Request) (string, error) { return "", err }
}

// badKeyCode is the code pointer of the KeyFuncs badKey returns.
var badKeyCode = reflect.ValueOf(badKey(nil)).Pointer()

// keyError returns the error of a KeyFunc made by badKey, and nil for any
// other (which it does not call).
func keyError(k KeyFunc) error {
	if k == nil || reflect.ValueOf(k).Pointer() != badKeyCode {
		return nil
	}
	_, err := k(nil) // badKey's KeyFuncs never look at the request
	return err
}
