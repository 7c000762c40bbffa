package closedloop

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestHistogramBuckets(t *testing.T) {
	// Every value falls in a bucket whose upper edge is ≥ the value and
	// within the stated resolution of it; bucket indices never decrease.
	prev := -1
	for _, v := range []uint64{0, 1, 63, 64, 65, 127, 128, 129, 1000, 4095, 4096, 1e6, 1e9, 1<<62 + 12345, 1<<63 - 1} {
		i := bucketOf(v)
		if i < prev {
			t.Errorf("bucketOf(%d) = %d < previous %d", v, i, prev)
		}
		prev = i
		if i >= nBuckets {
			t.Fatalf("bucketOf(%d) = %d out of range", v, i)
		}
		up := bucketUpper(i)
		if up < v {
			t.Errorf("bucketUpper(bucketOf(%d)) = %d < value", v, up)
		}
		if v >= subCount && float64(up-v) > float64(v)/subCount {
			t.Errorf("bucket of %d ends at %d: wider than 1/%d", v, up, subCount)
		}
		if i > 0 && bucketUpper(i-1) >= v {
			t.Errorf("value %d also fits the previous bucket (ends %d)", v, bucketUpper(i-1))
		}
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h Histogram
	if got := h.Quantile(0.99); got != 0 {
		t.Errorf("empty p99 = %v", got)
	}
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	h.Record(-5) // counted as zero
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{
		{0.5, 500 * time.Microsecond},
		{0.99, 990 * time.Microsecond},
		{1, 1000 * time.Microsecond},
	} {
		got := h.Quantile(tc.q)
		if got < tc.want || float64(got-tc.want) > float64(tc.want)/subCount {
			t.Errorf("Quantile(%v) = %v, want %v within 1/%d", tc.q, got, tc.want, subCount)
		}
	}
	if got := h.Quantile(0); got != 0 {
		t.Errorf("Quantile(0) = %v, want 0 (the recorded negative)", got)
	}
	if got := h.Max(); got != time.Millisecond {
		t.Errorf("Max = %v", got)
	}
	var m Histogram
	m.Merge(&h)
	m.Merge(&h)
	if m.Count() != 2*h.Count() || m.Quantile(0.5) != h.Quantile(0.5) {
		t.Errorf("merge: count %d p50 %v, want %d %v", m.Count(), m.Quantile(0.5), 2*h.Count(), h.Quantile(0.5))
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{Workers: 1, Duration: time.Millisecond, Keys: []string{"k"}}
	for name, c := range map[string]Config{
		"workers":  {Duration: time.Millisecond, Keys: []string{"k"}},
		"duration": {Workers: 1, Keys: []string{"k"}},
		"warmup":   {Workers: 1, Duration: time.Millisecond, Warmup: -1, Keys: []string{"k"}},
		"keys":     {Workers: 1, Duration: time.Millisecond},
	} {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err = %v, want ErrConfig", name, err)
		}
		if _, err := Run(context.Background(), c, func(context.Context, string) (bool, error) { return true, nil }); !errors.Is(err, ErrConfig) {
			t.Errorf("Run %s: err = %v, want ErrConfig", name, err)
		}
	}
	if err := good.Validate(); err != nil {
		t.Errorf("good config: %v", err)
	}
	if _, err := Run(context.Background(), good, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("nil op: err = %v", err)
	}
}

// TestRunCounts checks that every measured call is counted exactly once, in
// the right column, and that only the configured keys are used.
func TestRunCounts(t *testing.T) {
	keys := []string{"a", "b", "c", "d"}
	var mu sync.Mutex
	calls := map[string]int{}
	boom := errors.New("boom")
	op := func(_ context.Context, key string) (bool, error) {
		mu.Lock()
		calls[key]++
		n := calls[key]
		mu.Unlock()
		switch key {
		case "c":
			return false, nil
		case "d":
			if n%2 == 0 {
				return false, boom
			}
		}
		return true, nil
	}
	// between counts the calls made after MeasureStart began and before
	// MeasureEnd ran: every measured call must be one of them.
	var started, ended atomic.Bool
	var between atomic.Int64
	var startCalls, endCalls int
	counted := func(_ context.Context, key string) (bool, error) {
		if started.Load() && !ended.Load() {
			between.Add(1)
		}
		return op(context.Background(), key)
	}
	st, err := Run(context.Background(), Config{
		Workers: 4, Duration: 50 * time.Millisecond, Warmup: 10 * time.Millisecond, Keys: keys, Seed: 7,
		MeasureStart: func() { startCalls++; started.Store(true) },
		MeasureEnd:   func() { endCalls++; ended.Store(true) },
	}, counted)
	if err != nil {
		t.Fatal(err)
	}
	if startCalls != 1 || endCalls != 1 {
		t.Fatalf("MeasureStart called %d times, MeasureEnd %d, want 1 each", startCalls, endCalls)
	}
	if got := st.Allowed + st.Denied + st.Errors; got > uint64(between.Load()) {
		t.Errorf("measured %d calls, but only %d were made between the hooks", got, between.Load())
	}
	total := 0
	for k, n := range calls {
		if k < "a" || k > "d" {
			t.Errorf("unexpected key %q", k)
		}
		total += n
	}
	measured := st.Allowed + st.Denied + st.Errors
	if measured == 0 || measured > uint64(total) {
		t.Fatalf("measured %d of %d calls", measured, total)
	}
	if st.Latency.Count() != measured {
		t.Errorf("latency count %d != measured %d", st.Latency.Count(), measured)
	}
	if st.Allowed == 0 || st.Denied == 0 || st.Errors == 0 {
		t.Errorf("allowed %d denied %d errors %d: want all non-zero", st.Allowed, st.Denied, st.Errors)
	}
	if !errors.Is(st.FirstError, boom) {
		t.Errorf("first error = %v", st.FirstError)
	}
	if st.Workers != 4 || st.Elapsed < 50*time.Millisecond {
		t.Errorf("workers %d elapsed %v", st.Workers, st.Elapsed)
	}
	if st.PerSecond() <= 0 || st.Decisions() != st.Allowed+st.Denied {
		t.Errorf("per second %v decisions %d", st.PerSecond(), st.Decisions())
	}
}

// TestRunConcurrency checks that the configured number of workers really
// run at once.
func TestRunConcurrency(t *testing.T) {
	const workers = 8
	var mu sync.Mutex
	inFlight, peak := 0, 0
	op := func(context.Context, string) (bool, error) {
		mu.Lock()
		inFlight++
		peak = max(peak, inFlight)
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		mu.Lock()
		inFlight--
		mu.Unlock()
		return true, nil
	}
	if _, err := Run(context.Background(), Config{Workers: workers, Duration: 60 * time.Millisecond, Keys: []string{"k"}}, op); err != nil {
		t.Fatal(err)
	}
	if peak != workers {
		t.Errorf("peak concurrency %d, want %d", peak, workers)
	}
	if inFlight != 0 {
		t.Errorf("%d calls still in flight after Run returned", inFlight)
	}
}

func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	op := func(context.Context, string) (bool, error) { return true, nil }
	go func() {
		time.Sleep(20 * time.Millisecond)
		cancel()
	}()
	_, err := Run(ctx, Config{Workers: 2, Duration: time.Hour, Keys: []string{"k"}}, op)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

// An operation slower than the whole measured period (a stalled machine
// against a short Duration) still gets one measured: the period waits for
// it rather than measuring nothing.
func TestRunSlowerThanDuration(t *testing.T) {
	op := func(context.Context, string) (bool, error) {
		time.Sleep(20 * time.Millisecond)
		return true, nil
	}
	st, err := Run(context.Background(), Config{Workers: 1, Duration: time.Millisecond, Keys: []string{"k"}}, op)
	if err != nil {
		t.Fatal(err)
	}
	if st.Allowed < 1 || st.Elapsed < 20*time.Millisecond {
		t.Errorf("allowed %d in %v; want at least one operation, measured whole", st.Allowed, st.Elapsed)
	}
}

func ExampleRun() {
	op := func(_ context.Context, key string) (bool, error) { return key != "blocked", nil }
	st, err := Run(context.Background(), Config{Workers: 2, Duration: 10 * time.Millisecond, Keys: []string{"blocked"}}, op)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(st.Allowed == 0, st.Denied > 0)
	// Output: true true
}
