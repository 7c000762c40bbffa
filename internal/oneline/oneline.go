// Package oneline puts an error's text on one line.
//
// go-redis (v9.23) joins the failures of every sentinel its failover
// client asked with errors.Join, one per line: "redis: all sentinels
// specified in configuration are unreachable: write: broken pipe\nwrite:
// broken pipe". Quoted in readiness's JSON and in log lines, the newlines
// broke both.
package oneline

import "strings"

// Error returns err with the newlines of its text replaced by "; ", still
// wrapping err (errors.Is and errors.As see what err holds); err itself
// when its text has none, nil for nil.
func Error(err error) error {
	if err == nil || !strings.Contains(err.Error(), "\n") {
		return err
	}
	return &lineError{err: err}
}

// lineError is an error whose text has its newlines replaced by "; ".
type lineError struct{ err error }

func (e *lineError) Error() string { return strings.ReplaceAll(e.err.Error(), "\n", "; ") }

// Unwrap returns the error itself.
func (e *lineError) Unwrap() error { return e.err }
