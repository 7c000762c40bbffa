package server

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/floodgate-rl/floodgate/internal/clip"
	"github.com/floodgate-rl/floodgate/internal/crossorigin"
)

// Requests a browser sends on behalf of a web page are refused unless the
// page's origin is trusted: a page on any web site, open in the browser of
// someone who can reach the service (on an intranet, on localhost), can
// make that browser POST a form (text/plain or
// application/x-www-form-urlencoded, which needs no CORS preflight) to the
// API and so spend someone's rate limit or quota. Floodgate serves no page
// that sends such requests, so every method but GET, HEAD and OPTIONS, on
// every endpoint, is refused with 403 cross-origin-request, changing
// nothing, when it carries an Origin header that is not exactly one of
// Options.TrustedOrigins, even one matching the request's Host: a page
// whose DNS name its owner has rebound to the service's address (DNS
// rebinding) sends its own name as both Host and Origin, and its browser
// says Sec-Fetch-Site: same-origin. Without Origin (browsers send it with
// every POST), a request whose Sec-Fetch-Site names another site is
// refused too (internal/crossorigin). A request with neither header
// (curl, server-side clients, anything but a browser) is served as
// before, whatever its Content-Type. The admin endpoints apply the rule
// whatever their method, so that a page cannot use up its visitor's
// network's admin failures with GETs either (where the browser says where
// the request came from: Sec-Fetch-Site is sent to HTTPS and localhost
// only); so do the runtime profiles of --pprof, served without the token,
// so that a page cannot have its visitor's browser start CPU profiles and
// execution traces (which slow the service while they run) with an
// image's GET. An operator opening them (typed in the address bar, or
// links of the profiles' own index page: GETs without Origin) and go tool
// pprof are served. GETs are not refused elsewhere: a rebound page can
// read what they answer (/v1/peek is a POST, but /metrics and /readyz are
// GETs) unless Options.AllowedHosts refuses its Host.

// ErrInvalidOrigin reports a trusted origin no browser would send.
var ErrInvalidOrigin = errors.New("server: invalid trusted origin")

// ValidateTrustedOrigin checks that origin can be an Options.TrustedOrigins
// entry: an origin as browsers send it in the Origin header,
// "scheme://host" or "scheme://host:port", in lower case, without a path
// (not even "/"), user information, or the scheme's default port (browsers
// leave out :443 of https and :80 of http, so such an entry would never
// match).
func ValidateTrustedOrigin(origin string) error {
	u, err := url.Parse(origin)
	switch {
	case err != nil:
		return fmt.Errorf("%w %q: %w", ErrInvalidOrigin, origin, err)
	case u.Scheme == "" || u.Host == "" || u.Opaque != "":
		return fmt.Errorf("%w %q: want scheme://host[:port], e.g. https://app.example.com", ErrInvalidOrigin, origin)
	case u.User != nil:
		return fmt.Errorf("%w %q: an origin has no user information", ErrInvalidOrigin, origin)
	case u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery || strings.HasSuffix(origin, "#"):
		return fmt.Errorf("%w %q: an origin has no path, query or fragment (not even a trailing /)", ErrInvalidOrigin, origin)
	case origin != strings.ToLower(origin):
		return fmt.Errorf("%w %q: write it in lower case, as browsers send it", ErrInvalidOrigin, origin)
	case (u.Scheme == "https" && u.Port() == "443") || (u.Scheme == "http" && u.Port() == "80"):
		return fmt.Errorf("%w %q: browsers leave out the default port: write %s://%s", ErrInvalidOrigin, origin, u.Scheme, u.Hostname())
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%w %q: a web page's origin is http:// or https://", ErrInvalidOrigin, origin)
	case strings.Contains(u.Hostname(), "*"):
		return fmt.Errorf("%w %q: an origin is matched exactly, without wildcards: list each origin", ErrInvalidOrigin, origin)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%w %q: port %s is not 1..65535", ErrInvalidOrigin, origin, p)
		}
	}
	return nil
}

// newCrossOrigin returns the set of trusted origins, refusing one
// ValidateTrustedOrigin refuses.
func newCrossOrigin(origins []string) (*crossorigin.Trusted, error) {
	for _, o := range origins {
		if err := ValidateTrustedOrigin(o); err != nil {
			return nil, err
		}
	}
	return crossorigin.New(origins), nil
}

// checkedAsUnsafe reports whether a request with method to path is
// refused from untrusted pages: every method but GET, HEAD and OPTIONS,
// and every method under /admin/ and /debug/pprof/, where a wrong or
// missing token counts a failure against the caller's network and a
// profile costs the service CPU while it runs.
func checkedAsUnsafe(method, path string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return strings.HasPrefix(path, "/admin/") || strings.HasPrefix(path, "/debug/pprof/")
	}
	return true
}

// crossOrigin returns the problem refusing r when a browser sent it on
// behalf of a page whose origin is not trusted, or nil.
func (s *Server) crossOrigin(r *http.Request) error {
	if !checkedAsUnsafe(r.Method, r.URL.Path) {
		return nil
	}
	site, origin := r.Header.Get("Sec-Fetch-Site"), r.Header.Get("Origin")
	return originProblem(crossorigin.Check(s.xorigin, site, origin), site, origin)
}

// originProblem returns the problem of verdict v on a request carrying
// Sec-Fetch-Site site and Origin origin, or nil when v is Served.
func originProblem(v crossorigin.Verdict, site, origin string) error {
	var why string
	switch v {
	case crossorigin.Served:
		return nil
	case crossorigin.UntrustedOrigin:
		why = fmt.Sprintf("refused a request a browser sent on behalf of a web page (Origin %.100q): floodgate serves no page that sends it, "+
			"so the page is another site's, or one whose DNS name points to this service (DNS rebinding: its Origin then matches the Host)", origin)
	default:
		why = fmt.Sprintf("refused a request a browser sent from a page of another site (Sec-Fetch-Site: %.40s)", site)
	}
	return &problemError{status: http.StatusForbidden, kind: "cross-origin-request",
		detail: why + "; nothing was counted. Call the API from servers, or list the page's origin " +
			"(a page proxied under the service's own origin too) with floodgate serve --trusted-origin"}
}

// refuseCrossOrigin serves h, answering the requests crossOrigin refuses
// with its problem.
func (s *Server) refuseCrossOrigin(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.crossOrigin(r); err != nil {
			if strings.HasPrefix(r.URL.Path, "/admin/") {
				// Audited as every admin call is, at most one line per
				// interval: a web page could make its visitors' browsers
				// send these by the thousand.
				s.warn.Warn("admin-cross-origin", "admin request refused: sent by a browser from another origin", "caller", r.RemoteAddr,
					"method", r.Method, "path", r.URL.Path, "origin", clip.Text(r.Header.Get("Origin"), 200), "sec_fetch_site", clip.Text(r.Header.Get("Sec-Fetch-Site"), 40))
			}
			s.fail(w, r, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}

var (
	secFetchSiteBytes = []byte("Sec-Fetch-Site")
	originBytes       = []byte("Origin")
)

// fastCrossOrigin is crossOrigin for a POST served natively on fasthttp:
// the same rule, on the headers' bytes. It allocates nothing unless it
// refuses.
func (s *Server) fastCrossOrigin(ctx *fasthttp.RequestCtx) error {
	h := &ctx.Request.Header
	site, origin := h.PeekBytes(secFetchSiteBytes), h.PeekBytes(originBytes)
	if v := crossorigin.Check(s.xorigin, site, origin); v != crossorigin.Served {
		return originProblem(v, string(site), string(origin))
	}
	return nil
}
