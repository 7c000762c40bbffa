package plural_test

import (
	"testing"

	"github.com/floodgate-rl/floodgate/internal/plural"
)

func TestCount(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{
		{0, "0 policies"},
		{1, "1 policy"},
		{2, "2 policies"},
		{-1, "-1 policies"},
		{1_000_000, "1000000 policies"},
	} {
		if got := plural.Count(c.n, "policy", "policies"); got != c.want {
			t.Errorf("Count(%d): %q, want %q", c.n, got, c.want)
		}
	}
	if got := plural.Count(int64(1), "member", "members"); got != "1 member" {
		t.Errorf("Count(int64(1)): %q", got)
	}
	if got := plural.Count(uint64(1<<63), "member", "members"); got != "9223372036854775808 members" {
		t.Errorf("Count(uint64(1<<63)): %q", got)
	}
}

func TestWord(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{
		{0, "have"},
		{1, "has"},
		{2, "have"},
		{-1, "have"},
	} {
		if got := plural.Word(c.n, "has", "have"); got != c.want {
			t.Errorf("Word(%d): %q, want %q", c.n, got, c.want)
		}
	}
	for _, c := range []struct {
		n    float64
		want string
	}{
		{0, "requests"},
		{1, "request"},
		{0.6, "requests"},
		{2, "requests"},
	} {
		if got := plural.Word(c.n, "request", "requests"); got != c.want {
			t.Errorf("Word(%v): %q, want %q", c.n, got, c.want)
		}
	}
	if got := plural.Word(uint8(1), "is", "are"); got != "is" {
		t.Errorf("Word(uint8(1)): %q", got)
	}
}
