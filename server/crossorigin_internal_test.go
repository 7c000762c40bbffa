package server

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// TestFastChecksAllocateNothing: on fasthttp's native path, the checks
// of a request's Host and origin allocate nothing for a request that is
// not from a browser (no Sec-Fetch-Site, no Origin), nor for one from a
// trusted page, without AllowedHosts or with them and a Host they allow
// by name, wildcard, localhost or IPv4 address; a request from a page of
// another site, or of a name rebound to the service (Origin matching
// Host), and one to a Host not allowed are refused.
func TestFastChecksAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	xo, err := newCrossOrigin([]string{"https://app.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	hosts, err := newAllowedHosts([]string{"floodgate.internal", "*.floodgate.example"})
	if err != nil {
		t.Fatal(err)
	}
	var ctx fasthttp.RequestCtx
	h := &ctx.Request.Header
	h.SetMethod(fasthttp.MethodPost)
	h.SetRequestURI("/v1/check")
	h.SetContentType("application/x-www-form-urlencoded")
	h.Set("User-Agent", "curl/8.5.0")
	for _, s := range []*Server{{xorigin: xo}, {xorigin: xo, hosts: hosts}} {
		for _, host := range []string{"floodgate.internal:8080", "FloodGate.Internal", "eu.floodgate.example:8080", "localhost:8080", "10.1.2.3:8080"} {
			h.SetHost(host)
			for _, origin := range []string{"", "https://app.example.com"} {
				h.Del("Origin")
				if origin != "" {
					h.Set("Origin", origin)
				}
				if n := testing.AllocsPerRun(200, func() {
					if err := s.fastHost(&ctx); err != nil {
						t.Fatal(err)
					}
					if err := s.fastCrossOrigin(&ctx); err != nil {
						t.Fatal(err)
					}
				}); n != 0 {
					t.Errorf("%.1f allocations per check of Host %q, Origin %q (allowed hosts %v), want 0", n, host, origin, s.hosts != nil)
				}
			}
		}
	}
	s := &Server{xorigin: xo, hosts: hosts}
	h.SetHost("floodgate.internal:8080")
	h.Set("Sec-Fetch-Site", "cross-site")
	h.Del("Origin")
	if err := s.fastCrossOrigin(&ctx); err == nil {
		t.Error("a cross-site request passed")
	}
	h.Set("Sec-Fetch-Site", "same-origin")
	h.Set("Origin", "http://floodgate.internal:8080")
	if err := s.fastCrossOrigin(&ctx); err == nil {
		t.Error("a request from a page of the Host's own origin passed (floodgate serves no page: a rebound name's)")
	}
}
