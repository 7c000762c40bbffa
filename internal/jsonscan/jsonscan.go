// Package jsonscan reads a strict subset of JSON without reflection, for
// the request bodies of the usual shape that the decision endpoints
// decode on every call. Each method consumes one token when it is of the
// subset and reports false otherwise; after a false the Decoder's
// position means nothing, and the caller is expected to decode the whole
// body again with a complete decoder (encoding/json, protojson), which
// either gives the same result or says precisely what is wrong. So the
// subset only has to be decoded the same way as the complete decoders do;
// it never has to produce their errors.
package jsonscan

// Decoder reads tokens from B, starting at byte I. The zero value reads
// nothing; a Decoder is not safe for concurrent use.
type Decoder struct {
	B []byte
	I int
}

// Space skips JSON white space (space, tab, line feed, carriage return).
func (d *Decoder) Space() {
	for d.I < len(d.B) {
		switch d.B[d.I] {
		case ' ', '\t', '\n', '\r':
			d.I++
		default:
			return
		}
	}
}

// Byte skips white space and consumes c if it comes next.
func (d *Decoder) Byte(c byte) bool {
	d.Space()
	if d.I < len(d.B) && d.B[d.I] == c {
		d.I++
		return true
	}
	return false
}

// End skips white space and reports whether nothing follows.
func (d *Decoder) End() bool {
	d.Space()
	return d.I == len(d.B)
}

// Str reads a string of printable ASCII (0x20 to 0x7e) without escapes:
// false for any other string, and for a token that is not a string.
func (d *Decoder) Str() (string, bool) {
	b, ok := d.RawStr()
	return string(b), ok
}

// RawStr is Str without the copy: the string's bytes in B (a key to
// compare, or a value to convert once).
func (d *Decoder) RawStr() ([]byte, bool) {
	if !d.Byte('"') {
		return nil, false
	}
	start := d.I
	for ; d.I < len(d.B); d.I++ {
		switch c := d.B[d.I]; {
		case c == '"':
			d.I++
			return d.B[start : d.I-1], true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// Int reads an integer of at most 18 digits, optionally negative,
// without fraction or exponent.
func (d *Decoder) Int() (int64, bool) {
	d.Space()
	neg := d.I < len(d.B) && d.B[d.I] == '-'
	if neg {
		d.I++
	}
	u, ok := d.digits(18)
	if !ok {
		return 0, false
	}
	v := int64(u)
	if neg {
		v = -v
	}
	return v, true
}

// Uint reads a non-negative integer of at most max, without sign,
// fraction or exponent.
func (d *Decoder) Uint(max uint64) (uint64, bool) {
	d.Space()
	v, ok := d.digits(20)
	if !ok || v > max {
		return 0, false
	}
	return v, true
}

// digits reads the digits of a JSON integer: at least one, at most n (at
// most 20, and a 20-digit value must fit in a uint64), no leading zero,
// and no fraction or exponent after them.
func (d *Decoder) digits(n int) (uint64, bool) {
	start := d.I
	var v uint64
	for d.I < len(d.B) && d.B[d.I] >= '0' && d.B[d.I] <= '9' {
		c := uint64(d.B[d.I] - '0')
		if d.I-start == 19 && (v > (1<<64-1)/10 || v*10 > 1<<64-1-c) {
			return 0, false // a 20-digit value past the uint64 range
		}
		v = v*10 + c
		d.I++
	}
	k := d.I - start
	if k == 0 || k > n || (k > 1 && d.B[start] == '0') {
		return 0, false
	}
	if d.I < len(d.B) {
		switch d.B[d.I] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	return v, true
}
