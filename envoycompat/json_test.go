package envoycompat

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// usualBodies are requests of the shape decodeRequestFast reads itself.
var usualBodies = []string{
	`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u1"}]}],"hitsAddend":1}`,
	`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u1"}]}]}`,
	`{"hits_addend":3,"descriptors":[{"entries":[{"key":"a","value":""},{"key":"","value":"b"}]},{"entries":[]},{}],"domain":""}`,
	" { \"domain\" : \"api\" ,\n\t\"descriptors\" : [ { \"entries\" : [ { \"value\" : \"v\" , \"key\" : \"k\" } ] } ] }\r\n",
	`{"domain":"api","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requestsPerUnit":7,"unit":"HOUR"},"hitsAddend":0}]}`,
	`{"domain":"api","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":4294967295,"unit":"UNKNOWN"},"hits_addend":18446744073709551615}]}`,
	`{"domain":"api","descriptors":[{"hitsAddend":"18446744073709551615","limit":{"requestsPerUnit":"5"}}],"hitsAddend":"0"}`,
	`{"domain":"api","descriptors":[{"limit":{}},{"limit":{"unit":"DAY"}}],"hitsAddend":4294967295}`,
	`{"domain":" !#$%&'()*+,-./09:;<=>?@AZ[]^_` + "`" + `az{|}~","descriptors":[{"entries":[{"key":"k","value":":,{}[]"}]}]}`,
	`{}`,
	`{"descriptors":[]}`,
}

// oddBodies are valid and invalid requests around that shape: each is
// decoded by protojson, or refused by it, whichever way the fast path
// goes.
var oddBodies = []string{
	``, ` `, `{`, `}`, `[]`, `null`, `"x"`, `1`, `{not json`, `{"domain":"a",}`, `{"domain":"a"} x`, `{"domain":"a"}{}`,
	`{"domain" "a"}`, `{'domain':'a'}`, `{domain:"a"}`, `{"domain":"a""descriptors":[]}`,
	`{"descriptors":[{},]}`, `{"descriptors":[,{}]}`, `{"descriptors":[{"entries":[{"key":"k",}]}]}`,
	"\xef\xbb\xbf{}",
	// Unknown fields, other cases, escaped names.
	`{"foo":1}`, `{"Domain":"a"}`, `{"HitsAddend":1}`, `{"dom\u0061in":"a"}`,
	`{"descriptors":[{"isNegativeHits":true}]}`, `{"descriptors":[{"is_negative_hits":false}]}`,
	`{"descriptors":[{"limit":{"unitMultiplier":2}}]}`, `{"descriptors":[{"entries":[{"key":"k","val":"v"}]}]}`,
	// Nulls.
	`{"domain":null}`, `{"descriptors":null}`, `{"hitsAddend":null}`, `{"descriptors":[null]}`,
	`{"descriptors":[{"limit":null}]}`, `{"descriptors":[{"hitsAddend":null}]}`, `{"descriptors":[{"entries":[null]}]}`,
	`{"descriptors":[{"entries":[{"key":null}]}]}`,
	// Duplicates.
	`{"domain":"a","domain":"b"}`, `{"hitsAddend":1,"hits_addend":2}`, `{"descriptors":[],"descriptors":[]}`,
	`{"descriptors":[{"entries":[],"entries":[]}]}`, `{"descriptors":[{"hitsAddend":1,"hits_addend":1}]}`,
	`{"descriptors":[{"limit":{},"limit":{}}]}`, `{"descriptors":[{"limit":{"unit":"SECOND","unit":"MINUTE"}}]}`,
	`{"descriptors":[{"limit":{"requestsPerUnit":1,"requests_per_unit":1}}]}`,
	`{"descriptors":[{"entries":[{"key":"a","key":"b"}]}]}`, `{"descriptors":[{"entries":[{"value":"a","value":"b"}]}]}`,
	// Numbers.
	`{"hitsAddend":0}`, `{"hitsAddend":4294967296}`, `{"hitsAddend":-1}`, `{"hitsAddend":-0}`, `{"hitsAddend":01}`,
	`{"hitsAddend":1.0}`, `{"hitsAddend":1.5}`, `{"hitsAddend":1e2}`, `{"hitsAddend":1E400}`, `{"hitsAddend":"5"}`,
	`{"hitsAddend":" 5"}`, `{"hitsAddend":"5 "}`, `{"hitsAddend":"05"}`, `{"hitsAddend":"1e1"}`, `{"hitsAddend":"-1"}`, `{"hitsAddend":""}`, `{"hitsAddend":"5`, `{"hitsAddend":"4294967296"}`, `{"hitsAddend":true}`, `{"hitsAddend":[]}`, `{"hitsAddend":0x10}`, `{"hitsAddend":+1}`,
	`{"descriptors":[{"hitsAddend":18446744073709551616}]}`, `{"descriptors":[{"hitsAddend":"18446744073709551615"}]}`,
	`{"descriptors":[{"hitsAddend":-1}]}`, `{"descriptors":[{"hitsAddend":1e19}]}`, `{"descriptors":[{"hitsAddend":{"value":1}}]}`,
	`{"descriptors":[{"limit":{"requestsPerUnit":4294967296}}]}`, `{"descriptors":[{"limit":{"requestsPerUnit":"9"}}]}`,
	// Enums.
	`{"descriptors":[{"limit":{"unit":2}}]}`, `{"descriptors":[{"limit":{"unit":"minute"}}]}`, `{"descriptors":[{"limit":{"unit":"BOGUS"}}]}`,
	`{"descriptors":[{"limit":{"unit":99}}]}`, `{"descriptors":[{"limit":{"unit":-1}}]}`, `{"descriptors":[{"limit":{"unit":null}}]}`,
	`{"descriptors":[{"limit":{"unit":"MIN\u0055TE"}}]}`,
	// Strings: Unicode, escapes, control characters, invalid UTF-8.
	`{"domain":"ünïcödé 日本 😀"}`, `{"domain":"\u00fc\u65e5"}`, `{"domain":"\ud83d\ude00"}`, `{"domain":"\ud800"}`, `{"domain":"\udc00x"}`,
	`{"domain":"a\nb\"c\\d\/e\bf\fg\rh\ti"}`, `{"domain":"\x"}`, `{"domain":"\u12"}`, `{"domain":"\u00zz"}`,
	"{\"domain\":\"a\x01b\"}", "{\"domain\":\"a\x7fb\"}", "{\"domain\":\"a\xffb\"}", "{\"domain\":\"a\xc3\"}", "{\"domain\":\"\xed\xa0\x80\"}",
	"{\"descriptors\":[{\"entries\":[{\"key\":\"k\",\"value\":\"\xe2\x82\xac\"}]}]}", `{"descriptors":[{"entries":[{"key":"k","value":"a\"b"}]}]}`,
	`{"domain":"a`, `{"domain":`, `{"domain"`,
}

// checkDecode checks that decodeRequest(body) is protojson.Unmarshal's
// answer (an equal message, or the same error) and that the fast path
// accepts only what protojson reads the same way. It reports whether the
// fast path took body.
func checkDecode(t *testing.T, body []byte) (fast bool) {
	t.Helper()
	want := new(rlspb.RateLimitRequest)
	wantErr := protojson.Unmarshal(body, want)
	if f, ok := decodeRequestFast(body); ok {
		if wantErr != nil {
			t.Errorf("fast path accepts %q, which protojson refuses: %v", body, wantErr)
		} else if !proto.Equal(f, want) {
			t.Errorf("fast path reads %q as %v, protojson as %v", body, f, want)
		}
		fast = true
	}
	got, err := decodeRequest(body)
	switch {
	case (err == nil) != (wantErr == nil):
		t.Errorf("decodeRequest(%q): error %v, protojson's %v", body, err, wantErr)
	case err != nil && err.Error() != wantErr.Error():
		t.Errorf("decodeRequest(%q): error %q, protojson's %q", body, err, wantErr)
	case err == nil && !proto.Equal(got, want):
		t.Errorf("decodeRequest(%q) = %v, protojson %v", body, got, want)
	}
	return fast
}

func TestDecodeRequestUsualShapesAreFast(t *testing.T) {
	for _, b := range usualBodies {
		if !checkDecode(t, []byte(b)) {
			t.Errorf("fast path refuses %q", b)
		}
	}
}

func TestDecodeRequestOddBodies(t *testing.T) {
	for _, b := range oddBodies {
		checkDecode(t, []byte(b))
	}
}

// TestDecodeRequestRandom decodes random requests as protojson writes
// them (JSON and proto field names), then every one of them cut short,
// with a byte dropped, doubled or replaced. The requests of the usual
// shape must take the fast path.
func TestDecodeRequestRandom(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	usual := 0
	for i := range 400 {
		req := randomRequest(rnd)
		body, err := protojson.MarshalOptions{UseProtoNames: i%2 == 1}.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if fast := checkDecode(t, body); !fast && usualRequest(req) {
			t.Errorf("fast path refuses %s", body)
		}
		if usualRequest(req) {
			usual++
		}
		got, err := decodeRequest(body)
		if err != nil || !proto.Equal(got, req) {
			t.Fatalf("decodeRequest(%q) = %v, %v; want %v", body, got, err, req)
		}
		for range 8 {
			checkDecode(t, mutate(rnd, body))
		}
	}
	if usual < 40 {
		t.Errorf("%d random requests of the usual shape; want more", usual)
	}
}

// usualRequest reports whether the fast path is meant to read req as
// protojson writes it: strings of printable ASCII without escapes, the
// override's unit known, no field outside the fast path's.
func usualRequest(req *rlspb.RateLimitRequest) bool {
	plain := func(s string) bool {
		return !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r > 0x7e || r == '"' || r == '\\' })
	}
	if !plain(req.Domain) {
		return false
	}
	for _, d := range req.Descriptors {
		if d.IsNegativeHits || (d.Limit != nil && (d.Limit.UnitMultiplier != nil || typev3.RateLimitUnit_name[int32(d.Limit.Unit)] == "")) {
			return false
		}
		for _, e := range d.Entries {
			if !plain(e.Key) || !plain(e.Value) {
				return false
			}
		}
	}
	return true
}

// randomRequest is a request with random fields, strings of printable
// ASCII most of the time, sometimes of Unicode and characters to escape.
func randomRequest(rnd *rand.Rand) *rlspb.RateLimitRequest {
	str := func() string {
		const plain = "abcxyz019_-./:@ ~"
		const odd = "\"\\\n\t\x01\x7fü日😀\u2028"
		var b strings.Builder
		for range rnd.IntN(6) {
			if rnd.IntN(8) == 0 {
				r := []rune(odd)
				b.WriteRune(r[rnd.IntN(len(r))])
			} else {
				b.WriteByte(plain[rnd.IntN(len(plain))])
			}
		}
		return b.String()
	}
	num := func() uint64 {
		switch rnd.IntN(4) {
		case 0:
			return 0
		case 1:
			return uint64(rnd.IntN(10))
		case 2:
			return rnd.Uint64()
		}
		return math.MaxUint64 - uint64(rnd.IntN(3))
	}
	req := &rlspb.RateLimitRequest{Domain: str(), HitsAddend: uint32(num())}
	for range rnd.IntN(4) {
		d := &ratelimitv3.RateLimitDescriptor{}
		for range rnd.IntN(4) {
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: str(), Value: str()})
		}
		if rnd.IntN(3) == 0 {
			d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(num()), Unit: typev3.RateLimitUnit(rnd.IntN(9))}
			if rnd.IntN(5) == 0 {
				d.Limit.UnitMultiplier = wrapperspb.UInt32(uint32(num()))
			}
		}
		if rnd.IntN(3) == 0 {
			d.HitsAddend = wrapperspb.UInt64(num())
		}
		d.IsNegativeHits = rnd.IntN(10) == 0
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// mutate returns body cut short, or with a byte dropped, doubled or
// replaced by one of JSON's structural characters.
func mutate(rnd *rand.Rand, body []byte) []byte {
	if len(body) == 0 {
		return body
	}
	i := rnd.IntN(len(body))
	switch rnd.IntN(4) {
	case 0:
		return slices.Clone(body[:i])
	case 1:
		return slices.Concat(body[:i], body[i+1:])
	case 2:
		return slices.Concat(body[:i+1], body[i:])
	}
	const repl = `{}[],:"\ 0-9.e` + "\x00\xff"
	out := slices.Clone(body)
	out[i] = repl[rnd.IntN(len(repl))]
	return out
}

func FuzzDecodeRequest(f *testing.F) {
	for _, b := range usualBodies {
		f.Add([]byte(b))
	}
	for _, b := range oddBodies {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkDecode(t, body) })
}

// checkEncode checks that appendResponse writes resp, after a prefix it
// keeps, as JSON protojson reads back as an equal message (and that
// protojson would have written it too), or leaves it to protojson. It
// reports whether appendResponse wrote it.
func checkEncode(t *testing.T, resp *rlspb.RateLimitResponse) bool {
	t.Helper()
	out, ok := appendResponse([]byte("prefix"), resp)
	if !ok {
		return false
	}
	body, found := strings.CutPrefix(string(out), "prefix")
	if !found || !json.Valid([]byte(body)) {
		t.Fatalf("appendResponse(%v) = %q: not the prefix then JSON", resp, out)
	}
	if _, err := protojson.Marshal(resp); err != nil {
		t.Errorf("appendResponse writes %v, which protojson refuses: %v", resp, err)
	}
	back := new(rlspb.RateLimitResponse)
	if err := protojson.Unmarshal([]byte(body), back); err != nil {
		t.Fatalf("protojson cannot read %s (from %v): %v", body, resp, err)
	}
	if !proto.Equal(back, resp) {
		t.Errorf("%s reads back as %v, want %v", body, back, resp)
	}
	// The same bytes as protojson's compact output, as theirs writes
	// them: a limit's name came after its unit, where protojson puts it
	// first (the proto declares it first).
	if want, err := marshalCompact(resp); err != nil || string(want) != body {
		t.Errorf("appendResponse(%v) =\n%s\nprotojson writes\n%s (%v)", resp, body, want, err)
	}
	return true
}

// TestAppendResponse writes responses of every combination of the fields
// the service sets and of values that must be left to protojson.
func TestAppendResponse(t *testing.T) {
	codes := []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_UNKNOWN, rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT, 9}
	limits := []*rlspb.RateLimitResponse_RateLimit{nil, {}, {RequestsPerUnit: 10, Unit: rlspb.RateLimitResponse_RateLimit_MINUTE}, {Name: "per-user", RequestsPerUnit: math.MaxUint32, Unit: rlspb.RateLimitResponse_RateLimit_YEAR}}
	for u := range int32(8) {
		limits = append(limits, &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: 1, Unit: rlspb.RateLimitResponse_RateLimit_Unit(u)})
	}
	// Left to protojson.
	odd := []*rlspb.RateLimitResponse_RateLimit{{Unit: 99}, {Name: "ünï"}, {Name: `a"b`}, {Name: "a\\b"}, {Name: "a\nb"}, {UnitMultiplier: wrapperspb.UInt32(2)}}
	durations := []*durationpb.Duration{nil, {}, {Seconds: 60}, {Seconds: maxDurationSeconds}}
	oddDurations := []*durationpb.Duration{{Seconds: maxDurationSeconds + 1}, {Seconds: -1}, {Nanos: 5}, {Seconds: 1, Nanos: 500_000_000}, {Seconds: 1, Nanos: -1}}
	remaining := []uint32{0, 7, math.MaxUint32}
	plain := func(st *rlspb.RateLimitResponse_DescriptorStatus) bool {
		return !slices.Contains(odd, st.CurrentLimit) && !slices.Contains(oddDurations, st.DurationUntilReset) && st.Code != 9
	}
	var statuses []*rlspb.RateLimitResponse_DescriptorStatus
	for _, c := range codes {
		for _, l := range slices.Concat(limits, odd) {
			for _, r := range remaining {
				for _, d := range slices.Concat(durations, oddDurations) {
					statuses = append(statuses, &rlspb.RateLimitResponse_DescriptorStatus{Code: c, CurrentLimit: l, LimitRemaining: r, DurationUntilReset: d})
				}
			}
		}
	}
	headers := [][]*core.HeaderValue{nil, {}, {{Key: "X-RateLimit-Limit", Value: "10"}, {Key: "X-RateLimit-Remaining", Value: "0"}, {Key: "X-RateLimit-Reset", Value: "60"}}, {{}}, {{Key: "k"}}, {{Value: "v"}}}
	oddHeaders := [][]*core.HeaderValue{{{Key: "k", RawValue: []byte("v")}}, {{Key: "k", Value: "\u00e9"}}}
	for i, st := range statuses {
		for _, c := range codes {
			hs := headers[i%len(headers)]
			resp := &rlspb.RateLimitResponse{OverallCode: c, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{st}, ResponseHeadersToAdd: hs}
			if wrote := checkEncode(t, resp); !wrote && plain(st) && c != 9 {
				t.Errorf("appendResponse leaves %v to protojson", resp)
			}
		}
	}
	// Several statuses; none; the fields the service never sets.
	several := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OVER_LIMIT}
	for _, st := range statuses {
		if plain(st) && len(several.Statuses) < 40 {
			several.Statuses = append(several.Statuses, st)
		}
	}
	if !checkEncode(t, several) {
		t.Errorf("appendResponse leaves %v to protojson", several)
	}
	for _, resp := range []*rlspb.RateLimitResponse{{}, {Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{}, {}}}} {
		if !checkEncode(t, resp) {
			t.Errorf("appendResponse leaves %v to protojson", resp)
		}
	}
	others := []*rlspb.RateLimitResponse{
		{OverallCode: rlspb.RateLimitResponse_OK, ResponseHeadersToAdd: oddHeaders[0]},
		{OverallCode: rlspb.RateLimitResponse_OK, ResponseHeadersToAdd: oddHeaders[1]},
		{RequestHeadersToAdd: headers[2]},
		{RawBody: []byte("body")},
		{DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{"domain": structpb.NewStringValue("api")}}},
		{Quota: &rlspb.RateLimitResponse_Quota{Requests: 3}},
		{Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{Quota: &rlspb.RateLimitResponse_Quota{Requests: 1, ExpirationSpecifier: &rlspb.RateLimitResponse_Quota_ValidUntil{ValidUntil: timestamppb.New(fixedNow)}}}}},
	}
	for _, resp := range others {
		checkEncode(t, resp)
	}
}

// TestAppendResponseKnowsEveryField fails when the response messages
// gain a field: appendResponse must then write it or leave the responses
// that set it to protojson.
func TestAppendResponseKnowsEveryField(t *testing.T) {
	known := map[protoreflect.FullName][]protoreflect.Name{
		"envoy.service.ratelimit.v3.RateLimitResponse": {"overall_code", "statuses", "response_headers_to_add", // written
			"request_headers_to_add", "raw_body", "dynamic_metadata", "quota"}, // left to protojson
		"envoy.service.ratelimit.v3.RateLimitResponse.DescriptorStatus": {"code", "current_limit", "limit_remaining", "duration_until_reset", "quota"},
		"envoy.service.ratelimit.v3.RateLimitResponse.RateLimit":        {"name", "requests_per_unit", "unit", "unit_multiplier"},
		"envoy.config.core.v3.HeaderValue":                              {"key", "value", "raw_value"},
		"google.protobuf.Duration":                                      {"seconds", "nanos"},
	}
	for _, m := range []proto.Message{&rlspb.RateLimitResponse{}, &rlspb.RateLimitResponse_DescriptorStatus{}, &rlspb.RateLimitResponse_RateLimit{}, &core.HeaderValue{}, &durationpb.Duration{}} {
		md := m.ProtoReflect().Descriptor()
		var names []protoreflect.Name
		for i := range md.Fields().Len() {
			names = append(names, md.Fields().Get(i).Name())
		}
		want := known[md.FullName()]
		slices.Sort(names)
		slices.Sort(want)
		if !slices.Equal(names, want) {
			t.Errorf("%s has fields %v; appendResponse knows %v", md.FullName(), names, want)
		}
	}
}

// TestOverrideText checks the limit override text of the dynamic
// metadata: protobuf's text format with one space between fields in
// every build (String's spacing varies between builds).
func TestOverrideText(t *testing.T) {
	for _, c := range []struct {
		o    *ratelimitv3.RateLimitDescriptor_RateLimitOverride
		want string
	}{
		{&ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_MINUTE}, "requests_per_unit:2 unit:MINUTE"},
		{&ratelimitv3.RateLimitDescriptor_RateLimitOverride{Unit: typev3.RateLimitUnit_HOUR}, "unit:HOUR"},
		{&ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7}, "requests_per_unit:7"},
		{&ratelimitv3.RateLimitDescriptor_RateLimitOverride{}, ""},
		{&ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 99}, "requests_per_unit:1 unit:99"},
		// The multiplier, a wrapper message, was left out (a walk beside
		// theirs found "unit_multiplier:{value:2}" missing).
		{&ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(2)}, "requests_per_unit:3 unit:MINUTE unit_multiplier:{value:2}"},
		{&ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(0)}, "requests_per_unit:3 unit:MINUTE unit_multiplier:{}"},
	} {
		got := overrideText(c.o)
		if got != c.want {
			t.Errorf("overrideText(%v) = %q, want %q", c.o, got, c.want)
		}
		if s := strings.Join(strings.Fields(c.o.String()), " "); s != got {
			t.Errorf("overrideText(%v) = %q, String gives %q", c.o, got, s)
		}
	}
}

// TestMarshalCompact checks that a response protojson writes (one
// appendResponse leaves to it) has no white space outside its strings.
func TestMarshalCompact(t *testing.T) {
	md, err := structpb.NewStruct(map[string]any{"domain": "d", "descriptors": []any{map[string]any{"entries": []any{"a=b c"}, "limit": "requests_per_unit:2 unit:MINUTE"}}})
	if err != nil {
		t.Fatal(err)
	}
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, DynamicMetadata: md,
		Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{Code: rlspb.RateLimitResponse_OK, LimitRemaining: 3}}}
	b, err := marshalCompact(resp)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"overallCode":"OK","statuses":[{"code":"OK","limitRemaining":3}],"dynamicMetadata":{"descriptors":[{"entries":["a=b c"],"limit":"requests_per_unit:2 unit:MINUTE"}],"domain":"d"}}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
}

// TestDecodeRequestMax: a POST /json body of the usual shape with more
// than max descriptors decodes to max+1 of them at once, for the service
// to refuse (a grpcbounds walk: any number was decoded and decided); one
// within max, or max 0, decodes as decodeRequest.
func TestDecodeRequestMax(t *testing.T) {
	body := func(n int) []byte {
		return []byte(`{"domain":"edge","descriptors":[` + strings.Repeat(`{"entries":[{"key":"route","value":"/j"}]},`, n-1) + `{"entries":[{"key":"route","value":"/j"}]}],"hits_addend":2}`)
	}
	for _, tc := range []struct{ n, max, want int }{{5000, 10, 11}, {10, 10, 10}, {5000, 0, 5000}} {
		req, err := decodeRequestMax(body(tc.n), tc.max)
		if err != nil {
			t.Fatalf("%d descriptors, max %d: %v", tc.n, tc.max, err)
		}
		if got := len(req.GetDescriptors()); got != tc.want {
			t.Errorf("%d descriptors, max %d: %d decoded, want %d", tc.n, tc.max, got, tc.want)
		}
	}
}
