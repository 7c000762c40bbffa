package doctor

import (
	"os"
	"strings"
	"testing"
)

// TestDoctorACLMatchesDocs: the rules the fix of a refused read gives
// (doctorACL) are those of the doctor user docs/operations.md documents,
// which the cmd/floodgate ACL tests run doctor as. The fix gave the old
// line after the page added +command for go-redis's Cluster client.
func TestDoctorACLMatchesDocs(t *testing.T) {
	raw, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "ACL SETUSER doctor on >PASSWORD ~* "
	for line := range strings.SplitSeq(string(raw), "\n") {
		if rules, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			if rules != doctorACL {
				t.Errorf("docs/operations.md gives doctor's user\n%s\nthe fix of a refused read\n%s", rules, doctorACL)
			}
			return
		}
	}
	t.Fatalf("docs/operations.md has no line starting with %q", prefix)
}
