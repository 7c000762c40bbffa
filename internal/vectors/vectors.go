// Package vectors holds the step vectors every store must reproduce: named
// sequences of requests at fixed instants with the exact results the
// algorithms must give. The pure step function, the in-memory store and the
// Redis store all run this one table (see Run).
package vectors

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// Step is one request of a vector: at T0+At, with Cost, and what must come
// back.
type Step struct {
	Name       string
	At         time.Duration // offset from T0; may go backwards
	Cost       int64
	Allowed    bool
	Remaining  int64
	RetryAfter time.Duration // checked exactly
	ResetAt    time.Duration // offset from T0, checked exactly
	Delay      time.Duration
	Reason     floodgate.Reason
	// Policy, when set, replaces the case's policy for this step: the
	// same policy reconfigured (same name and limit, another setting).
	Policy *floodgate.Policy
}

// Case is one vector: a policy and a sequence of requests by one identity.
type Case struct {
	Name   string
	Policy floodgate.Policy
	Steps  []Step
}

// T0 is the vectors' origin, aligned to every window used (a whole day).
var T0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// Decider decides one request; the stores' adapters implement it.
type Decider func(ctx context.Context, now time.Time, p floodgate.Policy, identity string, cost int64) (floodgate.Result, error)

// Run runs every case of All against decide, each case under its own
// identity (made unique by idPrefix so runs never share state).
func Run(t *testing.T, idPrefix string, decide Decider) {
	t.Helper()
	RunCases(t, All(), idPrefix, decide)
}

// RunCases runs the given cases against decide.
func RunCases(t *testing.T, cases []Case, idPrefix string, decide Decider) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			id := idPrefix + "/" + c.Name
			for i, s := range c.Steps {
				p := c.Policy
				if s.Policy != nil {
					p = *s.Policy
				}
				got, err := decide(context.Background(), T0.Add(s.At), p, id, s.Cost)
				if err != nil {
					t.Fatalf("step %d %q: %v", i, s.Name, err)
				}
				want := floodgate.Result{
					Allowed:    s.Allowed,
					Limit:      c.Policy.Capacity(),
					Remaining:  s.Remaining,
					ResetAt:    T0.Add(s.ResetAt),
					RetryAfter: s.RetryAfter,
					Delay:      s.Delay,
					Reason:     s.Reason,
				}
				if !got.ResetAt.Equal(want.ResetAt) || got.Allowed != want.Allowed || got.Remaining != want.Remaining ||
					got.RetryAfter != want.RetryAfter || got.Delay != want.Delay || got.Reason != want.Reason || got.Limit != want.Limit {
					t.Fatalf("step %d %q:\n got %+v (reset %v)\nwant %+v (reset %v)", i, s.Name, got, got.ResetAt.Sub(T0), want, want.ResetAt.Sub(T0))
				}
			}
		})
	}
}

func must(p floodgate.Policy, err error) floodgate.Policy {
	if err != nil {
		panic(err) // the table is static; a bad policy is a bug in this file
	}
	return p
}

const (
	ms = time.Millisecond
	s  = time.Second
	us = time.Microsecond
)

// All returns the vector table.
func All() []Case {
	limited, exceeds, none := floodgate.ReasonLimited, floodgate.ReasonCostExceedsLimit, floodgate.ReasonNone
	return []Case{
		{
			Name:   "fixed_window",
			Policy: must(floodgate.NewFixedWindow("v-fw", 3, s)),
			Steps: []Step{
				{Name: "first", At: 0, Cost: 1, Allowed: true, Remaining: 2, ResetAt: s},
				{Name: "weighted", At: 100 * ms, Cost: 2, Allowed: true, Remaining: 0, ResetAt: s},
				{Name: "over", At: 200 * ms, Cost: 1, Remaining: 0, RetryAfter: 800 * ms, ResetAt: s, Reason: limited},
				{Name: "peek when empty", At: 300 * ms, Cost: 0, Remaining: 0, RetryAfter: 700 * ms, ResetAt: s, Reason: limited},
				{Name: "cost above limit", At: 900 * ms, Cost: 4, Remaining: 0, ResetAt: s, Reason: exceeds},
				{Name: "last microsecond", At: s - us, Cost: 1, Remaining: 0, RetryAfter: us, ResetAt: s, Reason: limited},
				{Name: "edge: a full window right after (2x burst)", At: s, Cost: 3, Allowed: true, Remaining: 0, ResetAt: 2 * s},
				{Name: "clock behind cannot reopen the old window", At: 500 * ms, Cost: 1, Remaining: 0, RetryAfter: s, ResetAt: 2 * s, Reason: limited},
				{Name: "idle then new window", At: 2500 * ms, Cost: 1, Allowed: true, Remaining: 2, ResetAt: 3 * s},
				{Name: "peek", At: 2600 * ms, Cost: 0, Allowed: true, Remaining: 2, ResetAt: 3 * s, Reason: none},
			},
		},
		{
			Name:   "sliding_window",
			Policy: must(floodgate.NewSlidingWindow("v-sw", 10, s)),
			Steps: []Step{
				{Name: "first", At: 0, Cost: 4, Allowed: true, Remaining: 6, ResetAt: 2 * s},
				{Name: "fill", At: 500 * ms, Cost: 6, Allowed: true, Remaining: 0, ResetAt: 2 * s},
				{Name: "next window, previous weighs 75%", At: 1250 * ms, Cost: 3, Allowed: true, Remaining: 0, ResetAt: 3 * s},
				{Name: "previous weighs 70%: denied for 1µs", At: 1300 * ms, Cost: 1, Remaining: 0, RetryAfter: us, ResetAt: 3 * s, Reason: limited},
				{Name: "previous weighs 60%", At: 1400 * ms, Cost: 1, Allowed: true, Remaining: 0, ResetAt: 3 * s},
				{Name: "cost above limit", At: 1450 * ms, Cost: 11, Remaining: 1, ResetAt: 3 * s, Reason: exceeds},
				{Name: "two windows idle: fresh", At: 3500 * ms, Cost: 1, Allowed: true, Remaining: 9, ResetAt: 5 * s},
				{Name: "clock behind in same window", At: 3400 * ms, Cost: 1, Allowed: true, Remaining: 8, ResetAt: 5 * s},
				{Name: "clock behind into previous window is clamped", At: 2900 * ms, Cost: 1, Allowed: true, Remaining: 7, ResetAt: 5 * s},
				{Name: "peek", At: 3900 * ms, Cost: 0, Allowed: true, Remaining: 7, ResetAt: 5 * s},
			},
		},
		{
			Name:   "sliding_window_wait_next_window",
			Policy: must(floodgate.NewSlidingWindow("v-sw2", 2, s)),
			Steps: []Step{
				{Name: "fill", At: 0, Cost: 2, Allowed: true, Remaining: 0, ResetAt: 2 * s},
				{Name: "denied until the current window decays", At: 100 * ms, Cost: 1, Remaining: 0, RetryAfter: 900*ms + us, ResetAt: 2 * s, Reason: limited},
				{Name: "at the retry time", At: s + us, Cost: 1, Allowed: true, Remaining: 0, ResetAt: 3 * s},
			},
		},
		{
			Name:   "token_bucket",
			Policy: must(floodgate.NewTokenBucket("v-tb", 10, s, 5)),
			Steps: []Step{
				{Name: "first from a full bucket", At: 0, Cost: 1, Allowed: true, Remaining: 4, ResetAt: 100 * ms},
				{Name: "drain", At: 0, Cost: 4, Allowed: true, Remaining: 0, ResetAt: 500 * ms},
				{Name: "empty", At: 50 * ms, Cost: 1, Remaining: 0, RetryAfter: 50 * ms, ResetAt: 500 * ms, Reason: limited},
				{Name: "two tokens refilled", At: 250 * ms, Cost: 2, Allowed: true, Remaining: 0, ResetAt: 700 * ms},
				{Name: "clock behind does not refill", At: 100 * ms, Cost: 1, Remaining: 0, RetryAfter: 100 * ms, ResetAt: 700 * ms, Reason: limited},
				{Name: "cost above burst", At: 250 * ms, Cost: 6, Remaining: 0, ResetAt: 700 * ms, Reason: exceeds},
				{Name: "idle refill caps at burst (peek)", At: 10 * s, Cost: 0, Allowed: true, Remaining: 5, ResetAt: 10 * s},
				{Name: "whole burst", At: 10 * s, Cost: 5, Allowed: true, Remaining: 0, ResetAt: 10*s + 500*ms},
			},
		},
		{
			Name:   "gcra",
			Policy: must(floodgate.NewGCRA("v-gcra", 10, s, 3)),
			Steps: []Step{
				{Name: "first", At: 0, Cost: 1, Allowed: true, Remaining: 2, ResetAt: 100 * ms},
				{Name: "burst", At: 0, Cost: 2, Allowed: true, Remaining: 0, ResetAt: 300 * ms},
				{Name: "over", At: 0, Cost: 1, Remaining: 0, RetryAfter: 100 * ms, ResetAt: 300 * ms, Reason: limited},
				{Name: "conforms again", At: 150 * ms, Cost: 1, Allowed: true, Remaining: 0, ResetAt: 400 * ms},
				{Name: "cost above burst", At: 150 * ms, Cost: 4, Remaining: 0, ResetAt: 400 * ms, Reason: exceeds},
				// A clock behind the latest admitted request (150ms) is
				// decided at that request's time, as the other algorithms
				// decide at their state's time: it gains nothing, and waits
				// what a request at 150ms would.
				{Name: "clock behind gains nothing", At: 100 * ms, Cost: 1, Remaining: 0, RetryAfter: 50 * ms, ResetAt: 400 * ms, Reason: limited},
				{Name: "idle (peek)", At: 5 * s, Cost: 0, Allowed: true, Remaining: 3, ResetAt: 5 * s},
				{Name: "after idling", At: 5 * s, Cost: 1, Allowed: true, Remaining: 2, ResetAt: 5*s + 100*ms},
				// A clock 2s behind (a backwards step) is not refused while
				// it catches up: it loses nothing either.
				{Name: "clock stepped back 2s", At: 3 * s, Cost: 1, Allowed: true, Remaining: 1, ResetAt: 5*s + 200*ms},
				{Name: "and again", At: 3*s + 10*ms, Cost: 1, Allowed: true, Remaining: 0, ResetAt: 5*s + 300*ms},
				{Name: "then full, as at 5s", At: 3*s + 20*ms, Cost: 1, Remaining: 0, RetryAfter: 100 * ms, ResetAt: 5*s + 300*ms, Reason: limited},
			},
		},
		{
			Name:   "gcra_shaping",
			Policy: floodgate.Policy{Name: "v-shape", Algorithm: floodgate.GCRA, Limit: 10, Window: s, Burst: 1, MaxDelay: 250 * ms},
			Steps: []Step{
				{Name: "fresh (peek): no delay", At: 0, Cost: 0, Allowed: true, Remaining: 1, ResetAt: 0},
				{Name: "conforms", At: 0, Cost: 1, Allowed: true, Remaining: 0, ResetAt: 100 * ms},
				// A peek reports the delay a request of cost 1 would get.
				{Name: "peek: the next waits 100ms", At: 0, Cost: 0, Allowed: true, Remaining: 0, ResetAt: 100 * ms, Delay: 100 * ms},
				{Name: "delayed 100ms", At: 0, Cost: 1, Allowed: true, Remaining: 0, ResetAt: 200 * ms, Delay: 100 * ms},
				{Name: "delayed 200ms", At: 0, Cost: 1, Allowed: true, Remaining: 0, ResetAt: 300 * ms, Delay: 200 * ms},
				{Name: "peek beyond max delay", At: 0, Cost: 0, Remaining: 0, RetryAfter: 50 * ms, ResetAt: 300 * ms, Reason: limited},
				{Name: "beyond max delay", At: 0, Cost: 1, Remaining: 0, RetryAfter: 50 * ms, ResetAt: 300 * ms, Reason: limited},
				{Name: "cost beyond burst+delay", At: 0, Cost: 4, Remaining: 0, ResetAt: 300 * ms, Reason: exceeds},
				{Name: "peek later: the next waits 50ms", At: 250 * ms, Cost: 0, Allowed: true, Remaining: 0, ResetAt: 300 * ms, Delay: 50 * ms},
				{Name: "delayed 50ms", At: 250 * ms, Cost: 1, Allowed: true, Remaining: 0, ResetAt: 400 * ms, Delay: 50 * ms},
			},
		},
		{
			Name:   "sliding_log",
			Policy: must(floodgate.NewSlidingLog("v-sl", 3, s)),
			Steps: []Step{
				{Name: "first", At: 0, Cost: 1, Allowed: true, Remaining: 2, ResetAt: s},
				{Name: "weighted", At: 400 * ms, Cost: 2, Allowed: true, Remaining: 0, ResetAt: 1400 * ms},
				{Name: "full until the first entry expires", At: 500 * ms, Cost: 1, Remaining: 0, RetryAfter: 500 * ms, ResetAt: 1400 * ms, Reason: limited},
				{Name: "first entry expired", At: s, Cost: 1, Allowed: true, Remaining: 0, ResetAt: 2 * s},
				{Name: "clock behind is clamped", At: 900 * ms, Cost: 1, Remaining: 0, RetryAfter: 400 * ms, ResetAt: 2 * s, Reason: limited},
				{Name: "cost above limit", At: s, Cost: 4, Remaining: 0, ResetAt: 2 * s, Reason: exceeds},
				{Name: "peek after expiry", At: 1400 * ms, Cost: 0, Allowed: true, Remaining: 2, ResetAt: 2 * s},
				{Name: "fill", At: 1400 * ms, Cost: 2, Allowed: true, Remaining: 0, ResetAt: 2400 * ms},
			},
		},
	}
}

// Calendar returns the vectors of the Quota algorithm, whose periods follow
// a calendar in a time zone.
func Calendar() []Case {
	limited, exceeds := floodgate.ReasonLimited, floodgate.ReasonCostExceedsLimit
	const day = 24 * time.Hour
	berlin := must(floodgate.NewQuota("v-quota-tz", 10, floodgate.Calendar{Unit: floodgate.PeriodMonth, Location: time.FixedZone("CET", 3600)}))
	return []Case{
		{
			// A monthly quota billed in New York (UTC-5 in winter): T0 is
			// 2026-11-30 19:00 there, so November ends 5 hours after T0.
			Name:   "quota_month_new_york",
			Policy: must(floodgate.NewQuota("v-quota", 10, floodgate.Calendar{Unit: floodgate.PeriodMonth, Location: time.FixedZone("EST", -5*3600)})),
			Steps: []Step{
				{Name: "first", At: 0, Cost: 6, Allowed: true, Remaining: 4, ResetAt: 5 * time.Hour},
				{Name: "too much", At: time.Hour, Cost: 5, Remaining: 4, RetryAfter: 4 * time.Hour, ResetAt: 5 * time.Hour, Reason: limited},
				{Name: "exactly the rest", At: time.Hour, Cost: 4, Allowed: true, Remaining: 0, ResetAt: 5 * time.Hour},
				{Name: "last microsecond of November", At: 5*time.Hour - us, Cost: 1, Remaining: 0, RetryAfter: us, ResetAt: 5 * time.Hour, Reason: limited},
				{Name: "December 1st, New York midnight", At: 5 * time.Hour, Cost: 10, Allowed: true, Remaining: 0, ResetAt: 31*24*time.Hour + 5*time.Hour},
				{Name: "cost above the quota", At: 6 * time.Hour, Cost: 11, Remaining: 0, ResetAt: 31*24*time.Hour + 5*time.Hour, Reason: exceeds},
				{Name: "clock behind counts in November", At: 4 * time.Hour, Cost: 1, Remaining: 0, RetryAfter: time.Hour, ResetAt: 5 * time.Hour, Reason: limited},
			},
		},
		{
			// The quota's time zone changes from UTC to Berlin (UTC+1 in
			// winter) and back within December: the period keeps its name,
			// hence its key, and its usage (docs/configuration.md, reloads).
			// Berlin's January starts an hour before UTC's.
			Name:   "quota_month_zone_change",
			Policy: must(floodgate.NewQuota("v-quota-tz", 10, floodgate.Calendar{Unit: floodgate.PeriodMonth})),
			Steps: []Step{
				{Name: "UTC", At: time.Hour, Cost: 6, Allowed: true, Remaining: 4, ResetAt: 31 * day},
				{Name: "Berlin keeps December's usage", At: 2 * time.Hour, Cost: 1, Allowed: true, Remaining: 3, ResetAt: 31*day - time.Hour, Policy: &berlin},
				{Name: "Berlin, limited", At: 3 * time.Hour, Cost: 4, Remaining: 3, RetryAfter: 31*day - 4*time.Hour, ResetAt: 31*day - time.Hour, Reason: limited, Policy: &berlin},
				{Name: "back to UTC, still December's usage", At: 4 * time.Hour, Cost: 3, Allowed: true, Remaining: 0, ResetAt: 31 * day},
				{Name: "Berlin's January", At: 31*day - time.Hour, Cost: 1, Allowed: true, Remaining: 9, ResetAt: 62*day - time.Hour, Policy: &berlin},
			},
		},
	}
}
