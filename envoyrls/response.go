package envoyrls

import (
	"math"
	"strconv"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
)

// answer1 is the answer to a request of one descriptor, allocated at
// once.
type answer1 struct {
	resp     rlspb.RateLimitResponse
	statuses [1]*rlspb.RateLimitResponse_DescriptorStatus
	status   [1]rlspb.RateLimitResponse_DescriptorStatus
	reset    [1]durationpb.Duration
}

// response builds the answer: one status per request descriptor, the
// overall code and, when enabled, the X-RateLimit-* headers.
func (s *Service) response(now time.Time, p *plan, results []floodgate.Result) *rlspb.RateLimitResponse {
	var (
		resp     *rlspb.RateLimitResponse
		statuses []rlspb.RateLimitResponse_DescriptorStatus
		resets   []durationpb.Duration
	)
	if len(p.descs) == 1 {
		a := &answer1{}
		resp, statuses, resets = &a.resp, a.status[:], a.reset[:]
		resp.Statuses = a.statuses[:]
	} else {
		resp = &rlspb.RateLimitResponse{Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(p.descs))}
		statuses = make([]rlspb.RateLimitResponse_DescriptorStatus, len(p.descs))
		resets = make([]durationpb.Duration, len(p.descs))
	}
	resp.OverallCode = rlspb.RateLimitResponse_OK
	var closest *rlspb.RateLimitResponse_DescriptorStatus
	forced := false
	for i, dp := range p.descs {
		st := &statuses[i]
		descriptorStatus(st, &resets[i], now, dp, p.layers, results)
		resp.Statuses[i] = st
		if st.Code == rlspb.RateLimitResponse_OVER_LIMIT && !dp.shadow {
			resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
			// Of the descriptors over their limits, the headers tell the
			// client the longest wait: the request passes only when
			// every one of them admits it again.
			if !forced || st.DurationUntilReset.AsDuration() > closest.DurationUntilReset.AsDuration() {
				closest, forced = st, true
			}
		}
		// A shadow descriptor, watched but not enforced, never describes
		// the request to its client: its limit is not one it is held to.
		if !forced && !dp.shadow && st.CurrentLimit != nil && (closest == nil || st.LimitRemaining < closest.LimitRemaining) {
			closest = st
		}
	}
	if s.opts.ResponseHeaders && closest != nil {
		resp.ResponseHeadersToAdd = []*corepb.HeaderValue{
			{Key: s.opts.LimitHeader, Value: strconv.FormatUint(uint64(closest.CurrentLimit.RequestsPerUnit), 10)},
			{Key: s.opts.RemainingHeader, Value: strconv.FormatUint(uint64(closest.LimitRemaining), 10)},
			{Key: s.opts.ResetHeader, Value: strconv.FormatInt(ceilSeconds(closest.DurationUntilReset.AsDuration()), 10)},
		}
	}
	return resp
}

// markDegraded says in resp that o, a failure mode of a fallback.Store,
// took the decision instead of the primary store: a header for Envoy to
// return to the client, and dynamic metadata for its access logs.
func (s *Service) markDegraded(resp *rlspb.RateLimitResponse, o fallback.Outcome) {
	mode, reason := o.Mode.String(), o.Reason.String()
	resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
		&corepb.HeaderValue{Key: s.opts.DegradedHeader, Value: mode + "; reason=" + reason})
	resp.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{
		"degraded":        structpb.NewBoolValue(true),
		"failure_mode":    structpb.NewStringValue(mode),
		"degraded_reason": structpb.NewStringValue(reason),
	}}
}

// descriptorStatus fills st in for one descriptor, with reset as its
// duration_until_reset when it has one: OK with no current_limit when
// nothing matched; OK with the maximum remaining when unlimited;
// OVER_LIMIT when it denied by itself or its cost is more than any limit
// admits (a descriptor that would have admitted a request another
// descriptor denied is OK, its remaining untouched).
func descriptorStatus(st *rlspb.RateLimitResponse_DescriptorStatus, reset *durationpb.Duration, now time.Time, dp descPlan, layers []layerPlan, results []floodgate.Result) {
	st.Code = rlspb.RateLimitResponse_OK
	switch {
	case dp.unlimited:
		st.LimitRemaining = math.MaxUint32
	case dp.denies:
		st.Code = rlspb.RateLimitResponse_OVER_LIMIT
		st.CurrentLimit = dp.limit
		// requests_per_unit 0 never admits; like envoyproxy/ratelimit,
		// say when the unit's current window ends rather than zero, which
		// a client reads as "retry now".
		if u, ok := unitLength(dp.limit.GetUnit()); ok {
			if m := int64(max(dp.limit.GetUnitMultiplier().GetValue(), 1)); m <= math.MaxInt64/int64(u) {
				w := u * time.Duration(m)
				setDuration(reset, w-time.Duration(now.UnixNano()%int64(w)))
			}
		}
		st.DurationUntilReset = reset
	case dp.layer >= 0:
		r := results[dp.layer]
		st.CurrentLimit = dp.limit
		st.LimitRemaining = clampUint32(r.Remaining)
		wait := r.ResetAt.Sub(now)
		if ownDenial(r) || layers[dp.layer].overCost {
			st.Code = rlspb.RateLimitResponse_OVER_LIMIT
			if r.RetryAfter > 0 {
				wait = r.RetryAfter
			}
		}
		setDuration(reset, max(wait, 0))
		st.DurationUntilReset = reset
	}
}

// setDuration sets pb to d, as durationpb.New does.
func setDuration(pb *durationpb.Duration, d time.Duration) {
	nanos := d.Nanoseconds()
	pb.Seconds, pb.Nanos = nanos/1e9, int32(nanos%1e9)
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}
