package rlswire

import (
	"bytes"
	"math"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// responses are answers of the shapes the services build, and edges.
func responses() []*rlspb.RateLimitResponse {
	status := func(code rlspb.RateLimitResponse_Code, rpu, remaining uint32, reset *durationpb.Duration) *rlspb.RateLimitResponse_DescriptorStatus {
		return &rlspb.RateLimitResponse_DescriptorStatus{Code: code, LimitRemaining: remaining, DurationUntilReset: reset,
			CurrentLimit: &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: rpu, Unit: rlspb.RateLimitResponse_RateLimit_MINUTE}}
	}
	header := func(k, v string) *corepb.HeaderValue { return &corepb.HeaderValue{Key: k, Value: v} }
	return []*rlspb.RateLimitResponse{
		{},
		{OverallCode: rlspb.RateLimitResponse_OK, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{
			status(rlspb.RateLimitResponse_OK, 1_000_000_000, 999_999_990, &durationpb.Duration{Seconds: 41, Nanos: 250_000_000})}},
		{OverallCode: rlspb.RateLimitResponse_OVER_LIMIT, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{
			status(rlspb.RateLimitResponse_OVER_LIMIT, 10, 0, &durationpb.Duration{}),
			{Code: rlspb.RateLimitResponse_OK},
			{},
			{CurrentLimit: &rlspb.RateLimitResponse_RateLimit{Name: "per-user ü", Unit: rlspb.RateLimitResponse_RateLimit_Unit(77),
				UnitMultiplier: wrapperspb.UInt32(5)}, DurationUntilReset: &durationpb.Duration{Seconds: -3, Nanos: -5}},
			{CurrentLimit: &rlspb.RateLimitResponse_RateLimit{UnitMultiplier: &wrapperspb.UInt32Value{}}},
			{CurrentLimit: &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: math.MaxUint32}, LimitRemaining: math.MaxUint32,
				DurationUntilReset: &durationpb.Duration{Seconds: math.MaxInt64, Nanos: 999_999_999}},
		},
			ResponseHeadersToAdd: []*corepb.HeaderValue{header("x-ratelimit-limit", "10"), header("", ""), header("k", "")},
			RequestHeadersToAdd:  []*corepb.HeaderValue{header("x-ratelimit-degraded", "fail_open; reason=timeout")},
			RawBody:              []byte("too many requests"),
		},
		// Marshaled by protobuf-go: fields the encoder does not write.
		{DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{"degraded": structpb.NewBoolValue(true)}}},
		{Quota: &rlspb.RateLimitResponse_Quota{Requests: 3}},
		{Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{Quota: &rlspb.RateLimitResponse_Quota{Id: "q"}}}},
		{ResponseHeadersToAdd: []*corepb.HeaderValue{{Key: "k", RawValue: []byte("v")}}},
	}
}

func TestAppendResponseMatchesProto(t *testing.T) {
	for _, m := range responses() {
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := AppendResponse([]byte("prefix"), m)
		if err != nil {
			t.Fatalf("AppendResponse(%v): %v", m, err)
		}
		if m.DynamicMetadata == nil && !bytes.Equal(got[6:], want) {
			t.Fatalf("AppendResponse(%v) = %x, proto.Marshal gives %x", m, got[6:], want)
		}
		back := &rlspb.RateLimitResponse{}
		if err := proto.Unmarshal(got[6:], back); err != nil || !proto.Equal(back, m) {
			t.Fatalf("AppendResponse(%v) decodes to %v, %v", m, back, err)
		}
		if plain(m) && responseSize(m) != len(want) {
			t.Fatalf("responseSize(%v) = %d, want %d", m, responseSize(m), len(want))
		}
	}
}

// TestAppendResponseRefusesWhatProtoRefuses checks that a string that is
// not UTF-8 fails as proto.Marshal fails, and that unknown fields are kept.
func TestAppendResponseRefusesWhatProtoRefuses(t *testing.T) {
	bad := []*rlspb.RateLimitResponse{
		{ResponseHeadersToAdd: []*corepb.HeaderValue{{Key: "x-\xff"}}},
		{RequestHeadersToAdd: []*corepb.HeaderValue{{Value: "\xc3"}}},
		{Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{CurrentLimit: &rlspb.RateLimitResponse_RateLimit{Name: "\xed\xa0\x80"}}}},
	}
	for _, m := range bad {
		if _, err := AppendResponse(nil, m); err == nil {
			t.Errorf("AppendResponse(%q) succeeded, want proto.Marshal's error", m.String())
		}
	}
	m := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}
	m.ProtoReflect().SetUnknown([]byte{0x78, 0x01}) // field 15, varint 1
	got, err := AppendResponse(nil, m)
	want, _ := proto.Marshal(m)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("AppendResponse with unknown fields = %x, %v; want %x", got, err, want)
	}
}

func FuzzAppendResponse(f *testing.F) {
	f.Add(int32(1), uint32(100), uint32(5), int64(30), int32(0), "x-ratelimit-limit", "100", "per-user", uint32(0), true)
	f.Add(int32(2), uint32(0), uint32(0), int64(-1), int32(-1), "", "", "", uint32(3), false)
	f.Fuzz(func(t *testing.T, code int32, rpu, remaining uint32, secs int64, nanos int32, key, value, name string, mult uint32, reset bool) {
		st := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_Code(code), LimitRemaining: remaining,
			CurrentLimit: &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: rpu, Name: name, Unit: rlspb.RateLimitResponse_RateLimit_Unit(code)}}
		if reset {
			st.DurationUntilReset = &durationpb.Duration{Seconds: secs, Nanos: nanos}
		}
		if mult != 0 {
			st.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(mult - 1)
		}
		m := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_Code(code),
			Statuses:             []*rlspb.RateLimitResponse_DescriptorStatus{st, {}},
			ResponseHeadersToAdd: []*corepb.HeaderValue{{Key: key, Value: value}}}
		want, wantErr := proto.Marshal(m)
		got, gotErr := AppendResponse(nil, m)
		if (gotErr != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("AppendResponse(%v) = %x, %v; proto.Marshal gives %x, %v", m, got, gotErr, want, wantErr)
		}
	})
}

func BenchmarkAppendResponse(b *testing.B) {
	m := responses()[1]
	m.ResponseHeadersToAdd = []*corepb.HeaderValue{{Key: "x-ratelimit-limit", Value: "1000000000"}}
	b.Run("rlswire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			data, err := Codec{}.Marshal(m)
			if err != nil {
				b.Fatal(err)
			}
			data.Free()
		}
	})
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		c := generic()
		for b.Loop() {
			data, err := c.Marshal(m)
			if err != nil {
				b.Fatal(err)
			}
			data.Free()
		}
	})
}
