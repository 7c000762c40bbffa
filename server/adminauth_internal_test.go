package server

import (
	"testing"
	"time"
)

// TestAdminGuardBoundHoldsAcrossWindowEdges: one network guessing a wrong
// token every 10 s has at most AdminFailureLimit of its guesses compared
// within any AdminFailureWindow, also when the first failures bunch just
// before a 15-minute boundary. (A sliding window counter, which the guard
// used, compared 20 in the 15 minutes from 10 failures at 04:44:30.)
func TestAdminGuardBoundHoldsAcrossWindowEdges(t *testing.T) {
	now := time.Date(2026, 12, 4, 4, 44, 30, 0, time.UTC)
	g, err := newAdminGuard(func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	var compared []time.Time
	wrong := func() bool { compared = append(compared, now); return false }
	// Ten failures in the last 30 s of a 15-minute window.
	for range AdminFailureLimit {
		if _, blocked, _ := g.authenticate("198.51.100.7", wrong); blocked {
			t.Fatalf("guess at %s blocked before %d failures", now.Format(time.TimeOnly), AdminFailureLimit)
		}
		now = now.Add(time.Second)
	}
	// Then a guess every 10 s for half an hour.
	for end := now.Add(30 * time.Minute); now.Before(end); now = now.Add(10 * time.Second) {
		_, blocked, wait := g.authenticate("198.51.100.7", wrong)
		if blocked && wait <= 0 {
			t.Fatalf("blocked at %s without a wait", now.Format(time.TimeOnly))
		}
	}
	for i := range compared {
		n := 0
		for _, c := range compared[i:] {
			if c.Sub(compared[i]) < AdminFailureWindow {
				n++
			}
		}
		if n > AdminFailureLimit {
			t.Fatalf("%d wrong tokens compared within %s from %s, want at most %d", n, AdminFailureWindow, compared[i].Format(time.TimeOnly), AdminFailureLimit)
		}
	}
	if len(compared) <= AdminFailureLimit {
		t.Fatalf("only %d guesses compared in 30 minutes: the failures never aged out", len(compared))
	}
}
