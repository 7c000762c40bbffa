package fallback

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

func TestNewRejectsBadOptions(t *testing.T) {
	m, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name           string
		primary, local floodgate.Store
		opts           Options
	}{
		{"nil primary", nil, m, Options{}},
		{"nil local", m, nil, Options{}},
		{"nil *memstore.Store primary", (*memstore.Store)(nil), m, Options{}},
		{"nil *memstore.Store local", m, (*memstore.Store)(nil), Options{}},
		{"bad default mode", m, m, Options{DefaultMode: 9}},
		{"bad policy mode", m, m, Options{Modes: map[string]Mode{"api": 0}}},
		{"negative budget", m, m, Options{Budget: -time.Millisecond}},
		{"budget too long", m, m, Options{Budget: time.Minute}},
		{"bad policy budget", m, m, Options{Budgets: map[string]time.Duration{"api": 0}}},
		{"negative instances", m, m, Options{Instances: -1}},
		{"negative factor", m, m, Options{Factor: -0.5}},
		{"NaN factor", m, m, Options{Factor: math.NaN()}},
		{"bad breaker", m, m, Options{Breaker: BreakerOptions{Jitter: 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.primary, tc.local, tc.opts)
			if !errors.Is(err, ErrInvalidOptions) || s != nil {
				t.Fatalf("New = %v, %v; want nil, ErrInvalidOptions", s, err)
			}
		})
	}
	s, err := New(m, m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Mode("anything") != ModeLocal || s.Budget("anything") != DefaultBudget {
		t.Fatalf("defaults: mode %v budget %v", s.Mode("anything"), s.Budget("anything"))
	}
}

func TestModeAndReasonNames(t *testing.T) {
	for _, m := range []Mode{ModeLocal, ModeOpen, ModeClosed} {
		got, err := ParseMode(m.String())
		if err != nil || got != m {
			t.Fatalf("ParseMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	if _, err := ParseMode("fail-open"); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("ParseMode(fail-open) error %v", err)
	}
	seen := map[string]bool{}
	for _, r := range Reasons() {
		if seen[r.String()] || r == ReasonNone {
			t.Fatalf("reason %v repeated or none", r)
		}
		seen[r.String()] = true
	}
	if Reason(99).String() != "Reason(99)" || Mode(0).String() != "Mode(0)" || BreakerState(7).String() != "BreakerState(7)" {
		t.Fatal("unknown values are not printed as such")
	}
}

func TestScalePolicy(t *testing.T) {
	for _, tc := range []struct {
		name       string
		p          floodgate.Policy
		instances  int
		factor     float64
		limit, brs int64
	}{
		{"unchanged", floodgate.Policy{Name: "a", Algorithm: floodgate.FixedWindow, Limit: 100, Window: time.Minute}, 1, 1, 100, 0},
		{"divided and widened", floodgate.Policy{Name: "a", Algorithm: floodgate.FixedWindow, Limit: 100, Window: time.Minute}, 10, 2, 20, 0},
		{"rounded up", floodgate.Policy{Name: "a", Algorithm: floodgate.SlidingWindow, Limit: 1000, Window: time.Minute}, 3, 1, 334, 0},
		{"at least one", floodgate.Policy{Name: "a", Algorithm: floodgate.FixedWindow, Limit: 5, Window: time.Minute}, 100, 1, 1, 0},
		{"burst scaled", floodgate.Policy{Name: "a", Algorithm: floodgate.TokenBucket, Limit: 100, Window: time.Minute, Burst: 40}, 4, 1.5, 38, 15},
		{"sliding log capped", floodgate.Policy{Name: "a", Algorithm: floodgate.SlidingLog, Limit: 90_000, Window: time.Minute}, 1, 3, floodgate.MaxSlidingLogLimit, 0},
		{"rate capped at 1/µs", floodgate.Policy{Name: "a", Algorithm: floodgate.GCRA, Limit: 600, Window: time.Millisecond}, 1, 4, 1000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.p.Validate(); err != nil {
				t.Fatal(err)
			}
			q := scalePolicy(tc.p, tc.instances, tc.factor)
			if q.Limit != tc.limit || q.Burst != tc.brs || q.Name != tc.p.Name || q.Window != tc.p.Window {
				t.Fatalf("scalePolicy = %v, want limit %d burst %d", q, tc.limit, tc.brs)
			}
			if err := q.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestLocalPolicyMustKeepIdentity(t *testing.T) {
	local, _ := memstore.New(memstore.Options{})
	failing := failStore{}
	for _, tc := range []struct {
		name string
		fn   func(floodgate.Policy) floodgate.Policy
	}{
		{"renamed", func(p floodgate.Policy) floodgate.Policy { p.Name = "other"; return p }},
		{"other algorithm", func(p floodgate.Policy) floodgate.Policy { p.Algorithm = floodgate.SlidingLog; return p }},
		{"invalid", func(p floodgate.Policy) floodgate.Policy { p.Limit = 0; return p }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(failing, local, Options{LocalPolicy: tc.fn})
			if err != nil {
				t.Fatal(err)
			}
			p, _ := floodgate.NewFixedWindow("api", 10, time.Minute)
			layers := []floodgate.Layer{{Policy: p, Key: "fg:api:fw:{ru}", Cost: 1}}
			out := make([]floodgate.Result, 1)
			err = s.Decide(context.Background(), time.Now().UnixMicro(), layers, out)
			// A configuration error, not an outage: a caller that fails
			// open on ErrStoreUnavailable must not stop limiting for it.
			if !errors.Is(err, floodgate.ErrInvalidPolicy) || errors.Is(err, floodgate.ErrStoreUnavailable) {
				t.Fatalf("Decide = %v, want ErrInvalidPolicy and not ErrStoreUnavailable", err)
			}
		})
	}
	s, err := New(failing, local, Options{LocalPolicy: func(p floodgate.Policy) floodgate.Policy { p.Limit = 2; return p }})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := floodgate.NewFixedWindow("api", 10, time.Minute)
	out := make([]floodgate.Result, 1)
	if err := s.Decide(context.Background(), time.Now().UnixMicro(), []floodgate.Layer{{Policy: p, Key: "k{x}", Cost: 1}}, out); err != nil || out[0].Limit != 2 {
		t.Fatalf("custom local policy: %+v, %v; want limit 2", out[0], err)
	}
}

// failStore always fails as unavailable.
type failStore struct{}

func (failStore) Decide(context.Context, int64, []floodgate.Layer, []floodgate.Result) error {
	return floodgate.ErrStoreUnavailable
}
