package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/clip"
	"github.com/floodgate-rl/floodgate/internal/deadline"
)

// DefaultMaxHitsAddend is the largest hits_addend accepted by default.
const DefaultMaxHitsAddend = 1_000_000_000

// Options configures a Service. The zero value is ready to use.
type Options struct {
	// MaxHitsAddend is the largest hits_addend (cost) a request or a
	// descriptor may carry. A descriptor with a limit and a larger cost is
	// OVER_LIMIT and consumes nothing (no limit admits it), as is one
	// whose costs, added up over the descriptors sharing its counter,
	// pass floodgate.MaxCost; the request's other descriptors are decided
	// as usual. Default DefaultMaxHitsAddend; at most floodgate.MaxCost /
	// MaxDescriptors.
	MaxHitsAddend int64
	// ResponseHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset to response_headers_to_add, for the enforced
	// descriptor closest to its limit (the first one over it, if any), as
	// envoyproxy/ratelimit does with LIMIT_RESPONSE_HEADERS_ENABLED;
	// shadow_mode descriptors never describe the request. Reset is in
	// whole seconds from now. Default off.
	ResponseHeaders bool
	// LimitHeader, RemainingHeader and ResetHeader rename those headers.
	// Defaults "X-RateLimit-Limit", "X-RateLimit-Remaining" and
	// "X-RateLimit-Reset". Header names are 1..64 bytes of [A-Za-z0-9-].
	LimitHeader, RemainingHeader, ResetHeader string
	// DegradedHeader names the header added to response_headers_to_add
	// when a decision was taken by the failure mode of a fallback.Store
	// instead of its primary (Redis), whatever ResponseHeaders says. Its
	// value is "MODE; reason=REASON", e.g. "local; reason=breaker_open",
	// as the HTTP API's X-Floodgate-Degraded. Such an answer also carries
	// dynamic_metadata {"degraded": true, "failure_mode": MODE,
	// "degraded_reason": REASON}. Default "X-Floodgate-Degraded".
	DegradedHeader string
	// IgnoreLimitOverrides makes the service apply the configured limit
	// even when Envoy sends a limit override with a descriptor. Default
	// false: an override applies, as in envoyproxy/ratelimit, as a fixed
	// window of the sent requests_per_unit per unit.
	IgnoreLimitOverrides bool
	// CountEachDescriptor decides each descriptor on its own, as
	// envoyproxy/ratelimit counts them: a request is counted in every
	// descriptor whose limit admits it, even when another descriptor is
	// over its limit (one store round trip per descriptor, in order, so
	// that duplicate descriptors are decided one after the other, as
	// theirs are). With a
	// fallback.Store, the request's decisions share one budget: once a
	// call to Redis has timed out, the remaining descriptors are decided
	// by their failure mode at once (reason timeout), so that a stalled
	// Redis delays the request by one budget, not one per descriptor.
	// Default false: all descriptors are decided together,
	// all-or-nothing, in one round trip; duplicate descriptors (one
	// counter) add their costs into one layer.
	CountEachDescriptor bool
	// Clock returns the time decisions are stamped with (and
	// DurationUntilReset measured from). Default: the limiter's
	// (floodgate.Limiter.Now), e.g. disciplined to Redis by clocksync.
	Clock func() time.Time
	// Timeout bounds the store calls of one request, as floodgate serve's
	// --decision-timeout bounds an HTTP check's: they end this long after
	// the request arrived, or at the caller's deadline when that comes
	// first (the deadline may come up to a millisecond early: see
	// internal/deadline). A request whose store failed for want of time
	// under Timeout, the caller's deadline not yet passed, is answered
	// UNAVAILABLE. Default 0: only the caller's deadline (Envoy sends its
	// filter's timeout) and the store's own timeouts bound them.
	Timeout time.Duration
	// OnDegraded, when set, is called once for every answer that carries
	// the degraded header (see DegradedHeader) with the failure mode's
	// outcome, for metrics (floodgate serve counts it in
	// floodgate_degraded_responses_total, as its HTTP answers). It runs on
	// the request's goroutine: keep it fast.
	OnDegraded func(fallback.Outcome)
	// Observe, when set, is called once for every descriptor of an
	// answered request that a limit applied to (not for unmatched,
	// unlimited or replaced ones), for metrics and logs. It runs on the
	// request's goroutine: keep it fast.
	Observe func(Observation)
	// OnError, when set, is called once for every request whose store
	// decision failed, with the store's error, before the request is
	// answered: for metrics and logs (floodgate serve counts it in
	// floodgate_decision_errors_total and logs it, as its HTTP API does
	// its own failures). The answer's status message says what kind of
	// failure it was, never the store's error, which may name addresses,
	// keys or a server's messages. It runs on the request's goroutine
	// with the caller's context: keep it fast.
	OnError func(ctx context.Context, err error)
	// OnRejected, when set, is called once for every request refused
	// before any decision, with why: INVALID_ARGUMENT (see
	// ErrInvalidRequest), UNAVAILABLE with no configuration loaded, or
	// RESOURCE_EXHAUSTED for a message over the gRPC server's receive
	// limit (RejectMessageSize; see Register) (floodgate serve counts it
	// in floodgate_grpc_rejected_total). A message that is not a
	// RateLimitRequest at all is refused by gRPC before the service sees
	// it, and not counted. It runs on the request's goroutine: keep it
	// fast.
	OnRejected func(Rejection)
}

// Observation is one descriptor decided by the service.
type Observation struct {
	// Domain is the request's domain.
	Domain string
	// Rule is the configured rule that matched; nil for a limit override
	// sent by Envoy.
	Rule *Rule
	// Policy is the floodgate policy name the descriptor was decided under
	// (empty for a requests_per_unit 0 limit, decided without a policy).
	Policy string
	// Identity is the descriptor's identity (see Identity). It is
	// unbounded: never use it as a metric label.
	Identity string
	// Code is the descriptor's status: OK or OVER_LIMIT.
	Code rlspb.RateLimitResponse_Code
	// Shadow reports a shadow-mode descriptor, whose OVER_LIMIT did not
	// deny the request.
	Shadow bool
	// Overall is the request's overall code.
	Overall rlspb.RateLimitResponse_Code
}

// Service implements envoy.service.ratelimit.v3.RateLimitService over a
// floodgate.Limiter. It is safe for concurrent use.
type Service struct {
	rlspb.UnimplementedRateLimitServiceServer

	lim    *floodgate.Limiter
	cfg    func() *Config
	opts   Options
	limits limits
	ticks  *deadline.Ticks // request deadlines under Options.Timeout
}

var _ rlspb.RateLimitServiceServer = (*Service)(nil)

// NewService returns a Service deciding with lim under the configuration
// cfg returns. cfg is called once per request, so a caller that reloads
// its configuration returns the newest one (for example from an
// atomic.Pointer); when it returns nil the service answers UNAVAILABLE.
func NewService(lim *floodgate.Limiter, cfg func() *Config, opts Options) (*Service, error) {
	if lim == nil {
		return nil, fmt.Errorf("%w: nil limiter", ErrInvalidOptions)
	}
	if cfg == nil {
		return nil, fmt.Errorf("%w: nil config function", ErrInvalidOptions)
	}
	if opts.MaxHitsAddend == 0 {
		opts.MaxHitsAddend = DefaultMaxHitsAddend
	}
	if maxHits := int64(floodgate.MaxCost / MaxDescriptors); opts.MaxHitsAddend < 1 || opts.MaxHitsAddend > maxHits {
		return nil, fmt.Errorf("%w: max hits addend %d out of range 1..%d", ErrInvalidOptions, opts.MaxHitsAddend, maxHits)
	}
	for _, h := range []struct {
		name *string
		def  string
	}{{&opts.LimitHeader, "X-RateLimit-Limit"}, {&opts.RemainingHeader, "X-RateLimit-Remaining"}, {&opts.ResetHeader, "X-RateLimit-Reset"}, {&opts.DegradedHeader, "X-Floodgate-Degraded"}} {
		if *h.name == "" {
			*h.name = h.def
		}
		if err := validHeaderName(*h.name); err != nil {
			return nil, err
		}
	}
	if opts.Clock == nil {
		opts.Clock = lim.Now
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("%w: negative timeout %v", ErrInvalidOptions, opts.Timeout)
	}
	return &Service{
		ticks:  deadline.New(),
		lim:    lim,
		cfg:    cfg,
		opts:   opts,
		limits: limits{maxHits: opts.MaxHitsAddend, ignoreOverride: opts.IgnoreLimitOverrides, countEach: opts.CountEachDescriptor},
	}, nil
}

func validHeaderName(name string) error {
	if len(name) > 64 {
		return fmt.Errorf("%w: header name %q longer than 64 bytes", ErrInvalidOptions, name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("%w: header name %q: %s not in [A-Za-z0-9-]", ErrInvalidOptions, name, clip.Char(name, i))
		}
	}
	return nil
}

// Register registers the service on r (a *grpc.Server) under
// envoy.service.ratelimit.v3.RateLimitService. A call whose message the
// server refuses for its size (over its grpc.MaxRecvMsgSize, 4 MiB by
// default) is answered RESOURCE_EXHAUSTED by gRPC, as before, and now
// counted by Options.OnRejected as RejectMessageSize.
func (s *Service) Register(r grpc.ServiceRegistrar) {
	desc := rlspb.RateLimitService_ServiceDesc // a copy: the package's stays as it is
	desc.Methods = []grpc.MethodDesc{{MethodName: "ShouldRateLimit", Handler: s.handle}}
	r.RegisterService(&desc, s)
}

// handle is the gRPC method handler of ShouldRateLimit: the generated
// one's work, and a refusal of the request's message seen. gRPC checks a
// message's size when the handler asks for it (dec), before any codec
// or interceptor, and answers an oversized one RESOURCE_EXHAUSTED itself
// (its only refusal with that code): counted here, as the service's own
// refusals are, it would otherwise be counted nowhere.
func (s *Service) handle(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	req := new(rlspb.RateLimitRequest)
	if err := dec(req); err != nil {
		if status.Code(err) == codes.ResourceExhausted {
			s.rejected(RejectMessageSize)
		}
		return nil, err
	}
	if interceptor == nil {
		return s.ShouldRateLimit(ctx, req)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: rlspb.RateLimitService_ShouldRateLimit_FullMethodName}
	return interceptor(ctx, req, info, func(ctx context.Context, r any) (any, error) {
		req, ok := r.(*rlspb.RateLimitRequest)
		if !ok {
			return nil, status.Errorf(codes.Internal, "envoyrls: an interceptor passed a %T, not a RateLimitRequest", r)
		}
		return s.ShouldRateLimit(ctx, req)
	})
}

// ShouldRateLimit implements RateLimitService.ShouldRateLimit. Every
// descriptor that matches a limit is decided as one layer of a single
// all-or-nothing floodgate decision (one store round trip): if one
// enforced descriptor is over its limit, the request consumes nothing in
// the others. Shadow-mode descriptors are decided and counted but never
// make the overall code OVER_LIMIT; when only they deny, the decision is
// repeated without them (one more round trip) so the enforced ones still
// count the request.
//
// Invalid requests get INVALID_ARGUMENT with a message saying what is
// wrong, and consume nothing. Store failures get UNAVAILABLE (or
// DEADLINE_EXCEEDED / CANCELED when the caller's context ended), which
// Envoy handles according to its failure_mode_deny setting.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	cfg := s.cfg()
	if cfg == nil {
		s.rejected(RejectNoConfig)
		return nil, status.Error(codes.Unavailable, "envoyrls: no rate limit configuration loaded")
	}
	p, err := cfg.plan(req, s.limits)
	if err != nil {
		reason := RejectDescriptor // every error of plan is a requestError
		if re, ok := errors.AsType[*requestError](err); ok {
			reason = re.reason
		}
		s.rejected(reason)
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	defer p.release()
	caller, own := ctx, false // own: the store calls end at Options.Timeout, before the caller's deadline
	if s.opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = s.ticks.WithTimeout(ctx, time.Now(), s.opts.Timeout)
		defer cancel()
		own = ctx != caller
	}
	now := s.opts.Clock()
	ctx, fo := fallback.NewRequestContext(ctx)
	var degraded fallback.Outcome
	results, err := s.decide(ctx, now, p, func() {
		// Each decision overwrites fo: the answer is degraded when any
		// of its decisions was.
		if fo.Degraded && !degraded.Degraded {
			degraded = *fo
		}
	})
	if err != nil {
		if s.opts.OnError != nil {
			s.opts.OnError(caller, err)
		}
		return nil, storeStatus(caller, own, err)
	}
	resp := s.response(now, p, results)
	if degraded.Degraded {
		s.markDegraded(resp, degraded)
		if s.opts.OnDegraded != nil {
			s.opts.OnDegraded(degraded)
		}
	}
	if s.opts.Observe != nil {
		s.observe(req.GetDomain(), p, resp)
	}
	return resp, nil
}

// rejected calls Options.OnRejected, when set, with reason.
func (s *Service) rejected(reason Rejection) {
	if s.opts.OnRejected != nil {
		s.opts.OnRejected(reason)
	}
}

func (s *Service) observe(domain string, p *plan, resp *rlspb.RateLimitResponse) {
	for i, dp := range p.descs {
		if dp.limit == nil {
			continue
		}
		s.opts.Observe(Observation{
			Domain:   domain,
			Rule:     dp.rule,
			Policy:   dp.policy().Name,
			Identity: dp.identity,
			Code:     resp.Statuses[i].GetCode(),
			Shadow:   dp.shadow,
			Overall:  resp.GetOverallCode(),
		})
	}
}

// decide runs the plan's layers and returns one result per layer (the
// plan's scratch space: valid until it is released). It calls after once
// after each successful store decision.
func (s *Service) decide(ctx context.Context, now time.Time, p *plan, after func()) ([]floodgate.Result, error) {
	p.results = grow(p.results, len(p.layers))
	results := p.results
	if len(p.layers) == 0 {
		return results, nil
	}
	if s.opts.CountEachDescriptor {
		for i := range p.layers {
			d, err := s.lim.AllowLayersAt(ctx, now, p.cost, p.layers[i].spec)
			if err != nil {
				return nil, err
			}
			after()
			results[i] = d.Layers[0]
		}
		return results, nil
	}
	if p.denyAll {
		// The request is denied anyway: report where the other
		// descriptors stand without consuming anything.
		p.specs = p.specs[:0]
		for i := range p.layers {
			p.layers[i].spec.Peek = true
			p.specs = append(p.specs, p.layers[i].spec)
		}
		d, err := s.lim.AllowLayersAt(ctx, now, p.cost, p.specs...)
		if err != nil {
			return nil, err
		}
		after()
		copy(results, d.Layers)
		return results, nil
	}
	p.active = grow(p.active, len(p.layers))
	active := p.active
	for i := range active {
		active[i] = i
	}
	for len(active) > 0 {
		p.specs = p.specs[:0]
		for _, i := range active {
			p.specs = append(p.specs, p.layers[i].spec)
		}
		d, err := s.lim.AllowLayersAt(ctx, now, p.cost, p.specs...)
		if err != nil {
			return nil, err
		}
		after()
		for j, i := range active {
			results[i] = d.Layers[j]
		}
		if d.Allowed {
			break
		}
		// Keep every layer but the shadow ones that denied by themselves;
		// stop when an enforced layer denied.
		keep := active[:0:0]
		enforcedDenied := false
		for j, i := range active {
			own := ownDenial(d.Layers[j])
			if own && !p.layers[i].shadow {
				enforcedDenied = true
			}
			if !own || !p.layers[i].shadow {
				keep = append(keep, i)
			}
		}
		if enforcedDenied || len(keep) == len(active) {
			break
		}
		active = keep
	}
	return results, nil
}

// ownDenial reports a layer that denied by itself, not because another
// layer of the same decision did.
func ownDenial(r floodgate.Result) bool {
	return !r.Allowed && r.Reason != floodgate.ReasonOtherLayer
}

// storeStatus maps a store error to a gRPC status. ctx is the caller's
// context; own says the store calls ran under a deadline of the service's
// own (Options.Timeout) that came before the caller's: the store then ran
// out of the service's time, not the caller's, which is UNAVAILABLE. The
// message says what kind of failure it was; the store's own error (a
// Redis address, a key, a server's message) is not in it (see
// Options.OnError). Errors of the service's own making (a policy the
// store cannot decide) keep their text: it names no backend.
func storeStatus(ctx context.Context, own bool, err error) error {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || !own && errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "envoyrls: the decision did not finish before the caller's deadline")
	case errors.Is(err, context.Canceled) || errors.Is(ctx.Err(), context.Canceled):
		return status.Error(codes.Canceled, "envoyrls: the request was canceled")
	case errors.Is(err, floodgate.ErrInvalidPolicy), errors.Is(err, floodgate.ErrInvalidLayers), errors.Is(err, floodgate.ErrInvalidCost):
		return status.Errorf(codes.Internal, "envoyrls: %v", err)
	case errors.Is(err, floodgate.ErrIndeterminate):
		return status.Error(codes.Unavailable, "envoyrls: the rate limit store failed after the request was sent; it may have been counted")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.Unavailable, "envoyrls: the decision did not finish in time")
	}
	return status.Error(codes.Unavailable, "envoyrls: the rate limit store is unavailable; nothing was counted")
}
