package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/plural"
	"github.com/floodgate-rl/floodgate/memstore"
)

// Admin token strength: at least MinAdminTokenLen characters, at least
// minTokenDistinct of them different. A token from
// "openssl rand -hex 32" (64 characters) passes; "a", a word or a
// repeated pattern does not.
const (
	MinAdminTokenLen = 32
	minTokenDistinct = 10
)

// ErrWeakAdminToken reports an admin token too short or too repetitive to
// guard the admin API.
var ErrWeakAdminToken = errors.New("server: weak admin token")

// ValidateAdminToken checks that token is strong enough to enable the
// admin API: MinAdminTokenLen characters or more, at least 10 distinct,
// no spaces or control characters (it travels in an HTTP header). Generate
// one with "openssl rand -hex 32".
func ValidateAdminToken(token string) error {
	if len(token) < MinAdminTokenLen {
		return fmt.Errorf("%w: %d characters, want at least %d (generate one with: openssl rand -hex 32)", ErrWeakAdminToken, len(token), MinAdminTokenLen)
	}
	seen := map[rune]bool{}
	for _, c := range token {
		if c <= ' ' || c == 0x7f || c > 0x7e {
			return fmt.Errorf("%w: it must be printable ASCII without spaces", ErrWeakAdminToken)
		}
		seen[c] = true
	}
	if len(seen) < minTokenDistinct {
		return fmt.Errorf("%w: only %d distinct characters, want at least %d (generate one with: openssl rand -hex 32)", ErrWeakAdminToken, len(seen), minTokenDistinct)
	}
	return nil
}

// Failed admin authentications are throttled per client network (an IPv4
// address, an IPv6 /64): after AdminFailureLimit failures within
// AdminFailureWindow, that network's admin requests get 429 — a correct
// token included — until the oldest failures age out.
const (
	AdminFailureLimit  = 10
	AdminFailureWindow = 15 * time.Minute
)

// adminGuard counts failed admin authentications per client network, in a
// memory store of its own (bounded; it evicts), on the clock now.
type adminGuard struct {
	lim    *floodgate.Limiter
	policy floodgate.Policy
	// mu makes one authentication's look at its network's failures, the
	// token's comparison and the count of a failure one step: without it,
	// concurrent wrong tokens all passed the look before any was counted,
	// and far more than AdminFailureLimit were compared in a window. Admin
	// calls are rare and the step takes microseconds, so one lock for all
	// networks costs nothing worth sharding for.
	mu sync.Mutex
}

func newAdminGuard(now func() time.Time) (*adminGuard, error) {
	st, err := memstore.New(memstore.Options{Shards: 4, MaxKeys: 100_000})
	if err != nil {
		return nil, err
	}
	lim, err := floodgate.New(st, floodgate.Options{Prefix: "admin-auth", Clock: now})
	if err != nil {
		return nil, err
	}
	// A sliding log, exact in any interval of AdminFailureWindow: a sliding
	// window counter let about twice AdminFailureLimit wrong tokens be
	// compared within one window when the failures bunched at a boundary.
	p, err := floodgate.NewSlidingLog("admin-failures", AdminFailureLimit, AdminFailureWindow)
	if err != nil {
		return nil, err
	}
	return &adminGuard{lim: lim, policy: p}, nil
}

// callerNetwork returns the throttling key of a request's peer: its IPv4
// address or IPv6 /64, or the raw address when it cannot be parsed.
func callerNetwork(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// authenticate runs one authentication from network: when network has
// used up its failures it returns blocked and how long until it may try
// again, without calling valid; otherwise it returns valid's verdict,
// counting a failure when it is false. The three steps are atomic for all
// callers, so that at most AdminFailureLimit wrong tokens from one
// network are ever compared within AdminFailureWindow.
func (g *adminGuard) authenticate(network string, valid func() bool) (ok, blocked bool, wait time.Duration) {
	// Not the request's context: a client that hangs up (or half-closes
	// its connection, and still reads the answer) must not have its
	// failure go uncounted. The store is in memory and does not block.
	ctx := context.Background()
	g.mu.Lock()
	defer g.mu.Unlock()
	if r, err := g.lim.Peek(ctx, g.policy, network); err == nil && r.Remaining <= 0 {
		return false, true, max(r.RetryAfter, time.Second)
	}
	if valid() {
		return true, false, 0
	}
	_, _ = g.lim.Allow(ctx, g.policy, network)
	return false, false, 0
}

// statusRecorder remembers the status an admin handler answered with.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// admin wraps an admin handler with bearer-token authentication, the
// throttling of failures and an audit log line per call (Info for every
// authenticated call, Warn for every failed authentication; the refusals
// of a throttled network at most once per WarnEvery, with the count
// suppressed), each with the caller's address.
func (s *Server) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.opts.AdminToken == "" {
			s.fail(w, r, &problemError{status: http.StatusForbidden, kind: "admin-disabled",
				detail: "the admin API is disabled: start the server with --admin-token-file, --admin-token or FLOODGATE_ADMIN_TOKEN"})
			return
		}
		token, hasToken := bearerToken(r.Header.Get("Authorization"))
		ok, blocked, wait := s.adminGuard.authenticate(callerNetwork(r.RemoteAddr), func() bool {
			// Compare digests so that neither the content nor the length
			// of the token leaks through timing.
			want, got := sha256.Sum256([]byte(s.opts.AdminToken)), sha256.Sum256([]byte(token))
			return hasToken && subtle.ConstantTimeCompare(want[:], got[:]) == 1
		})
		if blocked {
			// At most one line per interval, as the cross-origin
			// refusals: a refused guesser may keep sending by the
			// thousand, and the failures before were each logged.
			s.warn.Warn("admin-throttled", "admin request refused: too many failed authentications", "caller", r.RemoteAddr, "method", r.Method, "path", r.URL.Path)
			secs := int64((wait + time.Second - 1) / time.Second)
			w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
			s.fail(w, r, &problemError{status: http.StatusTooManyRequests, kind: "admin-throttled",
				detail: "too many failed admin authentications from this network; retry after " + plural.Count(secs, "second", "seconds")})
			return
		}
		if !ok {
			s.log.Warn("admin authentication failed", "caller", r.RemoteAddr, "method", r.Method, "path", r.URL.Path)
			w.Header().Set("WWW-Authenticate", `Bearer realm="floodgate-admin"`)
			s.fail(w, r, &problemError{status: http.StatusUnauthorized, kind: "unauthorized",
				detail: "missing or wrong admin token (send Authorization: Bearer <token>)"})
			return
		}
		rec := &statusRecorder{ResponseWriter: w}
		h(rec, r)
		s.log.Info("admin call", "caller", r.RemoteAddr, "method", r.Method, "path", r.URL.Path, "status", rec.status)
	}
}

// bearerToken returns the token of an Authorization header value of the
// Bearer scheme, whose name is matched without regard to case (RFC 9110
// §11.1: "bearer" and "BEARER" are Bearer) and followed by one or more
// spaces.
func bearerToken(v string) (string, bool) {
	scheme, token, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimLeft(token, " ")
	return token, token != ""
}
