package quota

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestRetryAfterWalksHolds: RetryAfter is the expiry of the hold at which
// the estimates given back, in expiry order, first make the cost fit, in
// both stores alike, also past the Redis script's first 64 holds; when
// the first maxWalk (128) holds do not free enough, it is the 128th's
// expiry, before which the cost cannot fit; when usage alone leaves no
// room, the period's end.
func TestRetryAfterWalksHolds(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		q := newQuota(t, b.store, monthly(1000), Options{Prefix: "retrywalk", MaxPending: 1000})
		if r, err := q.CheckAt(ctx, t0, "u", 600); err != nil || !r.Allowed {
			t.Fatalf("check 600: %+v, %v", r, err)
		}
		// 200 holds of 1 unit, one a second: hold i expires at
		// i s + 10 min. 800 used and held.
		for i := range 200 {
			if r, err := q.ReserveAt(ctx, t0.Add(time.Duration(i)*time.Second), "u", fmt.Sprint("r", i), 1); err != nil || !r.Allowed {
				t.Fatalf("reserve %d: %+v, %v", i, r, err)
			}
		}
		now := t0.Add(200 * time.Second)
		expiry := func(i int) time.Duration { return time.Duration(i)*time.Second + 10*time.Minute - 200*time.Second }
		for _, c := range []struct {
			cost int64
			want time.Duration // from now
		}{
			{201, expiry(0)},                      // the first hold frees enough
			{265, expiry(64)},                     // the 65th, past the script's first 64
			{328, expiry(127)},                    // the 128th
			{329, expiry(127)},                    // needs the 129th: not before the 128th's expiry
			{400, expiry(127)},                    // needs all 200
			{401, untilNewYear - 200*time.Second}, // usage alone leaves no room
		} {
			r, err := q.CheckAt(ctx, now, "u", c.cost)
			if err != nil || r.Reason != ReasonExhausted {
				t.Fatalf("check %d: %+v, %v", c.cost, r, err)
			}
			if r.RetryAfter != c.want {
				t.Errorf("check %d: RetryAfter %v, want %v", c.cost, r.RetryAfter, c.want)
			}
		}
	})
}

// TestRetryAfterTooManyPendingAfterMaxPendingLowered: five holds taken
// under MaxPending 5, then a reserve under MaxPending 2 (a policy
// lowered) is refused for too many pending until four of them have
// expired, not the first: its RetryAfter is the fourth's expiry, in both
// stores alike; for a cost with room only once the fifth has expired, the
// fifth's.
func TestRetryAfterTooManyPendingAfterMaxPendingLowered(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		wide := newQuota(t, b.store, monthly(100), Options{Prefix: "pendlow", MaxPending: 5})
		// Hold i (1 unit) is taken at i min and expires at i min + 10 min.
		for i := range 5 {
			if r, err := wide.ReserveAt(ctx, t0.Add(time.Duration(i)*time.Minute), "u", fmt.Sprint("r", i), 1); err != nil || !r.Allowed {
				t.Fatalf("reserve %d: %+v, %v", i, r, err)
			}
		}
		narrow := newQuota(t, b.store, monthly(100), Options{Prefix: "pendlow", MaxPending: 2})
		now := t0.Add(5 * time.Minute)
		expiry := func(i int) time.Duration { return time.Duration(i)*time.Minute + 10*time.Minute - 5*time.Minute }
		for _, c := range []struct {
			cost int64
			want time.Duration // from now
		}{
			{1, expiry(3)},   // 5 held, 2 allowed: 4 must go
			{100, expiry(4)}, // and 100 fits only once all 5 are back
		} {
			r, err := narrow.ReserveAt(ctx, now, "u", "new", c.cost)
			if err != nil || r.Reason != ReasonTooManyPending {
				t.Fatalf("reserve %d under MaxPending 2: %+v, %v", c.cost, r, err)
			}
			if r.RetryAfter != c.want {
				t.Errorf("reserve %d under MaxPending 2: RetryAfter %v, want %v", c.cost, r.RetryAfter, c.want)
			}
		}
		if r, err := narrow.ReserveAt(ctx, now.Add(expiry(3)), "u", "new", 1); err != nil || !r.Allowed {
			t.Fatalf("reserve at the RetryAfter given: %+v, %v", r, err)
		}
	})
}
