package suite

import (
	"os"
	"testing"
)

func TestParseProcStat(t *testing.T) {
	busy, steal, total, err := parseProcStat("cpu  100 5 30 800 7 2 3 50 9 0\ncpu0 1 2 3 4 5 6 7 8 9 0\n")
	if err != nil {
		t.Fatal(err)
	}
	if busy != 135 || steal != 50 || total != 997 {
		t.Fatalf("busy, steal, total = %d, %d, %d; want 135, 50, 997", busy, steal, total)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8", "cpu 1 2 3", "cpu 1 2 x 4 5 6 7 8"} {
		if _, _, _, err := parseProcStat(bad); err == nil {
			t.Errorf("parseProcStat(%q): no error", bad)
		}
	}
}

func TestParsePidStat(t *testing.T) {
	// A command name with a space and a parenthesis, as the kernel writes it.
	got, err := parsePidStat("42 (redis (x) srv) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 4 0 12345 0 0")
	if err != nil {
		t.Fatal(err)
	}
	if got != 325 {
		t.Fatalf("utime+stime = %d, want 325", got)
	}
	for _, bad := range []string{"42 redis S 1", "42 (redis) S 1 2 3", "42 (r) S 1 42 42 0 -1 4 1 0 0 0 x 75"} {
		if _, err := parsePidStat(bad); err == nil {
			t.Errorf("parsePidStat(%q): no error", bad)
		}
	}
}

// TestCPUSharesOfThisProcess samples this very process as "the server":
// the shares are fractions, and burning CPU here does not count as other
// work.
func TestCPUSharesOfThisProcess(t *testing.T) {
	a, ok := takeCPUSample(os.Getpid())
	if !ok {
		t.Skip("no /proc on this system")
	}
	// Burn CPU until the process's own time moves by a tick or more.
	var b cpuSample
	x := 0
	for round := 0; ; round++ {
		for i := range 10_000_000 {
			x ^= i
		}
		if b, ok = takeCPUSample(os.Getpid()); !ok {
			t.Fatal("second sample failed")
		}
		if b.own > a.own {
			break
		}
		if round == 1000 {
			t.Fatalf("own CPU did not grow after %d rounds of work: %d → %d", round, a.own, b.own)
		}
	}
	_ = x
	other, steal, ok := cpuShares(a, b)
	if ok && (other < 0 || other > 1 || steal < 0 || steal > 1) {
		t.Fatalf("shares out of range: other %v, steal %v", other, steal)
	}
}

// TestCPUSharesGoingBackwards: a counter that went backwards makes the
// shares unknown, never a wrapped-around share.
func TestCPUSharesGoingBackwards(t *testing.T) {
	a := cpuSample{busy: 100, steal: 10, total: 1000, own: 50}
	for _, b := range []cpuSample{
		{busy: 200, steal: 5, total: 2000, own: 60},  // steal back
		{busy: 90, steal: 20, total: 2000, own: 60},  // busy back
		{busy: 200, steal: 20, total: 900, own: 60},  // total back
		{busy: 200, steal: 20, total: 1000, own: 60}, // no time
		{busy: 200, steal: 20, total: 2000, own: 40}, // own back
	} {
		if other, steal, ok := cpuShares(a, b); ok {
			t.Errorf("cpuShares(%+v, %+v) = %v, %v, ok", a, b, other, steal)
		}
	}
	other, steal, ok := cpuShares(a, cpuSample{busy: 600, steal: 110, total: 2000, own: 150})
	if !ok || other != 0.4 || steal != 0.1 {
		t.Errorf("shares %v, %v, %v; want 0.4, 0.1, true", other, steal, ok)
	}
}
