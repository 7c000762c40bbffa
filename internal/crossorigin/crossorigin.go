// Package crossorigin decides whether a browser sent a state-changing
// HTTP request on behalf of a web page the service does not trust, from
// the two headers browsers add: Origin and Sec-Fetch-Site. The services
// of this module (floodgate serve's HTTP API, envoy-compat's /json) serve
// no page that sends such requests, so an Origin on one names a page of
// somebody else's: another site's, or one whose DNS name was rebound to
// the service's address (DNS rebinding), which makes it look same-origin
// to net/http's CrossOriginProtection (its Origin then matches its Host,
// and the browser says Sec-Fetch-Site: same-origin). Only origins listed
// as trusted are served.
package crossorigin

// Verdict is what Check decided about a request.
type Verdict int

// The verdicts.
const (
	// Served: not from a browser (neither header), a browser's own
	// navigation (Sec-Fetch-Site same-origin or none without Origin), or
	// from a trusted origin.
	Served Verdict = iota
	// UntrustedOrigin: the request carries an Origin that is not trusted,
	// whether or not it matches the request's Host.
	UntrustedOrigin
	// CrossSite: no Origin, but Sec-Fetch-Site says another site's page
	// sent it (cross-site or same-site, or a value browsers do not send).
	CrossSite
)

// Trusted is a set of trusted origins. The zero value and nil trust none.
// It is immutable, hence safe for concurrent use.
type Trusted struct {
	origins map[string]struct{}
}

// New returns the set of origins, each compared byte for byte with the
// Origin header (browsers send "scheme://host[:port]" in lower case,
// without the scheme's default port).
func New(origins []string) *Trusted {
	t := &Trusted{origins: make(map[string]struct{}, len(origins))}
	for _, o := range origins {
		t.origins[o] = struct{}{}
	}
	return t
}

// Check returns the verdict on a request with a method that changes
// something (any but GET, HEAD and OPTIONS, or one the caller treats as
// such) carrying the headers Sec-Fetch-Site site and Origin origin (empty
// when absent). It does not allocate.
func Check[T string | []byte](t *Trusted, site, origin T) Verdict {
	if len(origin) > 0 {
		if t != nil {
			if _, ok := t.origins[string(origin)]; ok {
				return Served
			}
		}
		return UntrustedOrigin
	}
	switch string(site) {
	case "", "same-origin", "none":
		// No Origin: a client that is not a browser, or a browser's
		// navigation (a link of the service's own page, an address
		// typed in): browsers send Origin with every POST.
		return Served
	}
	return CrossSite
}
