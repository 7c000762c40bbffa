package jsonscan

import (
	"math"
	"strconv"
	"testing"
)

func TestUint(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  uint64
		want uint64
		ok   bool
	}{
		{"0", math.MaxUint64, 0, true},
		{" \t\r\n7", math.MaxUint64, 7, true},
		{"4294967295", math.MaxUint32, math.MaxUint32, true},
		{"4294967296", math.MaxUint32, 0, false},
		{"18446744073709551615", math.MaxUint64, math.MaxUint64, true},
		{"18446744073709551616", math.MaxUint64, 0, false},
		{"99999999999999999999", math.MaxUint64, 0, false},
		{"100000000000000000000", math.MaxUint64, 0, false},
		{"-1", math.MaxUint64, 0, false},
		{"-0", math.MaxUint64, 0, false},
		{"01", math.MaxUint64, 0, false},
		{"1.0", math.MaxUint64, 0, false},
		{"1e2", math.MaxUint64, 0, false},
		{"1E2", math.MaxUint64, 0, false},
		{`"1"`, math.MaxUint64, 0, false},
		{"", math.MaxUint64, 0, false},
		{"12,", math.MaxUint64, 12, true},
	} {
		d := Decoder{B: []byte(tc.in)}
		got, ok := d.Uint(tc.max)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("Uint(%q, %d) = %d, %v; want %d, %v", tc.in, tc.max, got, ok, tc.want, tc.ok)
		}
	}
}

func TestInt(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"-12", -12, true},
		{"999999999999999999", 999999999999999999, true},
		{"1000000000000000000", 0, false},
		{"-", 0, false},
		{"-01", 0, false},
		{"3.5", 0, false},
	} {
		d := Decoder{B: []byte(tc.in)}
		got, ok := d.Int()
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("Int(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestStr(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		ok   bool
		end  bool // nothing left after the string
	}{
		{`"abc"`, "abc", true, true},
		{` ""  `, "", true, true},
		{`"a b~"x`, "a b~", true, false},
		{`"a\"b"`, "", false, false},
		{`"a\nb"`, "", false, false},
		{"\"a\nb\"", "", false, false},
		{"\"\x7f\"", "", false, false},
		{"\"\xc3\xbc\"", "", false, false},
		{`"abc`, "", false, false},
		{`abc`, "", false, false},
	} {
		d := Decoder{B: []byte(tc.in)}
		got, ok := d.Str()
		if ok != tc.ok || got != tc.want || (ok && d.End() != tc.end) {
			t.Errorf("Str(%s) = %q, %v; want %q, %v", strconv.Quote(tc.in), got, ok, tc.want, tc.ok)
		}
	}
}
