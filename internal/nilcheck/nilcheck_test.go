package nilcheck

import (
	"io"
	"strings"
	"testing"
)

func TestIsNil(t *testing.T) {
	var r *strings.Reader
	var w io.Writer
	var f func()
	var m map[string]int
	for _, tc := range []struct {
		name string
		v    any
		want bool
	}{
		{"untyped nil", nil, true},
		{"nil interface", w, true},
		{"typed nil pointer", r, true},
		{"typed nil pointer in an interface", io.Reader(r), true},
		{"nil func", f, true},
		{"nil map", m, true},
		{"pointer", strings.NewReader("x"), false},
		{"func", func() {}, false},
		{"value", 0, false},
		{"struct", struct{}{}, false},
	} {
		if got := IsNil(tc.v); got != tc.want {
			t.Errorf("%s: IsNil = %v, want %v", tc.name, got, tc.want)
		}
	}
}
