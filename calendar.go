package floodgate

import (
	"fmt"
	"time"
)

// PeriodUnit is the length of a quota period. The zero value is invalid.
type PeriodUnit uint8

// The period units. Every period starts and ends at a local midnight of the
// calendar's Location, so a day lasts 23 or 25 hours when daylight saving
// time starts or ends during it.
const (
	// PeriodDay periods run from one local midnight to the next. Key: "2026-12-01".
	PeriodDay PeriodUnit = iota + 1
	// PeriodWeek periods are ISO 8601 weeks, Monday 00:00 to the next Monday
	// 00:00. Key: the ISO week, "2026-W49" (the ISO year may differ from
	// the calendar year around New Year: 2027-01-01 is in "2026-W53").
	PeriodWeek
	// PeriodMonth periods are calendar months, the 1st 00:00 to the next 1st
	// 00:00. Key: "2026-12".
	PeriodMonth
	// PeriodAnchoredMonth periods are monthly billing cycles starting on
	// Calendar.AnchorDay at 00:00, or on the month's last day in months
	// too short to have that day: with anchor 31 the periods start on Jan
	// 31, Feb 28 (29 in leap years), Mar 31, Apr 30... Key: the start date,
	// "2026-02-28".
	PeriodAnchoredMonth
)

var unitNames = [...]string{PeriodDay: "day", PeriodWeek: "week", PeriodMonth: "month", PeriodAnchoredMonth: "anchored_month"}

// String returns the unit's snake_case name.
func (u PeriodUnit) String() string {
	if u >= PeriodDay && int(u) < len(unitNames) {
		return unitNames[u]
	}
	return fmt.Sprintf("PeriodUnit(%d)", uint8(u))
}

// ParsePeriodUnit returns the unit named s (its String form; "monthly", "daily"
// and "weekly" are accepted too).
func ParsePeriodUnit(s string) (PeriodUnit, error) {
	switch s {
	case "day", "daily":
		return PeriodDay, nil
	case "week", "weekly":
		return PeriodWeek, nil
	case "month", "monthly":
		return PeriodMonth, nil
	case "anchored_month":
		return PeriodAnchoredMonth, nil
	}
	return 0, fmt.Errorf("%w: unknown quota period unit %q (want day, week, month or anchored_month)", ErrInvalidPolicy, s)
}

// Calendar cuts time into calendar periods (for quotas: billing days,
// weeks and months). It is a plain value; the zero
// value is invalid (Unit is required).
type Calendar struct {
	// Unit is the period length.
	Unit PeriodUnit
	// Location is the time zone whose local midnights bound the periods,
	// e.g. time.LoadLocation("America/New_York") for a tenant billed in New
	// York. nil means UTC.
	Location *time.Location
	// AnchorDay is, for PeriodAnchoredMonth, the day of the month (1..31) each
	// period starts on, typically the subscription day. Other units
	// require zero.
	AnchorDay int
}

// Validate reports, wrapped in ErrInvalidPolicy, why c cannot cut
// time into periods.
func (c Calendar) Validate() error {
	if msg := c.problem(); msg != "" {
		return fmt.Errorf("%w: %s", ErrInvalidPolicy, msg)
	}
	return nil
}

// problem says why c cannot cut time into periods, or returns "".
func (c Calendar) problem() string {
	if c.Unit < PeriodDay || c.Unit > PeriodAnchoredMonth {
		return fmt.Sprintf("quota calendar: unknown unit %d (want day, week, month or anchored_month)", c.Unit)
	}
	if c.Unit == PeriodAnchoredMonth {
		if c.AnchorDay < 1 || c.AnchorDay > 31 {
			return fmt.Sprintf("quota calendar: anchor day %d out of range 1..31", c.AnchorDay)
		}
	} else if c.AnchorDay != 0 {
		return fmt.Sprintf("quota calendar: anchor day applies to anchored_month only, got %d for %s", c.AnchorDay, c.Unit)
	}
	return ""
}

// Period is one concrete quota period.
type Period struct {
	// Start is the first instant of the period, a local midnight in the
	// calendar's Location, e.g. 2026-12-01T00:00:00-05:00.
	Start time.Time
	// End is the first instant after the period (the next period's Start).
	End time.Time
	// Key names the period in storage keys: "2026-12-01" for a day,
	// "2026-W49" for a week, "2026-12" for a month, the start date for an
	// anchored month.
	Key string
}

// Contains reports whether t lies in [Start, End).
func (p Period) Contains(t time.Time) bool { return !t.Before(p.Start) && t.Before(p.End) }

// civil is a calendar date without a time zone. Its fields may be out of
// range (day 0, month 13); time.Date normalizes them.
type civil struct {
	y int
	m time.Month
	d int
}

func civilOf(t time.Time) civil {
	y, m, d := t.Date()
	return civil{y, m, d}
}

// norm returns the date normalized (day 32 of January is February 1).
func (c civil) norm() civil { return civilOf(time.Date(c.y, c.m, c.d, 12, 0, 0, 0, time.UTC)) }

func (c civil) addDays(n int) civil { return civil{c.y, c.m, c.d + n}.norm() }

func (c civil) before(o civil) bool {
	if c.y != o.y {
		return c.y < o.y
	}
	if c.m != o.m {
		return c.m < o.m
	}
	return c.d < o.d
}

// midnight returns the first instant of the date in loc, or of the dates
// after it when loc skipped it (as Apia skipped 2011-12-30). time.Date picks
// one instant for a local midnight, which is the first of the date only
// when the clocks do not change near it: a change can skip midnight (as
// in São Paulo until 2019; the day then starts when the clocks jump, which
// is midnight in the offset in force before the jump) or repeat it (as in
// Amman on 2021-10-29, whose clocks went back from 01:00 to 00:00; the day
// starts at the first 00:00, in the offset in force before the change).
// Either way the first instant of the date is its midnight in one of the
// offsets in force around it, or a clock change that jumps from an
// earlier date past its 00:00: the earliest of those that carries the
// date or a later one.
func (c civil) midnight(loc *time.Location) time.Time {
	m := time.Date(c.y, c.m, c.d, 0, 0, 0, 0, loc)
	from, to := m.Add(-zoneSearch), m.Add(zoneSearch)
	if s, e := m.ZoneBounds(); (s.IsZero() || s.Before(from)) && (e.IsZero() || e.After(to)) {
		return m // one offset all around: m is the only midnight
	}
	first := time.Time{}
	z := from
	for range maxZoneSearch {
		_, off := z.Zone()
		x := time.Date(c.y, c.m, c.d, 0, 0, 0, 0, time.FixedZone("", off)).In(loc)
		if !civilOf(x).before(c) && (first.IsZero() || x.Before(first)) {
			first = x
		}
		_, e := z.ZoneBounds()
		if e.IsZero() || e.After(to) {
			break
		}
		if !e.After(z) {
			// ZoneBounds can report an end at or before z near the end of
			// a leap year of a zone's yearly rule (Go 1.26), where no
			// zone changes its clocks: move on. Any instant carrying the
			// date or a later one is a fair candidate, not before the
			// first.
			e = z.Add(24 * time.Hour)
		}
		if !civilOf(e.In(loc)).before(c) && (first.IsZero() || e.Before(first)) {
			first = e // a change that jumps into the date past its 00:00
		}
		z = e
	}
	if first.IsZero() {
		return m // no candidate (not expected): keep time.Date's choice
	}
	return first
}

// zoneSearch is how far from a date's midnight midnight looks for clock
// changes: any instant further than that from it carries another date,
// whatever the offsets (they lie within ±26 hours of UTC).
const zoneSearch = 60 * time.Hour

// maxZoneSearch bounds the offsets midnight tries: a zone changes its
// clocks a few times in zoneSearch at most.
const maxZoneSearch = 8

func daysIn(y int, m time.Month) int { return time.Date(y, m+1, 0, 12, 0, 0, 0, time.UTC).Day() }

func (c Calendar) loc() *time.Location {
	if c.Location == nil {
		return time.UTC
	}
	return c.Location
}

// bounds returns the civil first day of the period containing date d and
// the civil first day of the next period.
func (c Calendar) bounds(d civil) (start, next civil) {
	switch c.Unit {
	case PeriodDay:
		return d, d.addDays(1)
	case PeriodWeek:
		wd := int(time.Date(d.y, d.m, d.d, 12, 0, 0, 0, time.UTC).Weekday())
		start = d.addDays(-((wd + 6) % 7)) // back to Monday
		return start, start.addDays(7)
	case PeriodMonth:
		start = civil{d.y, d.m, 1}
		return start, civil{d.y, d.m + 1, 1}.norm()
	default: // PeriodAnchoredMonth
		start = c.anchor(d.y, d.m)
		if d.before(start) {
			p := civil{d.y, d.m - 1, 1}.norm()
			start = c.anchor(p.y, p.m)
		}
		n := civil{start.y, start.m + 1, 1}.norm()
		return start, c.anchor(n.y, n.m)
	}
}

// anchor returns the start of the anchored period that begins in month m
// of year y.
func (c Calendar) anchor(y int, m time.Month) civil {
	return civil{y, m, min(c.AnchorDay, daysIn(y, m))}
}

func (c Calendar) key(start civil) string {
	switch c.Unit {
	case PeriodWeek:
		y, w := time.Date(start.y, start.m, start.d, 12, 0, 0, 0, time.UTC).ISOWeek()
		return fmt.Sprintf("%04d-W%02d", y, w)
	case PeriodMonth:
		return fmt.Sprintf("%04d-%02d", start.y, int(start.m))
	}
	return fmt.Sprintf("%04d-%02d-%02d", start.y, int(start.m), start.d)
}

// PeriodAt returns the period containing t. c must be valid. The periods
// partition time: PeriodAt(p.End) starts at p.End, and Start <= t < End
// holds even on days whose local midnight does not exist (a daylight
// saving jump at midnight), because both neighbours compute the shared
// boundary with the same call.
func (c Calendar) PeriodAt(t time.Time) Period {
	start, next, loc := c.span(t)
	return Period{Start: start.midnight(loc), End: next.midnight(loc), Key: c.key(start)}
}

// BoundsMicros returns the start and end (Unix µs) of the period
// containing now (Unix µs), without naming it: the hot path of the Quota
// step. c must be valid.
func (c Calendar) BoundsMicros(now int64) (start, end int64) {
	s, n, loc := c.span(time.UnixMicro(now))
	return s.midnight(loc).UnixMicro(), n.midnight(loc).UnixMicro()
}

// span returns the civil first days of the period containing t and of the
// next one, and the calendar's location.
func (c Calendar) span(t time.Time) (start, next civil, loc *time.Location) {
	loc = c.loc()
	start, next = c.bounds(civilOf(t.In(loc)))
	// A skipped or repeated local midnight can put t just outside the
	// bounds computed from its local date; step to the neighbour. Two steps
	// are always enough.
	for range 2 {
		if t.Before(start.midnight(loc)) {
			start, next = c.bounds(start.addDays(-1))
			continue
		}
		if !t.Before(next.midnight(loc)) {
			start, next = c.bounds(next)
			continue
		}
		break
	}
	return start, next, loc
}

// Previous returns the period just before p. c must be valid and p one of
// its periods.
func (c Calendar) Previous(p Period) Period { return c.PeriodAt(p.Start.Add(-time.Nanosecond)) }

// StorageTag names a period inside storage keys: "d2026-12-01",
// "w2026-W49", "m2026-12", "a31.2026-02-28". It carries the unit (and
// anchor day), so a change of unit or anchor never reuses another
// calendar's counters. It deliberately carries no time zone: a quota
// whose Location changes keeps the usage of the period the two zones
// share by name (the stored period overlaps the new one: December in UTC,
// then December in Tokyo), rather than giving every identity a fresh
// allowance. The consequence is that two calendars differing only in
// Location used at the same time (two instances, two policies of one
// name) count on one counter, each against its own period bounds: use
// one zone per quota name. The counter's expiry follows the period end of
// the zone that wrote it: package quota's keys never have their TTL
// shortened (a write under the zone whose period ends sooner keeps the
// later expiry); a policy's Quota layer sets its key to expire an hour
// (algo.QuotaGrace) after the period end of the last write's zone, so
// after a change to a zone whose period ends sooner and back, the usage
// may expire before the first zone's period ends.
func (c Calendar) StorageTag(p Period) string {
	switch c.Unit {
	case PeriodDay:
		return "d" + p.Key
	case PeriodWeek:
		return "w" + p.Key
	case PeriodMonth:
		return "m" + p.Key
	}
	return fmt.Sprintf("a%d.%s", c.AnchorDay, p.Key)
}
