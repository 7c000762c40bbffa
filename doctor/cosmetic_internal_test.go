package doctor

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestSignedSeconds: an offset under half a second read "-0s".
func TestSignedSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{{-300 * time.Millisecond, "0s"}, {0, "0s"}, {5 * time.Second, "+5s"}, {-5 * time.Second, "-5s"}} {
		if got := signedSeconds(tc.d); got != tc.want {
			t.Errorf("signedSeconds(%v) = %q, want %q", tc.d, got, tc.want)
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
