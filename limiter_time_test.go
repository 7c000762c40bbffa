package floodgate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// TestDecisionTimeOutOfRange: a decision time the stores cannot decide at
// (the Unix epoch itself, which a state reads as "no state yet", a time
// before it such as the zero time.Time, or one past 2^52 µs, where the Redis
// scripts' doubles are no longer exact) is refused with ErrInvalidTime and
// changes nothing. Before, the in-memory store decided at any time: a token
// bucket of one token admitted every request at the epoch (its state, last
// refilled at 0, read as fresh), and the zero time.Time was decided in
// year 1, while the Redis store refused late times as invalid layers.
func TestDecisionTimeOutOfRange(t *testing.T) {
	ctx := context.Background()
	tb, _ := floodgate.NewTokenBucket("tb", 1, time.Hour, 0)
	good := time.Unix(1_800_000_000, 0)
	for _, at := range []time.Time{time.UnixMicro(0), {}, time.UnixMicro(-1), time.UnixMicro(floodgate.MaxTimeMicros + 1), time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)} {
		l := newMem(t)
		for range 2 {
			if r, err := l.AllowAt(ctx, at, tb, "u", 1); !errors.Is(err, floodgate.ErrInvalidTime) {
				t.Fatalf("AllowAt %v: %+v, %v; want ErrInvalidTime", at, r, err)
			}
		}
		if d, err := l.AllowLayersAt(ctx, at, 1, floodgate.LayerSpec{Policy: tb, Identity: "u"}); !errors.Is(err, floodgate.ErrInvalidTime) {
			t.Fatalf("AllowLayersAt %v: %+v, %v; want ErrInvalidTime", at, d, err)
		}
		if r, err := l.PeekAt(ctx, good, tb, "u"); err != nil || r.Remaining != 1 {
			t.Fatalf("after refusals at %v: %+v, %v; want the full bucket", at, r, err)
		}
	}
	// The store refuses such a time itself, for callers of Decide.
	st, _ := memstore.New(memstore.Options{})
	layers := []floodgate.Layer{{Policy: tb, Key: "fg:tb:tb:{u}", Cost: 1}}
	out := make([]floodgate.Result, 1)
	for _, now := range []int64{0, -1, floodgate.MaxTimeMicros + 1} {
		if err := st.Decide(ctx, now, layers, out); !errors.Is(err, floodgate.ErrInvalidTime) {
			t.Fatalf("memstore Decide at %d: %v; want ErrInvalidTime", now, err)
		}
	}
	if err := st.Decide(ctx, floodgate.MaxTimeMicros, layers, out); err != nil || !out[0].Allowed {
		t.Fatalf("memstore Decide at the latest time: %+v, %v", out[0], err)
	}
}

// TestQuotaPeriodOutsideTimeRange checks that the Limiter refuses, with
// ErrInvalidTime, a Quota decision whose period starts before the Unix
// epoch, whether it builds the layers (LayersAt) or decides (AllowAt),
// and admits one whose period starts at the epoch.
func TestQuotaPeriodOutsideTimeRange(t *testing.T) {
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(store, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	week, err := floodgate.NewQuota("week", 10, floodgate.Calendar{Unit: floodgate.PeriodWeek})
	if err != nil {
		t.Fatal(err)
	}
	month, err := floodgate.NewQuota("month", 10, floodgate.Calendar{Unit: floodgate.PeriodMonth})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(1970, 1, 2, 0, 0, 0, 0, time.UTC) // in the ISO week 1970-W01, from 1969-12-29
	if _, err := l.AllowAt(context.Background(), at, week, "u", 1); !errors.Is(err, floodgate.ErrInvalidTime) {
		t.Errorf("AllowAt, week: got %v, want ErrInvalidTime", err)
	}
	if _, err := l.LayersAt(at, 1, floodgate.LayerSpec{Policy: month, Identity: "u"}, floodgate.LayerSpec{Policy: week, Identity: "u"}); !errors.Is(err, floodgate.ErrInvalidTime) {
		t.Errorf("LayersAt, week: got %v, want ErrInvalidTime", err)
	}
	if r, err := l.AllowAt(context.Background(), at, month, "u", 1); err != nil || !r.Allowed {
		t.Errorf("AllowAt, month from the epoch: got %+v, %v, want admitted", r, err)
	}
}
