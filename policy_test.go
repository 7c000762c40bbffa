package floodgate_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

func TestPolicyValidate(t *testing.T) {
	ok := floodgate.Policy{Name: "p", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Second}
	tests := []struct {
		name   string
		edit   func(*floodgate.Policy)
		wantOK bool
	}{
		{"valid", func(*floodgate.Policy) {}, true},
		{"empty name", func(p *floodgate.Policy) { p.Name = "" }, false},
		{"name with colon", func(p *floodgate.Policy) { p.Name = "a:b" }, false},
		{"name with brace", func(p *floodgate.Policy) { p.Name = "{a}" }, false},
		{"unknown algorithm", func(p *floodgate.Policy) { p.Algorithm = 0 }, false},
		{"algorithm past the end", func(p *floodgate.Policy) { p.Algorithm = 99 }, false},
		{"zero limit", func(p *floodgate.Policy) { p.Limit = 0 }, false},
		{"negative limit", func(p *floodgate.Policy) { p.Limit = -1 }, false},
		{"huge limit", func(p *floodgate.Policy) { p.Limit = floodgate.MaxLimit + 1 }, false},
		{"zero window", func(p *floodgate.Policy) { p.Window = 0 }, false},
		{"negative window", func(p *floodgate.Policy) { p.Window = -time.Second }, false},
		{"sub-microsecond window", func(p *floodgate.Policy) { p.Window = time.Second + 1 }, false},
		{"window too long", func(p *floodgate.Policy) { p.Window = floodgate.MaxWindow + time.Second }, false},
		{"burst on fixed window", func(p *floodgate.Policy) { p.Burst = 3 }, false},
		{"max delay on fixed window", func(p *floodgate.Policy) { p.MaxDelay = time.Second }, false},
		{"token bucket burst", func(p *floodgate.Policy) { p.Algorithm = floodgate.TokenBucket; p.Burst = 50 }, true},
		{"negative burst", func(p *floodgate.Policy) { p.Algorithm = floodgate.TokenBucket; p.Burst = -1 }, false},
		{"rate finer than 1/µs", func(p *floodgate.Policy) { p.Algorithm = floodgate.GCRA; p.Limit = 2000; p.Window = time.Millisecond }, false},
		{"gcra shaping", func(p *floodgate.Policy) { p.Algorithm = floodgate.GCRA; p.MaxDelay = time.Second }, true},
		{"negative delay", func(p *floodgate.Policy) { p.Algorithm = floodgate.GCRA; p.MaxDelay = -1 }, false},
		{"token bucket delay", func(p *floodgate.Policy) { p.Algorithm = floodgate.TokenBucket; p.MaxDelay = time.Second }, false},
		{"sliding log too large", func(p *floodgate.Policy) {
			p.Algorithm = floodgate.SlidingLog
			p.Limit = floodgate.MaxSlidingLogLimit + 1
		}, false},
		{"burst times interval too long", func(p *floodgate.Policy) {
			p.Algorithm = floodgate.TokenBucket
			p.Limit = 1
			p.Window = floodgate.MaxWindow
			p.Burst = floodgate.MaxLimit
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := ok
			tt.edit(&p)
			err := p.Validate()
			if tt.wantOK && err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
			if !tt.wantOK && !errors.Is(err, floodgate.ErrInvalidPolicy) {
				t.Fatalf("Validate() = %v, want ErrInvalidPolicy", err)
			}
		})
	}
}

func TestConstructorsReject(t *testing.T) {
	if _, err := floodgate.NewFixedWindow("x", 0, time.Second); err == nil {
		t.Error("NewFixedWindow accepted limit 0")
	}
	if _, err := floodgate.NewTokenBucket("x", 10, 0, 0); err == nil {
		t.Error("NewTokenBucket accepted window 0")
	}
	if _, err := floodgate.NewGCRA("x", 10, time.Second, -1); err == nil {
		t.Error("NewGCRA accepted burst -1")
	}
}

func TestParseAlgorithm(t *testing.T) {
	for a := floodgate.FixedWindow; a <= floodgate.GCRA; a++ {
		got, err := floodgate.ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", a.String(), got, err)
		}
	}
	if got, _ := floodgate.ParseAlgorithm("leaky_bucket"); got != floodgate.GCRA {
		t.Errorf("leaky_bucket = %v", got)
	}
	if _, err := floodgate.ParseAlgorithm("nope"); !errors.Is(err, floodgate.ErrInvalidPolicy) {
		t.Errorf("nope: %v", err)
	}
}

func TestQuotaPolicyValidate(t *testing.T) {
	cal := floodgate.Calendar{Unit: floodgate.PeriodMonth}
	if _, err := floodgate.NewQuota("q", 100, cal); err != nil {
		t.Fatal(err)
	}
	bad := []floodgate.Policy{
		{Name: "q", Algorithm: floodgate.Quota, Limit: 100},                                                                        // no calendar
		{Name: "q", Algorithm: floodgate.Quota, Limit: 100, Calendar: cal, Window: time.Hour},                                      // window
		{Name: "q", Algorithm: floodgate.Quota, Limit: 0, Calendar: cal},                                                           // limit
		{Name: "q", Algorithm: floodgate.Quota, Limit: 1, Calendar: floodgate.Calendar{Unit: floodgate.PeriodMonth, AnchorDay: 3}}, // anchor on month
		{Name: "q", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Second, Calendar: cal},                                // calendar elsewhere
	}
	for i, p := range bad {
		if err := p.Validate(); !errors.Is(err, floodgate.ErrInvalidPolicy) {
			t.Errorf("case %d: Validate() = %v", i, err)
		}
	}
}

func TestMust(t *testing.T) {
	p := floodgate.Must(floodgate.NewTokenBucket("api", 100, time.Minute, 20))
	if p.Name != "api" || p.Burst != 20 {
		t.Errorf("Must returned %+v", p)
	}
	defer func() {
		err, ok := recover().(error)
		if !ok || !errors.Is(err, floodgate.ErrInvalidPolicy) {
			t.Errorf("Must on an invalid policy panicked with %v, want an ErrInvalidPolicy error", err)
		}
	}()
	floodgate.Must(floodgate.NewTokenBucket("api", 0, time.Minute, 0))
	t.Error("Must did not panic on an invalid policy")
}

// TestWindowsInDays: windows of whole days are written in days, as the
// configuration writes them, in errors and in String.
func TestWindowsInDays(t *testing.T) {
	p := floodgate.Policy{Name: "p", Algorithm: floodgate.FixedWindow, Limit: 10, Window: 500 * 24 * time.Hour}
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "window 500d out of range 1ms..400d") {
		t.Errorf("Validate = %v, want the window in days", err)
	}
	p.Window = 30 * 24 * time.Hour
	if got, want := p.String(), "p: fixed_window 10/30d"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	p.Window = 90 * time.Minute
	if got, want := p.String(), "p: fixed_window 10/1h30m0s"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}

// TestValidateReportsEveryProblem: one Validate names every parameter out
// of range, not just the first.
func TestValidateReportsEveryProblem(t *testing.T) {
	p := floodgate.Policy{Name: "p", Algorithm: floodgate.FixedWindow, Limit: 0, Window: 0, Burst: 3}
	err := p.Validate()
	for _, want := range []string{`policy "p": limit 0 out of range`, "window 0s out of range 1ms..400d", "burst applies to token_bucket and gcra only"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to contain %q", err, want)
		}
	}
	if !errors.Is(err, floodgate.ErrInvalidPolicy) {
		t.Errorf("Validate() = %v, want ErrInvalidPolicy", err)
	}
}

// TestShapingAdmitsAboveCapacity pins what Policy.Capacity documents for
// GCRA with MaxDelay: a cost above the burst that fits within the burst
// plus MaxDelay's intervals is admitted with a Delay; one more unit is
// refused outright.
func TestShapingAdmitsAboveCapacity(t *testing.T) {
	ctx := context.Background()
	p := floodgate.Must(floodgate.NewGCRA("shape", 10, time.Second, 2)) // one unit per 100ms
	p.MaxDelay = 500 * time.Millisecond
	at := time.Unix(1_800_000_000, 0)
	l := newMem(t)
	r, err := l.AllowAt(ctx, at, p, "u", p.Capacity()+5)
	if err != nil || !r.Allowed || r.Delay != 500*time.Millisecond {
		t.Fatalf("cost %d: %+v, %v; want admitted with a 500ms delay", p.Capacity()+5, r, err)
	}
	r, err = newMem(t).AllowAt(ctx, at, p, "u", p.Capacity()+6)
	if err != nil || r.Allowed || r.Reason != floodgate.ReasonCostExceedsLimit || r.RetryAfter != 0 {
		t.Fatalf("cost %d: %+v, %v; want cost_exceeds_limit", p.Capacity()+6, r, err)
	}
}

// TestValidateMaxDelayRange: a MaxDelay out of range is reported as the
// other range errors are, naming the field and its range, under the
// policy's name (library callers have no configuration file to name it).
// It was "max delay 312750h0m0s too long", and "max delay -1s is
// negative".
func TestValidateMaxDelayRange(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{312750 * time.Hour, `policy "p": max_delay 312750h0m0s out of range 0s..13031d5h58m26.842624s`},
		{-time.Second, `policy "p": max_delay -1s out of range 0s..13031d5h58m26.842624s`},
	} {
		err := floodgate.Policy{Name: "p", Algorithm: floodgate.GCRA, Limit: 10, Window: time.Second, MaxDelay: tc.d}.Validate()
		if !errors.Is(err, floodgate.ErrInvalidPolicy) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("max delay %v: %v, want %q", tc.d, err, tc.want)
		}
	}
	if err := (floodgate.Policy{Name: "p", Algorithm: floodgate.GCRA, Limit: 10, Window: time.Second, MaxDelay: 1 << 50 * time.Microsecond}).Validate(); err != nil {
		t.Errorf("max delay 2^50µs: %v", err)
	}
}

// TestPolicyInterval: a bucket policy refills one unit per Window/Limit
// rounded down to whole microseconds, which admits more than Limit per
// Window when the division is not exact (an outside walk: 501 per 1ms
// admitted 1,000 per ms in both stores).
func TestPolicyInterval(t *testing.T) {
	for _, tc := range []struct {
		p    floodgate.Policy
		want time.Duration
	}{
		{floodgate.Policy{Name: "a", Algorithm: floodgate.TokenBucket, Limit: 100, Window: time.Second}, 10 * time.Millisecond},
		{floodgate.Policy{Name: "a", Algorithm: floodgate.TokenBucket, Limit: 300_000, Window: time.Second}, 3 * time.Microsecond},
		{floodgate.Policy{Name: "a", Algorithm: floodgate.GCRA, Limit: 501, Window: time.Millisecond}, time.Microsecond},
		{floodgate.Policy{Name: "a", Algorithm: floodgate.GCRA, Limit: 3, Window: time.Second}, 333_333 * time.Microsecond},
		{floodgate.Policy{Name: "a", Algorithm: floodgate.FixedWindow, Limit: 3, Window: time.Second}, 0},
		{floodgate.Policy{Name: "a", Algorithm: floodgate.TokenBucket, Limit: 0, Window: time.Second}, 0}, // invalid
	} {
		if got := tc.p.Interval(); got != tc.want {
			t.Errorf("%v: Interval() = %v, want %v", tc.p, got, tc.want)
		}
	}
}
