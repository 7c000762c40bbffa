package closedloop

import (
	"slices"
	"testing"
)

func TestParseCounts(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []int
	}{
		{"64", []int{64}},
		{"1,16,64,256", []int{1, 16, 64, 256}},
		{" 1 , 2", []int{1, 2}},
	} {
		got, err := ParseCounts(tt.in)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("ParseCounts(%q) = %v, %v, want %v", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"", "1,,2", "1;2", "x", "1.5"} {
		if got, err := ParseCounts(in); err == nil {
			t.Errorf("ParseCounts(%q) = %v, want an error", in, got)
		}
	}
}
