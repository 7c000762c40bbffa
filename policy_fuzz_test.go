package floodgate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// FuzzPolicyDecide builds a policy from arbitrary parameters and, when it
// validates, decides two requests of arbitrary costs on the in-memory
// store at arbitrary times. An invalid policy or cost must be refused with
// ErrInvalidPolicy, ErrInvalidCost or ErrInvalidTime (for a quota, also
// a time whose calendar period leaves the range, ValidatePeriod); a valid one must never panic, and its
// results must stay inside the documented ranges.
func FuzzPolicyDecide(f *testing.F) {
	ms := func(d time.Duration) int64 { return int64(d / time.Microsecond) }
	f.Add("api", uint8(1), int64(100), ms(time.Minute), int64(0), int64(0), "user", int64(1), int64(1), int64(1_700_000_000_000_000), int64(1000))
	f.Add("tb", uint8(4), int64(floodgate.MaxLimit), ms(floodgate.MaxWindow), int64(floodgate.MaxLimit), int64(0), "", int64(floodgate.MaxCost), int64(0), int64(1_700_000_000_000_000), int64(-1))
	f.Add("gc", uint8(5), int64(1), ms(floodgate.MaxWindow), int64(0), ms(floodgate.MaxWindow), "x", int64(1), int64(1), int64(0), int64(1<<62))
	f.Add("sl", uint8(2), int64(floodgate.MaxSlidingLogLimit), ms(time.Millisecond), int64(0), int64(0), "ü", int64(3), int64(-1), int64(-1), int64(0))
	f.Add("sw", uint8(3), int64(7), ms(time.Second), int64(0), int64(0), "a:b{c}", int64(8), int64(7), int64(floodgate.MaxTimeMicros), int64(1<<62))
	f.Add("q", uint8(6), int64(10), int64(0), int64(0), int64(0), "q", int64(1), int64(1), int64(-1<<62), int64(0))
	// A time inside the range whose month is not (a fuzz walk: the test
	// took its ErrInvalidTime for a failure).
	f.Add("0", uint8(6), int64(10), int64(0), int64(0), int64(0), "q", int64(1), int64(1), int64(4503599627370441), int64(0))
	f.Fuzz(func(t *testing.T, name string, alg uint8, limit, windowUS, burst, maxDelayUS int64, identity string, cost1, cost2, nowUS, stepUS int64) {
		p := floodgate.Policy{Name: name, Algorithm: floodgate.Algorithm(alg), Limit: limit,
			Window: time.Duration(windowUS) * time.Microsecond, Burst: burst, MaxDelay: time.Duration(maxDelayUS) * time.Microsecond}
		if p.Algorithm == floodgate.Quota {
			p.Window = 0
			p.Calendar = floodgate.Calendar{Unit: floodgate.PeriodMonth}
		}
		st, err := memstore.New(memstore.Options{MaxKeys: 16})
		if err != nil {
			t.Fatal(err)
		}
		lim, err := floodgate.New(st, floodgate.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if nowUS%3 == 0 { // mostly inside the range of decision times
			nowUS = 1 + (nowUS&(1<<62-1))%floodgate.MaxTimeMicros
		}
		now := time.UnixMicro(nowUS)
		// validTime is ValidateTime, and for a quota ValidatePeriod too:
		// its whole calendar period must lie in the range of times.
		validTime := func(us int64) error {
			if err := floodgate.ValidateTime(us); err != nil || p.Algorithm != floodgate.Quota {
				return err
			}
			return floodgate.ValidatePeriod(p.Name, p.Calendar, us)
		}
		verr := p.Validate()
		r, err := lim.AllowAt(ctx, now, p, identity, cost1)
		switch {
		case verr != nil:
			if !errors.Is(err, floodgate.ErrInvalidPolicy) {
				t.Fatalf("invalid policy %+v (%v): AllowAt returned %v", p, verr, err)
			}
			return
		case floodgate.ValidateCost(cost1) != nil:
			if !errors.Is(err, floodgate.ErrInvalidCost) {
				t.Fatalf("cost %d: AllowAt returned %v", cost1, err)
			}
			return
		case validTime(nowUS) != nil:
			if !errors.Is(err, floodgate.ErrInvalidTime) {
				t.Fatalf("time %d: AllowAt returned %v", nowUS, err)
			}
			return
		case err != nil:
			t.Fatalf("%v, cost %d at %d: %v", p, cost1, nowUS, err)
		}
		check(t, p, cost1, r)
		later := now.Add(time.Duration(stepUS%(1<<50)) * time.Microsecond)
		if r, err = lim.AllowAt(ctx, later, p, identity, cost2); floodgate.ValidateCost(cost2) == nil && validTime(later.UnixMicro()) == nil {
			if err != nil {
				t.Fatalf("%v, cost %d: %v", p, cost2, err)
			}
			check(t, p, cost2, r)
		}
	})
}

func check(t *testing.T, p floodgate.Policy, cost int64, r floodgate.Result) {
	t.Helper()
	c := p.Capacity()
	switch {
	case r.Limit != c:
		t.Fatalf("%v: limit %d, want capacity %d", p, r.Limit, c)
	case r.Remaining < 0 || r.Remaining > c:
		t.Fatalf("%v cost %d: remaining %d outside 0..%d (%+v)", p, cost, r.Remaining, c, r)
	case r.RetryAfter < 0 || r.Delay < 0 || r.Delay > p.MaxDelay:
		t.Fatalf("%v cost %d: retry after %v, delay %v (%+v)", p, cost, r.RetryAfter, r.Delay, r)
	case cost > c && p.MaxDelay == 0 && (r.Allowed || r.Reason != floodgate.ReasonCostExceedsLimit):
		// (GCRA shaping admits a cost above its burst that fits within
		// the burst plus MaxDelay, with a Delay.)
		t.Fatalf("%v cost %d above capacity: %+v", p, cost, r)
	case r.Allowed != (r.Reason == floodgate.ReasonNone):
		t.Fatalf("%v cost %d: allowed %v with reason %v", p, cost, r.Allowed, r.Reason)
	}
}
