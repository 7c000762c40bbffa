package floodgate_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// A first limiter in ten lines: 5 requests per minute per user, decided
// in memory.
func Example() {
	store, _ := memstore.New(memstore.Options{})
	limiter, _ := floodgate.New(store, floodgate.Options{})
	policy, _ := floodgate.NewSlidingWindow("api", 5, time.Minute)

	for i := 1; i <= 6; i++ {
		r, err := limiter.Allow(context.Background(), policy, "user-42")
		if err != nil {
			panic(err)
		}
		fmt.Printf("request %d: allowed=%v remaining=%d\n", i, r.Allowed, r.Remaining)
	}
	// Output:
	// request 1: allowed=true remaining=4
	// request 2: allowed=true remaining=3
	// request 3: allowed=true remaining=2
	// request 4: allowed=true remaining=1
	// request 5: allowed=true remaining=0
	// request 6: allowed=false remaining=0
}

// Weighted requests: an LLM call costing 700 tokens against 1,000 tokens per
// minute; a second one does not fit and consumes nothing.
func ExampleLimiter_AllowN() {
	store, _ := memstore.New(memstore.Options{})
	limiter, _ := floodgate.New(store, floodgate.Options{})
	tokens, _ := floodgate.NewFixedWindow("llm-tokens", 1000, time.Minute)
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

	r1, _ := limiter.AllowAt(context.Background(), now, tokens, "key-1", 700)
	r2, _ := limiter.AllowAt(context.Background(), now, tokens, "key-1", 700)
	fmt.Println(r1.Allowed, r1.Remaining)
	fmt.Println(r2.Allowed, r2.Remaining, r2.RetryAfter)
	// Output:
	// true 300
	// false 300 1m0s
}

// GCRA as a shaper: instead of denying, it tells the caller how long to wait
// so the output stays at 10 per second.
func ExampleNewGCRA_shaping() {
	store, _ := memstore.New(memstore.Options{})
	limiter, _ := floodgate.New(store, floodgate.Options{})
	p := floodgate.Policy{Name: "shape", Algorithm: floodgate.GCRA, Limit: 10, Window: time.Second, Burst: 1, MaxDelay: time.Second}
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for range 4 {
		r, _ := limiter.AllowAt(context.Background(), now, p, "downstream", 1)
		fmt.Println(r.Allowed, r.Delay)
	}
	// Output:
	// true 0s
	// true 100ms
	// true 200ms
	// true 300ms
}

// Layers are decided all-or-nothing: the per-user layer denies the 6th
// request, and the global layer is not charged for it.
func ExampleLimiter_AllowLayers() {
	store, _ := memstore.New(memstore.Options{})
	limiter, _ := floodgate.New(store, floodgate.Options{})
	global, _ := floodgate.NewFixedWindow("edge", 10_000, time.Minute)
	perUser, _ := floodgate.NewSlidingWindow("per-user", 5, time.Minute)
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

	var d floodgate.Decision
	for range 6 {
		d, _ = limiter.AllowLayersAt(context.Background(), now, 1,
			floodgate.LayerSpec{Policy: global, Identity: "all"},
			floodgate.LayerSpec{Policy: perUser, Identity: "user-42"})
	}
	fmt.Println("allowed:", d.Allowed, "binding layer:", d.Binding)
	edge, _ := limiter.PeekAt(context.Background(), now, global, "all")
	fmt.Println("edge remaining:", edge.Remaining)
	// Output:
	// allowed: false binding layer: 1
	// edge remaining: 9995
}

// The three layers of a typical API, decided together in one store call: an edge
// fixed window for the whole server, a sliding window per user and a
// monthly quota per user. One user sends 150 requests in a minute; the
// per-user layer answers 429 first, at request 101, and the denied requests
// consume nothing from the edge layer or the quota.
func ExampleLimiter_AllowLayers_threeLayers() {
	store, _ := memstore.New(memstore.Options{})
	limiter, _ := floodgate.New(store, floodgate.Options{})
	edge, _ := floodgate.NewFixedWindow("edge", 10_000, time.Minute)
	perUser, _ := floodgate.NewSlidingWindow("per-user", 100, time.Minute)
	monthly, _ := floodgate.NewQuota("monthly", 10_000, floodgate.Calendar{Unit: floodgate.PeriodMonth})
	layers := []floodgate.LayerSpec{
		{Policy: edge, Identity: "server"},
		{Policy: perUser, Identity: "user-42"},
		{Policy: monthly, Identity: "user-42"},
	}
	names := []string{"edge", "per-user", "monthly"}
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

	for i := 1; i <= 150; i++ {
		now := start.Add(time.Duration(i) * 400 * time.Millisecond) // 150 requests in one minute
		d, _ := limiter.AllowLayersAt(context.Background(), now, 1, layers...)
		if !d.Allowed {
			fmt.Printf("request %d: 429 from the %s layer, retry after %v\n", i, names[d.Binding], d.Result().RetryAfter.Round(time.Second))
			break
		}
	}
	now := start.Add(101 * 400 * time.Millisecond)
	for i, l := range layers {
		r, _ := limiter.PeekAt(context.Background(), now, l.Policy, l.Identity)
		fmt.Printf("%s: %d of %d left\n", names[i], r.Remaining, r.Limit)
	}
	// Output:
	// request 101: 429 from the per-user layer, retry after 20s
	// edge: 9900 of 10000 left
	// per-user: 0 of 100 left
	// monthly: 9900 of 10000 left
}

// Shaping with Wait: a GCRA policy of 10 per second with MaxDelay admits a
// request that arrives too early and Wait sleeps through its Delay, so the
// caller acts at the shaped rate without timing anything itself.
func ExampleLimiter_Wait() {
	store, _ := memstore.New(memstore.Options{})
	limiter, _ := floodgate.New(store, floodgate.Options{})
	p := floodgate.Must(floodgate.NewGCRA("downstream", 10, time.Second, 1))
	p.MaxDelay = time.Second

	start := time.Now()
	for range 3 {
		if _, err := limiter.Wait(context.Background(), p, "worker", 1); err != nil {
			panic(err)
		}
	}
	fmt.Println("three calls took at least 150ms:", time.Since(start) >= 150*time.Millisecond)
	// Output:
	// three calls took at least 150ms: true
}
