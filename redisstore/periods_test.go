package redisstore

import (
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// TestPeriodsBounds checks the Store's remembered quota period against
// Calendar.BoundsMicros for instants crossing period boundaries back and
// forth and for calendars alternating, and that a nil periods remembers
// nothing.
func TestPeriodsBounds(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	cals := []floodgate.Calendar{
		{Unit: floodgate.PeriodMonth},
		{Unit: floodgate.PeriodMonth, Location: ny},
		{Unit: floodgate.PeriodWeek},
		{Unit: floodgate.PeriodAnchoredMonth, AnchorDay: 31},
	}
	end := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	hour := time.Hour.Microseconds()
	nows := []int64{end - 1, end, end - hour, end + 5*hour, end + 5*hour - 1, end + 5*hour + 1, end - 40*24*hour}
	var ps periods
	check := func(ps *periods, c floodgate.Calendar, now int64) {
		t.Helper()
		s, e := ps.bounds(c, now)
		ws, we := c.BoundsMicros(now)
		if s != ws || e != we {
			t.Errorf("%v at %d: bounds %d..%d, want %d..%d", c, now, s, e, ws, we)
		}
	}
	for _, c := range cals {
		for _, now := range nows {
			check(&ps, c, now)
			check(nil, c, now)
		}
	}
	for _, now := range nows {
		for _, c := range cals {
			check(&ps, c, now)
		}
	}
}
