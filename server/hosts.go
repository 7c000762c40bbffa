package server

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/floodgate-rl/floodgate/internal/clip"
)

// The Host a request is addressed to is the one defence against DNS
// rebinding that covers reads too. A page on attacker.example whose owner
// points that name at the service's address (127.0.0.1, an intranet
// address) is, for its visitor's browser, of the same origin as the
// service: the page can send it GETs and read the answers (/metrics,
// /readyz, --pprof's profiles on the admin listener), and its requests
// carry "Host: attacker.example". With Options.AllowedHosts set, every
// HTTP request whose Host is neither a listed name, nor an IP address,
// nor localhost is answered 421 host-not-allowed before anything else
// looks at it. (Browsers send the name of the page's address as Host,
// never an IP address in its place, and resolve localhost themselves.)

// ErrInvalidHost reports an allowed host that no Host header would match
// as meant.
var ErrInvalidHost = errors.New("server: invalid allowed host")

// maxHostLen is the longest DNS name, in characters.
const maxHostLen = 253

// ValidateAllowedHost checks that name can be an Options.AllowedHosts
// entry: a host name as clients write it in URLs (letters, digits, '-'
// and '_', dots between labels, in any case), or "*." before one for
// every name under it (*.example.com: api.example.com, a.b.example.com,
// not example.com). It refuses a port (every port is served), a scheme, a
// path, a trailing dot (a Host with one matches without it) and an IP
// address (requests to IP addresses are always served), saying why.
func ValidateAllowedHost(name string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: "+format, append([]any{ErrInvalidHost, name}, args...)...)
	}
	if name == "" {
		return bad("empty: give a host name, e.g. floodgate.example.com")
	}
	if strings.Contains(name, "://") {
		if u, err := url.Parse(name); err == nil && u.Hostname() != "" {
			return bad("a host name, not a URL: write %s", u.Hostname())
		}
		return bad("a host name, not a URL: write the name alone, e.g. floodgate.example.com")
	}
	_, ipErr := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(name, "["), "]"))
	if _, err := netip.ParseAddrPort(name); err == nil || ipErr == nil {
		return bad("an IP address: requests to IP addresses and localhost are always served; list host names only")
	}
	if host, ok := splitPort(name); ok {
		return bad("a host name has no port (every port is served): write %s", host)
	}
	if i := strings.IndexAny(name, "/?#"); i >= 0 {
		return bad("a host name has no path: write %s", name[:i])
	}
	if name == "*" || name == "*." {
		return bad("a wildcard names a domain: *.example.com")
	}
	if strings.HasSuffix(name, ".") {
		return bad("write it without the trailing dot (a Host with one matches too)")
	}
	rest := strings.TrimPrefix(name, "*.")
	if len(rest) > maxHostLen {
		return bad("longer than %d characters", maxHostLen)
	}
	for _, c := range rest {
		switch {
		case c == '*':
			return bad("a wildcard is allowed only as a leading *. (*.example.com)")
		case c == ':':
			return bad("a host name has no port (every port is served)")
		case c != '-' && c != '_' && c != '.' && (c < '0' || c > '9') && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z'):
			return bad("invalid character %q (want letters, digits, '-', '_' and '.')", c)
		}
	}
	if strings.HasPrefix(rest, ".") || strings.Contains(rest, "..") {
		return bad("an empty label (two dots, or a leading one)")
	}
	return nil
}

// splitPort splits "host:port" (port digits, host not empty), reporting
// whether s is one.
func splitPort(s string) (host string, ok bool) {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 || i == len(s)-1 || strings.Trim(s[i+1:], "0123456789") != "" {
		return "", false
	}
	return s[:i], true
}

// allowedHosts is Options.AllowedHosts, ready to match. Nil allows every
// Host.
type allowedHosts struct {
	names    []string // in lower case
	suffixes []string // ".example.com" of "*.example.com", in lower case
}

// newAllowedHosts returns names ready to match, nil when there are none,
// or the error of one ValidateAllowedHost refuses.
func newAllowedHosts(names []string) (*allowedHosts, error) {
	if len(names) == 0 {
		return nil, nil
	}
	a := &allowedHosts{}
	for _, n := range names {
		if err := ValidateAllowedHost(n); err != nil {
			return nil, err
		}
		n = strings.ToLower(n)
		if suffix, ok := strings.CutPrefix(n, "*"); ok {
			a.suffixes = append(a.suffixes, suffix)
		} else {
			a.names = append(a.names, n)
		}
	}
	return a, nil
}

// allowsHost reports whether a allows a request whose Host (or HTTP/2
// :authority) is host, port included: a nil a, an empty host (HTTP/1.0
// without Host: no browser sends one), an IP address (IPv6 in brackets),
// localhost, a listed name, or a name under a listed wildcard, in any
// case and with or without a trailing dot. It allocates nothing but for
// an IPv6 address in host's bytes.
func allowsHost[T string | []byte](a *allowedHosts, host T) bool {
	if a == nil || len(host) == 0 {
		return true
	}
	if host[0] == '[' {
		// An IPv6 address: "[::1]" or "[::1]:8080".
		end := indexByte(host, ']')
		if end < 0 || (end+1 < len(host) && host[end+1] != ':') {
			return false
		}
		ip, err := netip.ParseAddr(string(host[1:end]))
		return err == nil && ip.Is6()
	}
	name := host
	if i := lastIndexByte(name, ':'); i >= 0 {
		name = name[:i]
	}
	if n := len(name); n > 0 && name[n-1] == '.' {
		name = name[:n-1]
	}
	for _, n := range a.names {
		if equalFoldASCII(name, n) {
			return true
		}
	}
	for _, s := range a.suffixes {
		if len(name) > len(s) && equalFoldASCII(name[len(name)-len(s):], s) {
			return true
		}
	}
	return equalFoldASCII(name, "localhost") || isIPv4(name)
}

// indexByte is strings.IndexByte of a string or []byte.
func indexByte[T string | []byte](s T, c byte) int {
	for i := range len(s) {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// lastIndexByte is strings.LastIndexByte of a string or []byte.
func lastIndexByte[T string | []byte](s T, c byte) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// equalFoldASCII reports whether s equals lower, which is in lower case,
// ignoring the case of s's ASCII letters.
func equalFoldASCII[T string | []byte](s T, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// isIPv4 reports whether s is an IPv4 address in dotted decimal, as
// netip.ParseAddr reads one (no leading zeros), without allocating.
func isIPv4[T string | []byte](s T) bool {
	parts, digits, v := 0, 0, 0
	for i := range len(s) {
		switch c := s[i]; {
		case '0' <= c && c <= '9':
			if digits == 1 && v == 0 {
				return false // a leading zero
			}
			v, digits = v*10+int(c-'0'), digits+1
			if v > 255 {
				return false
			}
		case c == '.' && digits > 0 && parts < 3:
			parts, digits, v = parts+1, 0, 0
		default:
			return false
		}
	}
	return parts == 3 && digits > 0
}

// refusedHost logs a request whose Host AllowedHosts refuses (at most one
// line per WarnEvery) and returns its problem.
func (s *Server) refusedHost(host, caller string) error {
	host = strings.ToLower(host) // as fasthttp hands it on: both engines answer alike
	s.warn.Warn("host-not-allowed", "request refused: its Host is not an --allowed-host", "host", clip.Text(host, 100), "caller", caller)
	return &problemError{status: http.StatusMisdirectedRequest, kind: "host-not-allowed",
		detail: fmt.Sprintf("refused a request addressed to Host %.100q: this service answers only to the names of floodgate serve --allowed-host, "+
			"IP addresses and localhost, so that a web page whose DNS name points to it (DNS rebinding) cannot use it through its visitors' browsers; "+
			"nothing was counted. Address the service by one of those, or add the name with --allowed-host", host)}
}

// refuseHost serves h, answering the requests whose Host AllowedHosts
// refuses with 421 host-not-allowed.
func (s *Server) refuseHost(h http.Handler) http.Handler {
	if s.hosts == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowsHost(s.hosts, r.Host) {
			s.fail(w, r, s.refusedHost(r.Host, r.RemoteAddr))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// fastHost is refuseHost's check for a request served natively on
// fasthttp (of origin form: its Host header is its host). It allocates
// nothing without AllowedHosts, nor for a listed name, localhost or an
// IPv4 address.
func (s *Server) fastHost(ctx *fasthttp.RequestCtx) error {
	if host := ctx.Request.Header.Host(); !allowsHost(s.hosts, host) {
		return s.refusedHost(string(host), ctx.RemoteAddr().String())
	}
	return nil
}
