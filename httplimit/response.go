package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// ProblemContentType is the media type of the middleware's error bodies.
const ProblemContentType = "application/problem+json"

// Problem is the RFC 9457 problem details body of every response the
// middleware writes itself (429, 503, 400, 500), but for a request whose
// client went away before its decision, which gets no body (see
// Options.OnStoreError). Type is "about:blank", so
// Title is the status text; the extension members say which policy denied
// the request and why.
type Problem struct {
	// Type is the problem type URI, "about:blank".
	Type string `json:"type"`
	// Title is the HTTP status text, e.g. "Too Many Requests".
	Title string `json:"title"`
	// Status is the HTTP status code, e.g. 429.
	Status int `json:"status"`
	// Detail explains this occurrence in English.
	Detail string `json:"detail,omitempty"`
	// Policy is the name of the policy that denied the request (429), or
	// that the request carries no key for (400). For a 503 (store failed
	// closed) or a 500 (a policy the store refuses) it names the enforced
	// policies of the failed decision, comma-separated ("per-key,global").
	Policy string `json:"policy,omitempty"`
	// Reason is the floodgate.Reason of the denial: "limited", or
	// "cost_exceeds_limit" for a request that can never be admitted.
	Reason string `json:"reason,omitempty"`
	// RetryAfter repeats the Retry-After header, in whole seconds; absent
	// when retrying cannot help (cost_exceeds_limit).
	RetryAfter int64 `json:"retry_after,omitempty"`
	// Limit is the denying policy's limit.
	Limit int64 `json:"limit,omitempty"`
	// Reset repeats X-RateLimit-Reset: Unix seconds when the identity's
	// state is fresh again.
	Reset int64 `json:"reset,omitempty"`
}

// writeProblem writes p as the whole response, with the extra headers.
func writeProblem(w http.ResponseWriter, p Problem, extra map[string]string) {
	h := w.Header()
	for k, v := range extra {
		h.Set(k, v)
	}
	h.Set("Content-Type", ProblemContentType)
	h.Set("Cache-Control", "no-store")
	body, err := json.Marshal(p)
	if err != nil {
		// Problem holds only strings and integers; Marshal cannot fail.
		body = []byte(`{"type":"about:blank","status":` + strconv.Itoa(p.Status) + `}`)
	}
	body = append(body, '\n')
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// setRateHeaders writes the X-RateLimit-* fields of the binding layer and,
// with ietf, the draft RateLimit-Policy and RateLimit fields of every
// layer. It replaces those an outer middleware wrote, the IETF fields
// included when ietf is off (it deletes them): one response describes one
// middleware's rules, the innermost's.
func setRateHeaders(h http.Header, d floodgate.Decision, rules []Rule, now time.Time, ietf bool) {
	res := d.Result()
	h.Set("X-RateLimit-Limit", itoa(res.Limit))
	h.Set("X-RateLimit-Remaining", itoa(res.Remaining))
	h.Set("X-RateLimit-Reset", itoa(resetSeconds(res.ResetAt)))
	if !ietf {
		h.Del("RateLimit-Policy")
		h.Del("RateLimit")
		return
	}
	var pol, cur strings.Builder
	for i, rule := range rules {
		if i > 0 {
			pol.WriteString(", ")
			cur.WriteString(", ")
		}
		p, l := rule.Policy, d.Layers[i]
		// Policy names are [A-Za-z0-9_.-], valid inside an sf-string.
		pol.WriteString(`"` + p.Name + `";q=` + itoa(p.Limit) + ";w=" + itoa(ceilSeconds(quotaWindow(p, now))))
		cur.WriteString(`"` + p.Name + `";r=` + itoa(l.Remaining) + ";t=" + itoa(ceilSeconds(l.ResetAt.Sub(now))))
	}
	h.Set("RateLimit-Policy", pol.String())
	h.Set("RateLimit", cur.String())
}

// quotaWindow returns the length of p's window at now: for a calendar
// quota, which has no Window, the length of the period now falls in (a
// month of 28 to 31 days, a day of 23 to 25 hours across a DST change).
func quotaWindow(p floodgate.Policy, now time.Time) time.Duration {
	if p.Algorithm == floodgate.Quota {
		period := p.Calendar.PeriodAt(now)
		return period.End.Sub(period.Start)
	}
	return p.Window
}

// resetSeconds returns t in Unix seconds, rounded up so a client waiting
// until then is never early.
func resetSeconds(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// retryAfterSeconds returns d in whole seconds, rounded up, at least 1.
func retryAfterSeconds(d time.Duration) int64 { return max(ceilSeconds(d), 1) }

// ceilSeconds returns d in whole seconds rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func quote(s string) string { return strconv.Quote(s) }
