package envoyrls

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// envoyDocParagraph returns the paragraph of docs/envoy.md that starts
// with start, its lines joined by single spaces.
func envoyDocParagraph(t *testing.T, start string) string {
	t.Helper()
	raw, err := os.ReadFile("../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, p, ok := strings.Cut(string(raw), start)
	if !ok {
		t.Fatalf("docs/envoy.md has no paragraph starting %q", start)
	}
	p, _, _ = strings.Cut(p, "\n\n")
	return start + " " + strings.Join(strings.Fields(p), " ")
}

// TestRefusedOverrideUnitsDocumented: a limit override in UNKNOWN (0, the
// unit left unset) or in a number neither enum names (8) is refused with
// INVALID_ARGUMENT and counted as limit_override, as MONTH, YEAR and WEEK
// are, and docs/envoy.md's list of bad requests names them; it named
// MONTH, YEAR and WEEK only (a re-walk).
func TestRefusedOverrideUnitsDocumented(t *testing.T) {
	rejected := make(chan Rejection, 4)
	r := newMemRig(t, apiConfig, Options{OnRejected: func(why Rejection) { rejected <- why }})
	doc := envoyDocParagraph(t, "Bad requests get the gRPC status")
	for _, tt := range []struct {
		unit       typev3.RateLimitUnit
		want, said string
	}{
		{typev3.RateLimitUnit_UNKNOWN, "limit override unit UNKNOWN is not supported", "`UNKNOWN`"},
		{typev3.RateLimitUnit(8), "limit override unit 8 is not supported", "`limit override unit 8 is not supported`"},
	} {
		d := desc("user=hal")
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: tt.unit}
		_, err := r.client.ShouldRateLimit(context.Background(), request("api", d))
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tt.want) {
			t.Errorf("unit %d: %v, want InvalidArgument saying %q", tt.unit, err, tt.want)
		}
		if why := <-rejected; why != RejectLimitOverride {
			t.Errorf("unit %d: rejected as %q, want %q", tt.unit, why, RejectLimitOverride)
		}
		if !strings.Contains(doc, tt.said) {
			t.Errorf("docs/envoy.md's bad requests do not name unit %d (%s):\n%s", tt.unit, tt.said, doc)
		}
	}
}

// TestScaledLimitRemainingDocumented: with a window that is not whole
// seconds, current_limit is scaled but limit_remaining counts the rule's
// own window (4 per 1.5 s: limit 8 per 3 × SECOND, remaining 3), and in
// the fallback for numbers past 32 bits what remains exceeds the limit
// reported (4,000,000,000 per 1.5 s: 2,666,666,667 per SECOND, remaining
// 3,999,999,999); docs/envoy.md says both next to the scaling (a re-walk).
func TestScaledLimitRemainingDocumented(t *testing.T) {
	r := newMemRig(t, `domain: f
descriptors:
  - key: k
    rate_limit: {requests_per_unit: 4, window: 1500ms}
  - key: big
    rate_limit: {requests_per_unit: 4000000000, window: 1500ms}
`, Options{ResponseHeaders: true})
	for _, tt := range []struct {
		desc             string
		limit, remaining uint32
	}{{"k=a", 8, 3}, {"big=a", 2_666_666_667, 3_999_999_999}} {
		resp := r.call(t, request("f", desc(tt.desc)))
		st := resp.GetStatuses()[0]
		if h := headers(resp); h["X-RateLimit-Limit"] != fmt.Sprint(tt.limit) || h["X-RateLimit-Remaining"] != fmt.Sprint(tt.remaining) {
			t.Errorf("%s: headers %v, want limit %d, remaining %d", tt.desc, h, tt.limit, tt.remaining)
		}
		if st.GetCurrentLimit().GetRequestsPerUnit() != tt.limit || st.GetLimitRemaining() != tt.remaining {
			t.Errorf("%s: current_limit %v, limit_remaining %d; want %d, %d", tt.desc, st.GetCurrentLimit(), st.GetLimitRemaining(), tt.limit, tt.remaining)
		}
	}
	doc := envoyDocParagraph(t, "Envoy's API can only report whole units")
	for _, said := range []string{"`limit_remaining`", "remaining 3", "3,999,999,999"} {
		if !strings.Contains(doc, said) {
			t.Errorf("docs/envoy.md's scaling paragraph does not say %q:\n%s", said, doc)
		}
	}
}
