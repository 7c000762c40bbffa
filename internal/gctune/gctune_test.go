package gctune

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		live, floor uint64
		want        int
	}{
		{0, 64 * mib, MaxPercent},
		{1 * mib, 64 * mib, MaxPercent},   // 6,300 % capped
		{8 * mib, 64 * mib, 700},          // goal 8 × 8 = 64
		{10 * mib, 64 * mib, 540},         // 10 × 6.4 = 64
		{32 * mib, 64 * mib, 100},         // twice the live heap reaches the floor
		{200 * mib, 64 * mib, 100},        // above the floor: the default
		{63 * mib, 64 * mib, 100},         // never below 100
		{5*mib + 1, 64 * mib, MaxPercent}, // (64/5 - 1) × 100 > 1000
	}
	for _, tt := range tests {
		if got := Percent(tt.live, tt.floor); got != tt.want {
			t.Errorf("Percent(%d, %d) = %d, want %d", tt.live, tt.floor, got, tt.want)
		}
		if p := Percent(tt.live, tt.floor); tt.live > 0 && p < MaxPercent && tt.live+tt.live*uint64(p)/100 < tt.floor {
			t.Errorf("Percent(%d, %d) = %d: goal below the floor", tt.live, tt.floor, p)
		}
	}
}

// The tuner sets a high percentage for this test binary's small heap
// after collections, and Stop restores the previous one.
func TestStartStop(t *testing.T) {
	t.Setenv("GOGC", "")
	before := debug.SetGCPercent(100)
	debug.SetGCPercent(before)
	tu := Start(1 << 40) // far above any live heap here: the cap applies
	if tu == nil {
		t.Fatal("Start returned nil")
	}
	if got := tu.Current(); got != MaxPercent {
		t.Errorf("after Start: %d, want %d", got, MaxPercent)
	}
	// Force the percentage elsewhere; a collection's finalizer sets it back.
	debug.SetGCPercent(150)
	tu.mu.Lock()
	tu.last = 150
	tu.mu.Unlock()
	deadline := time.Now().Add(20 * time.Second)
	for tu.Current() != MaxPercent && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if got := tu.Current(); got != MaxPercent {
		t.Fatalf("after collections: %d, want %d (the finalizer did not re-arm)", got, MaxPercent)
	}
	if got := debug.SetGCPercent(MaxPercent); got != MaxPercent {
		t.Errorf("runtime percentage %d, want %d", got, MaxPercent)
	}
	tu.Stop()
	if got := debug.SetGCPercent(before); got != before {
		t.Errorf("after Stop: %d, want the previous %d", got, before)
	}
	tu.Stop() // twice is fine
	var nilTuner *Tuner
	nilTuner.Stop()
}

func TestStartOff(t *testing.T) {
	if Start(0) != nil {
		t.Error("floor 0: want nil")
	}
	t.Setenv("GOGC", "200")
	if Start(64<<20) != nil {
		t.Error("GOGC set: want nil")
	}
}
