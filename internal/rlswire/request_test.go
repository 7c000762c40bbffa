package rlswire

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// sameAsProto decodes b with DecodeRequest and with proto.Unmarshal and
// fails t unless both fail or both give equal messages; a string field
// that is not UTF-8, which proto.Unmarshal refuses, must decode as
// proto.Unmarshal decodes it into bytesTwin's message, byte for byte.
func sameAsProto(t *testing.T, b []byte) {
	t.Helper()
	twin := dynamicpb.NewMessage(bytesTwin(t))
	twinErr := proto.Unmarshal(b, twin)
	got := &rlspb.RateLimitRequest{Domain: "left over"}
	gotErr := DecodeRequest(b, got)
	switch {
	case (gotErr != nil) != (twinErr != nil):
		t.Fatalf("DecodeRequest(%x) error = %v, proto.Unmarshal's (strings as bytes) %v", b, gotErr, twinErr)
	case gotErr != nil:
		if !proto.Equal(got, &rlspb.RateLimitRequest{}) {
			t.Fatalf("DecodeRequest(%x) failed (%v) but left %v", b, gotErr, got)
		}
		return
	case !sameFields(got.ProtoReflect(), twin):
		t.Fatalf("DecodeRequest(%x) = %v, differs from proto.Unmarshal's (strings as bytes) %v", b, got, twin)
	}
	want := &rlspb.RateLimitRequest{}
	if err := proto.Unmarshal(b, want); err == nil && !proto.Equal(got, want) {
		t.Fatalf("DecodeRequest(%x) = %v, proto.Unmarshal gives %v", b, got, want)
	}
}

// bytesTwin returns a RateLimitRequest descriptor whose string fields (in
// it and in the messages it holds) are bytes fields, which proto.Unmarshal
// takes as they come: the reference for strings that are not UTF-8.
func bytesTwin(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	twinOnce.Do(func() {
		local := &protoregistry.Files{}
		for _, fd := range []protoreflect.FileDescriptor{
			(&ratelimitpb.RateLimitDescriptor{}).ProtoReflect().Descriptor().ParentFile(),
			(&rlspb.RateLimitRequest{}).ProtoReflect().Descriptor().ParentFile(),
		} {
			fdp := protodesc.ToFileDescriptorProto(fd)
			for _, m := range fdp.GetMessageType() {
				toBytes(m)
			}
			twinFile, err := protodesc.NewFile(fdp, chainResolver{local})
			if err != nil {
				twinErr = err
				return
			}
			if err := local.RegisterFile(twinFile); err != nil {
				twinErr = err
				return
			}
		}
		d, err := local.FindDescriptorByName("envoy.service.ratelimit.v3.RateLimitRequest")
		twinDesc, twinErr = d.(protoreflect.MessageDescriptor), err
	})
	if twinErr != nil {
		t.Fatal(twinErr)
	}
	return twinDesc
}

var (
	twinOnce sync.Once
	twinDesc protoreflect.MessageDescriptor
	twinErr  error
)

// toBytes makes the string fields of m and its nested messages bytes.
func toBytes(m *descriptorpb.DescriptorProto) {
	for _, f := range m.GetField() {
		if f.GetType() == descriptorpb.FieldDescriptorProto_TYPE_STRING {
			f.Type = descriptorpb.FieldDescriptorProto_TYPE_BYTES.Enum()
		}
	}
	for _, n := range m.GetNestedType() {
		toBytes(n)
	}
}

// chainResolver finds files and descriptors in the twin files first, then
// among the generated ones.
type chainResolver struct{ local *protoregistry.Files }

func (r chainResolver) FindFileByPath(path string) (protoreflect.FileDescriptor, error) {
	if fd, err := r.local.FindFileByPath(path); err == nil {
		return fd, nil
	}
	return protoregistry.GlobalFiles.FindFileByPath(path)
}

func (r chainResolver) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	if d, err := r.local.FindDescriptorByName(name); err == nil {
		return d, nil
	}
	return protoregistry.GlobalFiles.FindDescriptorByName(name)
}

// sameFields reports whether got, a generated message, holds what want,
// its bytes twin, holds: the same fields set to the same values (a string
// equal to the bytes of its twin field), and the same unknown fields (their
// tags compared by value: dynamicpb keeps a tag's bytes as they came).
func sameFields(got, want protoreflect.Message) bool {
	if !bytes.Equal(minimalTags(got.GetUnknown()), minimalTags(want.GetUnknown())) {
		return false
	}
	fields := got.Descriptor().Fields()
	for i := range fields.Len() {
		gf := fields.Get(i)
		wf := want.Descriptor().Fields().ByNumber(gf.Number())
		if got.Has(gf) != want.Has(wf) {
			return false
		}
		if !got.Has(gf) {
			continue
		}
		if gf.IsList() {
			gl, wl := got.Get(gf).List(), want.Get(wf).List()
			if gl.Len() != wl.Len() {
				return false
			}
			for j := range gl.Len() {
				if !sameValue(gf, gl.Get(j), wl.Get(j)) {
					return false
				}
			}
		} else if !sameValue(gf, got.Get(gf), want.Get(wf)) {
			return false
		}
	}
	return true
}

// minimalTags returns unknown fields b with each tag written in the fewest
// bytes.
func minimalTags(b []byte) []byte {
	var out []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return append(out, b...)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return append(out, b...)
		}
		out = append(protowire.AppendTag(out, num, typ), b[n:n+m]...)
		b = b[n+m:]
	}
	return out
}

// sameValue compares one value of field f of a generated message with its
// twin's.
func sameValue(f protoreflect.FieldDescriptor, got, want protoreflect.Value) bool {
	switch f.Kind() {
	case protoreflect.MessageKind:
		return sameFields(got.Message(), want.Message())
	case protoreflect.StringKind:
		return got.String() == string(want.Bytes())
	}
	return got.Equal(want)
}

// requests are requests of the shapes Envoy sends and a few it should
// not, marshaled by protobuf-go.
func requests() []*rlspb.RateLimitRequest {
	entry := func(k, v string) *ratelimitpb.RateLimitDescriptor_Entry {
		return &ratelimitpb.RateLimitDescriptor_Entry{Key: k, Value: v}
	}
	return []*rlspb.RateLimitRequest{
		{},
		{Domain: "api"},
		{Domain: "api", Descriptors: []*ratelimitpb.RateLimitDescriptor{{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{entry("user", "u-1")}}}},
		{Domain: "edge", HitsAddend: 3, Descriptors: []*ratelimitpb.RateLimitDescriptor{
			{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{entry("remote_address", "10.0.0.1"), entry("path", "/login")}},
			{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{entry("user", "ü-2")},
				Limit: &ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: typepb.RateLimitUnit_HOUR,
					UnitMultiplier: wrapperspb.UInt32(3)},
				HitsAddend: wrapperspb.UInt64(1 << 40), IsNegativeHits: true},
			{},
			{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{entry("", ""), entry("k", "")}},
		}},
		{Domain: strings.Repeat("d", 2000), Descriptors: []*ratelimitpb.RateLimitDescriptor{{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{entry("user", strings.Repeat("v", 300))}}}},
	}
}

func TestDecodeRequestMatchesProto(t *testing.T) {
	for _, m := range requests() {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		sameAsProto(t, b)
		got := &rlspb.RateLimitRequest{}
		if err := DecodeRequest(b, got); err != nil || !proto.Equal(got, m) {
			t.Fatalf("DecodeRequest(Marshal(%v)) = %v, %v", m, got, err)
		}
	}
}

// TestDecodeRequestEdges covers what a hand-written decoder gets wrong:
// fields out of order or repeated, known fields with another wire type,
// unknown fields and groups, bad UTF-8 (kept, where proto.Unmarshal fails),
// truncation.
func TestDecodeRequestEdges(t *testing.T) {
	tag := protowire.AppendTag
	str := func(b []byte, num protowire.Number, s string) []byte {
		return protowire.AppendString(tag(b, num, protowire.BytesType), s)
	}
	msg := func(b []byte, num protowire.Number, m []byte) []byte {
		return protowire.AppendBytes(tag(b, num, protowire.BytesType), m)
	}
	vint := func(b []byte, num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(tag(b, num, protowire.VarintType), v)
	}
	entry := str(str(nil, 1, "user"), 2, "u-1")
	over := vint(vint(nil, 1, 5), 2, 2)
	cases := []struct {
		name string
		b    []byte
	}{
		{"descriptor before domain", str(msg(nil, 2, msg(nil, 1, entry)), 1, "api")},
		{"domain twice: last wins", str(str(nil, 1, "a"), 1, "b")},
		{"hits addend twice", vint(vint(nil, 3, 1), 3, 9)},
		{"hits addend overflows uint32", vint(nil, 3, 1<<33+5)},
		{"override in two parts: merged", msg(msg(nil, 2, msg(msg(nil, 2, vint(nil, 1, 5)), 2, vint(nil, 2, 3))), 2, msg(nil, 1, entry))},
		{"override, multiplier twice", msg(nil, 2, msg(nil, 2, msg(msg(over, 3, vint(nil, 1, 4)), 3, vint(nil, 1, 6))))},
		{"hits addend wrapper twice", msg(nil, 2, msg(msg(nil, 3, vint(nil, 1, 2)), 3, nil))},
		{"negative hits as 2", msg(nil, 2, vint(nil, 4, 2))},
		{"unknown enum unit", msg(nil, 2, msg(nil, 2, vint(nil, 2, 99)))},
		{"domain as varint: unknown", vint(nil, 1, 5)},
		{"descriptors as varint: unknown", vint(nil, 2, 5)},
		{"hits addend as bytes: unknown", str(nil, 3, "x")},
		{"entry as fixed32: unknown", msg(nil, 2, protowire.AppendFixed32(tag(nil, 1, protowire.Fixed32Type), 7))},
		{"entry key as varint", msg(nil, 2, msg(nil, 1, vint(nil, 1, 1)))},
		{"unknown fields everywhere", str(msg(str(nil, 9, "x"), 2, msg(vint(nil, 7, 1), 1, str(entry, 5, "z"))), 100, "y")},
		{"unknown in wrappers", msg(nil, 2, msg(msg(nil, 3, vint(nil, 2, 1)), 2, msg(nil, 3, str(nil, 9, "q"))))},
		{"group", tag(protowire.AppendFixed64(tag(tag(nil, 5, protowire.StartGroupType), 1, protowire.Fixed64Type), 1), 5, protowire.EndGroupType)},
		{"unterminated group", tag(nil, 5, protowire.StartGroupType)},
		{"stray end group", tag(nil, 5, protowire.EndGroupType)},
		{"field number 0", vint(nil, 0, 1)},
		{"bad UTF-8 domain: kept", str(nil, 1, "\xff")},
		{"bad UTF-8 key: kept", msg(nil, 2, msg(nil, 1, str(nil, 1, "a\xc3")))},
		{"bad UTF-8 value: kept", msg(nil, 2, msg(nil, 1, str(nil, 2, "\xed\xa0\x80")))},
		{"bad UTF-8 in a large request: kept", str(str(nil, 1, strings.Repeat("a", 3000)), 1, "\xff")},
		{"truncated length", []byte{0x0a, 0x05, 'a'}},
		{"truncated varint", []byte{0x18, 0x80}},
		{"truncated tag", []byte{0x80}},
		{"truncated descriptor", msg(nil, 2, []byte{0x0a, 0x09})},
		{"truncated entry", msg(nil, 2, msg(nil, 1, []byte{0x0a, 0x09, 'a'}))},
		{"many descriptors and entries", msg(msg(msg(nil, 2, msg(msg(nil, 1, entry), 1, entry)), 2, nil), 2, msg(msg(msg(nil, 1, entry), 3, nil), 1, entry))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { sameAsProto(t, c.b) })
	}
}

// TestDecodeRequestKeepsNoReference checks that the decoded strings do
// not point into the buffer gRPC reuses.
func TestDecodeRequestKeepsNoReference(t *testing.T) {
	for _, m := range requests() {
		b, _ := proto.Marshal(m)
		got := &rlspb.RateLimitRequest{}
		if err := DecodeRequest(b, got); err != nil {
			t.Fatal(err)
		}
		for i := range b {
			b[i] = 0
		}
		if !proto.Equal(got, m) {
			t.Fatalf("after the buffer was overwritten: %v, want %v", got, m)
		}
	}
}

// TestDecodeRequestListsDoNotShare checks that appending to one decoded
// descriptor's entries does not overwrite the next one's.
func TestDecodeRequestListsDoNotShare(t *testing.T) {
	m := requests()[3]
	b, _ := proto.Marshal(m)
	got := &rlspb.RateLimitRequest{}
	if err := DecodeRequest(b, got); err != nil {
		t.Fatal(err)
	}
	got.Descriptors[0].Entries = append(got.Descriptors[0].Entries, &ratelimitpb.RateLimitDescriptor_Entry{Key: "x"})
	got.Descriptors = append(got.Descriptors[:1], got.Descriptors[1:]...)
	if !proto.Equal(got.Descriptors[1], m.Descriptors[1]) {
		t.Fatalf("descriptor 1 = %v after appending to descriptor 0, want %v", got.Descriptors[1], m.Descriptors[1])
	}
}

func TestDecodeRequestAllocations(t *testing.T) {
	b, _ := proto.Marshal(requests()[2])
	m := &rlspb.RateLimitRequest{}
	got := testing.AllocsPerRun(100, func() {
		if err := DecodeRequest(b, m); err != nil {
			t.Fatal(err)
		}
	})
	// One for the descriptor with its entry, one for the strings.
	if got > 2 {
		t.Fatalf("DecodeRequest of one descriptor with one entry: %v allocations, want at most 2", got)
	}
}

func FuzzDecodeRequest(f *testing.F) {
	for _, m := range requests() {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Add([]byte{0x12, 0x04, 0x0a, 0x02, 0x0a, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) { sameAsProto(t, b) })
}

func BenchmarkDecodeRequest(b *testing.B) {
	buf, _ := proto.Marshal(requests()[2])
	b.Run("rlswire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := DecodeRequest(buf, &rlspb.RateLimitRequest{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := proto.Unmarshal(buf, &rlspb.RateLimitRequest{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestDecodeRequestMax: DecodeRequestMax keeps the first max+1
// descriptors of a request of more, each whole, and the request's other
// fields (the domain and hits_addend too when they come after the
// descriptors), so that a service refusing more than max sees more, and
// allocates for max+1 whatever the count: a request of 100,000 repeats of
// one descriptor allocated for 100,000 (a grpcbounds walk). With max 0,
// or a request within max, it is DecodeRequest.
func TestDecodeRequestMax(t *testing.T) {
	one := &ratelimitpb.RateLimitDescriptor{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "route", Value: "/" + strings.Repeat("a", 200)}, {Key: "user", Value: "kim"}}}
	build := func(n int) []byte {
		var b []byte
		for range n {
			d, _ := proto.Marshal(one)
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			b = protowire.AppendBytes(b, d)
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, "edge")
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		return protowire.AppendVarint(b, 7)
	}
	b := build(100_000)

	for _, tc := range []struct{ max, want int }{{0, 100_000}, {5, 6}, {100_000, 100_000}, {99_999, 100_000}} {
		m := &rlspb.RateLimitRequest{}
		if err := DecodeRequestMax(b, m, tc.max); err != nil {
			t.Fatalf("max %d: %v", tc.max, err)
		}
		if got := len(m.GetDescriptors()); got != tc.want {
			t.Errorf("max %d: %d descriptors, want %d", tc.max, got, tc.want)
		}
		if m.GetDomain() != "edge" || m.GetHitsAddend() != 7 {
			t.Errorf("max %d: domain %q, hits_addend %d; want edge, 7", tc.max, m.GetDomain(), m.GetHitsAddend())
		}
		for i, d := range m.GetDescriptors() {
			if !proto.Equal(d, one) {
				t.Fatalf("max %d: descriptor %d is %v, want %v", tc.max, i, d, one)
			}
		}
	}
	m := &rlspb.RateLimitRequest{}
	six := build(6) // more than shareLimit, as b: strings copied one by one
	small := testing.AllocsPerRun(5, func() { _ = DecodeRequestMax(six, m, 5) })
	big := testing.AllocsPerRun(5, func() { _ = DecodeRequestMax(b, m, 5) })
	if big > small {
		t.Errorf("DecodeRequestMax(100,000 descriptors, 5): %v allocations, want no more than for 6 (%v)", big, small)
	}
	// Bad wire format before the bound is still an error.
	if err := DecodeRequestMax(append([]byte{0x12, 0x7f}, b...), m, 5); err == nil {
		t.Error("a descriptor's length past the end was accepted")
	}
}
