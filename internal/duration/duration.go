// Package duration parses the durations of Floodgate's YAML files: a Go
// duration ("90s", "1h30m") or a whole number of days ("1d", "30d"), the
// same in the policies' configuration and in the Envoy descriptors.
package duration

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// ErrTooLong reports a duration written correctly but too long to be
// held: over about 292 years, time.Duration's range (MaxDays days). Callers
// say the range they accept, rather than suggest a mistake in the writing.
var ErrTooLong = errors.New("too long")

// MaxDays is the most days Parse reads: the whole days time.Duration
// holds, about 292 years.
const MaxDays = int64(math.MaxInt64 / int64(day))

const day = 24 * time.Hour

// goDuration matches what time.ParseDuration reads, whatever its size.
var goDuration = regexp.MustCompile(`^[-+]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+$`)

// Parse parses a Go duration or a whole number of days. The result must be
// positive. A duration too long to be held is an error wrapping
// ErrTooLong.
func Parse(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok && days != "" && strings.Trim(days, "0123456789") == "" {
		// Only digits: the one error ParseInt can give is ErrRange.
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n > MaxDays {
			return 0, fmt.Errorf("duration %q is %w", s, ErrTooLong)
		}
		d = time.Duration(n) * day
	} else {
		var err error
		d, err = time.ParseDuration(s)
		if err != nil {
			if goDuration.MatchString(s) {
				return 0, fmt.Errorf("duration %q is %w", s, ErrTooLong)
			}
			return 0, fmt.Errorf("invalid duration %q (want e.g. 500ms, 1m, 1h or 30d)", s)
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("duration %q must be positive", s)
	}
	return d, nil
}

// Format writes d for the messages that state a range: whole days as
// "30d", another duration of a day or more as its days and the rest as Go
// writes it ("1d12h0m0s", "13031d5h58m26.842624s": for reading, Parse
// does not read it back), anything shorter as Go writes it ("1ms", "0s").
func Format(d time.Duration) string {
	if d < day {
		return d.String()
	}
	s := strconv.FormatInt(int64(d/day), 10) + "d"
	if r := d % day; r != 0 {
		s += r.String()
	}
	return s
}
