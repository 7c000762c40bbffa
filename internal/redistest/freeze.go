package redistest

import (
	"testing"

	"github.com/floodgate-rl/floodgate/internal/posix"
)

// FreezeSentinels stops every sentinel of s (SIGSTOP: their connections
// stay open and nothing is answered, as a hung host's) and returns a
// function that resumes them (SIGCONT). They are resumed in t.Cleanup
// too, before they are stopped, if the test has not done it.
func (s *Sentinel) FreezeSentinels(t testing.TB) (thaw func()) {
	t.Helper()
	thaw = func() {
		for _, n := range s.Sentinels {
			_ = posix.Kill(n.Pid, posix.SIGCONT)
		}
	}
	t.Cleanup(thaw)
	for _, n := range s.Sentinels {
		if err := posix.Kill(n.Pid, posix.SIGSTOP); err != nil {
			thaw()
			t.Fatalf("redistest: stopping sentinel %s (pid %d): %v", n.Addr, n.Pid, err)
		}
	}
	return thaw
}
