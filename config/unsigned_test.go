package config_test

import (
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/config"
)

// TestUnsigned: Unsigned gives back the document Sign signed (with the
// final newline Sign adds to one without), and a document without a
// signature line unchanged.
func TestUnsigned(t *testing.T) {
	key := []byte(strings.Repeat("k", config.MinSignKeyLen))
	for _, doc := range []string{"version: \"1\"\n", "version: \"1\"", "# floodgate-signature: in the middle\nversion: \"1\"\n"} {
		signed, err := config.Sign([]byte(doc), key)
		if err != nil {
			t.Fatal(err)
		}
		want := doc
		if !strings.HasSuffix(want, "\n") {
			want += "\n"
		}
		if got := string(config.Unsigned(signed)); got != want {
			t.Errorf("Unsigned(Sign(%q)) = %q, want %q", doc, got, want)
		}
		if got := string(config.Unsigned([]byte(doc))); got != doc {
			t.Errorf("Unsigned(%q) = %q, want it unchanged", doc, got)
		}
	}
}
