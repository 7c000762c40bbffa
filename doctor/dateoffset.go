package doctor

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// dateSample is one Date header an instance answered: the second its
// clock read when it answered (an HTTP date has no fraction: the clock
// truncated), the local time (Options.Now) the request was sent at, and
// its round trip.
type dateSample struct {
	date time.Time
	sent time.Time
	rtt  time.Duration
}

// bounds returns the offsets of the instance's clock to Redis's that s
// allows, given Redis's clock as the local one plus redisOff, within u:
// the instance's clock read between date and date+1s at an instant
// between sent and sent+rtt.
func (s dateSample) bounds(redisOff, u time.Duration) (lo, hi time.Duration) {
	lo = s.date.Sub(s.sent.Add(s.rtt + redisOff + u))
	hi = s.date.Add(time.Second).Sub(s.sent.Add(redisOff - u))
	return lo, hi
}

// dateRange is what an instance's Date headers tell of its clock: its
// offset to Redis's clock (positive when ahead) lies between lo and hi.
type dateRange struct {
	lo, hi  time.Duration
	samples int // Date headers read
	// disagree is set when two headers allow no common offset: the
	// instance's clock stepped between them, or the URL reaches several
	// instances. lo and hi are then the ones before.
	disagree bool
}

// Date headers read of one instance, at most, and the time between two:
// a second of them meets a turn of the instance's second, which narrows
// its offset to about dateSpacing plus a round trip.
const (
	dateSamples = 12
	dateSpacing = 100 * time.Millisecond
)

// beyond reports whether every offset d allows is more than dateFail from
// Redis's clock.
func (d dateRange) beyond() bool {
	return !d.disagree && (d.lo > dateFail || d.hi < -dateFail)
}

// decided reports whether d tells whether the offset is more than
// dateFail: all of it beyond, or all of it within.
func (d dateRange) decided() bool {
	return d.beyond() || (d.lo >= -dateFail && d.hi <= dateFail)
}

// String says what d tells, for the check's evidence.
func (d dateRange) String() string {
	s := fmt.Sprintf("its Date header puts its clock between %s and %s from Redis's", lowSecs(d.lo), highSecs(d.hi))
	if d.samples > 1 {
		s = fmt.Sprintf("its Date headers (%d, %v apart) put its clock between %s and %s from Redis's", d.samples, dateSpacing, lowSecs(d.lo), highSecs(d.hi))
	}
	switch {
	case d.disagree:
		s += ", but a later one allows no offset in that range (its clock stepped, or the URL reaches several instances): not judged by its Date header"
	case d.beyond():
		s += fmt.Sprintf(": more than %v off", dateFail)
	case !d.decided():
		s += fmt.Sprintf(": perhaps more than %v off, not certainly", dateFail)
	}
	return s
}

// lowSecs and highSecs write a range's ends in seconds to two decimals,
// with their sign, rounded outwards (the range written holds the one
// measured); zero is "0.00s", not "-0.00s".
func lowSecs(d time.Duration) string  { return centis(floorDiv(d, 10*time.Millisecond)) }
func highSecs(d time.Duration) string { return centis(-floorDiv(-d, 10*time.Millisecond)) }

// floorDiv is d/unit rounded down.
func floorDiv(d, unit time.Duration) int64 {
	q := d / unit
	if d%unit < 0 {
		q--
	}
	return int64(q)
}

// centis writes n hundredths of a second with its sign.
func centis(n int64) string {
	if n == 0 {
		return "0.00s"
	}
	sign := "+"
	if n < 0 {
		sign, n = "-", -n
	}
	return fmt.Sprintf("%s%d.%02ds", sign, n/100, n%100)
}

// dateOffset reads what in's Date headers tell of its offset to Redis's
// clock (the local clock plus redisOff, within u). The Date header of
// /readyz already read is the first; while it leaves open whether the
// offset is more than dateFail, /readyz is read again every dateSpacing,
// up to dateSamples headers, and each header's range narrows the range.
// (One header alone, compared with an instant, was off by up to a second:
// an instance 1.5 s behind Redis failed as "-2s" 2 runs in 5, and one in
// step read "-1s" a run in 4.)
func (r *run) dateOffset(ctx context.Context, in *instance, redisOff, u time.Duration) dateRange {
	d := dateRange{samples: 1}
	d.lo, d.hi = in.date.bounds(redisOff, u)
	t := time.NewTimer(dateSpacing)
	defer t.Stop()
	for d.samples < dateSamples && !d.decided() {
		select {
		case <-ctx.Done():
			return d
		case <-t.C:
		}
		t.Reset(dateSpacing)
		sent := r.opts.Now()
		_, hdr, _, rtt, err := r.get(ctx, in.url+"/readyz")
		if err != nil {
			return d
		}
		date, err := http.ParseTime(hdr.Get("Date"))
		if err != nil {
			return d
		}
		d.samples++
		lo, hi := dateSample{date: date, sent: sent, rtt: rtt}.bounds(redisOff, u)
		lo, hi = max(d.lo, lo), min(d.hi, hi)
		if lo > hi {
			d.disagree = true
			return d
		}
		d.lo, d.hi = lo, hi
	}
	return d
}
