package doctor_test

import (
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestSentinelProbeFixes: the fix of a Sentinel deployment doctor cannot
// reach says what to do for the diagnosis made. An outside walk got one
// generic fix ("act on the diagnosis above (the sentinel addresses,
// --redis-master, the sentinels' password), check that the primary they
// name is up ...") with every sentinel stopped, and with the primary
// they name down.
func TestSentinelProbeFixes(t *testing.T) {
	s := redistest.StartSentinel(t)
	opts := doctor.Options{Redis: config.Redis{SentinelAddrs: s.SentinelAddrs, SentinelMaster: s.MasterName}, Prefix: "pf"}
	// Without a replica the sentinels cannot replace the primary: they
	// keep naming it.
	s.Replica.Stop()
	s.Primary.Stop()
	got := unreachable(t, opts)
	for _, want := range []string{"but that primary does not", "fix: a failover may be under way", "run doctor again in a few seconds"} {
		if !strings.Contains(got, want) {
			t.Errorf("the primary down: Redis/reachable %q does not say %q", got, want)
		}
	}
	stopSentinels(s)
	got = unreachable(t, opts)
	for _, want := range []string{"no sentinel answers", "fix: start the sentinels (or fix their addresses", "a failover is not followed"} {
		if !strings.Contains(got, want) {
			t.Errorf("the sentinels down: Redis/reachable %q does not say %q", got, want)
		}
	}
	if strings.Contains(got, "act on the diagnosis above") {
		t.Errorf("the sentinels down: the generic fix: %q", got)
	}
}

// stopSentinels stops every sentinel of s.
func stopSentinels(s *redistest.Sentinel) {
	for _, n := range s.Sentinels {
		n.Stop()
	}
}
