package floodgate_test

import (
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/memstore"
)

// TestLimiterKeyFollowsPeriods checks the Limiter's quota keys against
// algo.KeyAt when consecutive calls cross period boundaries, go back to an
// earlier period, and alternate calendars: the limiter remembers the last
// period it built a key for, and must never reuse it outside that period
// or for another calendar.
func TestLimiterKeyFollowsPeriods(t *testing.T) {
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var now time.Time
	l, err := floodgate.New(st, floodgate.Options{Prefix: "p", Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	var ps []floodgate.Policy
	for _, cal := range []floodgate.Calendar{
		{Unit: floodgate.PeriodMonth},
		{Unit: floodgate.PeriodMonth, Location: ny},
		{Unit: floodgate.PeriodDay},
		{Unit: floodgate.PeriodAnchoredMonth, AnchorDay: 31},
	} {
		p, err := floodgate.NewQuota("q", 100, cal)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	end := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	var times []time.Time
	for _, d := range []time.Duration{-time.Microsecond, 0, -time.Hour, 5 * time.Hour, 4*time.Hour + 59*time.Minute, 5*time.Hour + time.Microsecond, -40 * 24 * time.Hour} {
		times = append(times, end.Add(d))
	}
	for _, p := range ps {
		for _, at := range times { // one calendar, crossing boundaries back and forth
			now = at
			if got, want := l.Key(p, "u"), algo.KeyAt("p", p, "u", at.UnixMicro()); got != want {
				t.Errorf("%v at %v: key %q, want %q", p.Calendar, at, got, want)
			}
		}
	}
	for _, at := range times { // calendars alternating at each instant
		for _, p := range ps {
			now = at
			if got, want := l.Key(p, "u"), algo.KeyAt("p", p, "u", at.UnixMicro()); got != want {
				t.Errorf("%v at %v: key %q, want %q", p.Calendar, at, got, want)
			}
		}
	}
}
