package server

import (
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/sentinelfollow"
)

// TestSentinelsReportTellsEachState: /readyz's sentinels block says what
// each state of the Follower means for new connections, and nothing it
// does not know. A review found "no majority of the sentinels answers:
// new connections go on to the primary they last named" with two of
// three answering and no primary left (forgotten after a majority
// answered that they do not monitor the master, then one stopped), and
// the same warning before the first question to the sentinels had
// ended, a moment after the start.
func TestSentinelsReportTellsEachState(t *testing.T) {
	for _, c := range []struct {
		name        string
		st          sentinelfollow.Status
		warning     string // prefix; "" for none
		notAskedYet bool
	}{
		{"not asked yet", sentinelfollow.Status{Sentinels: 3}, sentinelsNotAsked, true},
		{"majority", sentinelfollow.Status{Asked: true, Sentinels: 3, Answering: 3, Majority: true, Primary: "10.0.0.1:6379"}, "", false},
		{"silent, a primary named before", sentinelfollow.Status{Asked: true, Sentinels: 3, Primary: "10.0.0.1:6379"}, noSentinelMajority, false},
		{"two answer, no majority names the primary", sentinelfollow.Status{Asked: true, Sentinels: 3, Answering: 2, Primary: "10.0.0.1:6379"}, noSentinelMajority, false},
		{"no primary to go on with", sentinelfollow.Status{Asked: true, Sentinels: 3, Answering: 2}, noSentinelPrimary, false},
		{"unknown master", sentinelfollow.Status{Asked: true, Sentinels: 3, Answering: 3, UnknownMaster: true}, `a majority of the sentinels answer that they do not monitor master "m"`, false},
	} {
		r := sentinelsReport(c.st, "m")
		if c.warning == "" && r.Warning != "" || !strings.HasPrefix(r.Warning, c.warning) {
			t.Errorf("%s: warning %q, want %q", c.name, r.Warning, c.warning)
		}
		if r.NotAskedYet != c.notAskedYet {
			t.Errorf("%s: not_asked_yet %v, want %v", c.name, r.NotAskedYet, c.notAskedYet)
		}
		if r.Answering*2 > r.Configured && strings.Contains(r.Warning, "sentinels answers") {
			t.Errorf("%s: %d of %d answering, and the warning says no majority answers: %q", c.name, r.Answering, r.Configured, r.Warning)
		}
		if r.Primary == "" && strings.Contains(r.Warning, "last named") {
			t.Errorf("%s: the warning names a primary they last named while there is none: %q", c.name, r.Warning)
		}
	}
}
