package clocksync_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocksync"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// TestSkewedInstancesAgree runs two limiters against one Redis, one whose
// clock is 5 s ahead and one 5 s behind. A token bucket of 5 per 10 s is
// drained by one instance, then the other tries 5 more at once. Without
// discipline, the instance ahead sees 10 s of refill the moment after the
// one behind drained the bucket, and admits 5 more: 10 in a burst meant to
// be 5. With clocksync.Clock as floodgate.Options.Clock both stamp Redis's
// time and admit 5 in total, whichever goes first.
func TestSkewedInstancesAgree(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	store, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := floodgate.NewTokenBucket("skew", 5, 10*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	ahead := func() time.Time { return time.Now().Add(5 * time.Second) }
	behind := func() time.Time { return time.Now().Add(-5 * time.Second) }
	limiter := func(prefix string, clock func() time.Time) *floodgate.Limiter {
		l, err := floodgate.New(store, floodgate.Options{Prefix: prefix, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	synced := func(local func() time.Time) func() time.Time {
		c, err := clocksync.New(client, clocksync.Options{Now: local})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		return c.Now
	}
	burst := func(l *floodgate.Limiter, id string) (admitted int, resets []time.Time) {
		for range 5 {
			res, err := l.Allow(context.Background(), p, id)
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed {
				admitted++
			}
			resets = append(resets, res.ResetAt)
		}
		return admitted, resets
	}
	prefix := fmt.Sprintf("fgt.skew.%x", time.Now().UnixNano())

	// The control: raw skewed clocks, the instance behind drains first.
	first, second := limiter(prefix, behind), limiter(prefix, ahead)
	a, _ := burst(first, "raw")
	b, _ := burst(second, "raw")
	t.Logf("raw clocks ±5s: behind admitted %d, then ahead admitted %d", a, b)
	if a+b != 10 {
		t.Fatalf("raw skewed clocks admitted %d; the control expects the known 10", a+b)
	}

	for _, order := range []string{"behind first", "ahead first"} {
		t.Run(order, func(t *testing.T) {
			lb, la := limiter(prefix, synced(behind)), limiter(prefix, synced(ahead))
			first, second := lb, la
			if order == "ahead first" {
				first, second = la, lb
			}
			id := "synced-" + order
			a, ra := burst(first, id)
			b, rb := burst(second, id)
			t.Logf("disciplined clocks, %s: %d then %d admitted", order, a, b)
			if a != 5 || b != 0 {
				t.Fatalf("admitted %d then %d, want 5 then 0", a, b)
			}
			// Both instances report the same bucket: reset times agree to
			// within the measurement error, not 10 s apart.
			if d := rb[0].Sub(ra[4]).Abs(); d > 100*time.Millisecond {
				t.Fatalf("the instances' reset times differ by %v", d)
			}
		})
	}
}
