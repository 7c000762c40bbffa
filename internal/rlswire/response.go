package rlswire

import (
	"unicode/utf8"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// AppendResponse appends m in protobuf wire format to b: the bytes
// proto.Marshal writes. A response with a field it does not write (quota,
// dynamic metadata, a header's raw value, unknown fields anywhere), a nil
// element in a list, or a string that is not UTF-8 (which proto.Marshal
// refuses) is marshaled by protobuf-go instead, with its error.
func AppendResponse(b []byte, m *rlspb.RateLimitResponse) ([]byte, error) {
	if !plain(m) {
		return proto.MarshalOptions{}.MarshalAppend(b, m)
	}
	return appendResponse(b, m), nil
}

// responseSize is the size of m in wire format, for a plain m.
func responseSize(m *rlspb.RateLimitResponse) int {
	n := 0
	if m.OverallCode != 0 {
		n += 1 + protowire.SizeVarint(uint64(m.OverallCode))
	}
	for _, s := range m.Statuses {
		n += 1 + protowire.SizeBytes(statusSize(s))
	}
	for _, h := range m.ResponseHeadersToAdd {
		n += 1 + protowire.SizeBytes(headerSize(h))
	}
	for _, h := range m.RequestHeadersToAdd {
		n += 1 + protowire.SizeBytes(headerSize(h))
	}
	if len(m.RawBody) > 0 {
		n += 1 + protowire.SizeBytes(len(m.RawBody))
	}
	return n
}

// appendResponse appends plain m.
func appendResponse(b []byte, m *rlspb.RateLimitResponse) []byte {
	if m.OverallCode != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(m.OverallCode))
	}
	for _, s := range m.Statuses {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(statusSize(s)))
		b = appendStatus(b, s)
	}
	for _, h := range m.ResponseHeadersToAdd {
		b = appendHeader(b, 3, h)
	}
	for _, h := range m.RequestHeadersToAdd {
		b = appendHeader(b, 4, h)
	}
	if len(m.RawBody) > 0 {
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendBytes(b, m.RawBody)
	}
	return b
}

// plain reports whether m holds only fields appendResponse writes, and
// valid strings.
func plain(m *rlspb.RateLimitResponse) bool {
	if m == nil || m.DynamicMetadata != nil || m.Quota != nil || len(m.ProtoReflect().GetUnknown()) > 0 {
		return false
	}
	for _, s := range m.Statuses {
		if s == nil || s.Quota != nil || len(s.ProtoReflect().GetUnknown()) > 0 {
			return false
		}
		if l := s.CurrentLimit; l != nil && (!utf8.ValidString(l.Name) || len(l.ProtoReflect().GetUnknown()) > 0 ||
			l.UnitMultiplier != nil && len(l.UnitMultiplier.ProtoReflect().GetUnknown()) > 0) {
			return false
		}
		if d := s.DurationUntilReset; d != nil && len(d.ProtoReflect().GetUnknown()) > 0 {
			return false
		}
	}
	for _, hs := range [2][]*corepb.HeaderValue{m.ResponseHeadersToAdd, m.RequestHeadersToAdd} {
		for _, h := range hs {
			if h == nil || len(h.RawValue) > 0 || !utf8.ValidString(h.Key) || !utf8.ValidString(h.Value) ||
				len(h.ProtoReflect().GetUnknown()) > 0 {
				return false
			}
		}
	}
	return true
}

// statusSize is the size of a descriptor status's fields.
func statusSize(s *rlspb.RateLimitResponse_DescriptorStatus) int {
	n := 0
	if s.Code != 0 {
		n += 1 + protowire.SizeVarint(uint64(s.Code))
	}
	if s.CurrentLimit != nil {
		n += 1 + protowire.SizeBytes(limitSize(s.CurrentLimit))
	}
	if s.LimitRemaining != 0 {
		n += 1 + protowire.SizeVarint(uint64(s.LimitRemaining))
	}
	if s.DurationUntilReset != nil {
		n += 1 + protowire.SizeBytes(durationSize(s.DurationUntilReset))
	}
	return n
}

// appendStatus appends a descriptor status's fields.
func appendStatus(b []byte, s *rlspb.RateLimitResponse_DescriptorStatus) []byte {
	if s.Code != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(s.Code))
	}
	if l := s.CurrentLimit; l != nil {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(limitSize(l)))
		// protobuf-go writes fields in the order of their numbers:
		// name (3, declared first) after requests_per_unit and unit.
		if l.RequestsPerUnit != 0 {
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(l.RequestsPerUnit))
		}
		if l.Unit != 0 {
			b = protowire.AppendTag(b, 2, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(l.Unit))
		}
		if l.Name != "" {
			b = protowire.AppendTag(b, 3, protowire.BytesType)
			b = protowire.AppendString(b, l.Name)
		}
		if u := l.UnitMultiplier; u != nil {
			b = protowire.AppendTag(b, 4, protowire.BytesType)
			if u.Value != 0 {
				b = protowire.AppendVarint(b, uint64(1+protowire.SizeVarint(uint64(u.Value))))
				b = protowire.AppendTag(b, 1, protowire.VarintType)
				b = protowire.AppendVarint(b, uint64(u.Value))
			} else {
				b = protowire.AppendVarint(b, 0)
			}
		}
	}
	if s.LimitRemaining != 0 {
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(s.LimitRemaining))
	}
	if d := s.DurationUntilReset; d != nil {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(durationSize(d)))
		if d.Seconds != 0 {
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(d.Seconds))
		}
		if d.Nanos != 0 {
			b = protowire.AppendTag(b, 2, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(int64(d.Nanos))) // int32: negative ones take ten bytes
		}
	}
	return b
}

// limitSize is the size of a RateLimit's fields.
func limitSize(l *rlspb.RateLimitResponse_RateLimit) int {
	n := 0
	if l.RequestsPerUnit != 0 {
		n += 1 + protowire.SizeVarint(uint64(l.RequestsPerUnit))
	}
	if l.Unit != 0 {
		n += 1 + protowire.SizeVarint(uint64(l.Unit))
	}
	if l.Name != "" {
		n += 1 + protowire.SizeBytes(len(l.Name))
	}
	if u := l.UnitMultiplier; u != nil {
		m := 0
		if u.Value != 0 {
			m = 1 + protowire.SizeVarint(uint64(u.Value))
		}
		n += 1 + protowire.SizeBytes(m)
	}
	return n
}

// durationSize is the size of a Duration's fields.
func durationSize(d *durationpb.Duration) int {
	n := 0
	if d.Seconds != 0 {
		n += 1 + protowire.SizeVarint(uint64(d.Seconds))
	}
	if d.Nanos != 0 {
		n += 1 + protowire.SizeVarint(uint64(int64(d.Nanos)))
	}
	return n
}

// headerSize is the size of a HeaderValue's key and value.
func headerSize(h *corepb.HeaderValue) int {
	n := 0
	if h.Key != "" {
		n += 1 + protowire.SizeBytes(len(h.Key))
	}
	if h.Value != "" {
		n += 1 + protowire.SizeBytes(len(h.Value))
	}
	return n
}

// appendHeader appends header h as field num.
func appendHeader(b []byte, num protowire.Number, h *corepb.HeaderValue) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(headerSize(h)))
	if h.Key != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, h.Key)
	}
	if h.Value != "" {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, h.Value)
	}
	return b
}
