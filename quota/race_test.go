package quota

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// admitted runs call(0) .. call(n-1) from n goroutines at once and returns
// how many were allowed; an error fails the test.
func admitted(t *testing.T, n int, call func(i int) (Result, error)) int64 {
	t.Helper()
	var count atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, err := call(i)
			if err != nil {
				t.Error(err)
				return
			}
			if r.Allowed {
				count.Add(1)
			}
		})
	}
	wg.Wait()
	return count.Load()
}

// TestLessonConcurrency is the lesson's incident as a test: limit 1000,
// identity at 990, 200 concurrent checks of cost 1 → exactly 10 admitted,
// every run.
func TestLessonConcurrency(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		q := newQuota(t, b.store, monthly(1000), Options{Prefix: "lesson"})
		for run := range 5 {
			id := fmt.Sprintf("key-%d", run)
			if r, err := q.CheckAt(ctx, t0, id, 990); err != nil || !r.Allowed {
				t.Fatalf("preset: %+v, %v", r, err)
			}
			got := admitted(t, 200, func(int) (Result, error) { return q.CheckAt(ctx, t0, id, 1) })
			if got != 10 {
				t.Fatalf("run %d: %d admitted, want exactly 10", run, got)
			}
			if r, err := q.CheckAt(ctx, t0, id, 0); err != nil || r.Used != 1000 {
				t.Fatalf("run %d: final %+v, %v; want used 1000", run, r, err)
			}
		}
	})
}

// TestConcurrentReserveSettle runs 100 reserve/settle pairs at once, with
// actual costs under and over their estimates: the final usage is exactly
// the sum of the actuals and nothing stays reserved.
func TestConcurrentReserveSettle(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		q := newQuota(t, b.store, monthly(10_000_000), Options{Prefix: "pairs"})
		rng := rand.New(rand.NewPCG(1, 2))
		type pair struct{ est, actual int64 }
		pairs := make([]pair, 100)
		var want int64
		for i := range pairs {
			pairs[i] = pair{est: 100 + rng.Int64N(900), actual: rng.Int64N(1500)}
			want += pairs[i].actual
		}
		var wg sync.WaitGroup
		for i, p := range pairs {
			wg.Go(func() {
				id := fmt.Sprintf("req-%d", i)
				if r, err := q.ReserveAt(ctx, t0, "tenant", id, p.est); err != nil || !r.Allowed {
					t.Errorf("reserve %s: %+v, %v", id, r, err)
					return
				}
				r, err := q.SettleAt(ctx, t0, "tenant", id, p.actual)
				if err != nil || r.Charged != p.actual || r.Refunded != max(p.est-p.actual, 0) || r.Unmatched || r.Replayed {
					t.Errorf("settle %s (est %d, actual %d): %+v, %v", id, p.est, p.actual, r, err)
				}
			})
		}
		wg.Wait()
		r, err := q.CheckAt(ctx, t0, "tenant", 0)
		if err != nil || r.Used != want || r.Reserved != 0 {
			t.Fatalf("final %+v, %v; want used %d, reserved 0", r, err, want)
		}
	})
}

// TestConcurrentReserveContention: limit 1000, 200 concurrent holds of 10
// → exactly 100 admitted, and the denied ones hold nothing.
func TestConcurrentReserveContention(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		q := newQuota(t, b.store, monthly(1000), Options{Prefix: "holds"})
		got := admitted(t, 200, func(i int) (Result, error) {
			return q.ReserveAt(ctx, t0, "tenant", fmt.Sprintf("r%d", i), 10)
		})
		r, err := q.CheckAt(ctx, t0, "tenant", 0)
		if got != 100 || err != nil || r.Reserved != 1000 {
			t.Fatalf("%d admitted, final %+v, %v; want 100 admitted and 1000 reserved", got, r, err)
		}
	})
}

// TestConcurrentDuplicateSettle settles one request id from 50 goroutines
// at once (retries, or several instances): it is counted once, one caller
// gets the charge and the refund, and every other the same standing,
// replayed, with nothing charged or refunded.
func TestConcurrentDuplicateSettle(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		q := newQuota(t, b.store, monthly(1000), Options{Prefix: "dup"})
		if _, err := q.ReserveAt(ctx, t0, "tenant", "job-1", 500); err != nil {
			t.Fatal(err)
		}
		results := make([]Result, 50)
		var wg sync.WaitGroup
		for i := range results {
			wg.Go(func() {
				r, err := q.SettleAt(ctx, t0, "tenant", "job-1", 300)
				if err != nil {
					t.Error(err)
				}
				results[i] = r
			})
		}
		wg.Wait()
		first := 0
		for _, r := range results {
			want := view{Allowed: true, Used: 300, Remaining: 700, Replayed: true, Period: "2026-12"}
			if !r.Replayed {
				first++
				want.Charged, want.Refunded, want.Replayed = 300, 200, false
			}
			if got := viewOf(r); got != want {
				t.Fatalf("outcome %+v, want %+v", got, want)
			}
		}
		if first != 1 {
			t.Fatalf("%d settlements were not replays, want exactly 1", first)
		}
		if r, err := q.CheckAt(ctx, t0, "tenant", 0); err != nil || r.Used != 300 {
			t.Fatalf("final %+v, %v; want used 300", r, err)
		}
	})
}
