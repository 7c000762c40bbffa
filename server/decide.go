package server

import (
	"context"
	"math"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/fallback"
)

// outcome is one decided check.
type outcome struct {
	check     check
	tier      string
	allowed   bool
	binding   int // index into layers
	layers    []floodgate.Result
	specs     []floodgate.LayerSpec // specs[i].Identity: the identity layer i keyed on
	shadowHit []bool                // shadow layers that would have denied
	degraded  fallback.Outcome
}

// tierOf returns the tier applying to c (see tierFor): the identity's
// assigned tier when the policy has tiered layers.
func (s *Server) tierOf(ctx context.Context, cfg *config.Config, c check) string {
	return s.tierFor(ctx, cfg, c.policy.Name, c.policy.Tiered(), c.policy.TierDimension, c.identity)
}

// decide runs one check as one all-or-nothing decision over the policy's
// layers. ctx carries the request's decision deadline, which bounds the
// tier lookup and the store calls together, and fo, the request's
// fallback outcome (fallback.NewRequestContext), shared by its checks:
// once a Redis call of the request has timed out, its remaining checks
// are decided by their failure mode without waiting for Redis again.
// Shadow layers are decided and counted with the others, but never deny:
// if only shadow layers denied, the enforced layers are decided again
// without them (a second store call, made only in that case).
func (s *Server) decide(ctx context.Context, fo *fallback.Outcome, cfg *config.Config, c check) (o outcome, err error) {
	o = outcome{check: c, tier: s.tierOf(ctx, cfg, c)}
	defer func() {
		if err == nil && o.degraded.Degraded {
			s.countDegraded(o.degraded)
		}
	}()
	specs, err := cfg.Specs(c.policy, o.tier, c.identity, c.peek)
	if err != nil {
		return o, badRequest("invalid-identity", "%s", err)
	}
	o.specs = specs // fresh from Specs, and nothing below changes it
	clearOutcome(fo)
	dec, err := s.lim.AllowLayers(ctx, c.cost, specs...)
	if err != nil {
		return o, err
	}
	if fo.Degraded {
		o.degraded = *fo
	}
	o.layers = dec.Layers
	var enforcedBuf [floodgate.MaxLayers]int
	enforced := enforcedBuf[:0]
	binding := -1 // the enforced layer whose denial lasts longest
	for i, l := range c.policy.Layers {
		r := dec.Layers[i]
		denied := !r.Allowed && r.Reason != floodgate.ReasonOtherLayer
		if l.Shadow {
			if o.shadowHit == nil {
				o.shadowHit = make([]bool, len(specs))
			}
			o.shadowHit[i] = denied
			continue
		}
		enforced = append(enforced, i)
		if denied && (binding < 0 || floodgate.Outlasts(r, dec.Layers[binding])) {
			binding = i
		}
	}
	switch {
	case dec.Allowed:
		o.allowed, o.binding = true, leastRemaining(o.layers, enforced)
	case binding >= 0:
		o.allowed, o.binding = false, binding
	case len(enforced) == 0 || c.peek:
		// Only shadow layers denied. A peek consumed nothing anyway, and a
		// shadow-only policy never blocks: report the enforced layers'
		// own results.
		for _, i := range enforced {
			o.layers[i].Allowed, o.layers[i].Reason = true, floodgate.ReasonNone
		}
		o.allowed, o.binding = true, leastRemaining(o.layers, enforced)
	default:
		// Only shadow layers denied, so nothing was consumed: decide the
		// enforced layers again, alone.
		sub := make([]floodgate.LayerSpec, len(enforced))
		for j, i := range enforced {
			sub[j] = specs[i]
		}
		clearOutcome(fo)
		dec2, err := s.lim.AllowLayers(ctx, c.cost, sub...)
		if err != nil {
			return o, err
		}
		if fo.Degraded && !o.degraded.Degraded {
			o.degraded = *fo
		}
		for j, i := range enforced {
			o.layers[i] = dec2.Layers[j]
		}
		o.allowed, o.binding = dec2.Allowed, enforced[dec2.Binding]
		if dec2.Allowed {
			o.binding = leastRemaining(o.layers, enforced)
		}
	}
	return o, nil
}

// clearOutcome forgets the outcome of the request's previous decision,
// which fo still holds; what the request shares (its failed calls) stays.
func clearOutcome(fo *fallback.Outcome) {
	fo.Degraded, fo.Mode, fo.Reason, fo.Err = false, 0, fallback.ReasonNone, nil
}

// leastRemaining returns, among the layers at idx (all layers when idx is
// empty), the one with the least remaining relative to its limit.
func leastRemaining(rs []floodgate.Result, idx []int) int {
	if len(idx) == 0 {
		idx = make([]int, len(rs))
		for i := range idx {
			idx[i] = i
		}
	}
	best, bi := math.Inf(1), idx[0]
	for _, i := range idx {
		if f := float64(rs[i].Remaining) / float64(max(rs[i].Limit, 1)); f < best {
			best, bi = f, i
		}
	}
	return bi
}

// LayerResult is one layer's part of a decision.
type LayerResult struct {
	// Name is the layer's name, e.g. "per-user".
	Name string `json:"name"`
	// Dimension is what the layer keys on: "global", "user", "user+ip"...
	Dimension string `json:"dimension"`
	// Algorithm is the layer's algorithm, e.g. "sliding_window".
	Algorithm string `json:"algorithm"`
	// Allowed reports whether this layer admitted the request.
	Allowed bool `json:"allowed"`
	// Limit is the layer's limit for the request's tier.
	Limit int64 `json:"limit"`
	// Remaining is what the layer could still admit after this request.
	Remaining int64 `json:"remaining"`
	// Reset is when the layer's state is fresh again, in Unix seconds
	// (rounded up).
	Reset int64 `json:"reset"`
	// ResetAt is Reset as an RFC 3339 time.
	ResetAt string `json:"reset_at"`
	// RetryAfterMS is, when denied, how long to wait in milliseconds
	// (rounded up).
	RetryAfterMS int64 `json:"retry_after_ms"`
	// DelayMS is, for a shaping (GCRA max_delay) layer, how long to wait
	// before acting on an admitted request, in milliseconds.
	DelayMS int64 `json:"delay_ms"`
	// Reason is none, limited, cost_exceeds_limit or other_layer.
	Reason string `json:"reason"`
	// Shadow marks a layer that counts but never denies.
	Shadow bool `json:"shadow,omitempty"`
}

// CheckResponse is the body of a decided check or peek (HTTP 200; or 429
// with ?enforce=1 when denied).
type CheckResponse struct {
	// Allowed reports whether the request may proceed.
	Allowed bool `json:"allowed"`
	// Policy and Tier say which limits applied.
	Policy string `json:"policy"`
	Tier   string `json:"tier"`
	// Limit, Remaining, Reset, ResetAt, RetryAfterMS and DelayMS are the
	// binding layer's, as in LayerResult; they are what the X-RateLimit-*
	// headers carry.
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	Reset        int64  `json:"reset"`
	ResetAt      string `json:"reset_at"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	DelayMS      int64  `json:"delay_ms"`
	// Binding names the layer that decided: when denied, the one whose
	// denial lasts longest (a cost above its limit, else the longest
	// retry_after_ms; the first on ties), so that a client that waits
	// retry_after_ms finds every layer admitting it; when allowed, the one
	// closest to its limit.
	Binding string `json:"binding"`
	// Reason is why the request was denied (none when allowed).
	Reason string `json:"reason"`
	// Layers are every layer's results, in configuration order.
	Layers []LayerResult `json:"layers"`
	// Degraded reports a decision taken by the policy's failure mode
	// because Redis could not decide (down, slow, or its circuit breaker
	// open, or one key holding a value floodgate did not write);
	// FailureMode (local, open or closed) and DegradedReason (timeout,
	// unavailable, indeterminate, breaker_open, error or foreign_value)
	// say how and why. Absent when Redis decided. The X-Floodgate-Degraded
	// header carries the same, e.g. "local; reason=breaker_open".
	Degraded       bool   `json:"degraded,omitempty"`
	FailureMode    string `json:"failure_mode,omitempty"`
	DegradedReason string `json:"degraded_reason,omitempty"`
}

func ceilSeconds(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

func ceilMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func layerResult(l *config.Layer, r floodgate.Result, tier string) LayerResult {
	// reset_at is the instant reset names: both rounded up to the second.
	reset := ceilSeconds(r.ResetAt)
	return LayerResult{
		Name:         l.Name,
		Dimension:    l.Dimension(),
		Algorithm:    l.Policy(tier).Algorithm.String(),
		Allowed:      r.Allowed,
		Limit:        r.Limit,
		Remaining:    r.Remaining,
		Reset:        reset,
		ResetAt:      time.Unix(reset, 0).UTC().Format(time.RFC3339),
		RetryAfterMS: ceilMillis(r.RetryAfter),
		DelayMS:      ceilMillis(r.Delay),
		Reason:       r.Reason.String(),
		Shadow:       l.Shadow,
	}
}

// response builds the JSON body of o.
func (o outcome) response() CheckResponse {
	return o.responseIn(make([]LayerResult, len(o.layers)))
}

// responseIn is response with the layers' results stored in layers
// (len(layers) == len(o.layers)), e.g. an array on the caller's stack.
func (o outcome) responseIn(layers []LayerResult) CheckResponse {
	p := o.check.policy
	resp := CheckResponse{Allowed: o.allowed, Policy: p.Name, Tier: o.tier, Layers: layers}
	for i, r := range o.layers {
		resp.Layers[i] = layerResult(p.Layers[i], r, o.tier)
	}
	b := resp.Layers[o.binding]
	resp.Limit, resp.Remaining, resp.Reset, resp.ResetAt = b.Limit, b.Remaining, b.Reset, b.ResetAt
	resp.RetryAfterMS, resp.DelayMS, resp.Binding, resp.Reason = b.RetryAfterMS, b.DelayMS, b.Name, b.Reason
	if o.allowed {
		resp.Reason, resp.RetryAfterMS = floodgate.ReasonNone.String(), 0
	}
	if o.degraded.Degraded {
		resp.Degraded, resp.FailureMode, resp.DegradedReason = true, o.degraded.Mode.String(), o.degraded.Reason.String()
	}
	return resp
}
