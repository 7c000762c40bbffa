package clip

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestText(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 80, "short"},
		{"exactly", 7, "exactly"},
		{"abcdef", 3, "abc..."},
		{strings.Repeat("é", 3), 3, "é..."}, // not half of the second é
		{"ééé", 0, "..."},
	} {
		got := Text(tc.s, tc.n)
		if got != tc.want || !utf8.ValidString(got) {
			t.Errorf("Text(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}
