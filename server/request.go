package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/clip"
	"github.com/floodgate-rl/floodgate/quota"
)

// Limits on requests.
const (
	// DefaultMaxBodyBytes is the largest request body accepted by default.
	DefaultMaxBodyBytes = 64 << 10
	// DefaultMaxBatch is the most items a batch may hold by default.
	DefaultMaxBatch = 100
	// MaxIdentityValues is the most identity values one request may carry.
	MaxIdentityValues = 16
)

// CheckRequest is the body of POST /v1/check and one item of a batch.
type CheckRequest struct {
	// Policy names a policy of the active configuration, e.g. "api".
	Policy string `json:"policy"`
	// Identity maps dimension names to values, e.g. {"user": "42",
	// "ip": "203.0.113.7"}. Every dimension a layer of the policy keys on
	// must be present; others are ignored.
	Identity map[string]string `json:"identity"`
	// Cost is what the request costs (1..floodgate.MaxCost); absent means
	// 1. Layers with their own cost in the configuration use that instead.
	Cost *int64 `json:"cost,omitempty"`
}

// PeekRequest is the body of POST /v1/peek: a check that consumes nothing.
// Its answer says whether a check of cost 1 would be admitted now and, on
// a GCRA layer with max_delay, the delay_ms it would be told to wait.
// It is the identity's standing only when not Degraded: a
// degraded peek (Redis slow or down) reports what the policy's failure
// mode would decide, e.g. a fresh identity in open mode, whatever Redis
// holds.
type PeekRequest struct {
	// Policy names a policy of the active configuration.
	Policy string `json:"policy"`
	// Identity maps dimension names to values, as in CheckRequest.
	Identity map[string]string `json:"identity"`
}

// BatchRequest is the body of POST /v1/check/batch: independent checks
// decided in order (a later item sees what an earlier one consumed).
type BatchRequest struct {
	// Requests are the checks, 1..MaxBatch of them.
	Requests []CheckRequest `json:"requests"`
}

// problemError is a client error to report as application/problem+json.
type problemError struct {
	status int
	kind   string // the problem type's slug
	detail string
	retry  bool // answered with Retry-After: 1
	// leaseID is Problem.LeaseID: a lease an acquire took and could not
	// give back.
	leaseID string
}

func (e *problemError) Error() string { return e.detail }

func badRequest(kind, format string, args ...any) *problemError {
	return &problemError{status: 400, kind: kind, detail: fmt.Sprintf(format, args...)}
}

// numberRange is the range of a whole-number field of a request body.
// A value outside it, however large (past int64 too), is the same
// invalid-cost problem.
type numberRange struct {
	field  string // the field's name, e.g. "cost"
	lo, hi int64
	hint   string // appended to the problem's detail, e.g. " (the real cost; ...)"
}

// The whole-number fields of the API's requests.
var (
	checkCost       = numberRange{"cost", 1, floodgate.MaxCost, " (use /v1/peek to check without consuming)"}
	quotaCost       = numberRange{"cost", 1, floodgate.MaxCost, " (use /v1/quota/status to look without consuming)"}
	reserveEstimate = numberRange{"estimate", 1, floodgate.MaxCost, " (the most the work may cost)"}
	settleActual    = numberRange{"actual", 0, floodgate.MaxCost, " (the real cost; 0 cancels the reservation)"}
	restoreUsed     = numberRange{"used", 0, quota.MaxUsed, ""}
)

// problem is the problem of value, a whole number as sent, out of r;
// where prefixes it (e.g. "requests[3]: ").
func (r numberRange) problem(where, value string) *problemError {
	return badRequest("invalid-cost", "%s%s %s out of range %d..%d%s", where, r.field, value, r.lo, r.hi, r.hint)
}

// check returns r's problem when v is outside r.
func (r numberRange) check(where string, v int64) error {
	if v < r.lo || v > r.hi {
		return r.problem(where, strconv.FormatInt(v, 10))
	}
	return nil
}

// decodeJSON decodes exactly one JSON object from body into v, rejecting
// unknown fields and trailing data, with messages naming what is wrong;
// known lists the fields, numbers gives the ranges of the whole-number
// ones (for a value too large for v's int64).
func decodeJSON(body []byte, v any, known string, numbers ...numberRange) error {
	body = withoutBOM(body)
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("malformed-json", "the request body is empty; send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonProblem(err, known, numbers)
	}
	// encoding/json decodes null into a struct as nothing at all (every
	// other value that is not an object is an UnmarshalTypeError): it
	// was answered as a body missing its fields, "policy" first.
	if bytes.TrimLeft(body, " \t\r\n")[0] != '{' {
		return badRequest("malformed-json", "the body must be a JSON object, got a JSON null")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("malformed-json", "unexpected data after the JSON object (at byte %d)", dec.InputOffset())
	}
	switch name, problem := fieldProblem(body, numbers); problem {
	case nullNumber:
		for _, r := range numbers {
			if r.field == name[strings.LastIndexByte(name, '.')+1:] {
				return badRequest("malformed-json", "field %q is null: send a whole number %d..%d%s, or leave the field out where it is optional", clip.Text(name, 80), r.lo, r.hi, r.hint)
			}
		}
	case duplicated:
		return badRequest("duplicate-field", "field %q appears twice in one object; send each field once", clip.Text(name, 80))
	case miscased:
		return badRequest("unknown-field", "unknown field %q: field names are lower case (did you mean %q?)", clip.Text(name, 80), clip.Text(strings.ToLower(name), 80))
	}
	return invalidText(body)
}

// utf8BOM is the byte order mark, U+FEFF, in UTF-8.
var utf8BOM = []byte("\xef\xbb\xbf")

// withoutBOM returns body without the byte order mark it may start with
// (as Windows tools, PowerShell's among them, write UTF-8 text): RFC 8259
// lets a JSON parser ignore it, and encoding/json refused it as "invalid
// character 'ï'". The mark becomes three spaces, in a copy, so that the
// offsets problems give still count from the body's first byte.
func withoutBOM(body []byte) []byte {
	if !bytes.HasPrefix(body, utf8BOM) {
		return body
	}
	b := bytes.Clone(body)
	copy(b, "   ")
	return b
}

// invalidText reports a body (valid JSON) whose strings are not all
// Unicode text: bytes that are not UTF-8, or a \u escape of a UTF-16
// surrogate without its other half. encoding/json reads each such byte
// or escape as U+FFFD, so "\xff" and "\xfe", or "\ud800" and "\udbff",
// would be one identity and share one counter: they are refused instead.
func invalidText(body []byte) error {
	if !utf8.Valid(body) {
		off := 0
		for off < len(body) {
			r, n := utf8.DecodeRune(body[off:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			off += n
		}
		return badRequest("malformed-json", "the body is not UTF-8 text (invalid byte %#x at byte %d); send JSON in UTF-8", body[off], off)
	}
	if off, esc, ok := loneSurrogate(body); ok {
		return badRequest("malformed-json", "the escape %s at byte %d is half of a UTF-16 surrogate pair; send the whole pair or the character itself", esc, off)
	}
	return nil
}

// loneSurrogate finds, in the strings of a valid JSON document, a \uXXXX
// escape of a surrogate that is not a high one directly followed by the
// escape of a low one, and reports it and its offset.
func loneSurrogate(body []byte) (int, string, bool) {
	if !bytes.Contains(body, []byte(`\u`)) {
		return 0, "", false
	}
	surrogate := func(i int) (rune, bool) { // the \u escape at i, if a surrogate
		if i+6 > len(body) || body[i] != '\\' || body[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(body[i+2:i+6]), 16, 16)
		if err != nil || v < 0xd800 || v > 0xdfff {
			return 0, false
		}
		return rune(v), true
	}
	inString := false
	for i := 0; i < len(body); i++ {
		switch c := body[i]; {
		case c == '"':
			inString = !inString
		case c == '\\' && inString:
			r, ok := surrogate(i)
			switch {
			case !ok:
				i++ // the escaped byte
			case r < 0xdc00:
				if lo, ok := surrogate(i + 6); ok && lo >= 0xdc00 {
					i += 11
					continue
				}
				return i, string(body[i : i+6]), true
			default:
				return i, string(body[i : i+6]), true
			}
		}
	}
	return 0, "", false
}

// A field problem fieldProblem finds.
const (
	duplicated = iota + 1
	miscased
	nullNumber
)

// fieldProblem reports, in one pass over body (a valid JSON document that
// encoding/json decoded), the first name that appears twice in one object
// (duplicated), as a path such as "requests[1].policy", or the first field
// name not written exactly as the field is named (miscased), or the first
// whole-number field of numbers whose value is null (nullNumber).
//
// encoding/json decodes null into a number field as if the field were
// absent: {"cost": null} was charged the default cost of 1 without a word.
// A client sending null most likely lost the value on its way (a
// serializer writing a missing number as null), so it is refused, as a
// string or fraction there is.
//
// encoding/json keeps the last of two equal names and matches field names
// without regard to case, so names are compared as it compares them: a
// body whose "policy" is read differently by another parser (one that
// keeps the first) is refused rather than decided under either. And since
// it matches "POLICY", or "coſt" with a long s, to the field, such a name
// is refused too: every request field is named in lower-case ASCII. The
// keys of an identity object, a map, are the client's own: they are
// compared exactly, as encoding/json fills the map (their case is checked
// with the identity), and may be written in any case.
func fieldProblem(body []byte, numbers []numberRange) (string, int) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	name, problem, _ := fieldProblemIn(dec, "", false, numbers)
	return name, problem
}

// identityName is the identity field's name, folded.
var identityName = foldName("identity")

// fieldProblemIn reads one value from dec, whose path is path; mapKeys
// says that an object's keys are a map's (compared exactly, any case)
// rather than field names (folded, lower case).
func fieldProblemIn(dec *json.Decoder, path string, mapKeys bool, numbers []numberRange) (string, int, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", 0, err
	}
	switch tok {
	case nil:
		field := path[strings.LastIndexByte(path, '.')+1:]
		for _, r := range numbers {
			if r.field == field {
				return path, nullNumber, nil
			}
		}
	case json.Delim('{'):
		seen := map[string]struct{}{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return "", 0, err
			}
			k, _ := kt.(string)
			name := k
			if path != "" {
				name = path + "." + k
			}
			fk := foldName(k)
			key := fk
			if mapKeys {
				key = k
			}
			if _, ok := seen[key]; ok {
				return name, duplicated, nil
			}
			seen[key] = struct{}{}
			if !mapKeys && !lowerName(k) {
				return k, miscased, nil
			}
			// An identity's values are the client's strings: one named
			// like a number field is not that field.
			nums := numbers
			if mapKeys {
				nums = nil
			}
			if n, problem, err := fieldProblemIn(dec, name, !mapKeys && fk == identityName, nums); problem != 0 || err != nil {
				return n, problem, err
			}
		}
		_, err = dec.Token()
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if n, problem, err := fieldProblemIn(dec, fmt.Sprintf("%s[%d]", path, i), false, numbers); problem != 0 || err != nil {
				return n, problem, err
			}
		}
		_, err = dec.Token()
	}
	return "", 0, err
}

// wholeNumber reports whether s is a JSON integer (digits, perhaps after
// a minus sign).
func wholeNumber(s string) bool {
	s = strings.TrimPrefix(s, "-")
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// lowerName reports whether s is made of a-z, 0-9 and '_' only.
func lowerName(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// foldName maps every rune of s to the smallest of its case variants
// (Unicode simple folding, as encoding/json folds field names), so that
// names equal without regard to case map to the same string.
func foldName(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			m = min(m, f)
		}
		b.WriteRune(m)
	}
	return b.String()
}

// describeType names what a JSON value of Go type t must be, in the
// API's words rather than Go's ("an array of checks", not
// "[]server.CheckRequest").
func describeType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		if e := t.Elem(); e == reflect.TypeFor[CheckRequest]() {
			return "an array of checks ({\"policy\", \"identity\", \"cost\"} objects)"
		}
		return "an array"
	case reflect.Struct:
		if t == reflect.TypeFor[CheckRequest]() {
			return "a check object ({\"policy\", \"identity\", \"cost\"})"
		}
		return "an object"
	}
	return "another JSON type"
}

// jsonProblem is the problem of err, encoding/json's error decoding a
// body whose fields are known, with the whole-number fields of numbers.
func jsonProblem(err error, known string, numbers []numberRange) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return badRequest("malformed-json", "malformed JSON at byte %d: %s", syn.Offset, strings.TrimPrefix(syn.Error(), "json: "))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("malformed-json", "malformed JSON: the body ends in the middle of a value")
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return badRequest("malformed-json", "the body must be a JSON object, got a JSON %s", typ.Value)
		}
		want := describeType(typ.Type)
		switch {
		case strings.HasPrefix(field, "identity") && typ.Type.Kind() == reflect.String:
			return badRequest("malformed-json", "field %q: identity values must be strings, got a JSON %s", field, typ.Value)
		case strings.HasPrefix(field, "identity"):
			want = "an object of dimension → string value"
		}
		// A whole number too large for an int64 is out of the field's
		// range as one just past its maximum is (decodeBatch says which
		// item).
		name := field[strings.LastIndexByte(field, '.')+1:]
		for _, r := range numbers {
			if n, ok := strings.CutPrefix(typ.Value, "number "); ok && r.field == name && wholeNumber(n) {
				return r.problem("", clip.Text(n, 40))
			}
		}
		return badRequest("malformed-json", "field %q must be %s, got a JSON %s", field, want, typ.Value)
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return badRequest("unknown-field", "unknown field %s (known fields: %s)", clip.Text(name, 80), known)
	}
	return badRequest("malformed-json", "malformed JSON: %s", strings.TrimPrefix(msg, "json: "))
}

// check is a validated request, bound to the configuration it was
// validated against.
type check struct {
	policy   *config.Policy
	identity map[string]string
	cost     int64
	peek     bool
}

// validate checks a decoded request against cfg. where prefixes messages
// (e.g. "requests[3]: ").
func validate(cfg *config.Config, policy string, identity map[string]string, cost *int64, peek bool, where string) (check, error) {
	if policy == "" {
		return check{}, badRequest("missing-policy", "%sfield \"policy\" is required", where)
	}
	p, ok := cfg.Policy(policy)
	if !ok {
		return check{}, badRequest("unknown-policy", "%sunknown policy %q: the service's configuration lists its policies (%s; GET /admin/v1/config when the admin API is on)", where, clip.Text(policy, 80), configOrigin(cfg))
	}
	if len(identity) > MaxIdentityValues {
		return check{}, badRequest("invalid-identity", "%sidentity has %d values (max %d)", where, len(identity), MaxIdentityValues)
	}
	for dim, v := range identity {
		if err := config.ValidateIdentityValue(dim, v); err != nil {
			return check{}, badRequest("invalid-identity", "%s%s", where, identityDetail(err))
		}
	}
	for _, l := range p.Layers {
		for _, d := range l.Dimensions {
			if _, ok := identity[d]; !ok {
				return check{}, badRequest("missing-identity", "%spolicy %q layer %q needs identity value %q (send \"identity\": {%q: \"...\"})", where, p.Name, l.Name, d, d)
			}
		}
	}
	c := check{policy: p, identity: identity, cost: 1, peek: peek}
	if cost != nil {
		if err := checkCost.check(where, *cost); err != nil {
			return check{}, err
		}
		c.cost = *cost
	}
	if peek {
		c.cost = 0
	}
	return c, nil
}

func policyNames(cfg *config.Config) string {
	ps := cfg.Policies()
	return nameList(len(ps), func(i int) string { return ps[i].Name })
}

// nameList joins the first 20 of n names with commas, saying how many
// more there are, or returns "none".
func nameList(n int, name func(i int) string) string {
	if n == 0 {
		return "none"
	}
	names := make([]string, 0, min(n, 21))
	for i := range min(n, 20) {
		names = append(names, name(i))
	}
	if n > 20 {
		names = append(names, "... "+strconv.Itoa(n-20)+" more")
	}
	return strings.Join(names, ", ")
}

// decodeCheck decodes and validates a POST /v1/check body against cfg.
func decodeCheck(cfg *config.Config, body []byte) (check, error) {
	r, ok := decodeCheckFast(body)
	if !ok {
		r = CheckRequest{}
		if err := decodeJSON(body, &r, "policy, identity, cost", checkCost); err != nil {
			return check{}, err
		}
	}
	return validate(cfg, r.Policy, r.Identity, r.Cost, false, "")
}

// decodePeek decodes and validates a POST /v1/peek body against cfg.
func decodePeek(cfg *config.Config, body []byte) (check, error) {
	var r PeekRequest
	if err := decodeJSON(body, &r, "policy, identity"); err != nil {
		return check{}, err
	}
	return validate(cfg, r.Policy, r.Identity, nil, true, "")
}

// decodeBatch decodes and validates a POST /v1/check/batch body: every
// item must be valid before any is decided.
func decodeBatch(cfg *config.Config, body []byte, maxItems int) ([]check, error) {
	body = withoutBOM(body) // for batchItemProblem too
	var r BatchRequest
	if err := decodeJSON(body, &r, "requests", checkCost); err != nil {
		var p *problemError
		if errors.As(err, &p) && (p.kind == "unknown-field" || p.kind == "invalid-cost") {
			if ip := batchItemProblem(body); ip != nil {
				return nil, ip
			}
		}
		return nil, err
	}
	if len(r.Requests) == 0 {
		return nil, badRequest("invalid-batch", "field \"requests\" must hold at least one check")
	}
	if len(r.Requests) > maxItems {
		return nil, badRequest("batch-too-large", "the batch has %d checks (max %d); split it", len(r.Requests), maxItems)
	}
	out := make([]check, len(r.Requests))
	for i, it := range r.Requests {
		c, err := validate(cfg, it.Policy, it.Identity, it.Cost, false, fmt.Sprintf("requests[%d]: ", i))
		if err != nil {
			return nil, err
		}
		out[i] = c
	}
	return out, nil
}

// batchItemProblem returns the problem of the first item of a batch body
// with an unknown field or a cost too large for an int64, its index and
// the item's own fields named, or nil when no item has one (the unknown
// field is the batch's own). encoding/json reports either without saying
// which item it is in.
func batchItemProblem(body []byte) error {
	var raw struct {
		Requests []json.RawMessage `json:"requests"`
	}
	if json.Unmarshal(body, &raw) != nil {
		return nil
	}
	for i, item := range raw.Requests {
		dec := json.NewDecoder(bytes.NewReader(item))
		dec.DisallowUnknownFields()
		var c CheckRequest
		if err := dec.Decode(&c); err != nil {
			var p *problemError
			if errors.As(jsonProblem(err, "policy, identity, cost", []numberRange{checkCost}), &p) && (p.kind == "unknown-field" || p.kind == "invalid-cost") {
				p.detail = fmt.Sprintf("requests[%d]: %s", i, p.detail)
				return p
			}
		}
	}
	return nil
}

// validateIdentity checks the shape of a request's identity values: how
// many, and each dimension name and value.
func validateIdentity(values map[string]string) error {
	if len(values) > MaxIdentityValues {
		return badRequest("invalid-identity", "identity has %d values (max %d)", len(values), MaxIdentityValues)
	}
	for dim, v := range values {
		if err := config.ValidateIdentityValue(dim, v); err != nil {
			return badRequest("invalid-identity", "%s", strings.TrimPrefix(err.Error(), config.ErrInvalidIdentity.Error()+": "))
		}
	}
	return nil
}

// missingIdentity reports the first of dims absent from values.
func missingIdentity(what string, dims []string, values map[string]string) error {
	for _, d := range dims {
		if _, ok := values[d]; !ok {
			return badRequest("missing-identity", "%s needs identity value %q (send \"identity\": {%q: \"...\"})", what, d, d)
		}
	}
	return nil
}

// printableID checks that id is 1..max bytes of printable ASCII.
func printableID(field, id string, maxLen int, kind string) error {
	if len(id) > maxLen {
		return badRequest(kind, "%s is %d bytes (max %d)", field, len(id), maxLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' {
			return badRequest(kind, "%s %q: byte %d (%#x) is not printable ASCII", field, clip.Text(id, 80), i, c)
		}
	}
	return nil
}

// identityDetail is the text of an identity error for a client: without
// the config package's prefix.
func identityDetail(err error) string {
	return strings.TrimPrefix(err.Error(), config.ErrInvalidIdentity.Error()+": ")
}

// configOrigin says, for callers told a name is unknown, where the
// configuration cfg lists its names: the kind of source only, not the
// file name or Redis key (callers need not learn the deployment's paths).
func configOrigin(cfg *config.Config) string {
	switch src := cfg.Source(); {
	case strings.HasPrefix(src, "redis:"):
		return "in Redis, published with floodgate config push"
	case src == config.DefaultName:
		return "the built-in example, printed by floodgate config example"
	default:
		return "its --config file"
	}
}
