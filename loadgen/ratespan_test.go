package loadgen

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestFormatRate(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{
		{0, "0.0"}, {0.001, "0.001"}, {0.5, "0.5"}, {2.0 / 3, "0.667"}, {0.000123456, "0.000123"},
		{0.9996, "1.0"}, {1, "1.0"}, {300, "300.0"}, {12268.04, "12268.0"},
	} {
		if got := formatRate(tc.v); got != tc.want {
			t.Errorf("formatRate(%v) = %q; want %q", tc.v, got, tc.want)
		}
	}
}

// TestRateSpan: the rates are over the time to the last answer, but for
// an open-loop run not interrupted, over its schedule's span when longer:
// Duration, or MaxRequests/Rate when shorter.
func TestRateSpan(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name        string
		o           Options
		elapsed     time.Duration
		interrupted bool
		want        time.Duration
	}{
		{"closed loop", Options{Duration: 3 * time.Second}, 3005 * ms, false, 3005 * ms},
		{"closed loop, max requests", Options{Duration: time.Minute, MaxRequests: 10}, 20 * ms, false, 20 * ms},
		{"last arrival before the end", Options{Rate: 0.5, Duration: 3 * time.Second}, 2012 * ms, false, 3 * time.Second},
		{"answers after the end", Options{Rate: 100, Duration: time.Second}, 1300 * ms, false, 1300 * ms},
		{"max requests", Options{Rate: 1, Duration: 10 * time.Second, MaxRequests: 3}, 2001 * ms, false, 3 * time.Second},
		{"max requests past the duration", Options{Rate: 1, Duration: 2 * time.Second, MaxRequests: 30}, 1001 * ms, false, 2 * time.Second},
		{"tiny rate", Options{Rate: 0.001, Duration: time.Hour, MaxRequests: 1}, 2 * ms, false, 1000 * time.Second},
		{"interrupted", Options{Rate: 0.5, Duration: time.Minute}, 2012 * ms, true, 2012 * ms},
	} {
		if got := rateSpan(tc.o, tc.elapsed, tc.interrupted); got != tc.want {
			t.Errorf("%s: rateSpan = %v; want %v", tc.name, got, tc.want)
		}
	}
}

// TestReportRates: the report's rates are its counts over RateSpan.
func TestReportRates(t *testing.T) {
	r := &run{opts: Options{Rate: 0.5, Duration: 3 * time.Second}}
	r.allowed.Store(1)
	r.denied.Store(1)
	r.errs.Store(1)
	rep := r.report(2012*time.Millisecond, false, &Histogram{})
	if rep.RateSpan != 3*time.Second || rep.AchievedRate != 1 || rep.AnsweredRate != 2.0/3 {
		t.Errorf("span %v, achieved %v, answered %v; want 3s, 1 (3 over 3s), 0.667 (2 over 3s)", rep.RateSpan, rep.AchievedRate, rep.AnsweredRate)
	}
}

// TestProgressEndLine: the line at the end gives the average over the
// run, labelled so, as the time since the last line may be a moment.
func TestProgressEndLine(t *testing.T) {
	r := &run{opts: Options{ProgressLines: true}}
	var b bytes.Buffer
	r.allowed.Store(10000)
	r.writeLine(&b, time.Second)
	r.allowed.Store(10020)
	b.Reset()
	r.writeEndLine(&b, 1002*time.Millisecond, false)
	if want := "10000.0 req/s (average)"; !strings.Contains(b.String(), want) {
		t.Errorf("end line %q; want %q", b.String(), want)
	}
}

// TestProgressEndLineRateSpan: the line at the end rates the requests
// over the report's RateSpan, so that it and the report show one rate
// (rwhttp walk: --rate 0.5 --duration 3s read "1.0 req/s (average)"
// there and "0.667 req/s achieved" in the report; --rate 0.001
// --requests 1, "1197.5 req/s (average)").
func TestProgressEndLineRateSpan(t *testing.T) {
	for _, tc := range []struct {
		name        string
		o           Options
		done        int64
		elapsed     time.Duration
		interrupted bool
	}{
		{"open loop ending early", Options{Rate: 0.5, Duration: 3 * time.Second}, 2, 2 * time.Second, false},
		{"tiny rate", Options{Rate: 0.001, Duration: time.Hour, MaxRequests: 1}, 1, 835 * time.Microsecond, false},
		{"interrupted", Options{Rate: 0.5, Duration: time.Minute}, 2, 2012 * time.Millisecond, true},
		{"closed loop", Options{Duration: 10 * time.Second}, 12345, 10 * time.Second, false},
	} {
		r := &run{opts: tc.o}
		r.opts.ProgressLines = true
		r.allowed.Store(tc.done)
		var b bytes.Buffer
		r.writeEndLine(&b, tc.elapsed, tc.interrupted)
		rep := r.report(tc.elapsed, tc.interrupted, &Histogram{})
		if want := " " + formatRate(rep.AchievedRate) + " req/s (average"; !strings.Contains(b.String(), want) {
			t.Errorf("%s: end line %q; want the report's rate, %q", tc.name, b.String(), want)
		}
	}
}
