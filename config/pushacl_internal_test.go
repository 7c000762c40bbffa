package config

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TestPushACLMatchesDocs: the grants the fix of a refused push gives
// (pushACL) are those of the config push user docs/operations.md
// documents, which TestConfigPushACLUser runs push as, once the line's
// resets are taken out.
func TestPushACLMatchesDocs(t *testing.T) {
	raw, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "ACL SETUSER floodgate-push on >PASSWORD "
	for line := range strings.SplitSeq(string(raw), "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), prefix)
		if !ok {
			continue
		}
		rules := slices.DeleteFunc(strings.Fields(rest), func(r string) bool {
			return r == "resetkeys" || r == "resetchannels" || r == "-@all"
		})
		if got := strings.Join(rules, " "); got != pushACL {
			t.Errorf("docs/operations.md gives config push's user\n%s\nthe fix of a refused push\n%s", got, pushACL)
		}
		return
	}
	t.Fatalf("docs/operations.md has no line starting with %q", prefix)
}

// TestPushACLFor: another prefix's key and channel replace fg's.
func TestPushACLFor(t *testing.T) {
	keys, err := KeysFor("px")
	if err != nil {
		t.Fatal(err)
	}
	got := pushACLFor(keys)
	if !strings.HasPrefix(got, "~px:config &px:config:changed +strlen ") || strings.Contains(got, "fg:") {
		t.Errorf("pushACLFor(px) = %q", got)
	}
}
