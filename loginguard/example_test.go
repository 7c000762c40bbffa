package loginguard_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/floodgate-rl/floodgate/loginguard"
)

// The progressive response for one address guessing one account's
// password: allowed, then a CAPTCHA, then delays, then a lock.
func Example() {
	backend, err := loginguard.NewMemory(loginguard.MemoryOptions{})
	if err != nil {
		log.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	guard, err := loginguard.New(backend, loginguard.Options{
		Secret: []byte("a random secret of at least 32 bytes, from configuration"),
		Pair:   loginguard.Ladder{Captcha: 2, Delay: 3, Lock: 5},
		Clock:  func() time.Time { return now }, // fixed for a stable output; omit in real code
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	ip := netip.MustParseAddr("203.0.113.7")
	for range 8 {
		v, err := guard.Check(ctx, "Alice", ip)
		if err != nil {
			log.Fatal(err) // the store failed: refuse the login (fail closed)
		}
		fmt.Println(v)
		if !v.Proceed() {
			now = now.Add(v.RetryAfter) // a patient client waits
			continue
		}
		// ...the CAPTCHA (when required) and the password are wrong:
		if _, err := guard.Failure(ctx, "Alice", ip); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// allow
	// allow
	// captcha_required by pair
	// delay for 1s by pair
	// captcha_required by pair
	// delay for 2s by pair
	// captcha_required by pair
	// locked for 30m0s by pair
}
