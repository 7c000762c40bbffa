package envoycompat

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// doLimit counts the request in the counter of every limited descriptor
// and returns each descriptor's status, as envoyproxy/ratelimit's fixed
// window cache does: every descriptor is counted, even when another one
// is over its limit, unless StopIncrementWhenOverLimit is set.
func (s *Service) doLimit(ctx context.Context, req *rlspb.RateLimitRequest, limits []*Limit) ([]*rlspb.RateLimitResponse_DescriptorStatus, error) {
	n := len(limits)
	hits := hitsAddends(req)
	now := s.opts.Now()
	unix := now.Unix()
	ops := make([]*Op, n)
	for i, l := range limits {
		if l == nil {
			continue
		}
		d := unitSeconds(l.Proto.GetUnit())
		if d == 0 {
			return nil, &RequestError{fmt.Sprintf("descriptor %d: limit unit %s has no length", i, l.Proto.GetUnit())}
		}
		ops[i] = &Op{
			Key:       CounterKey(s.opts.CacheKeyPrefix, req.GetDomain(), entriesOf(req.GetDescriptors()[i]), l, unix),
			TTL:       time.Duration(d)*time.Second + s.jitter(),
			PerSecond: l.Proto.GetUnit() == rlspb.RateLimitResponse_RateLimit_SECOND,
		}
		if m := s.opts.Metrics; m != nil {
			m.add(l, statTotalHits, hits[i])
		}
	}
	overLocal := make([]bool, n)
	anyOver := false
	for i, op := range ops {
		if op != nil && s.local.has(op.Key, now) {
			overLocal[i], anyOver = true, true
		}
	}
	near := make([]bool, n)
	anyNear := false
	if s.opts.StopIncrementWhenOverLimit && !anyOver {
		var probe []*Op
		var idx []int
		for i, op := range ops {
			if op != nil {
				probe, idx = append(probe, op), append(idx, i)
			}
		}
		cur, err := s.opts.Store.Get(ctx, probe)
		if err != nil {
			return nil, err
		}
		for j, i := range idx {
			if cur[j]+hits[i] > uint64(limits[i].Proto.GetRequestsPerUnit()) {
				near[i], anyNear = true, true
			}
		}
	}
	var todo []*Op
	for i, op := range ops {
		if op == nil || overLocal[i] {
			continue
		}
		op.N = s.addend(hits[i], anyOver, anyNear, near[i])
		todo = append(todo, op)
	}
	if len(todo) > 0 {
		if err := s.opts.Store.Incr(ctx, todo); err != nil {
			return nil, err
		}
	}
	out := make([]*rlspb.RateLimitResponse_DescriptorStatus, n)
	for i, l := range limits {
		if l == nil {
			out[i] = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
			continue
		}
		var after uint64
		if !overLocal[i] {
			after = ops[i].Result
		}
		out[i] = s.status(ops[i].Key, l, after-hits[i], after, overLocal[i], hits[i], unix, now)
	}
	return out, nil
}

// addend is what a descriptor adds to its counter.
func (s *Service) addend(hits uint64, anyOver, anyNear, near bool) uint64 {
	switch {
	case !s.opts.StopIncrementWhenOverLimit:
		return hits
	case anyOver:
		return 0
	case !anyNear, near:
		return hits
	}
	return 0
}

func (s *Service) jitter() time.Duration {
	secs := int64(s.opts.ExpirationJitterMax / time.Second)
	if secs <= 0 {
		return 0
	}
	s.rndMu.Lock()
	defer s.rndMu.Unlock()
	return time.Duration(s.rnd.Int64N(secs)) * time.Second
}

// status is one descriptor's status. before and after are the counter
// around this request's addition (before may have wrapped around when
// the counter was not increased; it only feeds the statistics).
func (s *Service) status(key string, l *Limit, before, after uint64, overLocal bool, hits uint64, unix int64, now time.Time) *rlspb.RateLimitResponse_DescriptorStatus {
	m := s.opts.Metrics
	limit := uint64(l.Proto.GetRequestsPerUnit())
	st := &rlspb.RateLimitResponse_DescriptorStatus{
		CurrentLimit:       l.Proto,
		DurationUntilReset: &durationpb.Duration{Seconds: resetSeconds(l.Proto.GetUnit(), unix)},
	}
	over := false
	switch {
	case overLocal:
		over = true
		st.Code = rlspb.RateLimitResponse_OVER_LIMIT
		m.add(l, statOverLimit, hits)
		m.add(l, statOverLimitLocal, hits)
	case after > limit:
		over = true
		st.Code = rlspb.RateLimitResponse_OVER_LIMIT
		nearThr := nearThreshold(limit, s.opts.NearLimitRatio)
		if before >= limit {
			m.add(l, statOverLimit, hits)
		} else {
			m.add(l, statOverLimit, after-limit)
			m.add(l, statNearLimit, limit-max(nearThr, before))
		}
		s.local.add(key, time.Duration(unitSeconds(l.Proto.GetUnit()))*time.Second, now)
	default:
		st.Code = rlspb.RateLimitResponse_OK
		st.LimitRemaining = uint32(limit - after)
		nearThr := nearThreshold(limit, s.opts.NearLimitRatio)
		if after > nearThr {
			if before >= nearThr {
				m.add(l, statNearLimit, hits)
			} else {
				m.add(l, statNearLimit, after-nearThr)
			}
		}
		m.add(l, statWithinLimit, hits)
	}
	if over && l.Shadow {
		st.Code = rlspb.RateLimitResponse_OK
		if overLocal || before >= limit {
			m.add(l, statShadowMode, hits)
		} else {
			m.add(l, statShadowMode, after-limit)
		}
	}
	return st
}

func entriesOf(d *ratelimitv3.RateLimitDescriptor) []Entry {
	es := make([]Entry, len(d.GetEntries()))
	for i, e := range d.GetEntries() {
		es[i] = Entry{e.GetKey(), e.GetValue()}
	}
	return es
}

// dynamicMetadata describes the request for Envoy's dynamic metadata: its
// domain, descriptors (entries as "key=value", limit override, own
// hits_addend), hits_addend when set, and the merged metadata of the
// descriptors that passed.
func dynamicMetadata(req *rlspb.RateLimitRequest, passed []int, limits []*Limit) *structpb.Struct {
	f := map[string]*structpb.Value{"domain": structpb.NewStringValue(utf8Text(req.GetDomain()))}
	descs := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		if d == nil {
			continue
		}
		df := map[string]*structpb.Value{}
		es := make([]*structpb.Value, 0, len(d.GetEntries()))
		for _, e := range d.GetEntries() {
			es = append(es, structpb.NewStringValue(utf8Text(e.GetKey()+"="+e.GetValue())))
		}
		df["entries"] = structpb.NewListValue(&structpb.ListValue{Values: es})
		if d.GetLimit() != nil {
			df["limit"] = structpb.NewStringValue(overrideText(d.GetLimit()))
		}
		if h := d.GetHitsAddend(); h != nil {
			df["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: df}))
	}
	f["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if h := req.GetHitsAddend(); h != 0 {
		f["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	md := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for _, i := range passed {
		if i < len(limits) && limits[i] != nil && limits[i].Metadata != nil {
			mergeStruct(md, limits[i].Metadata)
		}
	}
	if len(md.GetFields()) > 0 {
		f["metadata"] = structpb.NewStructValue(md)
	}
	return &structpb.Struct{Fields: f}
}

// mergeStruct adds src's fields to dst: a field dst lacks is taken; two
// structs are merged; otherwise dst's value stays.
func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		d, ok := dst.GetFields()[k]
		if !ok {
			dst.Fields[k] = proto.Clone(v).(*structpb.Value) // never share the configuration's values
			continue
		}
		if ds, ss := d.GetStructValue(), v.GetStructValue(); ds != nil && ss != nil {
			mergeStruct(ds, ss)
		}
	}
}

// overrideText is a limit override in protobuf's text format on one line,
// as envoyproxy/ratelimit's dynamic metadata carries it
// ("requests_per_unit:2 unit:MINUTE unit_multiplier:{value:2}"). The message's String method
// separates the fields with one space in some builds and two in others
// (on purpose); this writes one, every time. An override carrying
// unknown fields is left to String.
func overrideText(o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) string {
	if len(o.ProtoReflect().GetUnknown()) > 0 {
		return o.String()
	}
	var b []byte
	if n := o.GetRequestsPerUnit(); n != 0 {
		b = strconv.AppendUint(append(b, "requests_per_unit:"...), uint64(n), 10)
	}
	if u := o.GetUnit(); u != 0 {
		if len(b) > 0 {
			b = append(b, ' ')
		}
		b = append(b, "unit:"...)
		if name, ok := typev3.RateLimitUnit_name[int32(u)]; ok {
			b = append(b, name...)
		} else {
			b = strconv.AppendInt(b, int64(u), 10)
		}
	}
	if m := o.GetUnitMultiplier(); m != nil {
		if len(b) > 0 {
			b = append(b, ' ')
		}
		b = append(b, "unit_multiplier:{"...)
		if v := m.GetValue(); v != 0 {
			b = strconv.AppendUint(append(b, "value:"...), uint64(v), 10)
		}
		b = append(b, '}')
	}
	return string(b)
}

// nearThreshold is the count above which hits are near_limit: the limit
// times ratio, rounded down as theirs does in float32, or the limit itself
// (none is near) for a ratio outside 0..1, where theirs computes a
// threshold above the limit or a platform-dependent one.
func nearThreshold(limit uint64, ratio float32) uint64 {
	if !(ratio >= 0 && ratio <= 1) {
		return limit
	}
	// float32 rounding can take limit×1 above a limit past 2^24.
	return min(uint64(math.Floor(float64(float32(limit)*ratio))), limit)
}
