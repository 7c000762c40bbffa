package quota_test

import (
	"context"
	"errors"
	"fmt"
	"time"
	_ "time/tzdata"

	"github.com/floodgate-rl/floodgate/quota"
)

// An LLM gateway bills tenants in tokens: 100,000 per calendar month in
// the tenant's time zone. The real cost of a call is known only after the
// model answers, so the gateway reserves the worst case first and settles
// the actual count afterwards. (Production code would use
// quota.NewRedisStore; times are fixed here so the output is stable.)
func Example_llmTokens() {
	ctx := context.Background()
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		panic(err)
	}
	store, err := quota.NewMemoryStore(quota.MemoryOptions{})
	if err != nil {
		panic(err)
	}
	q, err := quota.New(store, quota.Policy{
		Name:     "llm-tokens",
		Limit:    100_000,
		Calendar: quota.Calendar{Unit: quota.Month, Location: ny},
	}, quota.Options{SoftThreshold: 0.8, HoldTTL: 10 * time.Minute})
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 12, 31, 23, 50, 0, 0, ny)
	report := func(r quota.Result, err error) quota.Result {
		if errors.Is(err, quota.ErrQuotaStateLost) {
			// The month's counter vanished (evicted, deleted): fail closed
			// and restore it from billing records with q.Restore.
			fmt.Println("quota state lost:", err)
		} else if err != nil {
			fmt.Println("quota store error:", err)
		}
		return r
	}

	// Before the call: hold prompt tokens + max_tokens.
	r := report(q.ReserveAt(ctx, now, "tenant-42", "req-1", 4_000))
	fmt.Println("reserve:", r.Allowed, "reserved", r.Reserved, "remaining", r.Remaining, "period", r.Period.Key)

	// After the call: the model used 2,750 tokens; the rest is refunded.
	r = report(q.SettleAt(ctx, now.Add(3*time.Second), "tenant-42", "req-1", 2_750))
	fmt.Println("settle:", "used", r.Used, "refunded", r.Refunded)

	// A retry of the same settlement (or another instance) changes nothing.
	r = report(q.SettleAt(ctx, now.Add(4*time.Second), "tenant-42", "req-1", 2_750))
	fmt.Println("retry:", "replayed", r.Replayed, "used", r.Used)

	// A long generation overran its estimate: it is charged in full, and
	// the soft threshold tells the gateway to warn the tenant.
	report(q.ReserveAt(ctx, now.Add(time.Minute), "tenant-42", "req-2", 60_000))
	r = report(q.SettleAt(ctx, now.Add(2*time.Minute), "tenant-42", "req-2", 81_000))
	fmt.Printf("overrun: used %d, %.0f%% soft=%v exhausted=%v\n", r.Used, 100*r.Fraction, r.Soft, r.Exhausted)

	// What is left no longer fits a large request; the hint is the end of
	// the month in New York.
	r = report(q.ReserveAt(ctx, now.Add(3*time.Minute), "tenant-42", "req-3", 20_000))
	fmt.Println("denied:", r.Allowed, r.Reason, "retry after", r.RetryAfter)

	// Midnight in New York starts a fresh allowance.
	r = report(q.ReserveAt(ctx, now.Add(10*time.Minute), "tenant-42", "req-3", 20_000))
	fmt.Println("january:", r.Allowed, "period", r.Period.Key, "remaining", r.Remaining)

	// Output:
	// reserve: true reserved 4000 remaining 96000 period 2026-12
	// settle: used 2750 refunded 1250
	// retry: replayed true used 2750
	// overrun: used 83750, 84% soft=true exhausted=false
	// denied: false exhausted retry after 7m0s
	// january: true period 2027-01 remaining 80000
}
