//go:build unix

package redistest

import (
	"syscall"
	"testing"
)

// FreezeSentinels stops every sentinel of s (SIGSTOP: their connections
// stay open and nothing is answered, as a hung host's) and returns a
// function that resumes them (SIGCONT). They are resumed in t.Cleanup
// too, before they are stopped, if the test has not done it.
func (s *Sentinel) FreezeSentinels(t testing.TB) (thaw func()) {
	t.Helper()
	thaw = func() {
		for _, n := range s.Sentinels {
			_ = syscall.Kill(n.Pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw)
	for _, n := range s.Sentinels {
		if err := syscall.Kill(n.Pid, syscall.SIGSTOP); err != nil {
			thaw()
			t.Fatalf("redistest: stopping sentinel %s (pid %d): %v", n.Addr, n.Pid, err)
		}
	}
	return thaw
}
