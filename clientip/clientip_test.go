package clientip

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

func mustResolver(t testing.TB, opts Options) *Resolver {
	t.Helper()
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustPrefixes(t testing.TB, list ...string) []netip.Prefix {
	t.Helper()
	ps, err := ParsePrefixes(list)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func request(remote string, header string, lines ...string) *http.Request {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = remote
	for _, l := range lines {
		req.Header.Add(header, l)
	}
	return req
}

func TestClientIP(t *testing.T) {
	trusted := []string{"10.0.0.0/8", "2001:db8::/32", "192.0.2.200"}
	tests := []struct {
		name    string
		trusted []string
		header  Header
		remote  string
		field   string // header field the request carries; default the one read
		lines   []string
		want    string
	}{
		{name: "no proxies trusted: header ignored", remote: "203.0.113.9:1234", lines: []string{"1.2.3.4"}, want: "203.0.113.9"},
		{name: "untrusted peer: spoofed header ignored", trusted: trusted, remote: "198.51.100.1:1234", lines: []string{"1.2.3.4"}, want: "198.51.100.1"},
		{name: "trusted peer without header", trusted: trusted, remote: "10.1.2.3:80", want: "10.1.2.3"},
		{name: "trusted peer, one entry", trusted: trusted, remote: "10.0.0.1:80", lines: []string{"203.0.113.9"}, want: "203.0.113.9"},
		{name: "spoofed entry left of client", trusted: trusted, remote: "10.0.0.1:80", lines: []string{"1.2.3.4, 203.0.113.9, 10.0.0.2"}, want: "203.0.113.9"},
		{name: "several header lines", trusted: trusted, remote: "10.0.0.1:80", lines: []string{"1.2.3.4, 203.0.113.9", "10.0.0.2", "10.0.0.3"}, want: "203.0.113.9"},
		{name: "single trusted address", trusted: trusted, remote: "192.0.2.200:80", lines: []string{"192.0.2.201"}, want: "192.0.2.201"},
		{name: "junk where client expected", trusted: trusted, remote: "10.0.0.1:80", lines: []string{"1.2.3.4, garbage, 10.0.0.2"}, want: "10.0.0.2"},
		{name: "junk as only entry", trusted: trusted, remote: "10.0.0.1:80", lines: []string{"unknown"}, want: "10.0.0.1"},
		{name: "junk left of client", trusted: trusted, remote: "10.0.0.1:80", lines: []string{"<script>, 203.0.113.9"}, want: "203.0.113.9"},
		{name: "empty elements skipped", trusted: trusted, remote: "10.0.0.1:80", lines: []string{"203.0.113.9,, ,\t,10.0.0.2,"}, want: "203.0.113.9"},
		{name: "all trusted: leftmost", trusted: trusted, remote: "10.0.0.1:80", lines: []string{"10.0.0.3, 10.0.0.2"}, want: "10.0.0.3"},
		{name: "IPv4 with port", trusted: trusted, remote: "10.0.0.1:80", lines: []string{"203.0.113.9:5555"}, want: "203.0.113.9"},
		{name: "IPv4 with bad port", trusted: trusted, remote: "10.0.0.1:80", lines: []string{"203.0.113.9:99999"}, want: "10.0.0.1"},
		{name: "IPv6 peer and entries", trusted: trusted, remote: "[2001:db8::1]:443", lines: []string{"2a00:1450::1, 2001:db8:beef::5"}, want: "2a00:1450::1"},
		{name: "bracketed IPv6 with port", trusted: trusted, remote: "[2001:db8::1]:443", lines: []string{"[2a00:1450::7]:9000"}, want: "2a00:1450::7"},
		{name: "IPv4-mapped peer is trusted as IPv4", trusted: trusted, remote: "[::ffff:10.0.0.1]:80", lines: []string{"203.0.113.9"}, want: "203.0.113.9"},
		{name: "IPv4-mapped entry normalised", trusted: trusted, remote: "10.0.0.1:80", lines: []string{"::ffff:203.0.113.9"}, want: "203.0.113.9"},
		{name: "IPv4-mapped untrusted peer normalised", remote: "[::ffff:198.51.100.7]:80", want: "198.51.100.7"},
		{name: "mapped trusted prefix", trusted: []string{"::ffff:10.0.0.0/104"}, remote: "10.9.9.9:80", lines: []string{"203.0.113.9"}, want: "203.0.113.9"},
		{name: "zone dropped", trusted: trusted, remote: "10.0.0.1:80", lines: []string{"fe80::1%eth0"}, want: "fe80::1"},
		{name: "bare remote address", remote: "203.0.113.9", want: "203.0.113.9"},
		{name: "X-Forwarded-For ignored when reading Forwarded", trusted: trusted, header: Forwarded, remote: "10.0.0.1:80", field: "X-Forwarded-For", lines: []string{"203.0.113.9"}, want: "10.0.0.1"},
		{name: "Forwarded ignored when reading X-Forwarded-For", trusted: trusted, remote: "10.0.0.1:80", field: "Forwarded", lines: []string{"for=203.0.113.9"}, want: "10.0.0.1"},
		{name: "Forwarded: RFC 7239 example", trusted: []string{"0.0.0.0/0", "::/0"}, header: Forwarded, remote: "10.0.0.1:80",
			lines: []string{`for=192.0.2.60;proto=http;by=203.0.113.43, for="[2001:db8:cafe::17]:4711"`}, want: "192.0.2.60"},
		{name: "Forwarded: rightmost untrusted", trusted: trusted, header: Forwarded, remote: "10.0.0.1:80",
			lines: []string{`for=1.2.3.4, for="[2a00:1450::9]:4711";proto=https`, "for=10.0.0.2"}, want: "2a00:1450::9"},
		{name: "Forwarded: case-insensitive name", trusted: trusted, header: Forwarded, remote: "10.0.0.1:80", lines: []string{"FOR=203.0.113.9"}, want: "203.0.113.9"},
		{name: "Forwarded: unknown", trusted: trusted, header: Forwarded, remote: "10.0.0.1:80", lines: []string{"for=1.2.3.4, for=unknown"}, want: "10.0.0.1"},
		{name: "Forwarded: obfuscated", trusted: trusted, header: Forwarded, remote: "10.0.0.1:80", lines: []string{`for="_gazonk"`}, want: "10.0.0.1"},
		{name: "Forwarded: obfuscated port", trusted: trusted, header: Forwarded, remote: "10.0.0.1:80", lines: []string{`for="[2a00:1450::9]:_p1"`}, want: "2a00:1450::9"},
		{name: "Forwarded: comma inside quotes", trusted: trusted, header: Forwarded, remote: "10.0.0.1:80", lines: []string{`for="1.2.3.4, for=5.6.7.8"`}, want: "10.0.0.1"},
		{name: "Forwarded: escaped quote", trusted: trusted, header: Forwarded, remote: "10.0.0.1:80", lines: []string{`for="a\",b", for=203.0.113.9`}, want: "203.0.113.9"},
		{name: "Forwarded: unbalanced client quote", trusted: trusted, header: Forwarded, remote: "10.0.0.1:80", lines: []string{`for="1.2.3.4, for=203.0.113.9`}, want: "203.0.113.9"},
		{name: "Forwarded: element without for", trusted: trusted, header: Forwarded, remote: "10.0.0.1:80", lines: []string{"for=1.2.3.4, proto=https"}, want: "10.0.0.1"},
		{name: "Forwarded: duplicate for", trusted: trusted, header: Forwarded, remote: "10.0.0.1:80", lines: []string{"for=1.2.3.4;for=203.0.113.9"}, want: "10.0.0.1"},
		{name: "Forwarded: unquoted IPv6 accepted", trusted: trusted, header: Forwarded, remote: "10.0.0.1:80", lines: []string{"for=2a00:1450::9"}, want: "2a00:1450::9"},
		{name: "Forwarded: by and host only", trusted: trusted, header: Forwarded, remote: "10.0.0.1:80", lines: []string{"for=203.0.113.9;by=10.0.0.1;host=example.com"}, want: "203.0.113.9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustResolver(t, Options{TrustedProxies: mustPrefixes(t, tt.trusted...), Header: tt.header})
			field := tt.field
			if field == "" {
				field = tt.header.String()
			}
			got, err := r.ClientIP(request(tt.remote, field, tt.lines...))
			if err != nil {
				t.Fatal(err)
			}
			if want := netip.MustParseAddr(tt.want); got != want {
				t.Fatalf("ClientIP = %v, want %v", got, want)
			}
		})
	}
}

func TestClientIPNoAddress(t *testing.T) {
	r := mustResolver(t, Options{})
	for _, remote := range []string{"", "@", "/tmp/sock", "example.com:80", "[::1", "1.2.3.4:80:90"} {
		_, err := r.ClientIP(request(remote, "X-Forwarded-For"))
		if !errors.Is(err, ErrNoAddress) {
			t.Errorf("remote %q: err = %v, want ErrNoAddress", remote, err)
		}
	}
}

func TestMaxHops(t *testing.T) {
	r := mustResolver(t, Options{TrustedProxies: mustPrefixes(t, "10.0.0.0/8")})
	var entries []string
	entries = append(entries, "203.0.113.9")
	for i := range MaxHops + 5 {
		entries = append(entries, fmt.Sprintf("10.0.%d.%d", i/250, i%250+1))
	}
	got, err := r.ClientIP(request("10.255.0.1:80", "X-Forwarded-For", strings.Join(entries, ", ")))
	if err != nil {
		t.Fatal(err)
	}
	// The walk reads MaxHops entries from the right, all trusted, and then
	// stops at the last one it read rather than believing more.
	if want := netip.MustParseAddr(entries[len(entries)-MaxHops]); got != want {
		t.Fatalf("ClientIP = %v, want %v", got, want)
	}
	// Within the bound, the client is found.
	got, _ = r.ClientIP(request("10.255.0.1:80", "X-Forwarded-For", strings.Join(entries[:MaxHops], ", ")))
	if want := netip.MustParseAddr("203.0.113.9"); got != want {
		t.Fatalf("ClientIP within bound = %v, want %v", got, want)
	}
}

func TestKeyGroupsIPv6(t *testing.T) {
	r := mustResolver(t, Options{IPv6Prefix: 64})
	tests := []struct{ remote, want string }{
		{"[2001:db8:1:2:aaaa::1]:1", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:bbbb:cccc:dddd:eeee]:1", "2001:db8:1:2::/64"},
		{"[2001:db8:1:3::1]:1", "2001:db8:1:3::/64"},
		{"203.0.113.9:1", "203.0.113.9"},
		{"[::ffff:203.0.113.9]:1", "203.0.113.9"},
	}
	for _, tt := range tests {
		got, err := r.Key(request(tt.remote, "X-Forwarded-For"))
		if err != nil {
			t.Fatal(err)
		}
		if got != tt.want {
			t.Errorf("Key(%s) = %q, want %q", tt.remote, got, tt.want)
		}
	}
	full := mustResolver(t, Options{IPv6Prefix: 128})
	if got, _ := full.Key(request("[2001:db8:1:2:aaaa::1]:1", "X")); got != "2001:db8:1:2:aaaa::1" {
		t.Errorf("ungrouped Key = %q", got)
	}
}

// TestKeyGroupsIPv6ByDefault: with the zero Options, an IPv6 client that
// sends from many addresses of its /64 is one client, so a per-IP limit
// cannot be escaped by picking a new source address for each request.
// (Before, each address was a client of its own.)
func TestKeyGroupsIPv6ByDefault(t *testing.T) {
	r := mustResolver(t, Options{})
	seen := map[string]bool{}
	for _, remote := range []string{"[2001:db8:1:2::1]:1", "[2001:db8:1:2::2]:1", "[2001:db8:1:2:ffff:ffff:ffff:ffff]:9", "[2001:db8:1:2::1%eth0]:1"} {
		got, err := r.Key(request(remote, "X-Forwarded-For"))
		if err != nil {
			t.Fatal(err)
		}
		seen[got] = true
	}
	if len(seen) != 1 || !seen["2001:db8:1:2::/64"] {
		t.Fatalf("keys of one /64 = %v, want only 2001:db8:1:2::/64", seen)
	}
	if got := r.Group(netip.MustParseAddr("2001:db8:1:3::1")); got != "2001:db8:1:3::/64" {
		t.Fatalf("Group of the next /64 = %q", got)
	}
	if got := r.Group(netip.MustParseAddr("::ffff:192.0.2.7")); got != "192.0.2.7" {
		t.Fatalf("Group of an IPv4-mapped address = %q, want 192.0.2.7", got)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, opts := range []Options{
		{IPv6Prefix: 129},
		{IPv6Prefix: -1},
		{Header: 2},
		{TrustedProxies: []netip.Prefix{{}}},
	} {
		if _, err := New(opts); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("New(%+v) err = %v, want ErrInvalidOptions", opts, err)
		}
	}
}

func TestParsePrefixes(t *testing.T) {
	got, err := ParsePrefixes([]string{"10.0.0.0/8", " 192.0.2.7 ", "2001:db8::/32", "::1"})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32"),
		netip.MustParsePrefix("2001:db8::/32"), netip.MustParsePrefix("::1/128"),
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"10.0.0.0/33", "example.com", "", "fe80::1%eth0", "1.2.3.4/8/9"} {
		if _, err := ParsePrefixes([]string{bad}); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("ParsePrefixes(%q) err = %v, want ErrInvalidOptions", bad, err)
		}
	}
}
