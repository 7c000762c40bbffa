// Package rlswire encodes and decodes the two messages of Envoy's rate
// limit service (RateLimitRequest in, RateLimitResponse out) without
// protobuf-go's reflection, and gives gRPC a codec that uses them: on the
// service's hot path the generic unmarshal and marshal cost about 2 µs of
// CPU per decision, more than matching the descriptors and building the
// answer together (docs/benchmarks.md).
//
// The results are protobuf-go's but for one leniency: a request decodes
// to a message proto.Equal to what proto.Unmarshal gives (unknown fields
// kept, last value wins for scalars, repeated occurrences of a message
// field merged), with an error where proto.Unmarshal has one for bad wire
// format; a string field that is not UTF-8, which proto.Unmarshal refuses,
// is kept byte for byte. Envoy's C++ protobuf sends such strings (a header
// value with a byte 0xff copied into a descriptor entry; it only logs
// them), and refusing the whole request would make Envoy's rate limit call
// fail, and the request pass unlimited with failure_mode_deny false.
// DecodeRequestMax bounds the descriptors decoded, so that a request of
// many cannot make the decoder allocate in proportion to them. A
// response encodes to the bytes proto.Marshal writes. The fuzz tests hold both against protobuf-go. Every other
// message, and a response with a field these encoders do not write (quota,
// dynamic metadata, unknown fields), goes through protobuf-go unchanged.
// ServerOptions installs the codec, with the flow-control windows such a
// server wants.
package rlswire

import (
	"errors"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// shareLimit is the largest request whose strings are substrings of one
// copy of the whole request (one allocation for all of them). A larger
// request gets a copy per string, so that a small string kept by the
// service does not keep a large request alive.
const shareLimit = 1 << 10

// errWire is the error of a request that is not valid protobuf wire
// format.
var errWire = errors.New("rlswire: cannot parse invalid wire-format data")

// one is the storage of a request of one descriptor with one entry, the
// usual shape, allocated at once.
type one struct {
	desc  ratelimitpb.RateLimitDescriptor
	descs [1]*ratelimitpb.RateLimitDescriptor
	entry ratelimitpb.RateLimitDescriptor_Entry
	ents  [1]*ratelimitpb.RateLimitDescriptor_Entry
}

// decoder decodes one request. whole is the request as one string when it
// is small enough to share (see shareLimit); descs and entries are the
// preallocated messages not yet used.
type decoder struct {
	whole   string
	descs   []*ratelimitpb.RateLimitDescriptor
	entries []*ratelimitpb.RateLimitDescriptor_Entry
}

// DecodeRequest decodes b, a RateLimitRequest in protobuf wire format, into
// m, replacing what m held, as proto.Unmarshal would, but keeping string
// fields that are not UTF-8 as they came (see the package comment). On
// error m is reset to its zero value. m keeps no reference to b.
func DecodeRequest(b []byte, m *rlspb.RateLimitRequest) error {
	return DecodeRequestMax(b, m, 0)
}

// DecodeRequestMax is DecodeRequest keeping at most max+1 descriptors of
// a request that has more than max (max 0: no bound): the first max+1,
// each decoded whole, and the request's other fields; the rest are
// skipped unread. A service that refuses a request
// of more than max descriptors sees it has more, and the decoder
// allocates for max+1 at most, however many the request carries.
func DecodeRequestMax(b []byte, m *rlspb.RateLimitRequest, max int) error {
	proto.Reset(m)
	nd, ne, err := count(b, max)
	if err != nil {
		return err
	}
	d := decoder{}
	if len(b) <= shareLimit {
		d.whole = string(b)
	}
	if nd == 1 && ne == 1 {
		o := &one{}
		o.descs[0], o.ents[0] = &o.desc, &o.entry
		d.descs, d.entries = o.descs[:], o.ents[:]
	} else if nd > 0 {
		descs := make([]ratelimitpb.RateLimitDescriptor, nd)
		d.descs = make([]*ratelimitpb.RateLimitDescriptor, nd)
		for i := range descs {
			d.descs[i] = &descs[i]
		}
		if ne > 0 {
			entries := make([]ratelimitpb.RateLimitDescriptor_Entry, ne)
			d.entries = make([]*ratelimitpb.RateLimitDescriptor_Entry, ne)
			for i := range entries {
				d.entries[i] = &entries[i]
			}
		}
	}
	if err := d.request(b, m); err != nil {
		proto.Reset(m)
		return err
	}
	return nil
}

// count returns the descriptors of request b and their entries, checking
// the wire format of the request and of the descriptors as it goes (the
// entries' own fields are checked when they are decoded). With max above
// 0, it counts max+1 descriptors at most, and only their entries.
func count(b []byte, max int) (descs, entries int, err error) {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return 0, 0, errWire
		}
		b = b[n:]
		if num != 2 || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return 0, 0, errWire
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return 0, 0, errWire
		}
		b = b[n:]
		if max > 0 && descs > max {
			continue // past the bound: not decoded
		}
		descs++
		for len(v) > 0 {
			num, typ, n := consumeTag(v)
			if n < 0 {
				return 0, 0, errWire
			}
			v = v[n:]
			if num == 1 && typ == protowire.BytesType {
				entries++
			}
			if n = protowire.ConsumeFieldValue(num, typ, v); n < 0 {
				return 0, 0, errWire
			}
			v = v[n:]
		}
	}
	return descs, entries, nil
}

// consumeTag is protowire.ConsumeTag, refusing as proto.Unmarshal does a
// field number above protowire.MaxValidNumber.
func consumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	num, typ, n := protowire.ConsumeTag(b)
	if n >= 0 && num > protowire.MaxValidNumber {
		return 0, 0, -1
	}
	return num, typ, n
}

// text returns field v, found at offset off of the request, as a string
// (a substring of the shared copy when there is one), byte for byte: not
// checked for UTF-8, which proto3 requires of a string field and Envoy does
// not always send (see the package comment).
func (d *decoder) text(v []byte, off int) string {
	if d.whole != "" {
		return d.whole[off : off+len(v)]
	}
	return string(v)
}

// field is one field read by fields: its number, wire type, value (the
// bytes of a length-delimited field, nil otherwise), varint (the number of
// a varint field), raw (its value as it came, length included, to keep
// when it is unknown) and off (the offset of value in the request).
type field struct {
	num    protowire.Number
	typ    protowire.Type
	value  []byte
	varint uint64
	raw    []byte
	off    int
}

// fields calls f on each field of message b, which starts at offset base
// of the request.
func fields(b []byte, base int, f func(field) error) error {
	pos := 0
	for pos < len(b) {
		num, typ, n := consumeTag(b[pos:])
		if n < 0 {
			return errWire
		}
		fl := field{num: num, typ: typ}
		pos += n
		start := pos
		switch typ {
		case protowire.VarintType:
			fl.varint, n = protowire.ConsumeVarint(b[pos:])
		case protowire.BytesType:
			fl.value, n = protowire.ConsumeBytes(b[pos:])
			if n >= 0 {
				fl.off = base + pos + n - len(fl.value)
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b[pos:])
		}
		if n < 0 {
			return errWire
		}
		pos += n
		fl.raw = b[start:pos]
		if err := f(fl); err != nil {
			return err
		}
	}
	return nil
}

// unknown appends f, a field m does not know (or knows with another wire
// type), to m's unknown fields, as proto.Unmarshal keeps them: its tag
// written again (in the fewest bytes), then its value as it came.
func unknown(m protoreflect.ProtoMessage, f field) {
	r := m.ProtoReflect()
	r.SetUnknown(append(protowire.AppendTag(r.GetUnknown(), f.num, f.typ), f.raw...))
}

// request decodes the fields of a RateLimitRequest.
func (d *decoder) request(b []byte, m *rlspb.RateLimitRequest) error {
	return fields(b, 0, func(f field) error {
		switch {
		case f.num == 1 && f.typ == protowire.BytesType:
			m.Domain = d.text(f.value, f.off)
			return nil
		case f.num == 2 && f.typ == protowire.BytesType:
			// The descriptors are decoded in order into the
			// preallocated ones, which count found; those past them
			// are over DecodeRequestMax's bound, and dropped.
			if len(m.Descriptors) == len(d.descs) {
				return nil
			}
			desc := d.descs[len(m.Descriptors)]
			m.Descriptors = d.descs[: len(m.Descriptors)+1 : len(m.Descriptors)+1]
			return d.descriptor(f.value, f.off, desc)
		case f.num == 3 && f.typ == protowire.VarintType:
			m.HitsAddend = uint32(f.varint)
			return nil
		}
		unknown(m, f)
		return nil
	})
}

// descriptor decodes the fields of a RateLimitDescriptor at offset base.
func (d *decoder) descriptor(b []byte, base int, m *ratelimitpb.RateLimitDescriptor) error {
	// Its entries are the next ones of the preallocated entries, in
	// order; d.entries moves past them.
	ents := d.entries
	err := fields(b, base, func(f field) error {
		switch {
		case f.num == 1 && f.typ == protowire.BytesType:
			e := ents[len(m.Entries)]
			m.Entries = ents[: len(m.Entries)+1 : len(m.Entries)+1]
			return d.entry(f.value, f.off, e)
		case f.num == 2 && f.typ == protowire.BytesType:
			if m.Limit == nil {
				m.Limit = &ratelimitpb.RateLimitDescriptor_RateLimitOverride{}
			}
			return override(f.value, m.Limit)
		case f.num == 3 && f.typ == protowire.BytesType:
			if m.HitsAddend == nil {
				m.HitsAddend = &wrapperspb.UInt64Value{}
			}
			return fields(f.value, 0, func(f field) error {
				if f.num == 1 && f.typ == protowire.VarintType {
					m.HitsAddend.Value = f.varint
				} else {
					unknown(m.HitsAddend, f)
				}
				return nil
			})
		case f.num == 4 && f.typ == protowire.VarintType:
			m.IsNegativeHits = protowire.DecodeBool(f.varint)
			return nil
		}
		unknown(m, f)
		return nil
	})
	d.entries = d.entries[len(m.Entries):]
	return err
}

// entry decodes the fields of a descriptor entry at offset base.
func (d *decoder) entry(b []byte, base int, m *ratelimitpb.RateLimitDescriptor_Entry) error {
	return fields(b, base, func(f field) error {
		switch {
		case f.num == 1 && f.typ == protowire.BytesType:
			m.Key = d.text(f.value, f.off)
		case f.num == 2 && f.typ == protowire.BytesType:
			m.Value = d.text(f.value, f.off)
		default:
			unknown(m, f)
		}
		return nil
	})
}

// override decodes the fields of a descriptor's limit override into m
// (merging, as a repeated occurrence of the field does).
func override(b []byte, m *ratelimitpb.RateLimitDescriptor_RateLimitOverride) error {
	return fields(b, 0, func(f field) error {
		switch {
		case f.num == 1 && f.typ == protowire.VarintType:
			m.RequestsPerUnit = uint32(f.varint)
		case f.num == 2 && f.typ == protowire.VarintType:
			m.Unit = typepb.RateLimitUnit(int32(f.varint))
		case f.num == 3 && f.typ == protowire.BytesType:
			if m.UnitMultiplier == nil {
				m.UnitMultiplier = &wrapperspb.UInt32Value{}
			}
			return fields(f.value, 0, func(f field) error {
				if f.num == 1 && f.typ == protowire.VarintType {
					m.UnitMultiplier.Value = uint32(f.varint)
				} else {
					unknown(m.UnitMultiplier, f)
				}
				return nil
			})
		default:
			unknown(m, f)
		}
		return nil
	})
}
