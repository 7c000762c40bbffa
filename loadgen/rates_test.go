package loadgen

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestProgressLineRate: a progress line's req/s is the rate since the
// line before, not the average since the start: 13,509 requests at 1s,
// 24,549 at 2s is 11,040 req/s (an outside walk saw 12268.0, the
// average).
func TestProgressLineRate(t *testing.T) {
	r := &run{opts: Options{ProgressLines: true}}
	var b bytes.Buffer
	for _, step := range []struct {
		at      time.Duration
		allowed int64
		want    string
	}{
		{time.Second, 13509, "13509.0 req/s (last 1.0s)"},
		{2 * time.Second, 24549, "11040.0 req/s (last 1.0s)"},
		{4 * time.Second, 25549, "500.0 req/s (last 2.0s)"}, // a tick lost
	} {
		b.Reset()
		r.allowed.Store(step.allowed)
		r.writeLine(&b, step.at)
		if !strings.Contains(b.String(), step.want) {
			t.Errorf("at %v with %d done: %q; want %q", step.at, step.allowed, b.String(), step.want)
		}
	}
}

// TestReportRateDigits: a rate below 1/s is written with 3 significant
// digits, not one decimal: --rate 0.001 read "open loop, 0.0 req/s
// target", like a closed loop.
func TestReportRateDigits(t *testing.T) {
	for _, tc := range []struct {
		rep  Report
		want []string
	}{
		{Report{TargetRate: 0.001, Sent: 1, AchievedRate: 0.001, AnsweredRate: 0.001, Elapsed: time.Millisecond, RateSpan: 1000 * time.Second},
			[]string{"open loop, 0.001 req/s target", "1 (0.001 req/s achieved, 0.001/s answered, over the 16m40s of the schedule)"}},
		{Report{TargetRate: 300, Sent: 300, AchievedRate: 300, AnsweredRate: 299.5, Elapsed: time.Second, RateSpan: time.Second},
			[]string{"open loop, 300.0 req/s target", "300 (300.0 req/s achieved, 299.5/s answered)\n"}},
		{Report{TargetRate: 0.5, Sent: 2, AchievedRate: 2.0 / 3, AnsweredRate: 2.0 / 3, Elapsed: 2012 * time.Millisecond, RateSpan: 3 * time.Second},
			[]string{"open loop, 0.5 req/s target", "2 (0.667 req/s achieved, 0.667/s answered, over the 3s of the schedule)"}},
	} {
		s := tc.rep.String()
		for _, w := range tc.want {
			if !strings.Contains(s, w) {
				t.Errorf("report of %+v:\n%s\nwant %q", tc.rep, s, w)
			}
		}
	}
}

// TestOpenLoopRateOverSchedule: an open-loop run's achieved rate is over
// the time its schedule spans, not up to its last answer, which comes up
// to an interval before the end: 5 arrivals at 4/s for 1.1s are 4.5/s,
// not 5/s over the 1s to the last (an outside walk's 2 at 0.5/s for 3s
// read 1.0 req/s, double the target).
func TestOpenLoopRateOverSchedule(t *testing.T) {
	s, target := startCheckServer(t)
	rep, err := Run(context.Background(), Options{Target: target, Rate: 4, Duration: 1100 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sent != 5 || s.received.Load() != 5 {
		t.Fatalf("%d sent, %d received; want 5 (at 0, 0.25, 0.5, 0.75 and 1s)", rep.Sent, s.received.Load())
	}
	if most := float64(rep.Sent) / 1.1; rep.AchievedRate > most+1e-9 || rep.AnsweredRate > most+1e-9 {
		t.Errorf("achieved %v, answered %v req/s; want at most %v, 5 over the 1.1s scheduled", rep.AchievedRate, rep.AnsweredRate, most)
	}
}

// TestOpenLoopEndsAtLastRequest: an open-loop run stopped by MaxRequests
// ends with its last request's answer, not when the arrival after it
// would have been due (1000s at --rate 0.001; an outside walk's
// --requests 3 --rate 1 took 3.001s). The minute's context only guards
// against that wait of 100s.
func TestOpenLoopEndsAtLastRequest(t *testing.T) {
	_, target := startCheckServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{Target: target, Rate: 0.01, MaxRequests: 1, Duration: time.Hour}, nil)
	if err != nil || rep.Interrupted || rep.Sent != 1 {
		t.Errorf("%v, interrupted %v, %d sent; want the run over after its one request", err, rep.Interrupted, rep.Sent)
	}
}

// TestReportScheduleSingular: one worker and one identity are named in
// the singular; the report said "1 workers, 1 identities".
func TestReportScheduleSingular(t *testing.T) {
	for _, tc := range []struct {
		rep  Report
		want string
	}{
		{Report{Concurrency: 1, Identities: 1}, "closed loop, 1 worker, 1 identity\n"},
		{Report{TargetRate: 5, Concurrency: 1, Identities: 1}, "open loop, 5.0 req/s target, 1 worker, 1 identity\n"},
		{Report{Concurrency: 2, Identities: 3}, "closed loop, 2 workers, 3 identities\n"},
	} {
		if s := tc.rep.String(); !strings.Contains(s, tc.want) {
			t.Errorf("report lacks %q:\n%s", tc.want, s)
		}
	}
}

// TestReportEnvoyJSON400Note: an envoy-json run's HTTP 400s come with a
// note that they may be the service's own failures (a walk's run while
// envoy-compat's Redis was down reported only "HTTP 400: Bad Request");
// other modes' 400s and envoy-json runs without them have no note.
func TestReportEnvoyJSON400Note(t *testing.T) {
	const note = "note: an Envoy JSON API answers 400 to any failure of its own"
	bad := []ErrorCount{{Message: "HTTP 400: Bad Request", Count: 3}}
	for _, tc := range []struct {
		rep  Report
		want bool
	}{
		{Report{Mode: EnvoyJSON, Errors: 3, ErrorSamples: bad}, true},
		{Report{Mode: EnvoyJSON, Errors: 3, ErrorSamples: []ErrorCount{{Message: "HTTP 503: down", Count: 3}}}, false},
		{Report{Mode: HTTP, Errors: 3, ErrorSamples: bad}, false},
	} {
		if got := strings.Contains(tc.rep.String(), note); got != tc.want {
			t.Errorf("%v mode, errors %v: note %v, want %v:\n%s", tc.rep.Mode, tc.rep.ErrorSamples, got, tc.want, tc.rep.String())
		}
	}
}
