package envoyrls

import (
	"strings"
	"testing"
)

// TestRefusedHeaderCharacterIsNamed: a header name with a non-ASCII
// character names that character, not its first byte read as one.
func TestRefusedHeaderCharacterIsNamed(t *testing.T) {
	err := validHeaderName("x-é")
	if err == nil || !strings.Contains(err.Error(), `character 'é' not in`) {
		t.Fatalf("got %v, want it to name 'é'", err)
	}
}
