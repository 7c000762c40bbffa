package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/degraded"
	"github.com/floodgate-rl/floodgate/internal/nilcheck"
	"github.com/floodgate-rl/floodgate/internal/plural"
	"github.com/floodgate-rl/floodgate/internal/redact"
)

// Handler wraps next: every request is decided against the rules before
// next sees it. Its signature makes m.Handler a
// func(http.Handler) http.Handler. Like http.ServeMux.Handle, it panics
// at once when next is nil (a nil http.HandlerFunc or pointer included),
// rather than on the first request it admits.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	if nilcheck.IsNil(next) {
		panic(fmt.Sprintf("httplimit: Middleware.Handler: nil handler (%T)", next))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m.opts.Skip != nil && m.opts.Skip(r) {
			next.ServeHTTP(w, r)
			return
		}
		if m.admit(w, r) {
			next.ServeHTTP(w, r)
		}
	})
}

// admit decides r, writes the rate limit headers or the whole refusal, and
// reports whether the request may be served.
func (m *Middleware) admit(w http.ResponseWriter, r *http.Request) bool {
	now := m.opts.Clock()
	cost := int64(1)
	if m.opts.Cost != nil {
		c, err := m.opts.Cost(r)
		if err == nil {
			err = floodgate.ValidateCost(c)
		}
		if err != nil {
			m.log(r.Context(), slog.LevelInfo, "rate limit: request cost rejected", slog.String("error", err.Error()))
			writeProblem(w, Problem{
				Type: "about:blank", Title: http.StatusText(http.StatusBadRequest), Status: http.StatusBadRequest,
				Detail: "the cost of this request could not be determined",
			}, nil)
			return false
		}
		cost = c
	}
	specs, rules, ok := m.specs(w, r, m.enforced)
	if !ok {
		return false
	}
	if len(specs) > 0 {
		ctx := r.Context()
		var dg *degraded.Record
		if m.degrades {
			// Only for a store with failure modes (fallback.Store):
			// the other stores' decisions cost no context of their own.
			ctx, dg = degraded.NewContext(ctx)
		}
		d, err := m.decide(ctx, now, cost, specs)
		if err != nil && m.requestEnded(w, r, err) {
			return false
		}
		if err != nil {
			return m.storeFailed(w, r, err, false, rules)
		}
		// The store may answer after the client has gone (a go-redis
		// call already waiting for Redis's reply is not ended by the
		// request's cancellation): such a request is not served either,
		// though what the store admitted stays counted.
		if m.decidedTooLate(w, r, d.Allowed) {
			return false
		}
		if dg != nil && !m.degraded(w, r, d, dg.Outcome(), rules) {
			return false
		}
		if d.Allowed && cost > 0 {
			if delay := shapingDelay(d); delay > 0 && !m.waitOut(w, r, delay) {
				return false
			}
		}
		setRateHeaders(w.Header(), d, rules, now, m.opts.IETFHeaders)
		if !d.Allowed {
			m.deny(w, d, rules, cost)
			return false
		}
	}
	if len(m.shadow) > 0 {
		m.runShadow(w, r, now, cost)
	}
	return true
}

// specs builds the layers of rules for r. It answers the request itself
// and reports false when a required rule has no key.
func (m *Middleware) specs(w http.ResponseWriter, r *http.Request, rules []Rule) ([]floodgate.LayerSpec, []Rule, bool) {
	specs := make([]floodgate.LayerSpec, 0, len(rules))
	used := rules[:0:0]
	for _, rule := range rules {
		id := ""
		if rule.Key != nil {
			v, err := rule.Key(r)
			if err == nil && v == "" {
				// A KeyFunc that found no identity but said nothing: not
				// the server-wide budget (that is a nil Key), or every
				// such request would share one client's limit.
				err = errEmptyKey
			}
			switch {
			case err == nil:
				id = v
			case errors.Is(err, ErrNoKey) && rule.Optional:
				continue
			case errors.Is(err, ErrNoKey):
				m.log(r.Context(), slog.LevelInfo, "rate limit: request without key", slog.String("policy", rule.Policy.Name), slog.String("error", err.Error()))
				writeProblem(w, Problem{
					Type: "about:blank", Title: http.StatusText(http.StatusBadRequest), Status: http.StatusBadRequest,
					Detail: "this request does not identify its client as rate limit policy " + quote(rule.Policy.Name) + " requires" + missingWhat(err),
					Policy: rule.Policy.Name,
				}, nil)
				return nil, nil, false
			default:
				m.log(r.Context(), slog.LevelWarn, "rate limit: key function failed", slog.String("policy", rule.Policy.Name), slog.String("error", err.Error()))
				writeProblem(w, Problem{
					Type: "about:blank", Title: http.StatusText(http.StatusInternalServerError), Status: http.StatusInternalServerError,
					Detail: "the rate limiter could not identify the client",
				}, nil)
				return nil, nil, false
			}
		}
		specs = append(specs, floodgate.LayerSpec{Policy: rule.Policy, Identity: id})
		used = append(used, rule)
	}
	return specs, used, true
}

// decide runs one store call under the optional timeout.
func (m *Middleware) decide(ctx context.Context, now time.Time, cost int64, specs []floodgate.LayerSpec) (floodgate.Decision, error) {
	if m.opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.opts.Timeout)
		defer cancel()
	}
	return m.decider.AllowLayersAt(ctx, now, cost, specs...)
}

// statusClientClosedRequest is the status written for a request whose
// client went away before its decision: nginx's 499, which no client reads
// but access logs and status-recording wrappers around the middleware
// show for what it is.
const statusClientClosedRequest = 499

// requestEnded reports whether r's own context ended (its client went
// away, or a deadline set around the middleware passed) before the store
// call that failed with err returned. Such a request was decided by
// nobody: it is neither served nor counted as a store failure, whatever
// the FailureMode, since a client could otherwise get past a used-up limit
// by closing its side of the connection, and each one would be reported as
// an outage. requestEnded answers it with a status and no body: 499 when
// the request was cancelled, 503 when its deadline passed. Options.Timeout
// expiring alone is not the request's end: that is a store failure.
func (m *Middleware) requestEnded(w http.ResponseWriter, r *http.Request, err error) bool {
	cerr := r.Context().Err()
	if cerr == nil {
		return false
	}
	m.log(r.Context(), slog.LevelDebug, "rate limit: request ended before its decision", slog.String("error", redact.Keys(err.Error())), slog.String("request", cerr.Error()))
	writeEnded(w, cerr)
	return true
}

// decidedTooLate reports whether r's own context ended while its decision
// was made (the store answered anyway), and then answers it as
// requestEnded does, without a body. counted says whether the decision
// admitted the request, and so consumed its cost.
func (m *Middleware) decidedTooLate(w http.ResponseWriter, r *http.Request, counted bool) bool {
	cerr := r.Context().Err()
	if cerr == nil {
		return false
	}
	m.log(r.Context(), slog.LevelDebug, "rate limit: request ended while it was decided", slog.String("request", cerr.Error()), slog.Bool("counted", counted))
	writeEnded(w, cerr)
	return true
}

// shapingDelay returns how long an admitted decision asks its caller to
// wait before acting on it: the longest Delay of its layers (GCRA policies
// with MaxDelay), zero when none shapes.
func shapingDelay(d floodgate.Decision) time.Duration {
	var delay time.Duration
	for _, l := range d.Layers {
		delay = max(delay, l.Delay)
	}
	return delay
}

// waitOut holds an admitted request for the Delay its shaping policy gave
// it, as floodgate.Limiter.Wait does, and reports whether it may be served.
// A request whose context ends first is answered as requestEnded does
// (499 or 503, no body) and not served; its admission stays counted.
func (m *Middleware) waitOut(w http.ResponseWriter, r *http.Request, delay time.Duration) bool {
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		cerr := r.Context().Err()
		m.log(r.Context(), slog.LevelDebug, "rate limit: request ended while it waited out its shaping delay", slog.String("request", cerr.Error()), slog.Duration("delay", delay))
		writeEnded(w, cerr)
		return false
	}
}

// writeEnded answers a request whose context ended (cerr) with a status
// and no body: 499 when it was cancelled, 503 when its deadline passed.
func writeEnded(w http.ResponseWriter, cerr error) {
	status := statusClientClosedRequest
	if errors.Is(cerr, context.DeadlineExceeded) {
		status = http.StatusServiceUnavailable
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
}

// policyNames returns the names of rules, comma-separated.
func policyNames(rules []Rule) string {
	names := make([]string, len(rules))
	for i, r := range rules {
		names[i] = r.Policy.Name
	}
	return strings.Join(names, ",")
}

// storeFailed applies the failure mode and reports whether to serve.
// rules are the enforced rules whose decision failed, named in the body
// of a refusal.
func (m *Middleware) storeFailed(w http.ResponseWriter, r *http.Request, err error, shadow bool, rules []Rule) bool {
	m.log(r.Context(), slog.LevelWarn, "rate limit: store failed", slog.String("error", redact.Keys(err.Error())), slog.Bool("shadow", shadow), slog.String("failure_mode", m.opts.FailureMode.String()))
	if m.opts.OnStoreError != nil {
		m.opts.OnStoreError(r, err, shadow)
	}
	// A full store is never failed open: whoever picks the keys (an API key
	// header, say) could fill it on purpose and switch every rule off,
	// global caps included. Shadow rules never refuse anything.
	if shadow {
		return true
	}
	// A decision refused for its input (a fallback store's LocalPolicy
	// that returns an invalid policy, a Clock that returns the zero time,
	// a Decider refusing a key or cost) is a configuration error, not an
	// outage: failing open would switch the limit off until someone reads
	// the logs. A request cannot cause one: its cost is checked before
	// (400), and any identity makes a valid key.
	if misconfigured(err) {
		writeProblem(w, Problem{
			Type: "about:blank", Title: http.StatusText(http.StatusInternalServerError), Status: http.StatusInternalServerError,
			Detail: "the rate limiter is misconfigured",
			Policy: policyNames(rules),
		}, nil)
		return false
	}
	if m.opts.FailureMode == FailOpen && !errors.Is(err, floodgate.ErrStoreFull) {
		return true
	}
	writeUnavailable(w, rules)
	return false
}

// writeUnavailable writes the 503 of a decision the store could not take
// (failed closed): Retry-After 1, no rate limit headers of its own.
func writeUnavailable(w http.ResponseWriter, rules []Rule) {
	writeProblem(w, Problem{
		Type: "about:blank", Title: http.StatusText(http.StatusServiceUnavailable), Status: http.StatusServiceUnavailable,
		Detail:     "the rate limiter is unavailable; try again shortly",
		Policy:     policyNames(rules),
		RetryAfter: 1,
	}, map[string]string{"Retry-After": "1"})
}

// DegradedHeader marks the answer to a request decided by a failure mode
// of a fallback.Store in place of its primary (Redis): its value is the
// mode and why the primary did not decide, "local; reason=timeout" or
// "closed; reason=breaker_open", as floodgate serve writes it. Absent
// when the primary decided.
const DegradedHeader = "X-Floodgate-Degraded"

// errDegraded stands for the primary's error of a degraded decision that
// names none (fallback names one for each).
var errDegraded = errors.New("httplimit: decided by the store's failure mode")

// degraded handles a decision taken with dg, the Outcome noted by a store with
// failure modes (fallback.Store), and reports whether to go on with it.
// A decision the primary took goes on unmarked. One its failure mode took
// is a store failure, logged and reported to OnStoreError as such: denied
// by ModeClosed, it is answered as a store failure under FailClosed (503,
// whatever FailureMode: the policy's failure mode has decided), without
// the rate limit headers that would say a limit was used up; decided by
// ModeLocal (the local store's limit) or ModeOpen, it goes on marked with
// DegradedHeader.
func (m *Middleware) degraded(w http.ResponseWriter, r *http.Request, d floodgate.Decision, dg degraded.Outcome, rules []Rule) bool {
	h := w.Header()
	if !dg.Degraded {
		// An outer middleware's mark describes its own decision: one
		// response describes the innermost's, as its rate limit headers.
		h.Del(DegradedHeader)
		return true
	}
	m.reportDegraded(r, d, dg, false)
	h.Set(DegradedHeader, dg.Mode+"; reason="+dg.Reason)
	if dg.Mode == "closed" && !d.Allowed {
		writeUnavailable(w, rules)
		return false
	}
	return true
}

// outcomeOf returns what rec holds, the zero Outcome for none.
func outcomeOf(rec *degraded.Record) degraded.Outcome {
	if rec == nil {
		return degraded.Outcome{}
	}
	return rec.Outcome()
}

// reportDegraded reports a decision dg says a failure mode took as a store
// failure: to OnStoreError, each one, with the primary's error and
// shadow, and to the logger, at most one line per degradedLogEvery for
// each reason (of enforced or of shadow rules), carrying how many were
// not logged since the last ("suppressed"): during an outage every
// request meets one.
func (m *Middleware) reportDegraded(r *http.Request, d floodgate.Decision, dg degraded.Outcome, shadow bool) {
	err := dg.Err
	if err == nil {
		err = errDegraded
	}
	if rl := m.degradedLog; rl != nil && m.opts.Logger.Enabled(r.Context(), slog.LevelWarn) {
		if shadow {
			rl = m.shadowDegradedLog
		}
		// Reasons come from a closed set (fallback.Reason's names).
		if suppressed, due := rl.Due(dg.Reason); due {
			attrs := []slog.Attr{slog.String("error", redact.Keys(err.Error())), slog.String("mode", dg.Mode), slog.String("reason", dg.Reason),
				slog.Bool("allowed", d.Allowed), slog.Bool("shadow", shadow)}
			if suppressed > 0 {
				attrs = append(attrs, slog.Int("suppressed", suppressed))
			}
			m.log(r.Context(), slog.LevelWarn, "rate limit: store failed, decided by its failure mode", attrs...)
		}
	}
	if m.opts.OnStoreError != nil {
		m.opts.OnStoreError(r, err, shadow)
	}
}

// misconfigured reports whether err is a decision refused for its input
// (a policy, cost, key, layers, time or context the store cannot use),
// not a failure of the store.
func misconfigured(err error) bool {
	for _, s := range [...]error{floodgate.ErrInvalidPolicy, floodgate.ErrInvalidCost, floodgate.ErrInvalidKey,
		floodgate.ErrInvalidLayers, floodgate.ErrInvalidTime, floodgate.ErrNilContext} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// deny writes the 429 for a denied decision, describing its binding
// layer: the one whose denial lasts longest (floodgate.Outlasts), so a
// request whose cost exceeds any layer's capacity, which can never pass,
// gets no Retry-After, and otherwise Retry-After is the longest wait.
func (m *Middleware) deny(w http.ResponseWriter, d floodgate.Decision, rules []Rule, cost int64) {
	res := d.Result()
	p := rules[d.Binding].Policy
	prob := Problem{
		Type: "about:blank", Title: http.StatusText(http.StatusTooManyRequests), Status: http.StatusTooManyRequests,
		Policy: p.Name, Reason: res.Reason.String(),
		Limit: res.Limit, Reset: resetSeconds(res.ResetAt),
	}
	var extra map[string]string
	if res.Reason == floodgate.ReasonCostExceedsLimit {
		prob.Detail = "this request costs " + itoa(cost) + " units but policy " + quote(p.Name) +
			" admits at most " + itoa(p.Capacity()) + " at once: it can never be admitted, so retrying will not help"
	} else {
		secs := retryAfterSeconds(res.RetryAfter)
		prob.Detail = "rate limit " + quote(p.Name) + " exceeded; retry after " + plural.Count(secs, "second", "seconds")
		prob.RetryAfter = secs
		extra = map[string]string{"Retry-After": itoa(secs)}
	}
	writeProblem(w, prob, extra)
}

// runShadow decides the shadow rules and reports what they would have
// denied. It never refuses the request.
func (m *Middleware) runShadow(w http.ResponseWriter, r *http.Request, now time.Time, cost int64) {
	specs := make([]floodgate.LayerSpec, 0, len(m.shadow))
	rules := make([]Rule, 0, len(m.shadow))
	for _, rule := range m.shadow {
		id := ""
		if rule.Key != nil {
			v, err := rule.Key(r)
			if err != nil {
				// A shadow rule never refuses a request, not even for a
				// missing key; it just does not count it.
				continue
			}
			id = v
		}
		specs = append(specs, floodgate.LayerSpec{Policy: rule.Policy, Identity: id})
		rules = append(rules, rule)
	}
	if len(specs) == 0 {
		return
	}
	ctx := r.Context()
	var dg *degraded.Record
	if m.degrades {
		ctx, dg = degraded.NewContext(ctx)
	}
	d, err := m.decide(ctx, now, cost, specs)
	if err != nil {
		// The enforced rules admitted the request: it is served whatever
		// happened here, but a client that has gone is no store failure.
		if r.Context().Err() == nil {
			m.storeFailed(w, r, err, true, rules)
		}
		return
	}
	if o := outcomeOf(dg); o.Degraded {
		// A failure mode's decision (every request denied by
		// ModeClosed, say) says nothing of what the rule would do: a
		// store failure of the shadow rules, never a shadow denial.
		m.reportDegraded(r, d, o, true)
		return
	}
	if d.Allowed {
		return
	}
	p := rules[d.Binding].Policy
	res := d.Result()
	m.log(r.Context(), slog.LevelInfo, "rate limit: shadow rule would have denied",
		slog.String("policy", p.Name), slog.String("reason", res.Reason.String()),
		slog.Int64("limit", res.Limit), slog.Duration("retry_after", res.RetryAfter))
	if m.opts.OnShadowDeny != nil {
		m.opts.OnShadowDeny(r, p, res)
	}
}

func (m *Middleware) log(ctx context.Context, level slog.Level, msg string, attrs ...slog.Attr) {
	if m.opts.Logger != nil {
		m.opts.Logger.LogAttrs(ctx, level, msg, attrs...)
	}
}

// missingWhat names, for a 400, what the request lacks when the key says
// (a Header key: the header to send); other keys' errors stay in the log.
// errEmptyKey is ErrNoKey for a KeyFunc that returned "" and no error.
var errEmptyKey = fmt.Errorf("%w: the key function returned an empty identity", ErrNoKey)

func missingWhat(err error) string {
	var mh *missingHeader
	if errors.As(err, &mh) {
		return ": send the " + mh.name + " header"
	}
	return ""
}
