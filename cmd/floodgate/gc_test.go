package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestStartGC(t *testing.T) {
	for _, bad := range []int{-1, 1<<20 + 1} {
		if _, err := startGC(bad); err == nil || !strings.Contains(err.Error(), "--gc-heap-floor-mib") {
			t.Errorf("%d: err = %v, want one naming the flag", bad, err)
		}
	}
	t.Setenv("GOGC", "")
	before := debug.SetGCPercent(100)
	debug.SetGCPercent(before)
	stop, err := startGC(0)
	if err != nil {
		t.Fatal(err)
	}
	stop() // off: nothing to stop
	if got := debug.SetGCPercent(before); got != before {
		t.Errorf("floor 0 changed the GC percentage to %d", got)
	}
	stop, err = startGC(1024) // far above this test binary's live heap
	if err != nil {
		t.Fatal(err)
	}
	if got := debug.SetGCPercent(-1); got <= 100 {
		t.Errorf("with a 1 GiB floor the GC percentage is %d, want above 100", got)
	}
	debug.SetGCPercent(before)
	stop()
}

func TestGCFlagRefused(t *testing.T) {
	for _, cmd := range []string{"serve", "loadtest", "envoy-compat"} {
		if code, out := runCLI(t, cmd, "--gc-heap-floor-mib", "-5"); code == 0 || !strings.Contains(out, "--gc-heap-floor-mib -5") {
			t.Errorf("%s: exit %d, %q; want a refusal naming the flag", cmd, code, out)
		}
	}
}
