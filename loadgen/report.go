package loadgen

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Report is the outcome of a load test.
type Report struct {
	// Target and Mode are what was tested.
	Target string
	Mode   Mode
	// GRPCClient is the client that called, in the GRPC mode.
	GRPCClient GRPCClient
	// TargetRate is the requested arrival rate (0: closed loop),
	// Concurrency the number of workers, Identities the number of distinct
	// identities.
	TargetRate  float64
	Concurrency int
	Identities  int
	// Elapsed is the wall time from the start to the last answer:
	// Duration, or less when the run stopped early (MaxRequests, or
	// interrupted) or, in open loop, when its last arrival was due before
	// the end (by up to 1/TargetRate), plus the wait for the requests in
	// flight at the end (up to Options.Timeout).
	Elapsed time.Duration
	// RateSpan is the time AchievedRate and AnsweredRate are over:
	// Elapsed, but in an open-loop run not interrupted, the time its
	// schedule spans when that is longer: Duration, or MaxRequests
	// arrivals (MaxRequests/TargetRate seconds) when shorter. A run of
	// 2 arrivals at 0.5/s for 3s is 0.67/s over its 3s, not 1/s over the
	// 2s to its last answer.
	RateSpan time.Duration
	// Duration is Options.Duration, the time the run was to send for.
	Duration time.Duration
	// Interrupted is set when the run's context ended before Duration
	// (Ctrl-C): the report covers what ran until then. InterruptedAfter is
	// when, from the start; Elapsed adds the wait for the requests then
	// in flight (up to InterruptGrace), and the rates are over Elapsed.
	Interrupted      bool
	InterruptedAfter time.Duration
	// Sent is the number of requests sent and completed, answered or
	// failed: Allowed + Denied + Errors.
	Sent int64
	// Allowed and Denied count the checks the service answered; a denial
	// is a 429 over the HTTP API, OVER_LIMIT over Envoy's.
	Allowed, Denied int64
	// Degraded counts the answers among Allowed and Denied that the
	// service marked as taken by its fallback instead of the shared count
	// in Redis: over HTTP, "degraded": true or the X-Floodgate-Degraded
	// header; over gRPC and Envoy's JSON API, an X-Floodgate-Degraded
	// entry in response_headers_to_add (or, JSON, "degraded": true in
	// dynamicMetadata). Such answers say nothing of the shared limit:
	// with Redis down, a perfect-looking run may be all of them.
	Degraded int64
	// Errors counts requests that failed (transport errors, timeouts,
	// unexpected statuses).
	Errors int64
	// Dropped counts open-loop arrivals that were never sent, nor timed,
	// because every worker was busy and the queue (Concurrency long) full,
	// at any time of the run, or because they were still queued, or due
	// and not yet queued, when the duration ended: the service could not
	// keep up, or the generator (or its machine) lacked workers.
	Dropped int64
	// AchievedRate is Sent per second of RateSpan; AnsweredRate is
	// Allowed + Denied per second of RateSpan, which failures (a storm of
	// refused connections, say) do not inflate.
	AchievedRate, AnsweredRate float64
	// DenyRatio is Denied / (Allowed + Denied): the share of 429s (of
	// OVER_LIMIT answers over Envoy's APIs).
	DenyRatio float64
	// ExpectedDenyRatio is the share an exact limiter would have denied
	// (from Options.Expect or Options.ExpectedDenyRatio); meaningful only
	// when HasExpected.
	ExpectedDenyRatio float64
	HasExpected       bool
	// Latency summarises the answered requests' latencies (from their
	// scheduled time in open loop); dropped arrivals and failed requests
	// are not in it.
	Latency Latencies
	// ErrorSamples are the most frequent error messages with their counts.
	ErrorSamples []ErrorCount
}

// MaxDroppedShare is the share of open-loop arrivals dropped above which
// the report warns that its latencies understate the queueing.
const MaxDroppedShare = 0.01

// Latencies are latency percentiles, accurate to 0.8%.
type Latencies struct {
	Min, P50, P90, P99, P999, Max, Mean time.Duration
}

// ErrorCount is one distinct error message and how often it occurred.
type ErrorCount struct {
	Message string
	Count   int64
}

// String formats the report as a table for a terminal.
func (r Report) String() string {
	var b strings.Builder
	row := func(name, format string, args ...any) {
		fmt.Fprintf(&b, "  %-18s %s\n", name, fmt.Sprintf(format, args...))
	}
	if r.Mode == GRPC {
		fmt.Fprintf(&b, "load test of %s (%v, %v client)\n", r.Target, r.Mode, r.GRPCClient)
	} else {
		fmt.Fprintf(&b, "load test of %s (%v)\n", r.Target, r.Mode)
	}
	if r.TargetRate > 0 {
		row("schedule", "open loop, %s req/s target, %s, %s", formatRate(r.TargetRate), plural(r.Concurrency, "worker"), plural(r.Identities, "identity", "identities"))
	} else {
		row("schedule", "closed loop, %s, %s", plural(r.Concurrency, "worker"), plural(r.Identities, "identity", "identities"))
	}
	if r.Interrupted {
		row("elapsed", "%v (interrupted after %.1fs of %v, then %.1fs waiting for the answers in flight: the report covers what ran, its rates the whole elapsed time)",
			r.Elapsed.Round(time.Millisecond), r.InterruptedAfter.Seconds(), r.Duration, (r.Elapsed - r.InterruptedAfter).Seconds())
	} else {
		row("elapsed", "%v", r.Elapsed.Round(time.Millisecond))
	}
	over := ""
	if r.RateSpan > r.Elapsed {
		over = fmt.Sprintf(", over the %v of the schedule", r.RateSpan.Round(time.Millisecond))
	}
	row("requests", "%d (%s req/s achieved, %s/s answered%s)", r.Sent, formatRate(r.AchievedRate), formatRate(r.AnsweredRate), over)
	denied, ratioLabel := r.Mode.deniedLabels()
	row("allowed", "%d", r.Allowed)
	row(denied, "%d", r.Denied)
	if r.Degraded > 0 {
		row("degraded", "%d (%.2f%% of the answers: taken by the fallback, not the shared count)", r.Degraded, 100*ratio(r.Degraded, r.Allowed+r.Denied))
	} else {
		row("degraded", "%d", r.Degraded)
	}
	if r.Errors > 0 {
		row("errors", "%d (%.2f%% of the requests sent: not a clean run)", r.Errors, 100*ratio(r.Errors, r.Sent))
	} else {
		row("errors", "%d", r.Errors)
	}
	if r.TargetRate > 0 {
		arrivals := r.Sent + r.Dropped
		if r.Dropped > 0 {
			row("dropped", "%d (%.2f%% of the arrivals: never sent nor timed)", r.Dropped, 100*ratio(r.Dropped, arrivals))
		} else {
			row("dropped", "%d", r.Dropped)
		}
	}
	if r.HasExpected {
		row(ratioLabel, "%.2f%% (expected %.2f%%, difference %+.2f points)", 100*r.DenyRatio, 100*r.ExpectedDenyRatio, 100*(r.DenyRatio-r.ExpectedDenyRatio))
	} else {
		row(ratioLabel, "%.2f%% (no expectation given)", 100*r.DenyRatio)
	}
	if r.HasExpected && r.Degraded > 0 {
		fmt.Fprintf(&b, "  warning: %d answers were degraded: the deny ratio is not the shared limiter's, and the comparison with the expected one does not hold\n", r.Degraded)
	}
	if r.TargetRate > 0 && ratio(r.Dropped, r.Sent+r.Dropped) > MaxDroppedShare {
		cause := fmt.Sprintf("the service could not keep up at %s req/s, or the generator lacked workers (raise --concurrency)", formatRate(r.TargetRate))
		if r.Errors > 0 {
			// Workers pause after transport errors (up to a second each):
			// an outage drops arrivals however many workers there are.
			cause = fmt.Sprintf("workers pausing after the %d failed requests (a service down or restarting), the service not keeping up at %s req/s, or the generator lacking workers (raise --concurrency)", r.Errors, formatRate(r.TargetRate))
		}
		fmt.Fprintf(&b, "  warning: %.2f%% of the arrivals were dropped (every worker busy and the queue of %d full): %s; the latency percentiles, of the requests sent only, understate the queueing\n", 100*ratio(r.Dropped, r.Sent+r.Dropped), r.Concurrency, cause)
	}
	l := r.Latency
	switch {
	case r.Allowed+r.Denied == 0:
		row("latency", "no answers")
	default:
		label := "latency"
		if r.Errors > 0 || r.Dropped > 0 {
			label = "latency (answered)"
		}
		row(label, "p50 %v  p90 %v  p99 %v  p99.9 %v", dur(l.P50), dur(l.P90), dur(l.P99), dur(l.P999))
		row("", "min %v  mean %v  max %v", dur(l.Min), dur(l.Mean), dur(l.Max))
	}
	for i, e := range r.ErrorSamples {
		if i == 5 {
			row("", "… %d more distinct errors", len(r.ErrorSamples)-5)
			break
		}
		label := ""
		if i == 0 {
			label = "error samples"
		}
		row(label, "%d× %s", e.Count, e.Message)
	}
	if r.Mode == EnvoyJSON && slices.ContainsFunc(r.ErrorSamples, func(e ErrorCount) bool { return strings.HasPrefix(e.Message, "HTTP 400") }) {
		fmt.Fprintf(&b, "  note: an Envoy JSON API answers 400 to any failure of its own (its Redis down or refusing it) as to a request it cannot read: its log says which\n")
	}
	return b.String()
}

// plural writes n and the noun, singular for 1: "1 identity", "2
// identities". The plural is the noun with an s unless given.
func plural(n int, noun string, pluralForm ...string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, noun)
	}
	if len(pluralForm) > 0 {
		return fmt.Sprintf("%d %s", n, pluralForm[0])
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// deniedLabels names a denial as the mode's API answers it, for the
// report's count and ratio: a 429 over the HTTP API, OVER_LIMIT over
// Envoy's (gRPC, and JSON whose 429 carries "overallCode": "OVER_LIMIT").
func (m Mode) deniedLabels() (count, ratio string) {
	if m == GRPC || m == EnvoyJSON {
		return "over_limit", "over-limit ratio"
	}
	return "denied (429)", "429 ratio"
}

// formatRate formats a rate in requests per second: with one decimal
// from 1 up (and for 0), with 3 significant digits below, so that a
// target of 0.001/s does not read "0.0" (as a closed loop's would).
func formatRate(v float64) string {
	// 'g' rounds to 3 digits; 'f' with -1 writes that value in full,
	// without an exponent.
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 3, 64), 64)
	if r >= 1 || v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(r, 'f', -1, 64)
}

// dur rounds a latency for display: 3 significant digits.
func dur(d time.Duration) time.Duration {
	switch {
	case d >= 100*time.Millisecond:
		return d.Round(time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	case d >= 100*time.Microsecond:
		return d.Round(time.Microsecond)
	}
	return d.Round(100 * time.Nanosecond)
}
