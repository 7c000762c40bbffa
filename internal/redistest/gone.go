package redistest

import (
	"testing"
	"time"
)

// GoneErrors receives from errs the errors of n callers that hung up
// while their calls waited on a paused Redis, waiting at most 10 s in
// all: a call that was not sent returns as soon as its caller goes, so
// callers still missing then (as on code that sends their calls once
// Redis resumes) fail t, and GoneErrors returns those it received, for
// the test to resume Redis and drain the rest.
func GoneErrors(t testing.TB, errs <-chan error, n int) []error {
	t.Helper()
	got := make([]error, 0, n)
	timeout := time.After(10 * time.Second)
	for range n {
		select {
		case err := <-errs:
			got = append(got, err)
		case <-timeout:
			t.Errorf("%d of %d gone callers had not returned 10 s after they went, with Redis paused", n-len(got), n)
			return got
		}
	}
	return got
}
