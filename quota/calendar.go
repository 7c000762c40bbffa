package quota

import "github.com/floodgate-rl/floodgate"

// The calendar types live in the root package, where a calendar quota can
// also be one layer of a layered decision (floodgate.Quota); these names
// keep this package's API self-contained.
type (
	// Unit is floodgate.PeriodUnit.
	Unit = floodgate.PeriodUnit
	// Calendar is floodgate.Calendar.
	Calendar = floodgate.Calendar
	// Period is floodgate.Period.
	Period = floodgate.Period
)

// The period units.
const (
	Day           = floodgate.PeriodDay
	Week          = floodgate.PeriodWeek
	Month         = floodgate.PeriodMonth
	AnchoredMonth = floodgate.PeriodAnchoredMonth
)

// ParseUnit returns the unit named s; see floodgate.ParsePeriodUnit.
func ParseUnit(s string) (Unit, error) { return floodgate.ParsePeriodUnit(s) }
