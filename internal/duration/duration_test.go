package duration

import (
	"errors"
	"testing"
)

// TestTooLong: a duration written correctly but too long to be held
// wraps ErrTooLong (an outside walk got "invalid duration ... (want e.g.
// 500ms, ...)" for window: 2562048h, which reads as a mistake in the
// writing); a mistake in the writing does not.
func TestTooLong(t *testing.T) {
	for _, s := range []string{"2562048h", "9999999999999999999ns", "1.5h9999999999h", "99999d", "-2562048h"} {
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
