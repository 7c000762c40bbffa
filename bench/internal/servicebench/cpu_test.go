package servicebench

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParsePidStat(t *testing.T) {
	// Fields after the name: state ppid pgrp session tty tpgid flags minflt
	// cminflt majflt cmajflt utime stime cutime cstime ...
	tail := " S 1 2 3 0 -1 4194560 100 0 0 0 250 37 9 9 20 0 5 0"
	tests := []struct {
		name, stat string
		want       time.Duration
		err        string
	}{
		{"plain", "1234 (redis-server)" + tail, 287 * clockTick, ""},
		{"name with spaces and parentheses", "1234 (a) b (c) d)" + tail, 287 * clockTick, ""},
		{"no name", "1234 redis-server" + tail, 0, "no command name"},
		{"short", "1234 (x) S 1 2 3", 0, "fields after the command name"},
		{"not a number", "1234 (x) S 1 2 3 0 -1 4194560 100 0 0 0 25x 37 9 9", 0, "field 14"},
	}
	for _, tt := range tests {
		got, err := parsePidStat(tt.stat)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: %v, %v; want an error containing %q", tt.name, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: %v, %v; want %v", tt.name, got, err, tt.want)
		}
	}
}

func TestParseMachineStat(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	got, err := parseMachineStat("cpu  100 5 40 9000 30 2 3 7 0 0\ncpu0 50 2 20 4500 15 1 1 3 0 0\n")
	if want := (100 + 5 + 40 + 2 + 3) * clockTick; err != nil || got != want {
		t.Errorf("busy %v, %v; want %v", got, err, want)
	}
	for _, bad := range []string{"", "intr 1 2 3", "cpu 1 2 3", "cpu 1 2 x 4 5 6 7 8"} {
		if _, err := parseMachineStat(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// The readers work on this machine's /proc, on this process.
func TestSampleCPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	a, err := sampleCPU(os.Getpid(), os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for i := range 20_000_000 { // some CPU time for the counters to see
		x += i % 7
	}
	b, err := sampleCPU(os.Getpid(), os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	c := cpuBetween(a, b)
	// Service and Redis read the same process a moment apart, so a
	// clock tick can land between the two reads of either sample.
	diff := c.Redis - c.Service
	if c.Service < 0 || c.Redis < 0 || diff > 3*clockTick || diff < -3*clockTick || c.Loadgen <= 0 || c.Other < 0 || x < 0 {
		t.Errorf("CPU %+v from %+v to %+v", c, a, b)
	}
	if _, err := procCPU(-1); err == nil {
		t.Error("pid -1: no error")
	}
}

func TestCPUBetween(t *testing.T) {
	a := cpuSample{service: time.Second, redis: time.Second, loadgen: time.Second, machine: 10 * time.Second}
	b := cpuSample{service: 3 * time.Second, redis: 2 * time.Second, loadgen: 2 * time.Second, machine: 15 * time.Second}
	if got, want := cpuBetween(a, b), (CPU{Service: 2 * time.Second, Redis: time.Second, Loadgen: time.Second, Other: time.Second}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	// The tick-granular machine counter may lag the getrusage one: other
	// stays at zero rather than going negative.
	b.machine = 13 * time.Second
	if got := cpuBetween(a, b).Other; got != 0 {
		t.Errorf("other %v, want 0", got)
	}
}
