package floodgate_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// TestRefusedCharacterIsNamed: a prefix or policy name with a character
// outside its set names that character, not its first byte read as one
// ("byte 'Ã'" for "é"), and a byte of no valid UTF-8 character by its
// value.
func TestRefusedCharacterIsNamed(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"é", `character 'é' not in`},
		{"ab/c", `character '/' not in`},
		{"a\xff", `byte 0xff not in`},
	} {
		err := floodgate.ValidatePrefix(c.in)
		if !errors.Is(err, floodgate.ErrInvalidKey) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ValidatePrefix(%q) = %v, want %q", c.in, err, c.want)
		}
		_, err = floodgate.NewFixedWindow(c.in, 1, time.Second)
		if !errors.Is(err, floodgate.ErrInvalidPolicy) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewFixedWindow(%q) = %v, want %q", c.in, err, c.want)
		}
	}
}
