// Package clientip finds the address of the client behind an HTTP request.
//
// The peer address (http.Request.RemoteAddr) is the only one the server has
// seen for itself. Forwarding headers (X-Forwarded-For, Forwarded) are
// written by whoever sent the request, so they are believed only as far as
// they were written by a configured trusted proxy: a [Resolver] walks the
// forwarding chain from the right (the peer) to the left and returns the
// first address that is not a trusted proxy. A header sent by an untrusted
// peer is ignored entirely, so a client cannot choose the address it is
// rate limited under.
//
// Addresses are normalised: an IPv4-mapped IPv6 address (::ffff:192.0.2.1)
// is the IPv4 address it maps, and IPv6 zones are dropped. [Resolver.Key]
// groups IPv6 clients by network, by default their /64 (the block one
// subscriber usually holds, and can pick any of its 2^64 addresses from),
// so that rotating through one's own /64 does not buy more requests.
package clientip

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/floodgate-rl/floodgate/internal/clip"
)

// DefaultIPv6Prefix is the IPv6 network length a Resolver counts as one
// client when Options.IPv6Prefix is 0.
const DefaultIPv6Prefix = 64

// ErrInvalidOptions reports a Resolver configuration that cannot be used.
var ErrInvalidOptions = errors.New("clientip: invalid options")

// ErrNoAddress reports a request whose peer address cannot be parsed as an
// IP address (for example a request served over a Unix socket).
var ErrNoAddress = errors.New("clientip: no client address")

// Header selects the forwarding header a Resolver reads from trusted
// proxies. Read the one your proxies append to, and only that one: a header
// the proxies do not maintain is written entirely by the client.
type Header uint8

// The forwarding headers.
const (
	// XForwardedFor is the de facto standard "X-Forwarded-For: client,
	// proxy1, proxy2". It is the zero value.
	XForwardedFor Header = iota
	// Forwarded is RFC 7239's "Forwarded: for=client;proto=https,
	// for=proxy1"; only the for= parameter is used.
	Forwarded
)

// String returns the header's canonical field name.
func (h Header) String() string {
	switch h {
	case XForwardedFor:
		return "X-Forwarded-For"
	case Forwarded:
		return "Forwarded"
	}
	return fmt.Sprintf("Header(%d)", uint8(h))
}

// Options configures a Resolver. The zero value trusts no proxy: the client
// is always the peer.
type Options struct {
	// TrustedProxies lists the networks of the proxies allowed to report
	// the client's address. A peer (or forwarding entry) inside one of
	// them is skipped on the way left. Default none. IPv4-mapped IPv6
	// prefixes (::ffff:10.0.0.0/104) are converted to IPv4. Use
	// ParsePrefixes to read them from configuration.
	TrustedProxies []netip.Prefix
	// Header is the forwarding header the trusted proxies append to.
	// Default XForwardedFor.
	Header Header
	// IPv6Prefix is the length of the IPv6 network Key counts as one
	// client: 1..127 give the network ("2001:db8:1:2::/64"), 128 the full
	// address ("2001:db8:1:2::7"). Default (0) 64: a client given a /64
	// can send from any of its addresses, so counting each address
	// alone would give it 2^64 budgets. IPv4 clients are never grouped.
	IPv6Prefix int
}

// Resolver finds client addresses. It is immutable and safe for concurrent
// use.
type Resolver struct {
	trusted    []netip.Prefix
	field      string
	header     Header
	ipv6Prefix int
}

// New returns a Resolver for opts.
func New(opts Options) (*Resolver, error) {
	if opts.Header > Forwarded {
		return nil, fmt.Errorf("%w: unknown header %d (want XForwardedFor or Forwarded)", ErrInvalidOptions, opts.Header)
	}
	if opts.IPv6Prefix < 0 || opts.IPv6Prefix > 128 {
		return nil, fmt.Errorf("%w: IPv6 prefix %d out of range 0..128", ErrInvalidOptions, opts.IPv6Prefix)
	}
	if opts.IPv6Prefix == 0 {
		opts.IPv6Prefix = DefaultIPv6Prefix
	}
	r := &Resolver{header: opts.Header, field: opts.Header.String(), ipv6Prefix: opts.IPv6Prefix}
	for i, p := range opts.TrustedProxies {
		if !p.IsValid() {
			return nil, fmt.Errorf("%w: trusted proxy %d is not a valid prefix", ErrInvalidOptions, i)
		}
		r.trusted = append(r.trusted, normalisePrefix(p))
	}
	return r, nil
}

// ParsePrefixes parses networks in CIDR notation ("10.0.0.0/8",
// "2001:db8::/32") or single addresses ("192.0.2.7", meaning /32 or /128),
// as found in configuration files. It reports the first entry that is
// neither, wrapped in ErrInvalidOptions.
func ParsePrefixes(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		s = strings.TrimSpace(s)
		if strings.Contains(s, "/") {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("%w: trusted proxy %q: %v", ErrInvalidOptions, s, err)
			}
			out = append(out, p)
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("%w: trusted proxy %q is neither an address nor a network", ErrInvalidOptions, s)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// normalisePrefix masks p and turns an IPv4-mapped IPv6 prefix of at least
// 96 bits into the IPv4 prefix it covers, so it matches normalised
// addresses.
func normalisePrefix(p netip.Prefix) netip.Prefix {
	a := p.Addr().WithZone("")
	if a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked()
	}
	return netip.PrefixFrom(a, p.Bits()).Masked()
}

// normalise drops the zone and unmaps IPv4-mapped IPv6 addresses.
func normalise(a netip.Addr) netip.Addr { return a.WithZone("").Unmap() }

// trusts reports whether a is inside a trusted proxy network.
func (r *Resolver) trusts(a netip.Addr) bool {
	for _, p := range r.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ClientIP returns the client's address: the peer's unless the peer is a
// trusted proxy, and then the rightmost address of the forwarding header
// that is not a trusted proxy. If every address of the chain is trusted,
// the leftmost is the client. An entry that is not an address (junk,
// "unknown", an obfuscated identifier) where the walk expected one ends the
// walk: whatever lies further left was written by an unknown party, so the
// trusted proxy that forwarded the junk is taken as the client. Several
// header lines are read in order as one list. It fails, wrapping
// ErrNoAddress, only when the peer address itself is not an IP address.
func (r *Resolver) ClientIP(req *http.Request) (netip.Addr, error) {
	peer, err := ParseRemoteAddr(req.RemoteAddr)
	if err != nil {
		return netip.Addr{}, err
	}
	if !r.trusts(peer) {
		return peer, nil
	}
	lines := req.Header.Values(r.field)
	if len(lines) == 0 {
		return peer, nil
	}
	client := peer
	hops(lines, r.header == Forwarded, func(a netip.Addr) bool {
		if !a.IsValid() {
			return false // junk: keep the last trusted hop
		}
		client = a
		return r.trusts(a)
	})
	return client, nil
}

// Key returns the identity to rate limit the request's client under: an
// IPv4 client's address in its canonical text form ("192.0.2.1"), an IPv6
// client's network of Options.IPv6Prefix bits ("2001:db8:1:2::/64" by
// default), or its address ("2001:db8::1") when that is 128.
func (r *Resolver) Key(req *http.Request) (string, error) {
	a, err := r.ClientIP(req)
	if err != nil {
		return "", err
	}
	return r.Group(a), nil
}

// Group returns the identity of address a as Key would: its canonical
// text, or its IPv6 network of Options.IPv6Prefix bits.
func (r *Resolver) Group(a netip.Addr) string {
	a = normalise(a)
	if r.ipv6Prefix < 128 && a.Is6() {
		p, err := a.Prefix(r.ipv6Prefix)
		if err == nil {
			return p.String()
		}
	}
	return a.String()
}

// ParseRemoteAddr parses a peer address as net/http sets
// Request.RemoteAddr ("192.0.2.1:1234", "[2001:db8::1]:1234"), also
// accepting a bare address. The result is normalised (no zone, IPv4-mapped
// addresses unmapped). Anything else fails with ErrNoAddress.
func ParseRemoteAddr(s string) (netip.Addr, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return normalise(ap.Addr()), nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return normalise(a), nil
	}
	if host, _, err := net.SplitHostPort(s); err == nil {
		if a, err := netip.ParseAddr(host); err == nil {
			return normalise(a), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%w: peer address %q is not an IP address", ErrNoAddress, clip.Text(s, 64))
}
