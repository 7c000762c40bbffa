package duration

import (
	"errors"
	"testing"
	"time"
)

// TestTooLong: a duration written correctly but too long to be held
// wraps ErrTooLong (an outside walk got "invalid duration ... (want e.g.
// 500ms, ...)" for window: 2562048h, which reads as a mistake in the
// writing); a mistake in the writing does not.
func TestTooLong(t *testing.T) {
	for _, s := range []string{"2562048h", "9999999999999999999ns", "1.5h9999999999h", "106752d", "99999999999999999999d", "-2562048h"} {
		if _, err := Parse(s); !errors.Is(err, ErrTooLong) {
			t.Errorf("Parse(%q): %v, want ErrTooLong", s, err)
		}
	}
	for _, s := range []string{"1x", "h", "5", "1.5d", "30 d", "", "1hh"} {
		if _, err := Parse(s); err == nil || errors.Is(err, ErrTooLong) {
			t.Errorf("Parse(%q): %v, want an invalid duration, not ErrTooLong", s, err)
		}
	}
	if d, err := Parse("2562047h"); err != nil || d <= 0 {
		t.Errorf("Parse(2562047h) = %v, %v: the longest hours a Duration holds", d, err)
	}
}

// TestDays: every day count time.Duration holds is read, however many
// digits it has (an outside walk: max_delay, in range up to about 13,031
// days, was refused as "too long" from 10000d, the day parser reading
// four digits at most).
func TestDays(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want time.Duration
	}{
		{"10000d", 10000 * day},
		{"13031d", 13031 * day},
		{"99999d", 99999 * day},
		{"0000000000000000000001d", day},
		{"106751d", time.Duration(MaxDays) * day},
	} {
		if got, err := Parse(tc.s); err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.s, got, err, tc.want)
		}
	}
}

// TestFormat: range bounds of a day or more are written in days.
func TestFormat(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                            "0s",
		time.Millisecond:             "1ms",
		400 * day:                    "400d",
		36 * time.Hour:               "1d12h0m0s",
		(1 << 50) * time.Microsecond: "13031d5h58m26.842624s",
		-time.Second:                 "-1s",
	} {
		if got := Format(d); got != want {
			t.Errorf("Format(%v) = %q, want %q", d, got, want)
		}
	}
}
