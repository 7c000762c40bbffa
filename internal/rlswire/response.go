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

// Every field these messages have is numbered below 16, so a tag is one
// byte. As protobuf-go does for proto3, a scalar field (varint, string,
// bytes) that holds its zero value is not written; a message field is
// written whenever it is set, empty or not; fields go in the order of
// their numbers.

// varintSize is the size of varint field holding v.
func varintSize(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(v)
}

// appendVarint appends varint field num holding v.
func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

// stringSize is the size of a string (or bytes) field holding n bytes.
func stringSize(n int) int {
	if n == 0 {
		return 0
	}
	return 1 + protowire.SizeBytes(n)
}

// appendString appends string field num holding v.
func appendString(b []byte, num protowire.Number, v string) []byte {
	if v == "" {
		return b
	}
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), v)
}

// messageSize is the size of a set message field whose fields take n
// bytes.
func messageSize(n int) int { return 1 + protowire.SizeBytes(n) }

// appendMessage appends the tag and length of message field num whose
// fields take n bytes; the caller appends the fields.
func appendMessage(b []byte, num protowire.Number, n int) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.BytesType), uint64(n))
}

// responseSize is the size of m in wire format, for a plain m.
func responseSize(m *rlspb.RateLimitResponse) int {
	n := varintSize(uint64(m.OverallCode))
	for _, s := range m.Statuses {
		n += messageSize(statusSize(s))
	}
	for _, h := range m.ResponseHeadersToAdd {
		n += messageSize(headerSize(h))
	}
	for _, h := range m.RequestHeadersToAdd {
		n += messageSize(headerSize(h))
	}
	return n + stringSize(len(m.RawBody))
}

// appendResponse appends plain m.
func appendResponse(b []byte, m *rlspb.RateLimitResponse) []byte {
	b = appendVarint(b, 1, uint64(m.OverallCode))
	for _, s := range m.Statuses {
		b = appendStatus(appendMessage(b, 2, statusSize(s)), s)
	}
	for _, h := range m.ResponseHeadersToAdd {
		b = appendHeader(appendMessage(b, 3, headerSize(h)), h)
	}
	for _, h := range m.RequestHeadersToAdd {
		b = appendHeader(appendMessage(b, 4, headerSize(h)), h)
	}
	if len(m.RawBody) > 0 {
		b = protowire.AppendBytes(protowire.AppendTag(b, 5, protowire.BytesType), m.RawBody)
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
	n := varintSize(uint64(s.Code)) + varintSize(uint64(s.LimitRemaining))
	if s.CurrentLimit != nil {
		n += messageSize(limitSize(s.CurrentLimit))
	}
	if s.DurationUntilReset != nil {
		n += messageSize(durationSize(s.DurationUntilReset))
	}
	return n
}

// appendStatus appends a descriptor status's fields.
func appendStatus(b []byte, s *rlspb.RateLimitResponse_DescriptorStatus) []byte {
	b = appendVarint(b, 1, uint64(s.Code))
	if l := s.CurrentLimit; l != nil {
		b = appendLimit(appendMessage(b, 2, limitSize(l)), l)
	}
	b = appendVarint(b, 3, uint64(s.LimitRemaining))
	if d := s.DurationUntilReset; d != nil {
		b = appendDuration(appendMessage(b, 4, durationSize(d)), d)
	}
	return b
}

// limitSize is the size of a RateLimit's fields.
func limitSize(l *rlspb.RateLimitResponse_RateLimit) int {
	n := varintSize(uint64(l.RequestsPerUnit)) + varintSize(uint64(l.Unit)) + stringSize(len(l.Name))
	if u := l.UnitMultiplier; u != nil {
		n += messageSize(varintSize(uint64(u.Value)))
	}
	return n
}

// appendLimit appends a RateLimit's fields: name (3, declared first)
// after requests_per_unit and unit.
func appendLimit(b []byte, l *rlspb.RateLimitResponse_RateLimit) []byte {
	b = appendVarint(b, 1, uint64(l.RequestsPerUnit))
	b = appendVarint(b, 2, uint64(l.Unit))
	b = appendString(b, 3, l.Name)
	if u := l.UnitMultiplier; u != nil {
		b = appendVarint(appendMessage(b, 4, varintSize(uint64(u.Value))), 1, uint64(u.Value))
	}
	return b
}

// durationSize is the size of a Duration's fields. Nanos is an int32: a
// negative one is written sign-extended, in ten bytes.
func durationSize(d *durationpb.Duration) int {
	return varintSize(uint64(d.Seconds)) + varintSize(uint64(int64(d.Nanos)))
}

// appendDuration appends a Duration's fields.
func appendDuration(b []byte, d *durationpb.Duration) []byte {
	return appendVarint(appendVarint(b, 1, uint64(d.Seconds)), 2, uint64(int64(d.Nanos)))
}

// headerSize is the size of a HeaderValue's key and value.
func headerSize(h *corepb.HeaderValue) int {
	return stringSize(len(h.Key)) + stringSize(len(h.Value))
}

// appendHeader appends a HeaderValue's key and value.
func appendHeader(b []byte, h *corepb.HeaderValue) []byte {
	return appendString(appendString(b, 1, h.Key), 2, h.Value)
}
