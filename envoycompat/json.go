package envoycompat

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate/internal/jsonscan"
)

// POST /json without reflection. A RateLimitRequest of the usual shape —
// the fields of RateLimitRequest, its descriptors, their entries and
// limit override and hits_addend, each field once under its JSON or
// proto name, strings of printable ASCII without escapes, integers as
// plain digits (bare or quoted), the override's unit by name — is read by
// decodeRequestFast; anything else (and every malformed body) goes
// through protojson, which gives an equal message for what
// decodeRequestFast accepts (TestDecodeRequestFast checks it) and the
// errors. A response made of the fields the service sets is written by
// appendResponse, protobuf JSON that protojson reads back as an equal
// message (TestAppendResponse); any other goes through protojson.

// decodeRequest decodes a RateLimitRequest in protobuf JSON.
func decodeRequest(body []byte) (*rlspb.RateLimitRequest, error) {
	return decodeRequestMax(body, 0)
}

// decodeRequestMax is decodeRequest reading at most max+1 descriptors
// (max 0: all) of a body of the usual shape: one of more descriptors
// decodes, at once, to a request of max+1 (the last one empty, the fields
// after them unread), for the service to refuse, and costs no more than
// max+1 descriptors however many it carries. A body of another shape is
// decoded whole by protojson (bounded by maxJSONBody).
func decodeRequestMax(body []byte, max int) (*rlspb.RateLimitRequest, error) {
	if req, ok := decodeFast(body, max); ok {
		return req, nil
	}
	req := new(rlspb.RateLimitRequest)
	if err := protojson.Unmarshal(body, req); err != nil {
		return nil, err
	}
	return req, nil
}

// decodeRequestFast decodes body when it has the usual shape; ok is false
// when it does not, and the caller must decode it with protojson.
func decodeRequestFast(body []byte) (req *rlspb.RateLimitRequest, ok bool) {
	return decodeFast(body, 0)
}

// decodeFast is decodeRequestFast reading max+1 descriptors at most (see
// decodeRequestMax).
func decodeFast(body []byte, max int) (req *rlspb.RateLimitRequest, ok bool) {
	d := jsonscan.Decoder{B: body}
	req = new(rlspb.RateLimitRequest)
	var seenDomain, seenDescs, seenHits, full bool
	ok = object(&d, func(key []byte) bool {
		var ok bool
		switch string(key) {
		case "domain":
			if seenDomain {
				return false
			}
			seenDomain = true
			req.Domain, ok = d.Str()
		case "descriptors":
			if seenDescs {
				return false
			}
			seenDescs = true
			req.Descriptors, ok, full = descriptors(&d, max)
		case "hitsAddend", "hits_addend":
			if seenHits {
				return false
			}
			seenHits = true
			var h uint64
			h, ok = uintValue(&d, math.MaxUint32)
			req.HitsAddend = uint32(h)
		}
		return ok
	})
	if full {
		return req, true
	}
	return req, ok && d.End()
}

// object reads an object, calling field with each key once the decoder
// is past its colon; field reads the value and returns false to give up.
func object(d *jsonscan.Decoder, field func(key []byte) bool) bool {
	if !d.Byte('{') {
		return false
	}
	if d.Byte('}') {
		return true
	}
	for {
		key, ok := d.RawStr()
		if !ok || !d.Byte(':') || !field(key) {
			return false
		}
		if d.Byte('}') {
			return true
		}
		if !d.Byte(',') {
			return false
		}
	}
}

// array reads an array, calling elem for each element.
func array(d *jsonscan.Decoder, elem func() bool) bool {
	if !d.Byte('[') {
		return false
	}
	if d.Byte(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if d.Byte(']') {
			return true
		}
		if !d.Byte(',') {
			return false
		}
	}
}

// uintValue reads an integer field of at most max: plain digits, bare
// or quoted (protojson writes 64-bit integers quoted).
func uintValue(d *jsonscan.Decoder, max uint64) (uint64, bool) {
	if !d.Byte('"') {
		return d.Uint(max)
	}
	if d.I == len(d.B) || d.B[d.I] < '0' || d.B[d.I] > '9' { // no white space inside the quotes
		return 0, false
	}
	v, ok := d.Uint(max)
	if !ok || d.I == len(d.B) || d.B[d.I] != '"' {
		return 0, false
	}
	d.I++
	return v, true
}

// descriptors reads the descriptors array; with max above 0, it stops at
// the descriptor after the first max, returning max descriptors and an
// empty one, and full true.
func descriptors(d *jsonscan.Decoder, max int) (_ []*ratelimitv3.RateLimitDescriptor, ok, full bool) {
	var out []*ratelimitv3.RateLimitDescriptor
	ok = array(d, func() bool {
		if max > 0 && len(out) == max {
			full = true
			out = append(out, new(ratelimitv3.RateLimitDescriptor))
			return false
		}
		desc := new(ratelimitv3.RateLimitDescriptor)
		out = append(out, desc)
		var seenEntries, seenLimit, seenHits bool
		return object(d, func(key []byte) bool {
			switch string(key) {
			case "entries":
				if seenEntries {
					return false
				}
				seenEntries = true
				var ok bool
				desc.Entries, ok = entries(d)
				return ok
			case "limit":
				if seenLimit {
					return false
				}
				seenLimit = true
				desc.Limit = new(ratelimitv3.RateLimitDescriptor_RateLimitOverride)
				return override(d, desc.Limit)
			case "hitsAddend", "hits_addend":
				if seenHits {
					return false
				}
				seenHits = true
				h, ok := uintValue(d, math.MaxUint64)
				desc.HitsAddend = wrapperspb.UInt64(h)
				return ok
			}
			return false
		})
	})
	return out, ok, full
}

func entries(d *jsonscan.Decoder) ([]*ratelimitv3.RateLimitDescriptor_Entry, bool) {
	var out []*ratelimitv3.RateLimitDescriptor_Entry
	ok := array(d, func() bool {
		e := new(ratelimitv3.RateLimitDescriptor_Entry)
		out = append(out, e)
		var seenKey, seenValue bool
		return object(d, func(key []byte) bool {
			var ok bool
			switch {
			case string(key) == "key" && !seenKey:
				seenKey = true
				e.Key, ok = d.Str()
			case string(key) == "value" && !seenValue:
				seenValue = true
				e.Value, ok = d.Str()
			}
			return ok
		})
	})
	return out, ok
}

func override(d *jsonscan.Decoder, o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) bool {
	var seenRPU, seenUnit bool
	return object(d, func(key []byte) bool {
		switch string(key) {
		case "requestsPerUnit", "requests_per_unit":
			if seenRPU {
				return false
			}
			seenRPU = true
			n, ok := uintValue(d, math.MaxUint32)
			o.RequestsPerUnit = uint32(n)
			return ok
		case "unit":
			if seenUnit {
				return false
			}
			seenUnit = true
			name, ok := d.RawStr()
			u, known := typev3.RateLimitUnit_value[string(name)]
			o.Unit = typev3.RateLimitUnit(u)
			return ok && known
		}
		return false
	})
}

// appendResponse appends resp in protobuf JSON when it holds only the
// fields the service sets, with values written below; ok is false
// otherwise, and the caller must encode it with protojson.
func appendResponse(b []byte, resp *rlspb.RateLimitResponse) (_ []byte, ok bool) {
	if len(resp.GetRequestHeadersToAdd()) > 0 || len(resp.GetRawBody()) > 0 || resp.GetDynamicMetadata() != nil || resp.GetQuota() != nil {
		return b, false
	}
	sep := byte('{')
	if c := resp.GetOverallCode(); c != rlspb.RateLimitResponse_UNKNOWN {
		if b, ok = appendEnum(appendKey(b, &sep, "overallCode"), rlspb.RateLimitResponse_Code_name, int32(c)); !ok {
			return b, false
		}
	}
	if sts := resp.GetStatuses(); len(sts) > 0 {
		b = appendKey(b, &sep, "statuses")
		for i, st := range sts {
			b = listSep(b, i)
			if b, ok = appendStatus(b, st); !ok {
				return b, false
			}
		}
		b = append(b, ']')
	}
	if hs := resp.GetResponseHeadersToAdd(); len(hs) > 0 {
		b = appendKey(b, &sep, "responseHeadersToAdd")
		for i, h := range hs {
			b = listSep(b, i)
			if h == nil || len(h.GetRawValue()) > 0 {
				return b, false
			}
			hsep := byte('{')
			if h.GetKey() != "" {
				if b, ok = appendString(appendKey(b, &hsep, "key"), h.GetKey()); !ok {
					return b, false
				}
			}
			if h.GetValue() != "" {
				if b, ok = appendString(appendKey(b, &hsep, "value"), h.GetValue()); !ok {
					return b, false
				}
			}
			b = closeObject(b, hsep)
		}
		b = append(b, ']')
	}
	return closeObject(b, sep), true
}

func appendStatus(b []byte, st *rlspb.RateLimitResponse_DescriptorStatus) (_ []byte, ok bool) {
	if st == nil || st.GetQuota() != nil {
		return b, false
	}
	sep := byte('{')
	if c := st.GetCode(); c != rlspb.RateLimitResponse_UNKNOWN {
		if b, ok = appendEnum(appendKey(b, &sep, "code"), rlspb.RateLimitResponse_Code_name, int32(c)); !ok {
			return b, false
		}
	}
	if l := st.GetCurrentLimit(); l != nil {
		if l.GetUnitMultiplier() != nil {
			return b, false
		}
		b = appendKey(b, &sep, "currentLimit")
		lsep := byte('{')
		// The fields in the proto's declaration order, as protojson
		// writes them: name (field 3) is declared first.
		if n := l.GetName(); n != "" {
			if b, ok = appendString(appendKey(b, &lsep, "name"), n); !ok {
				return b, false
			}
		}
		if n := l.GetRequestsPerUnit(); n != 0 {
			b = strconv.AppendUint(appendKey(b, &lsep, "requestsPerUnit"), uint64(n), 10)
		}
		if u := l.GetUnit(); u != rlspb.RateLimitResponse_RateLimit_UNKNOWN {
			if b, ok = appendEnum(appendKey(b, &lsep, "unit"), rlspb.RateLimitResponse_RateLimit_Unit_name, int32(u)); !ok {
				return b, false
			}
		}
		b = closeObject(b, lsep)
	}
	if n := st.GetLimitRemaining(); n != 0 {
		b = strconv.AppendUint(appendKey(b, &sep, "limitRemaining"), uint64(n), 10)
	}
	if du := st.GetDurationUntilReset(); du != nil {
		// protojson writes whole seconds as "Ns"; fractions and the
		// values it refuses (out of range, negative) are left to it.
		if du.GetNanos() != 0 || du.GetSeconds() < 0 || du.GetSeconds() > maxDurationSeconds {
			return b, false
		}
		b = append(appendKey(b, &sep, "durationUntilReset"), '"')
		b = strconv.AppendInt(b, du.GetSeconds(), 10)
		b = append(b, 's', '"')
	}
	return closeObject(b, sep), true
}

// maxDurationSeconds is the largest google.protobuf.Duration, 10,000
// years.
const maxDurationSeconds = 315_576_000_000

// appendKey appends the separator *sep (the object's '{' before its
// first field, ',' after) and "name":.
func appendKey(b []byte, sep *byte, name string) []byte {
	b = append(b, *sep, '"')
	*sep = ','
	b = append(b, name...)
	return append(b, '"', ':')
}

// listSep appends what comes before element i of a list: '[' before
// the first, ',' before the others.
func listSep(b []byte, i int) []byte {
	if i == 0 {
		return append(b, '[')
	}
	return append(b, ',')
}

// closeObject ends an object whose separator is sep: '{' when no field
// was written.
func closeObject(b []byte, sep byte) []byte {
	if sep == '{' {
		b = append(b, '{')
	}
	return append(b, '}')
}

// appendEnum appends the name of enum value v; false for a value without
// a name (protojson writes it as a number).
func appendEnum(b []byte, names map[int32]string, v int32) ([]byte, bool) {
	name, ok := names[v]
	if !ok {
		return b, false
	}
	return appendString(b, name)
}

// appendString appends s as a JSON string when it is printable ASCII
// that needs no escape; false otherwise.
func appendString(b []byte, s string) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return b, false
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), true
}

// marshalCompact writes resp with protojson without white space.
// protojson puts a space after some separators in some builds and not in
// others (on purpose, so that nobody relies on its layout); the body is
// compacted so that every build of envoy-compat writes the same bytes,
// the layout of appendResponse and of envoyproxy/ratelimit's builds that
// add no space.
func marshalCompact(resp *rlspb.RateLimitResponse) ([]byte, error) {
	b, err := protojson.Marshal(resp)
	if err != nil {
		return nil, err
	}
	var c bytes.Buffer
	c.Grow(len(b))
	if err := json.Compact(&c, b); err != nil {
		return nil, err
	}
	return c.Bytes(), nil
}
