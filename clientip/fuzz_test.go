package clientip

import (
	"net/netip"
	"strings"
	"testing"
)

// referenceXFF is a deliberately naive second implementation of the
// X-Forwarded-For walk: split everything left to right, then walk the
// whole slice from the right. The Resolver must agree with it whenever the
// chain is within MaxHops.
func referenceXFF(lines []string, peer netip.Addr, trusted func(netip.Addr) bool) (netip.Addr, int) {
	var chain []netip.Addr
	for _, l := range lines {
		for _, e := range strings.Split(l, ",") {
			if e = strings.Trim(e, " \t"); e != "" {
				chain = append(chain, parseNode(e))
			}
		}
	}
	last := peer
	for i := len(chain) - 1; i >= 0; i-- {
		if !chain[i].IsValid() {
			return last, len(chain)
		}
		if !trusted(chain[i]) {
			return chain[i], len(chain)
		}
		last = chain[i]
	}
	return last, len(chain)
}

// FuzzClientIP checks the resolver on arbitrary peers and headers. Its
// seeds run in every plain `go test`.
func FuzzClientIP(f *testing.F) {
	seeds := []struct{ remote, xff, fwd string }{
		{"10.0.0.1:80", "203.0.113.9", "for=203.0.113.9"},
		{"10.0.0.1:80", "1.2.3.4, 203.0.113.9, 10.0.0.2", `for=192.0.2.60;proto=http, for="[2001:db8:cafe::17]:4711"`},
		{"[::ffff:10.0.0.1]:80", "::ffff:203.0.113.9", `for="[::ffff:203.0.113.9]"`},
		{"[2001:db8::1]:443", "[2a00:1450::7]:9000, 2001:db8::2", `For="_hidden", for=unknown`},
		{"10.0.0.1:80", "garbage,,, ,10.0.0.2", `for="a\",b";by=x, for=10.0.0.3`},
		{"198.51.100.1:1", "1.2.3.4", `for="1.2.3.4`},
		{"@", "1.2.3.4", "for=1.2.3.4"},
		{"10.0.0.1:80", "fe80::1%eth0, 1.2.3.4:65536", `for="\`},
		{"10.0.0.1:80", strings.Repeat("10.0.0.9,", 40), strings.Repeat(`for="10.0.0.9";`, 5)},
	}
	for _, s := range seeds {
		f.Add(s.remote, s.xff, s.fwd)
	}
	trusted := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("2001:db8::/32"),
		netip.MustParsePrefix("::ffff:172.16.0.0/108"),
	}
	xff := mustResolver(f, Options{TrustedProxies: trusted, IPv6Prefix: 64})
	fwd := mustResolver(f, Options{TrustedProxies: trusted, Header: Forwarded})
	all := mustResolver(f, Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}})

	f.Fuzz(func(t *testing.T, remote, xffLine, fwdLine string) {
		req := request(remote, "X-Forwarded-For", strings.Split(xffLine, "\n")...)
		for _, l := range strings.Split(fwdLine, "\n") {
			req.Header.Add("Forwarded", l)
		}
		peer, peerErr := ParseRemoteAddr(remote)
		for _, r := range []*Resolver{xff, fwd, all} {
			got, err := r.ClientIP(req)
			if (err != nil) != (peerErr != nil) {
				t.Fatalf("ClientIP err = %v, ParseRemoteAddr err = %v", err, peerErr)
			}
			if err != nil {
				continue
			}
			if !got.IsValid() || got.Zone() != "" || got.Is4In6() {
				t.Fatalf("ClientIP = %v: not a normalised address", got)
			}
			if !r.trusts(peer) && got != peer {
				t.Fatalf("untrusted peer %v, yet ClientIP = %v", peer, got)
			}
			if r.trusts(peer) && got != peer && !r.trusts(got) {
				// An untrusted answer other than the peer must come from
				// the header the resolver reads.
				field := req.Header.Values(r.field)
				if len(field) == 0 {
					t.Fatalf("ClientIP = %v with no %s header", got, r.field)
				}
			}
			key, err := r.Key(req)
			if err != nil || key == "" || strings.ContainsAny(key, " ,\"") {
				t.Fatalf("Key = %q, %v", key, err)
			}
		}
		// The X-Forwarded-For walk agrees with the naive reference.
		if peerErr == nil && xff.trusts(peer) {
			lines := req.Header.Values("X-Forwarded-For")
			want, n := referenceXFF(lines, peer, xff.trusts)
			if n <= MaxHops {
				if got, _ := xff.ClientIP(req); got != want {
					t.Fatalf("ClientIP = %v, reference %v (lines %q)", got, want, lines)
				}
			}
		}
		// A Forwarded header without any for= parameter yields the peer.
		if peerErr == nil && !strings.Contains(strings.ToLower(fwdLine), "for") {
			if got, _ := fwd.ClientIP(req); got != peer {
				t.Fatalf("Forwarded without for=: ClientIP = %v, want peer %v", got, peer)
			}
		}
	})
}

// FuzzRoundTrip builds a chain of addresses from fuzz bytes, writes it in
// both header syntaxes and checks that the resolver finds exactly the
// rightmost untrusted address.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte{10, 0, 0, 1, 203, 0, 113, 9}, uint8(0))
	f.Add([]byte{0xff, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 10, 1, 1, 1}, uint8(3))
	f.Add([]byte{10, 9, 9, 9, 10, 8, 8, 8, 10, 7, 7, 7}, uint8(255))
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	xff := mustResolver(f, Options{TrustedProxies: trusted})
	fwd := mustResolver(f, Options{TrustedProxies: trusted, Header: Forwarded})

	f.Fuzz(func(t *testing.T, data []byte, style uint8) {
		var chain []netip.Addr
		for len(data) > 0 && len(chain) < MaxHops {
			if data[0] == 0xff && len(data) >= 17 {
				var b [16]byte
				copy(b[:], data[1:17])
				chain = append(chain, netip.AddrFrom16(b).Unmap())
				data = data[17:]
				continue
			}
			if len(data) < 4 {
				break
			}
			chain = append(chain, netip.AddrFrom4([4]byte(data[:4])))
			data = data[4:]
		}
		if len(chain) == 0 {
			return
		}
		peer := netip.MustParseAddr("10.0.0.1")
		want := peer
		for i := len(chain) - 1; i >= 0; i-- {
			want = chain[i]
			if !xff.trusts(chain[i]) {
				break
			}
		}
		var xs, fs []string
		for i, a := range chain {
			port := style&(1<<(i%8)) != 0
			xs = append(xs, xffNode(a, port))
			fs = append(fs, forwardedNode(a, port))
		}
		remote := netip.AddrPortFrom(peer, 443).String()
		if got, err := xff.ClientIP(request(remote, "X-Forwarded-For", strings.Join(xs, ", "))); err != nil || got != want {
			t.Fatalf("X-Forwarded-For %q: got %v %v, want %v", xs, got, err, want)
		}
		if got, err := fwd.ClientIP(request(remote, "Forwarded", fs...)); err != nil || got != want {
			t.Fatalf("Forwarded %q: got %v %v, want %v", fs, got, err, want)
		}
	})
}

func xffNode(a netip.Addr, port bool) string {
	if !port {
		return a.String()
	}
	return netip.AddrPortFrom(a, 8080).String()
}

func forwardedNode(a netip.Addr, port bool) string {
	switch {
	case a.Is6():
		s := "[" + a.String() + "]"
		if port {
			s += ":4711"
		}
		return `for="` + s + `";proto=https`
	case port:
		return `for="` + a.String() + `:_p1"`
	}
	return "proto=http;for=" + a.String()
}
