package quota

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// TestPeriodOutsideEpochRefused: a time whose period does not lie within
// the Unix epoch..floodgate.MaxTimeMicros is refused with
// floodgate.ErrInvalidTime, naming the period, by every operation and in
// both stores, and nothing is written; floodgate.Limiter refuses the same
// times for a Quota policy. An outside walk found CheckAt on 1970-01-02
// (in the ISO week 1970-W01, from 1969-12-29) allowed, period
// 1969-12-29..1970-01-05, and a month quota in September 2112 (ending
// after MaxTimeMicros) allowed too.
func TestPeriodOutsideEpochRefused(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		week := newQuota(t, b.store, Policy{Name: "qe", Limit: 10, Calendar: Calendar{Unit: Week}}, Options{Prefix: "pb"})
		month := newQuota(t, b.store, Policy{Name: "qm", Limit: 10, Calendar: Calendar{Unit: Month}}, Options{Prefix: "pb"})
		jan2 := time.Date(1970, 1, 2, 0, 0, 0, 0, time.UTC)
		sep2112 := time.Date(2112, 9, 10, 0, 0, 0, 0, time.UTC) // before MaxTimeMicros (2112-09-17), in a month ending after it
		if sep2112.UnixMicro() > floodgate.MaxTimeMicros {
			t.Fatalf("%v is past MaxTimeMicros: ValidateTime, not the period, would refuse it", sep2112)
		}
		jan6 := time.Date(1970, 1, 6, 0, 0, 0, 0, time.UTC) // in 1970-W02, whose previous week is 1970-W01
		for _, tc := range []struct {
			name string
			call func() (Result, error)
			want string
		}{
			{"week check", func() (Result, error) { return week.CheckAt(ctx, jan2, "u", 1) }, "the week period 1970-W01 containing 1970-01-02T00:00:00Z runs from 1969-12-29T00:00:00Z"},
			{"week status", func() (Result, error) { return week.CheckAt(ctx, jan2, "u", 0) }, "1970-W01"},
			{"week reserve", func() (Result, error) { return week.ReserveAt(ctx, jan2, "u", "r1", 1) }, "1970-W01"},
			{"week settle", func() (Result, error) { return week.SettleAt(ctx, jan2, "u", "r1", 1) }, "1970-W01"},
			{"week restore", func() (Result, error) { return week.RestoreAt(ctx, jan2, "u", 5) }, "1970-W01"},
			{"week restore of the previous period", func() (Result, error) { return week.RestorePeriodAt(ctx, jan6, "u", "1970-W01", 5) }, "the week period 1970-W01 containing 1969-12-29T00:00:00Z"},
			{"month check", func() (Result, error) { return month.CheckAt(ctx, sep2112, "u", 1) }, "the month period 2112-09 containing 2112-09-10T00:00:00Z runs from 2112-09-01T00:00:00Z to 2112-10-01T00:00:00Z, outside the Unix epoch..2112-09-17"},
			{"month reserve", func() (Result, error) { return month.ReserveAt(ctx, sep2112, "u", "r2", 1) }, "2112-09"},
			{"month settle", func() (Result, error) { return month.SettleAt(ctx, sep2112, "u", "r2", 1) }, "2112-09"},
			{"month restore", func() (Result, error) { return month.RestoreAt(ctx, sep2112, "u", 5) }, "2112-09"},
		} {
			r, err := tc.call()
			if !errors.Is(err, floodgate.ErrInvalidTime) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %+v, %v; want ErrInvalidTime saying %q", tc.name, r, err, tc.want)
			}
		}
		if m, ok := b.store.(*MemoryStore); ok {
			if periods, records := m.Len(); periods != 0 || records != 0 {
				t.Fatalf("refused operations left %d periods, %d records", periods, records)
			}
		}
		if b.client != nil {
			if keys := b.client.Keys(ctx, "pb:*").Val(); len(keys) != 0 {
				t.Fatalf("refused operations wrote keys %v", keys)
			}
		}
		// The first week starting after the epoch, and the months up to
		// August 2112, are counted.
		if r, err := week.CheckAt(ctx, jan6, "u", 1); err != nil || !r.Allowed || r.Period.Key != "1970-W02" {
			t.Errorf("week check on 1970-01-06: %+v, %v; want allowed in 1970-W02", r, err)
		}
		if r, err := month.CheckAt(ctx, time.Date(2112, 8, 31, 0, 0, 0, 0, time.UTC), "u", 1); err != nil || !r.Allowed {
			t.Errorf("month check in August 2112: %+v, %v; want allowed", r, err)
		}
	})
}
