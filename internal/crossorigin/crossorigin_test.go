package crossorigin

import "testing"

// TestCheck: an Origin is served only when trusted, whether or not it
// matches the Host (a page of a rebound DNS name sends the matching one);
// without an Origin, Sec-Fetch-Site decides as net/http's
// CrossOriginProtection does.
func TestCheck(t *testing.T) {
	trusted := New([]string{"https://app.example.com", "http://localhost:3000"})
	for _, c := range []struct {
		site, origin string
		want         Verdict
	}{
		{"", "", Served}, // curl, server-side clients
		{"same-origin", "", Served},
		{"none", "", Served},
		{"cross-site", "", CrossSite},
		{"same-site", "", CrossSite},
		{"bogus", "", CrossSite},
		{"", "https://app.example.com", Served},
		{"cross-site", "https://app.example.com", Served},
		{"same-origin", "http://localhost:3000", Served},
		// A rebound name: same-origin as far as the browser knows.
		{"same-origin", "http://attacker.example:30020", UntrustedOrigin},
		{"", "http://attacker.example:30020", UntrustedOrigin},
		{"none", "http://127.0.0.1:8080", UntrustedOrigin},
		// Spellings no browser sends for a trusted origin.
		{"", "https://app.example.com/", UntrustedOrigin},
		{"", "HTTPS://app.example.com", UntrustedOrigin},
		{"", "https://App.Example.com", UntrustedOrigin},
		{"", "http://app.example.com", UntrustedOrigin},
		{"", "https://app.example.com:443", UntrustedOrigin},
		{"", "null", UntrustedOrigin},
	} {
		if got := Check(trusted, c.site, c.origin); got != c.want {
			t.Errorf("Check(site %q, origin %q) = %v, want %v", c.site, c.origin, got, c.want)
		}
		if got := Check(trusted, []byte(c.site), []byte(c.origin)); got != c.want {
			t.Errorf("Check([]byte: site %q, origin %q) = %v, want %v", c.site, c.origin, got, c.want)
		}
		if c.origin != "" {
			if got := Check(nil, c.site, c.origin); got != UntrustedOrigin {
				t.Errorf("Check(nil, site %q, origin %q) = %v, want UntrustedOrigin", c.site, c.origin, got)
			}
		}
	}
}

// TestCheckAllocatesNothing: on the bytes of fasthttp's headers too.
func TestCheckAllocatesNothing(t *testing.T) {
	trusted := New([]string{"https://app.example.com"})
	site, origin, other := []byte("cross-site"), []byte("https://app.example.com"), []byte("https://evil.example")
	if n := testing.AllocsPerRun(100, func() {
		if Check(trusted, site, origin) != Served || Check(trusted, site, other) != UntrustedOrigin || Check(trusted, site, nil) != CrossSite {
			t.Fatal("wrong verdict")
		}
	}); n != 0 {
		t.Errorf("%v allocations per Check, want 0", n)
	}
}
