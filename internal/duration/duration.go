// Package duration parses the durations of Floodgate's YAML files: a Go
// duration ("90s", "1h30m") or a whole number of days ("1d", "30d"), the
// same in the policies' configuration and in the Envoy descriptors.
package duration

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// ErrTooLong reports a duration written correctly but too long to be
// held: over about 292 years (time.Duration's range), or days of more than
// four digits. Callers say the range they accept, rather than suggest a
// mistake in the writing.
var ErrTooLong = errors.New("too long")

// goDuration matches what time.ParseDuration reads, whatever its size.
var goDuration = regexp.MustCompile(`^[-+]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+$`)

// Parse parses a Go duration or a whole number of days. The result must be
// positive. A duration too long to be held is an error wrapping
// ErrTooLong.
func Parse(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok && days != "" && strings.Trim(days, "0123456789") == "" {
		if len(days) > 4 {
			return 0, fmt.Errorf("duration %q is %w", s, ErrTooLong)
		}
		n, err := strconv.Atoi(days)
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		d = time.Duration(n) * 24 * time.Hour
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
