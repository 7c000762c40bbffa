package server

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/floodgate-rl/floodgate/internal/jsonscan"
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
	d := jsonscan.Decoder{B: body}
	if !d.Byte('{') {
		return r, false
	}
	var seenPolicy, seenIdentity, seenCost bool
	for empty := d.Byte('}'); !empty; {
		key, ok := d.Str()
		if !ok || !d.Byte(':') {
			return r, false
		}
		switch {
		case key == "policy" && !seenPolicy:
			seenPolicy = true
			if r.Policy, ok = d.Str(); !ok {
				return r, false
			}
		case key == "identity" && !seenIdentity:
			seenIdentity = true
			if r.Identity, ok = stringMap(&d); !ok {
				return r, false
			}
		case key == "cost" && !seenCost:
			seenCost = true
			c, ok := d.Int()
			if !ok {
				return r, false
			}
			r.Cost = &c
		default: // unknown, repeated or in another case
			return r, false
		}
		if d.Byte('}') {
			break
		}
		if !d.Byte(',') {
			return r, false
		}
	}
	return r, d.End()
}

// stringMap reads an object of strings, each key once.
func stringMap(d *jsonscan.Decoder) (map[string]string, bool) {
	if !d.Byte('{') {
		return nil, false
	}
	m := make(map[string]string, 2)
	if d.Byte('}') {
		return m, true
	}
	for {
		k, ok := d.Str()
		if !ok || !d.Byte(':') {
			return nil, false
		}
		v, ok := d.Str()
		if !ok {
			return nil, false
		}
		if _, dup := m[k]; dup {
			return nil, false
		}
		m[k] = v
		if d.Byte('}') {
			return m, true
		}
		if !d.Byte(',') {
			return nil, false
		}
	}
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
