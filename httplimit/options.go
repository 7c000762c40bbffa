// Package httplimit is Floodgate's net/http middleware.
//
// A [Middleware] applies a list of [Rule]s to every request: each rule is a
// floodgate.Policy and a [KeyFunc] that says whose request it is (an API
// key, an authenticated user, a route pattern, a client IP, or a
// combination). The enforced rules are decided together as one
// all-or-nothing layered decision (floodgate.Limiter.AllowLayers), in one
// store call (one round trip but on a Redis Cluster whose primaries hold
// the rules' keys apart); a request denied by one rule consumes nothing in
// the others.
//
// Responses follow the conventions clients already understand:
//
//   - every limited response carries X-RateLimit-Limit, X-RateLimit-Remaining
//     and X-RateLimit-Reset (Unix seconds), taken from the binding layer
//     (floodgate.Decision.Result). Limit is the most that layer can
//     admit at once, so a fresh identity's Remaining is Limit less the
//     request's cost (60 then 59 on its first request at cost 1): the
//     policy's Limit for fixed window, sliding log, sliding window and
//     quota (Remaining: what is left in the window or period), its Burst
//     for token bucket and GCRA (Remaining: the tokens, or bursts, left
//     now; the bucket refills at Limit per Window). Reset is when the
//     identity's state is fresh again: the window's end, the period's
//     end, or when the bucket is full again;
//   - a denial is 429 Too Many Requests with Retry-After (whole seconds,
//     rounded up, at least 1) and an application/problem+json body (RFC
//     9457) of type [Problem]; a request whose cost exceeds a limit
//     outright (reason cost_exceeds_limit) gets no Retry-After, since
//     waiting will not help;
//   - optionally, the IETF draft's RateLimit-Policy and RateLimit fields
//     (draft-ietf-httpapi-ratelimit-headers-10), one list member per
//     enforced rule.
//
// A rule in shadow mode is decided and counted but never denies; a request
// it would have denied is reported to Options.OnShadowDeny and the logger.
// When the store fails, Options.FailureMode chooses between serving the
// request (FailOpen, the default) and answering 503 (FailClosed). A store
// that reports itself full (floodgate.ErrStoreFull) is always answered
// 503: its keys may be chosen by the client, and failing open would let a
// client switch the limits off by filling it. (memstore never reports
// full: it evicts.) A decision refused for its input (an error wrapping
// floodgate.ErrInvalidPolicy, ErrInvalidCost, ErrInvalidKey,
// ErrInvalidLayers, ErrInvalidTime or ErrNilContext: a fallback store's
// LocalPolicy that returns an invalid policy, a Clock that returns the
// zero time, a Decider of your own refusing its input) is a configuration
// error, answered 500 in either mode; a request cannot cause one, since
// its cost is checked first (400, see CostFunc) and any identity makes a
// valid key. A request whose own context ends while its decision is being
// made (its client went away) is not a store failure: it is answered with
// a status and no body, and never served (see Options.OnStoreError) — also
// when the store's answer arrives after the client went and admits it;
// that admission stays counted against the limit.
//
// On a store that decides by failure modes while Redis fails (a
// *floodgate.Limiter on a fallback.Store), a decision the primary did not
// take is told apart from the primary's: denied by a policy's
// fallback.ModeClosed, it is answered as a store failure under FailClosed
// (503, Retry-After: 1, no X-RateLimit-* headers), whatever the
// FailureMode, not as a used-up limit; taken by ModeLocal (the local
// store's limit) or ModeOpen, it is answered as it says. Either carries
// [DegradedHeader] ("local; reason=timeout") and is reported to
// Options.OnStoreError (each one) and the logger (at most one line per 10
// seconds for each reason, with how many were not logged) as a store
// failure. A shadow rule's decision taken so is reported the same way,
// with shadow true, and never as a shadow denial. New finds the
// fallback.Store once: behind a *floodgate.Limiter or a type embedding
// one, through stores with an Unwrap() floodgate.Store method (a
// denycache.Store, which does not cache the failure modes' decisions) and
// Deciders with an Unwrap() Decider method. For a Decider of your own
// around a Limiter (metrics, tracing) that has none, or a store wrapper
// without Unwrap, set Options.FallbackStore; New logs a warning when it
// cannot tell. Other stores' decisions cost nothing for it.
//
// A GCRA policy with MaxDelay shapes rather than denies: it admits a
// request that would conform within MaxDelay and gives it a Delay
// (floodgate.Result.Delay). The middleware waits that Delay out before
// calling the next handler, as floodgate.Limiter.Wait does (the longest
// Delay of the enforced rules; none for a request of cost 0, which
// consumes nothing), so such a policy spaces the requests it serves
// instead of serving them all at once. The wait holds the request's
// goroutine; a request whose client goes during it is answered 499 with
// no body and not served, its admission still counted. Shadow rules are
// never waited for.
//
// Options.Skip exempts requests (health checks, CORS preflight): they
// reach the next handler undecided, uncounted and without rate limit
// headers.
//
// Middlewares can be nested (an outer per-IP one, an inner per-route
// one): each decides its own rules, and the headers of the response are
// the innermost deciding middleware's — it replaces X-RateLimit-* and
// RateLimit-Policy and RateLimit, deleting the last two when it has no
// IETFHeaders of its own. A middleware whose store failed open writes no
// headers and leaves the outer one's, and so does an inner middleware's
// own 400 (no key) or 503 (store failed closed): such an answer carries
// the outer middleware's rate limit headers, and its body's "policy"
// names the inner policy (for a 503, every enforced policy of the failed
// decision, comma-separated). Clients that read the headers of a non-2xx answer should read
// them only from a 429.
package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/degraded"
	"github.com/floodgate-rl/floodgate/internal/nilcheck"
	"github.com/floodgate-rl/floodgate/internal/ratelog"
)

// Sentinel errors.
var (
	// ErrInvalidOptions reports rules or options New cannot use.
	ErrInvalidOptions = errors.New("httplimit: invalid options")
	// ErrNoKey is returned (wrapped) by a KeyFunc when the request does not
	// carry the identity it extracts, for example no API key header. A
	// required rule answers such a request with 400; an Optional rule is
	// skipped for it.
	ErrNoKey = errors.New("httplimit: request has no rate limit key")
)

// Decider makes layered decisions. *floodgate.Limiter implements it.
type Decider interface {
	AllowLayersAt(ctx context.Context, now time.Time, cost int64, specs ...floodgate.LayerSpec) (floodgate.Decision, error)
}

// Rule is one limit the middleware applies.
type Rule struct {
	// Policy is the limit. Its Name must be unique among the rules: it
	// namespaces the rule's keys and names it in headers and logs.
	Policy floodgate.Policy
	// Key returns the identity the request is counted under. Nil means one
	// identity shared by every request (a server-wide limit).
	Key KeyFunc
	// Optional makes a request whose Key fails with ErrNoKey skip this rule
	// instead of being answered with 400 (for example a per-API-key rule
	// that anonymous requests do not fall under).
	Optional bool
	// Shadow decides and counts this rule but never denies because of it:
	// a request it would have denied is served and reported to
	// Options.OnShadowDeny and Options.Logger. Shadow rules are decided
	// together in a second store call, only for requests the enforced
	// rules admitted (a denied request would not have been counted by
	// them either); they add no response headers.
	Shadow bool
}

// FailureMode says what the middleware does when the store fails: errors
// other than a configuration error (an invalid policy, cost, key, layers,
// time or context), which is answered 500 whatever the mode.
type FailureMode uint8

// The failure modes.
const (
	// FailOpen serves the request without rate limit headers and reports
	// the error to Options.OnStoreError and the logger. It is the default:
	// for throughput limits an outage of the limiter should not become an
	// outage of the service. floodgate.ErrStoreFull is the exception: it
	// is answered as in FailClosed, since a client could cause it; and
	// configuration errors (floodgate.ErrInvalidPolicy, ErrInvalidCost,
	// ErrInvalidKey, ErrInvalidLayers, ErrInvalidTime, ErrNilContext) are
	// answered 500, also reported to Options.OnStoreError.
	//
	// A store call that misses Options.Timeout is a failure too, so under
	// FailOpen every request whose decision is slow is served uncounted:
	// a burst that slows the store down (one client can send it) gets past
	// the limit, up to every request for as long as the store fails. A
	// walk against limit 100 with Timeout 100ms and 500 concurrent
	// requests from one client (a -race build on a loaded 2-core machine)
	// saw 100, 493, 109, 100 and 209 served over five runs on one Redis,
	// and up to 500 on a Redis Cluster; with Timeout 5s, exactly 100.
	// Where that matters, give a Timeout that the store misses only when
	// it is really failing, use FailClosed, or wrap the store in package
	// fallback, which decides a call that misses its budget with a local
	// store at a per-instance limit (fallback.ModeLocal) rather than
	// admitting it (see the package documentation for how the middleware
	// answers its decisions).
	FailOpen FailureMode = iota
	// FailClosed answers 503 Service Unavailable with Retry-After: 1 and a
	// problem+json body. Use it where admitting unlimited traffic is worse
	// than refusing it (for example login endpoints).
	FailClosed
)

// String returns "open" or "closed".
func (f FailureMode) String() string {
	switch f {
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	}
	return fmt.Sprintf("FailureMode(%d)", uint8(f))
}

// CostFunc returns what a request costs (0..floodgate.MaxCost). Cost 0
// charges nothing but is not free: it is served only while a request of
// cost 1 would be, and answered 429 once the limit is used up. To exempt
// requests (health checks), use Options.Skip. An error, or
// a cost out of range, answers the request with 400.
type CostFunc func(r *http.Request) (int64, error)

// Options configures a Middleware. The zero value is ready to use.
type Options struct {
	// Skip, when set, is asked first about every request: one it returns
	// true for is passed to the next handler undecided — not counted, no
	// rate limit headers, no Cost asked — for example health checks or
	// CORS preflight requests (r.Method == http.MethodOptions). Default:
	// every request is decided.
	Skip func(r *http.Request) bool
	// Cost prices each request. Default: every request costs 1.
	Cost CostFunc
	// FailureMode chooses what happens when the store fails. Default
	// FailOpen.
	FailureMode FailureMode
	// IETFHeaders adds the draft RateLimit-Policy and RateLimit fields to
	// limited responses. Default off.
	IETFHeaders bool
	// Timeout bounds each store call, on top of the request's own context.
	// A call that misses it is a store failure, decided by FailureMode
	// (with FailOpen: served uncounted, see there). Zero (default) adds no
	// deadline of its own: a stalled store then holds each request until
	// the store client's own timeouts (a go-redis client's ReadTimeout, 5s
	// by default: a request cancelled by its client's departure does not
	// end a call already waiting for Redis's reply; only a deadline does).
	// A request whose client has gone is not served, see OnStoreError:
	// neither when its store call fails nor when it succeeds after the
	// client went (the admission then stays counted).
	Timeout time.Duration
	// Clock returns the time decisions are stamped with. Default: the
	// decider's own clock when it has a Now method (a *floodgate.Limiter
	// does: its Options.Clock, e.g. disciplined to Redis by clocksync),
	// else time.Now.
	Clock func() time.Time
	// Logger receives shadow denials (Info), store failures (Warn; a
	// fallback.Store's degraded decisions as "store failed, decided by
	// its failure mode", with its mode and reason, at most one line per
	// 10 seconds for each reason, of enforced and of shadow rules apart,
	// the next one saying how many were held back: "suppressed"),
	// rejected keys or costs (Info) and requests whose client went away
	// before they were served (Debug). Nil (default) logs nothing. Log
	// records never contain identities (keys, users, addresses): a store
	// error naming a key is logged with the key's identity part (its
	// {hash tag}) replaced by {…}; OnStoreError gets the error as it is.
	Logger *slog.Logger
	// OnShadowDeny, when set, is called for every request a shadow rule
	// would have denied, with the rule's policy and its result.
	OnShadowDeny func(r *http.Request, p floodgate.Policy, res floodgate.Result)
	// OnStoreError, when set, is called for every store failure, whatever
	// the FailureMode, with shadow reporting whether only shadow rules
	// were affected. That includes every decision a fallback.Store's
	// failure mode took (see the package documentation), with the
	// primary's error (fallback.ErrBreakerOpen when it was not called),
	// the request then answered as that decision says: it is called for
	// each one, also while the logger's line for them is held back, so
	// that a metric counts them all.
	//
	// A store call that fails after the request's own context has ended
	// is not a store failure, and is not reported here or logged as one:
	// the client closed the connection (or its half of it: net/http
	// cancels the context then), or a deadline set around the middleware
	// passed. Whatever the FailureMode, such a request is not served, so
	// that a client cannot get past a used-up limit by hanging up; the
	// middleware writes only a status, 499 (nginx's "client closed
	// request", for access logs) when the request was cancelled and 503
	// when its deadline passed, and no body. The same goes for a store
	// call that succeeds after the request's context ended (logged at
	// Debug as "request ended while it was decided"): what it admitted
	// stays counted, but the request is not served. Options.Timeout
	// expiring is the store's failure, not the request's end.
	OnStoreError func(r *http.Request, err error, shadow bool)
	// FallbackStore says that the decider decides against a
	// fallback.Store where New cannot see it: a Decider of your own
	// around a *floodgate.Limiter (metrics, tracing), or a Limiter on a
	// store of your own wrapping a fallback.Store. The middleware then
	// tells apart the decisions its failure modes take (see the package
	// documentation); without it, such a Decider's fallback.ModeClosed
	// denials during an outage are answered as used-up limits (429,
	// X-RateLimit-Remaining: 0). New finds a fallback.Store by itself
	// behind a *floodgate.Limiter (or a type embedding one), through any
	// store with an Unwrap() floodgate.Store method (denycache.Store has
	// one) and any Decider with an Unwrap() Decider method; it logs a
	// warning (with Logger) when the decider is none of these and
	// FallbackStore is not set, and the program links package fallback.
	// Set on another store, it costs each decision an allocation and
	// changes nothing. Default false.
	FallbackStore bool
}

// Middleware applies rules to requests. It is immutable and safe for
// concurrent use.
type Middleware struct {
	decider  Decider
	enforced []Rule
	shadow   []Rule
	opts     Options
	// degrades says the decider is, or decides against, a
	// fallback.Store, whose failure modes' decisions are told apart
	// (Middleware.degraded), or Options.FallbackStore says so.
	degrades bool
	// degradedLog and shadowDegradedLog write the log lines of degraded
	// decisions of the enforced and the shadow rules, at most one per
	// degradedLogEvery for each reason; nil without a Logger.
	degradedLog, shadowDegradedLog *ratelog.Log
}

// degradedLogEvery is how often at most the middleware logs a degraded
// decision of each reason (and of enforced or shadow rules), as serve
// logs its own.
const degradedLogEvery = 10 * time.Second

// reportsDegraded reports whether d's decisions may be taken by a
// fallback.Store's failure mode, looking through Deciders with an
// Unwrap() Decider method, and whether it could tell (degraded.Reports).
func reportsDegraded(d Decider) (reports, known bool) {
	for range 32 {
		u, ok := d.(interface{ Unwrap() Decider })
		if !ok {
			return degraded.Reports(d)
		}
		if d = u.Unwrap(); nilcheck.IsNil(d) {
			return false, false
		}
	}
	return false, false
}

// New returns a Middleware deciding rules with d (usually a
// *floodgate.Limiter). It fails with ErrInvalidOptions when d is nil (a
// nil *floodgate.Limiter included), a rule's policy is invalid or shared,
// or a rule's Key was built from an argument it cannot use (IP(nil),
// User(nil), Header(""), Join with no or a nil part).
func New(d Decider, rules []Rule, opts Options) (*Middleware, error) {
	if nilcheck.IsNil(d) {
		return nil, fmt.Errorf("%w: nil decider (%T)", ErrInvalidOptions, d)
	}
	if len(rules) == 0 {
		return nil, fmt.Errorf("%w: no rules", ErrInvalidOptions)
	}
	if opts.FailureMode > FailClosed {
		return nil, fmt.Errorf("%w: unknown failure mode %d", ErrInvalidOptions, opts.FailureMode)
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("%w: negative timeout %v", ErrInvalidOptions, opts.Timeout)
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
		if c, ok := d.(interface{ Now() time.Time }); ok {
			opts.Clock = c.Now
		}
	}
	m := &Middleware{decider: d, opts: opts}
	reports, known := reportsDegraded(d)
	m.degrades = reports || opts.FallbackStore
	if opts.Logger != nil {
		m.degradedLog = ratelog.New(opts.Logger, degradedLogEvery)
		m.shadowDegradedLog = ratelog.New(opts.Logger, degradedLogEvery)
	}
	names := make(map[string]int, len(rules))
	for i, r := range rules {
		if err := r.Policy.Validate(); err != nil {
			return nil, fmt.Errorf("%w: rule %d: %w", ErrInvalidOptions, i, err)
		}
		if err := keyError(r.Key); err != nil {
			return nil, fmt.Errorf("%w: rule %d (%s): %w", ErrInvalidOptions, i, r.Policy.Name, err)
		}
		if j, dup := names[r.Policy.Name]; dup {
			return nil, fmt.Errorf("%w: rules %d and %d share policy name %q", ErrInvalidOptions, j, i, r.Policy.Name)
		}
		names[r.Policy.Name] = i
		if r.Shadow {
			m.shadow = append(m.shadow, r)
		} else {
			m.enforced = append(m.enforced, r)
		}
	}
	if len(m.enforced) > floodgate.MaxLayers || len(m.shadow) > floodgate.MaxLayers {
		return nil, fmt.Errorf("%w: more than %d enforced or shadow rules", ErrInvalidOptions, floodgate.MaxLayers)
	}
	if opts.Logger != nil && !known && !opts.FallbackStore {
		opts.Logger.Warn("rate limit: cannot tell whether the decider decides against a fallback.Store; "+
			"if it does, set Options.FallbackStore (or give the decider an Unwrap() httplimit.Decider method), "+
			"else a policy failing closed during an outage is answered as a used-up limit (429)",
			slog.String("decider", fmt.Sprintf("%T", d)))
	}
	return m, nil
}
