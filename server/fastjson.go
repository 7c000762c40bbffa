package server

import (
	"encoding/json"
	"strconv"
	"strings"
)

// The decision endpoints' JSON without reflection. A POST /v1/check body
// of the usual shape — {"policy": "...", "identity": {"dim": "value",
// ...}, "cost": N}, keys in lower case, each once, strings of printable
// ASCII without escapes — is decoded by decodeCheckFast; anything else
// (and every malformed body) goes through encoding/json, which gives the
// same result for what decodeCheckFast accepts (FuzzDecodeCheckFast checks
// it) and the precise error messages. Answers are written by
// appendCheckResponse, byte for byte what encoding/json's Encoder writes
// (FuzzAppendCheckResponse checks it).

// decodeCheckFast decodes body when it has the usual shape; ok is false
// when it does not, and the caller must decode it with encoding/json.
func decodeCheckFast(body []byte) (r CheckRequest, ok bool) {
	d := fastDecoder{b: body}
	if !d.byte('{') {
		return r, false
	}
	var seenPolicy, seenIdentity, seenCost bool
	for empty := d.byte('}'); !empty; {
		key, ok := d.str()
		if !ok || !d.byte(':') {
			return r, false
		}
		switch {
		case key == "policy" && !seenPolicy:
			seenPolicy = true
			if r.Policy, ok = d.str(); !ok {
				return r, false
			}
		case key == "identity" && !seenIdentity:
			seenIdentity = true
			if r.Identity, ok = d.stringMap(); !ok {
				return r, false
			}
		case key == "cost" && !seenCost:
			seenCost = true
			c, ok := d.int()
			if !ok {
				return r, false
			}
			r.Cost = &c
		default: // unknown, repeated or in another case
			return r, false
		}
		if d.byte('}') {
			break
		}
		if !d.byte(',') {
			return r, false
		}
	}
	d.space()
	return r, d.i == len(d.b)
}

// fastDecoder reads the JSON subset decodeCheckFast accepts.
type fastDecoder struct {
	b []byte
	i int
}

func (d *fastDecoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// byte skips white space and consumes c if it comes next.
func (d *fastDecoder) byte(c byte) bool {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// str reads a string of printable ASCII without escapes.
func (d *fastDecoder) str() (string, bool) {
	if !d.byte('"') {
		return "", false
	}
	start := d.i
	for ; d.i < len(d.b); d.i++ {
		switch c := d.b[d.i]; {
		case c == '"':
			s := string(d.b[start:d.i])
			d.i++
			return s, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return "", false
		}
	}
	return "", false
}

// stringMap reads an object of strings, each key once.
func (d *fastDecoder) stringMap() (map[string]string, bool) {
	if !d.byte('{') {
		return nil, false
	}
	m := make(map[string]string, 2)
	if d.byte('}') {
		return m, true
	}
	for {
		k, ok := d.str()
		if !ok || !d.byte(':') {
			return nil, false
		}
		v, ok := d.str()
		if !ok {
			return nil, false
		}
		if _, dup := m[k]; dup {
			return nil, false
		}
		m[k] = v
		if d.byte('}') {
			return m, true
		}
		if !d.byte(',') {
			return nil, false
		}
	}
}

// int reads an integer of at most 18 digits, without fraction or
// exponent.
func (d *fastDecoder) int() (int64, bool) {
	d.space()
	neg := d.i < len(d.b) && d.b[d.i] == '-'
	if neg {
		d.i++
	}
	start := d.i
	var v int64
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		v = v*10 + int64(d.b[d.i]-'0')
		d.i++
	}
	n := d.i - start
	if n == 0 || n > 18 || (n > 1 && d.b[start] == '0') {
		return 0, false
	}
	if d.i < len(d.b) {
		switch d.b[d.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	if neg {
		v = -v
	}
	return v, true
}

// appendCheckResponse appends r as encoding/json's Encoder writes it,
// final newline included.
func appendCheckResponse(b []byte, r *CheckResponse) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, r.Allowed)
	b = appendField(b, "policy", r.Policy)
	b = appendField(b, "tier", r.Tier)
	b = appendIntField(b, "limit", r.Limit)
	b = appendIntField(b, "remaining", r.Remaining)
	b = appendIntField(b, "reset", r.Reset)
	b = appendField(b, "reset_at", r.ResetAt)
	b = appendIntField(b, "retry_after_ms", r.RetryAfterMS)
	b = appendIntField(b, "delay_ms", r.DelayMS)
	b = appendField(b, "binding", r.Binding)
	b = appendField(b, "reason", r.Reason)
	b = append(b, `,"layers":`...)
	if r.Layers == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range r.Layers {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendLayerResult(b, &r.Layers[i])
		}
		b = append(b, ']')
	}
	if r.Degraded {
		b = append(b, `,"degraded":true`...)
	}
	if r.FailureMode != "" {
		b = appendField(b, "failure_mode", r.FailureMode)
	}
	if r.DegradedReason != "" {
		b = appendField(b, "degraded_reason", r.DegradedReason)
	}
	return append(b, "}\n"...)
}

func appendLayerResult(b []byte, l *LayerResult) []byte {
	b = append(b, `{"name":`...)
	b = appendString(b, l.Name)
	b = appendField(b, "dimension", l.Dimension)
	b = appendField(b, "algorithm", l.Algorithm)
	b = append(b, `,"allowed":`...)
	b = strconv.AppendBool(b, l.Allowed)
	b = appendIntField(b, "limit", l.Limit)
	b = appendIntField(b, "remaining", l.Remaining)
	b = appendIntField(b, "reset", l.Reset)
	b = appendField(b, "reset_at", l.ResetAt)
	b = appendIntField(b, "retry_after_ms", l.RetryAfterMS)
	b = appendIntField(b, "delay_ms", l.DelayMS)
	b = appendField(b, "reason", l.Reason)
	if l.Shadow {
		b = append(b, `,"shadow":true`...)
	}
	return append(b, '}')
}

// appendField appends ,"name":"value" (name needs no escaping).
func appendField(b []byte, name, value string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendString(b, value)
}

func appendIntField(b []byte, name string, v int64) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, v, 10)
}

// appendString appends s as a JSON string, escaped as encoding/json
// escapes it (HTML characters included).
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			// A copy goes to Marshal, so that s does not escape through
			// the interface (which would move every caller's answer,
			// layers included, to the heap); this path is rare.
			q, err := json.Marshal(strings.Clone(s))
			if err != nil { // not for a string
				return append(b, `""`...)
			}
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
