package doctor

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRangeSeconds: a Date header's range is written to the hundredth,
// rounded outwards, and never "-0.00s" (an offset under half a second
// read "-0s" before ranges).
func TestRangeSeconds(t *testing.T) {
	for _, tc := range []struct {
		d         time.Duration
		low, high string
	}{
		{0, "0.00s", "0.00s"},
		{-3 * time.Millisecond, "-0.01s", "0.00s"},
		{3 * time.Millisecond, "0.00s", "+0.01s"},
		{-1600 * time.Millisecond, "-1.60s", "-1.60s"},
		{2604 * time.Millisecond, "+2.60s", "+2.61s"},
		{-5 * time.Second, "-5.00s", "-5.00s"},
	} {
		if got := lowSecs(tc.d); got != tc.low {
			t.Errorf("lowSecs(%v) = %q, want %q", tc.d, got, tc.low)
		}
		if got := highSecs(tc.d); got != tc.high {
			t.Errorf("highSecs(%v) = %q, want %q", tc.d, got, tc.high)
		}
	}
}

// TestReportIndentsMultilineText: a Cluster's /readyz error spans lines;
// its continuation lines started at column 0, breaking the report.
func TestReportIndentsMultilineText(t *testing.T) {
	rep := &Report{Checks: []Check{{Group: GroupInstances, Name: "ready", Status: Fail, Summary: "one\ntwo",
		Evidence: []string{"a: degraded: x\ny"}, Fix: "f\ng", Read: "r"}}}
	var b strings.Builder
	if err := rep.WriteText(&b, false); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line == "two" || line == "y" || line == "g" {
			t.Fatalf("line %q not indented:\n%s", line, b.String())
		}
	}
}

// TestUnreadFixForADownInstance: for an instance that refused the
// connection, the clocks, breakers and fallback checks advised giving
// its main address (--addr); it is down, and the fix now says so.
func TestUnreadFixForADownInstance(t *testing.T) {
	down := &instance{url: "http://127.0.0.1:1", err: errors.New("connection refused")}
	if fix := unreadFix([]*instance{down}); !strings.Contains(fix, "did not answer at all") || strings.Contains(fix, "--addr") {
		t.Fatalf("fix %q", fix)
	}
	admin := &instance{url: "http://127.0.0.1:2", readyStatus: 200, metrics404: true, err: errMetrics404}
	if fix := unreadFix([]*instance{admin}); fix != metricsFix {
		t.Fatalf("fix %q", fix)
	}
}
