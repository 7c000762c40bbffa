package connlimit

import "time"

// SetClock makes l read the time from now instead of time.Now. Call it
// before l is used.
func SetClock(l *Limit, now func() time.Time) { l.now = now }
