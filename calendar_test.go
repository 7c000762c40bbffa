package floodgate_test

import (
	"fmt"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, whatever the machine has installed

	"github.com/floodgate-rl/floodgate"
)

// firstInstant returns the first instant whose date in loc is date or a
// later one, found by reading loc's clock every 15 minutes from well
// before the date's UTC midnight, then every minute over the last 15
// minutes (the zones' clock changes fall on whole minutes).
func firstInstant(loc *time.Location, date time.Time) time.Time {
	y, m, d := date.Date()
	notBefore := func(t time.Time) bool {
		ty, tm, td := t.In(loc).Date()
		return !time.Date(ty, tm, td, 0, 0, 0, 0, time.UTC).Before(time.Date(y, m, d, 0, 0, 0, 0, time.UTC))
	}
	t := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Add(-27 * time.Hour)
	for !notBefore(t) {
		t = t.Add(15 * time.Minute)
	}
	for u := t.Add(-15 * time.Minute); ; u = u.Add(time.Minute) {
		if notBefore(u) {
			return u
		}
	}
}

// TestPeriodStartsAtFirstInstantOfItsDate checks, in zones whose clocks
// repeated or skipped local midnight, that every period around each clock
// change starts at the first instant carrying its first date (found by
// reading the clock, not by the calendar's arithmetic), and that the
// periods tile time. Amman's clocks went back from 01:00 to 00:00 on
// 2021-10-29: the first 00:00-01:00 carries the 29th and was billed to
// the 28th.
func TestPeriodStartsAtFirstInstantOfItsDate(t *testing.T) {
	amman, err := time.LoadLocation("Asia/Amman")
	if err != nil {
		t.Fatal(err)
	}
	p := floodgate.Calendar{Unit: floodgate.PeriodDay, Location: amman}.PeriodAt(time.Date(2021, 10, 28, 21, 30, 0, 0, time.UTC))
	if got, want := fmt.Sprintf("%s [%s, %s)", p.Key, p.Start.In(amman).Format(time.RFC3339), p.End.In(amman).Format(time.RFC3339)),
		"2021-10-29 [2021-10-29T00:00:00+03:00, 2021-10-30T00:00:00+02:00)"; got != want {
		t.Errorf("Amman, 2021-10-28T21:30Z (local 00:30 on the 29th, before the clocks went back): got %s, want %s", got, want)
	}

	zones := []string{
		"Asia/Amman", "Asia/Gaza", "Asia/Hebron", "Asia/Jerusalem", // back from 01:00 to 00:00
		"America/Goose_Bay", "America/Moncton", // back from 00:01 to 23:01 until 2010
		"Asia/Colombo", "Asia/Chita", "Asia/Magadan", // back by 30 minutes or 2 hours into the day
		"Antarctica/Casey", "Antarctica/Vostok", // back by 3 hours, across midnight
		"America/Sao_Paulo", "America/Havana", // midnight skipped
		"Pacific/Apia", // 2011-12-30 skipped
		"Europe/Berlin", "America/New_York",
	}
	from := time.Date(1971, 1, 1, 0, 0, 0, 0, time.UTC)
	to := time.Date(2041, 1, 1, 0, 0, 0, 0, time.UTC)
	changed := 0 // days whose first instant is not time.Date's midnight
	for _, name := range zones {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatal(err)
		}
		for z := from.In(loc); z.Before(to); {
			_, next := z.ZoneBounds()
			if next.IsZero() {
				break
			}
			if !next.After(z) {
				// ZoneBounds stalls near the end of a leap year of a
				// zone's yearly rule; no clock changes there.
				z = z.Add(24 * time.Hour)
				continue
			}
			z = next
			// The dates around the clock change at z.
			y, m, d := z.In(loc).Date()
			for k := -2; k <= 2; k++ {
				date := time.Date(y, m, d+k, 0, 0, 0, 0, time.UTC)
				first := firstInstant(loc, date)
				if !first.Equal(time.Date(date.Year(), date.Month(), date.Day(), 0, 0, 0, 0, loc)) {
					changed++
				}
				fy, fm, fd := first.In(loc).Date()
				if fy != date.Year() || fm != date.Month() || fd != date.Day() {
					continue // a skipped date: no period starts on it
				}
				cals := []floodgate.Calendar{
					{Unit: floodgate.PeriodDay, Location: loc},
					{Unit: floodgate.PeriodAnchoredMonth, AnchorDay: date.Day(), Location: loc},
				}
				if date.Weekday() == time.Monday {
					cals = append(cals, floodgate.Calendar{Unit: floodgate.PeriodWeek, Location: loc})
				}
				if date.Day() == 1 {
					cals = append(cals, floodgate.Calendar{Unit: floodgate.PeriodMonth, Location: loc})
				}
				for _, cal := range cals {
					got := cal.PeriodAt(first)
					before := cal.PeriodAt(first.Add(-time.Nanosecond))
					if !got.Start.Equal(first) || !before.End.Equal(first) {
						t.Errorf("%s %s %s: period %s starts at %s after %s ending at %s, want both at %s (the first instant of the date)",
							name, cal.Unit, date.Format(time.DateOnly), got.Key, got.Start.In(loc).Format(time.RFC3339Nano),
							before.Key, before.End.In(loc).Format(time.RFC3339Nano), first.In(loc).Format(time.RFC3339Nano))
					}
					if s, e := cal.BoundsMicros(first.UnixMicro()); s != got.Start.UnixMicro() || e != got.End.UnixMicro() {
						t.Errorf("%s %s %s: BoundsMicros gives [%d, %d), PeriodAt [%d, %d)", name, cal.Unit, date.Format(time.DateOnly),
							s, e, got.Start.UnixMicro(), got.End.UnixMicro())
					}
					if after := cal.PeriodAt(got.End); !after.Start.Equal(got.End) {
						t.Errorf("%s %s: period %s ends at %s, the next (%s) starts at %s", name, cal.Unit, got.Key,
							got.End.In(loc).Format(time.RFC3339Nano), after.Key, after.Start.In(loc).Format(time.RFC3339Nano))
					}
				}
			}
		}
	}
	if changed == 0 {
		t.Fatal("no date whose first instant is not its time.Date midnight: the zones' data lacks the clock changes this test is about")
	}
}
