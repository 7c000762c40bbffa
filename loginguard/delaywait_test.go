package loginguard

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// TestDelayForAttemptsInProgressEndsWhenTheyExpire is the re-walk's
// report: not strict, AttemptTimeout 3 s, an attacker leaves 28 attempts
// in progress against an account (from clean pairs, each only a CAPTCHA)
// with no failure; the owner, after one typo, was told to wait 60 s (the
// Delay rung driven by 1 failure and 28 in progress, capped at MaxDelay)
// but could proceed 3 s later, once those had expired. The wait answered
// is now when they expire: the failure alone is below the Delay rung.
func TestDelayForAttemptsInProgressEndsWhenTheyExpire(t *testing.T) {
	opts := Options{AttemptTimeout: 3 * time.Second} // default ladders: account delay at 10, lock at 20
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			c := &clock{t: t0}
			opts := opts
			opts.Clock = c.now
			g := newGuard(t, mk(t, "lgdelaywait"), opts)
			ctx := context.Background()
			for i := range 28 {
				v, err := g.Check(ctx, "owner", netip.AddrFrom4([4]byte{10, 9, 0, byte(i + 1)}))
				if err != nil {
					t.Fatal(err)
				}
				if !v.Proceed() {
					t.Fatalf("attacker's attempt %d: %v, want it to proceed", i, v)
				}
			}
			c.set(t0.Add(100 * time.Millisecond))
			home := addr("192.0.2.80")
			if v, err := g.Check(ctx, "owner", home); err != nil || !v.Proceed() {
				t.Fatalf("owner's check: %v, %v; want it to proceed", v, err)
			}
			o, err := g.Failure(ctx, "owner", home)
			if err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("delay for %v by account", 3*time.Second)
			if o.Next.String() != want || !o.Next.Until.Equal(t0.Add(3100*time.Millisecond)) {
				t.Fatalf("after the owner's typo: %v (until %v), want %s (until 3.1 s)", o.Next, o.Next.Until.Sub(t0), want)
			}
			c.set(t0.Add(3100 * time.Millisecond))
			if v, err := g.Check(ctx, "owner", home); err != nil || v.Action != Allow {
				t.Fatalf("owner's check when the attempts in progress expired: %v, %v; want allow", v, err)
			}
		})
	}
}
