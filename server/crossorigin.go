package server

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/floodgate-rl/floodgate/internal/clip"
)

// Requests a browser sends on behalf of a page of another origin are
// refused: a page on any web site, open in the browser of someone who can
// reach the service (on an intranet, on localhost), can make that browser
// POST a form (text/plain or application/x-www-form-urlencoded, which
// needs no CORS preflight) to the API and so spend someone's rate limit
// or quota. Every method but GET, HEAD and OPTIONS, on every endpoint,
// goes through the standard library's http.CrossOriginProtection: a
// request whose Sec-Fetch-Site says it came from another site, or whose
// Origin does not match its Host, is answered 403 cross-origin-request and
// changes nothing. A request with neither header (curl, server-side
// clients, anything but a browser) is served as before, whatever its
// Content-Type. The admin endpoints refuse such requests whatever their
// method, so that a page cannot use up its visitor's network's admin
// failures with GETs either (where the browser says where the request came
// from: Sec-Fetch-Site is sent to HTTPS and localhost only); so do the
// runtime profiles of --pprof, served without the token, so that a page
// cannot have its visitor's browser start CPU profiles and execution
// traces (which slow the service while they run) with an image's GET.
// An operator opening them (typed in the address bar, or links of the
// profiles' own index page) and go tool pprof are served.

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
	}
	return nil
}

// newCrossOrigin returns the protection trusting origins.
func newCrossOrigin(origins []string) (*http.CrossOriginProtection, error) {
	c := http.NewCrossOriginProtection()
	for _, o := range origins {
		if err := ValidateTrustedOrigin(o); err != nil {
			return nil, err
		}
		if err := c.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("%w %q: %w", ErrInvalidOrigin, o, err)
		}
	}
	return c, nil
}

// crossOrigin returns the problem refusing r when a browser sent it from a
// page of an origin other than the service's and not trusted, or nil.
func (s *Server) crossOrigin(r *http.Request) error {
	if origin := r.Header.Get("Origin"); origin != "" && (hasUpper(r.Host) || hasUpper(origin)) {
		// Hosts are compared in lower case, as fasthttp hands them on
		// (net/http keeps the Host as sent): both engines then refuse
		// and serve the same requests. Browsers send both in lower case.
		lower := *r
		lower.Host = strings.ToLower(r.Host)
		lower.Header = http.Header{"Origin": {strings.ToLower(origin)}, "Sec-Fetch-Site": r.Header.Values("Sec-Fetch-Site")}
		r = &lower
	}
	err := s.xorigin.Check(r)
	if err == nil && (strings.HasPrefix(r.URL.Path, "/admin/") || strings.HasPrefix(r.URL.Path, "/debug/pprof/")) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			// Checked as a POST would be: Check lets safe methods
			// through, but a wrong or missing token counts a failure
			// against the caller's network, and a profile costs the
			// service CPU while it runs.
			unsafe := *r
			unsafe.Method = http.MethodPost
			err = s.xorigin.Check(&unsafe)
		}
	}
	if err == nil {
		return nil
	}
	why := fmt.Sprintf("Origin %.100q does not match Host %.100q", r.Header.Get("Origin"), r.Host)
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		why = fmt.Sprintf("Sec-Fetch-Site: %.40s", site)
	}
	return &problemError{status: http.StatusForbidden, kind: "cross-origin-request",
		detail: "refused a request a browser sent from a page of another origin (" + why + "); nothing was counted. " +
			"Call the API from servers, or list the page's origin in floodgate serve --trusted-origin"}
}

// hasUpper reports whether s has an upper-case ASCII letter.
func hasUpper(s string) bool {
	for i := range len(s) {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
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

// fastCrossOrigin is crossOrigin for a POST to route served natively on
// fasthttp. A request without Sec-Fetch-Site and Origin (not from a
// browser) costs two header lookups and no allocation; one with either is
// checked by crossOrigin on an http.Request holding them, so that both
// engines apply the same rule.
func (s *Server) fastCrossOrigin(ctx *fasthttp.RequestCtx, route string) error {
	h := &ctx.Request.Header
	site, origin := h.PeekBytes(secFetchSiteBytes), h.PeekBytes(originBytes)
	if len(site) == 0 && len(origin) == 0 {
		return nil
	}
	r := &http.Request{Method: http.MethodPost, URL: &url.URL{Path: route}, Host: string(ctx.Host()), Header: http.Header{}}
	if len(site) > 0 {
		r.Header.Set("Sec-Fetch-Site", string(site))
	}
	if len(origin) > 0 {
		r.Header.Set("Origin", string(origin))
	}
	return s.crossOrigin(r)
}
