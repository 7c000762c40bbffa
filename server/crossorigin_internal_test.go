package server

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// TestFastCrossOriginAllocatesNothing: on fasthttp's native path, the
// cross-origin check of a request that is not from a browser (no
// Sec-Fetch-Site, no Origin) allocates nothing; one from a browser page
// of another site is refused.
func TestFastCrossOriginAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	xo, err := newCrossOrigin(nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{xorigin: xo}
	var ctx fasthttp.RequestCtx
	h := &ctx.Request.Header
	h.SetMethod(fasthttp.MethodPost)
	h.SetRequestURI("/v1/check")
	h.SetHost("floodgate.internal:8080")
	h.SetContentType("application/x-www-form-urlencoded")
	h.Set("User-Agent", "curl/8.5.0")
	if n := testing.AllocsPerRun(200, func() {
		if err := s.fastCrossOrigin(&ctx, "/v1/check"); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%.1f allocations per check of a request without Sec-Fetch-Site or Origin, want 0", n)
	}
	h.Set("Sec-Fetch-Site", "cross-site")
	if err := s.fastCrossOrigin(&ctx, "/v1/check"); err == nil {
		t.Error("a cross-site request passed")
	}
	h.Del("Sec-Fetch-Site")
	h.Set("Origin", "http://floodgate.internal:8080")
	if err := s.fastCrossOrigin(&ctx, "/v1/check"); err != nil {
		t.Errorf("a same-origin request (Origin matching Host) was refused: %v", err)
	}
}
