package quota

import (
	"errors"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, whatever the machine has installed

	"github.com/floodgate-rl/floodgate"
)

func mustLoad(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	return loc
}

func TestPeriodAt(t *testing.T) {
	ny := mustLoad(t, "America/New_York")
	berlin := mustLoad(t, "Europe/Berlin")
	saoPaulo := mustLoad(t, "America/Sao_Paulo")
	plus530 := time.FixedZone("UTC+5:30", 5*3600+1800)
	utc := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	day := Calendar{Unit: Day}
	week := Calendar{Unit: Week}
	month := Calendar{Unit: Month}
	a31 := Calendar{Unit: AnchoredMonth, AnchorDay: 31}
	tests := []struct {
		name       string
		cal        Calendar
		at         string // RFC 3339
		start, end string // RFC 3339, compared as instants
		key        string
		hours      float64 // length, 0 = not checked
	}{
		{"day utc", day, "2026-12-01T10:00:00Z", "2026-12-01T00:00:00Z", "2026-12-02T00:00:00Z", "2026-12-01", 24},
		{"day starts at midnight exactly", day, "2026-12-02T00:00:00Z", "2026-12-02T00:00:00Z", "2026-12-03T00:00:00Z", "2026-12-02", 24},
		{"day last nanosecond", day, "2026-12-01T23:59:59.999999999Z", "2026-12-01T00:00:00Z", "2026-12-02T00:00:00Z", "2026-12-01", 24},
		{"jan 31 to feb 1", day, "2027-02-01T00:00:00Z", "2027-02-01T00:00:00Z", "2027-02-02T00:00:00Z", "2027-02-01", 24},
		{"feb 29 leap year", day, "2028-02-29T13:00:00Z", "2028-02-29T00:00:00Z", "2028-03-01T00:00:00Z", "2028-02-29", 24},
		{"new york spring forward: 23h day", Calendar{Unit: Day, Location: ny}, "2026-03-08T12:00:00Z", "2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z", "2026-03-08", 23},
		{"new york fall back: 25h day", Calendar{Unit: Day, Location: ny}, "2026-11-01T12:00:00Z", "2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z", "2026-11-01", 25},
		{"berlin spring forward", Calendar{Unit: Day, Location: berlin}, "2026-03-29T10:00:00Z", "2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z", "2026-03-29", 23},
		{"berlin fall back", Calendar{Unit: Day, Location: berlin}, "2026-10-25T10:00:00Z", "2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z", "2026-10-25", 25},
		{"sao paulo: the day before a skipped midnight is whole", Calendar{Unit: Day, Location: saoPaulo}, "2018-11-04T02:30:00Z", "2018-11-03T03:00:00Z", "2018-11-04T03:00:00Z", "2018-11-03", 24},
		{"sao paulo: a day whose midnight was skipped starts at 01:00", Calendar{Unit: Day, Location: saoPaulo}, "2018-11-04T03:00:00Z", "2018-11-04T03:00:00Z", "2018-11-05T02:00:00Z", "2018-11-04", 23},
		{"apia skipped december 30, 2011: the 29th ends when the 31st starts", Calendar{Unit: Day, Location: mustLoad(t, "Pacific/Apia")}, "2011-12-30T09:59:00Z", "2011-12-29T10:00:00Z", "2011-12-30T10:00:00Z", "2011-12-29", 24},
		{"new york tenant: utc december is still november", Calendar{Unit: Month, Location: ny}, "2026-12-01T03:00:00Z", "2026-11-01T04:00:00Z", "2026-12-01T05:00:00Z", "2026-11", 0},
		{"new york tenant: december starts at 05:00 utc", Calendar{Unit: Month, Location: ny}, "2026-12-01T05:00:00Z", "2026-12-01T05:00:00Z", "2027-01-01T05:00:00Z", "2026-12", 0},
		{"half-hour zone", Calendar{Unit: Day, Location: plus530}, "2026-12-01T20:00:00Z", "2026-12-01T18:30:00Z", "2026-12-02T18:30:00Z", "2026-12-02", 24},
		{"month", month, "2026-12-15T00:00:00Z", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z", "2026-12", 0},
		{"month february leap", month, "2028-02-29T23:59:59Z", "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z", "2028-02", 29 * 24},
		{"month berlin spans dst", Calendar{Unit: Month, Location: berlin}, "2026-03-15T00:00:00Z", "2026-02-28T23:00:00Z", "2026-03-31T22:00:00Z", "2026-03", 31*24 - 1},
		{"iso week thursday", week, "2026-12-03T08:00:00Z", "2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z", "2026-W49", 168},
		{"iso week sunday belongs to the week before", week, "2026-12-06T23:00:00Z", "2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z", "2026-W49", 168},
		{"iso week 53 across new year", week, "2027-01-01T12:00:00Z", "2026-12-28T00:00:00Z", "2027-01-04T00:00:00Z", "2026-W53", 168},
		{"iso week 1 of 2027", week, "2027-01-04T00:00:00Z", "2027-01-04T00:00:00Z", "2027-01-11T00:00:00Z", "2027-W01", 168},
		{"iso week with dst in new york", Calendar{Unit: Week, Location: ny}, "2026-11-04T12:00:00Z", "2026-11-02T05:00:00Z", "2026-11-09T05:00:00Z", "2026-W45", 168},
		{"iso week containing fall back", Calendar{Unit: Week, Location: ny}, "2026-10-30T12:00:00Z", "2026-10-26T04:00:00Z", "2026-11-02T05:00:00Z", "2026-W44", 169},
		{"anchor 31 in january", a31, "2027-02-10T00:00:00Z", "2027-01-31T00:00:00Z", "2027-02-28T00:00:00Z", "2027-01-31", 28 * 24},
		{"anchor 31 falls on feb 28", a31, "2027-03-01T00:00:00Z", "2027-02-28T00:00:00Z", "2027-03-31T00:00:00Z", "2027-02-28", 31 * 24},
		{"anchor 31 falls on feb 29 in a leap year", a31, "2028-02-29T00:00:00Z", "2028-02-29T00:00:00Z", "2028-03-31T00:00:00Z", "2028-02-29", 31 * 24},
		{"anchor 31 before the anchor in a long month", a31, "2027-03-30T23:59:59Z", "2027-02-28T00:00:00Z", "2027-03-31T00:00:00Z", "2027-02-28", 0},
		{"anchor 31 in april is the 30th", a31, "2027-04-30T00:00:00Z", "2027-04-30T00:00:00Z", "2027-05-31T00:00:00Z", "2027-04-30", 0},
		{"anchor 31 december to january", a31, "2027-01-05T00:00:00Z", "2026-12-31T00:00:00Z", "2027-01-31T00:00:00Z", "2026-12-31", 31 * 24},
		{"anchor 15", Calendar{Unit: AnchoredMonth, AnchorDay: 15}, "2026-12-14T23:00:00Z", "2026-11-15T00:00:00Z", "2026-12-15T00:00:00Z", "2026-11-15", 30 * 24},
		{"anchor 1 equals month", Calendar{Unit: AnchoredMonth, AnchorDay: 1}, "2026-12-14T00:00:00Z", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z", "2026-12-01", 0},
		{"anchor 30 in new york", Calendar{Unit: AnchoredMonth, AnchorDay: 30, Location: ny}, "2027-02-28T04:59:59Z", "2027-01-30T05:00:00Z", "2027-02-28T05:00:00Z", "2027-01-30", 0},
		{"anchor 30 in new york, feb 28 local evening", Calendar{Unit: AnchoredMonth, AnchorDay: 30, Location: ny}, "2027-03-01T04:59:59Z", "2027-02-28T05:00:00Z", "2027-03-30T04:00:00Z", "2027-02-28", 30*24 - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cal.Validate(); err != nil {
				t.Fatal(err)
			}
			at := utc(tt.at)
			got := tt.cal.PeriodAt(at)
			if !got.Start.Equal(utc(tt.start)) || !got.End.Equal(utc(tt.end)) || got.Key != tt.key {
				t.Fatalf("PeriodAt(%s) = [%s, %s) %q, want [%s, %s) %q", tt.at,
					got.Start.UTC().Format(time.RFC3339), got.End.UTC().Format(time.RFC3339), got.Key, tt.start, tt.end, tt.key)
			}
			if !got.Contains(at) {
				t.Fatalf("period %v does not contain %v", got, at)
			}
			if tt.hours != 0 {
				if h := got.End.Sub(got.Start).Hours(); h != tt.hours {
					t.Fatalf("period lasts %vh, want %vh", h, tt.hours)
				}
			}
		})
	}
}

// TestPeriodsPartitionTime walks 15 months in steps of 191 minutes in zones
// with daylight saving time (including one whose DST started at midnight,
// so that some local midnights do not exist) and checks that consecutive
// periods tile time with no gap or overlap.
func TestPeriodsPartitionTime(t *testing.T) {
	zones := []*time.Location{
		time.UTC,
		mustLoad(t, "America/New_York"),
		mustLoad(t, "Europe/Berlin"),
		mustLoad(t, "America/Sao_Paulo"), // DST began at 00:00 until 2019
		mustLoad(t, "Australia/Lord_Howe"),
		mustLoad(t, "Asia/Kathmandu"),
	}
	from := time.Date(2017, 9, 1, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(0, 15, 0)
	for _, loc := range zones {
		for _, cal := range []Calendar{
			{Unit: Day, Location: loc},
			{Unit: Week, Location: loc},
			{Unit: Month, Location: loc},
			{Unit: AnchoredMonth, AnchorDay: 29, Location: loc},
		} {
			t.Run(loc.String()+"/"+cal.Unit.String(), func(t *testing.T) {
				t.Parallel()
				var last Period
				for at := from; at.Before(to); at = at.Add(191 * time.Minute) {
					p := cal.PeriodAt(at)
					if !p.Contains(at) {
						t.Fatalf("PeriodAt(%v) = [%v, %v) does not contain it", at, p.Start, p.End)
					}
					if p.Key == last.Key && (!p.Start.Equal(last.Start) || !p.End.Equal(last.End)) {
						t.Fatalf("key %q names two periods: %v and %v", p.Key, last, p)
					}
					if last.Key != "" && p.Key != last.Key && !p.Start.Equal(last.End) {
						t.Fatalf("gap or overlap: %v then %v", last, p)
					}
					if next := cal.PeriodAt(p.End); !next.Start.Equal(p.End) {
						t.Fatalf("period after %v starts at %v", p, next.Start)
					}
					if prev := cal.Previous(p); !prev.End.Equal(p.Start) {
						t.Fatalf("period before %v ends at %v", p, prev.End)
					}
					last = p
				}
			})
		}
	}
}

func TestCalendarValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		cal  Calendar
	}{
		{"zero", Calendar{}},
		{"unknown unit", Calendar{Unit: 9}},
		{"anchor missing", Calendar{Unit: AnchoredMonth}},
		{"anchor 32", Calendar{Unit: AnchoredMonth, AnchorDay: 32}},
		{"anchor on month", Calendar{Unit: Month, AnchorDay: 3}},
	} {
		if err := tt.cal.Validate(); !errors.Is(err, floodgate.ErrInvalidPolicy) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidPolicy", tt.name, err)
		}
	}
	for _, s := range []string{"day", "weekly", "month", "anchored_month"} {
		if _, err := ParseUnit(s); err != nil {
			t.Errorf("ParseUnit(%q): %v", s, err)
		}
	}
	if _, err := ParseUnit("fortnight"); !errors.Is(err, floodgate.ErrInvalidPolicy) {
		t.Errorf("ParseUnit(fortnight) = %v", err)
	}
}

// FuzzPeriodAt checks the partition invariants for arbitrary instants,
// units, anchors and zones: the period contains the instant, its neighbours
// meet it exactly, and its key names only it.
func FuzzPeriodAt(f *testing.F) {
	zones := []string{"UTC", "America/New_York", "Europe/Berlin", "America/Sao_Paulo", "Pacific/Apia", "Australia/Lord_Howe", "Asia/Kathmandu"}
	f.Add(int64(1795046400), uint8(1), uint8(0), uint8(0))
	f.Add(int64(1541300400), uint8(1), uint8(0), uint8(3))
	f.Add(int64(1325239200), uint8(2), uint8(0), uint8(4))
	f.Add(int64(1830000000), uint8(4), uint8(31), uint8(1))
	f.Fuzz(func(t *testing.T, sec int64, unit, anchor, zone uint8) {
		sec %= 10_000_000_000 // about 1653..2286
		loc := mustLoad(t, zones[int(zone)%len(zones)])
		cal := Calendar{Unit: Unit(unit%4 + 1), Location: loc}
		if cal.Unit == AnchoredMonth {
			cal.AnchorDay = int(anchor%31) + 1
		}
		at := time.Unix(sec, 0)
		p := cal.PeriodAt(at)
		if !p.Contains(at) {
			t.Fatalf("%v: PeriodAt(%v) = [%v, %v)", cal.Unit, at, p.Start, p.End)
		}
		next := cal.PeriodAt(p.End)
		if !next.Start.Equal(p.End) || next.Key == p.Key {
			t.Fatalf("%v: after %v comes %v", cal.Unit, p, next)
		}
		if prev := cal.Previous(p); !prev.End.Equal(p.Start) || prev.Key == p.Key {
			t.Fatalf("%v: before %v comes %v", cal.Unit, p, prev)
		}
		if again := cal.PeriodAt(p.Start); again != p {
			t.Fatalf("%v: PeriodAt(start) = %v, want %v", cal.Unit, again, p)
		}
	})
}
