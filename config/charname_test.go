package config_test

import (
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/config"
)

// TestRefusedNameCharacterIsNamed: a policy or dimension name with a
// non-ASCII character names that character, not its first byte read as
// one ('Ã' for 'é').
func TestRefusedNameCharacterIsNamed(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"policies:\n  - name: é\n    layers: []\n", `policy name "é": character 'é' not in`},
		{"policies:\n  - name: p\n    layers:\n      - {name: l, algorithm: gcra, limit: 5, window: 1s, dimension: é}\n", `dimension name "é": character 'é' not in`},
	} {
		_, err := config.Parse([]byte(c.doc), "e.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}
