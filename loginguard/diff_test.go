package loginguard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestDifferential runs the same random operation sequences on the pure
// step function, the Memory backend and the Lua scripts, and requires
// identical replies (verdict, locks crossed and all three states) at every
// step. Time moves forwards and, now and then, backwards.
func TestDifferential(t *testing.T) {
	mks := backends(t)
	ctx := context.Background()
	var seen [Locked + 1]int
	crossings := 0
	for seed := range uint64(12) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 41))
			opts := Options{
				Secret:            testSecret,
				Account:           Ladder{Captcha: rng.Int64N(3), Delay: 3 + rng.Int64N(3), Lock: 6 + rng.Int64N(4), Window: time.Duration(1+rng.IntN(5)) * time.Minute, Lockout: time.Duration(1+rng.IntN(5)) * time.Minute},
				IP:                Ladder{Captcha: 2 + rng.Int64N(3), Delay: 5 + rng.Int64N(3), Lock: 8 + rng.Int64N(5), Window: time.Duration(1+rng.IntN(10)) * time.Minute, Lockout: time.Minute},
				Pair:              Ladder{Captcha: 1 + rng.Int64N(2), Delay: 2 + rng.Int64N(2), Lock: 4 + rng.Int64N(3), Window: time.Minute, Lockout: time.Duration(1+rng.IntN(3)) * time.Minute},
				BaseDelay:         time.Duration(100+rng.IntN(900)) * time.Millisecond,
				MaxDelay:          time.Duration(2+rng.IntN(20)) * time.Second,
				AttemptTimeout:    time.Duration(1+rng.IntN(20)) * time.Second,
				StrictAccountLock: rng.IntN(2) == 0,
			}
			p, err := compile(&opts)
			if err != nil {
				t.Fatal(err)
			}
			g := newGuard(t, newPure(), opts) // for ids only
			names := []string{"ann", "bob", "cy"}
			nets := []string{"203.0.113.1/32", "198.51.100.0/32", "2001:db8::/64"}
			bs := map[string]Backend{}
			for name, mk := range mks {
				bs[name] = mk(t, fmt.Sprintf("lgdiff%d", seed))
			}
			now := t0.UnixMicro()
			for step := range 400 {
				switch r := rng.IntN(20); {
				case r < 12:
					now += rng.Int64N(3_000_000)
				case r < 18:
					now += rng.Int64N(60_000_000)
				case r < 19:
					now -= rng.Int64N(5_000_000) // a clock behind
				default:
					now += rng.Int64N(600_000_000)
				}
				acct, network := names[rng.IntN(len(names))], nets[rng.IntN(len(nets))]
				ids := [numDims]string{g.digest('a', acct, ""), g.digest('i', network, ""), g.digest('p', acct, network)}
				o := []op{opCheck, opCheck, opPeek, opFailure, opFailure, opFailure, opSuccess, opAbandon}[rng.IntN(8)]
				if rng.IntN(60) == 0 {
					// An unlock of a random set of dimensions (whether
					// each had state depends on each store's own expiry
					// clock, so only the states left are compared).
					var some [numDims]string
					mask := rng.IntN(7) + 1
					for d := range numDims {
						if mask&(1<<d) != 0 {
							some[d] = ids[d]
						}
					}
					for _, b := range bs {
						if _, err := b.remove(ctx, &some); err != nil {
							t.Fatal(err)
						}
					}
					continue
				}
				var ref reply
				first := true
				for name, b := range bs {
					r, err := b.run(ctx, o, now, &ids, &p)
					if err != nil {
						t.Fatalf("step %d %s: %v", step, name, err)
					}
					r.nows, r.write = [numDims]int64{}, false
					if first {
						ref, first = r, false
						seen[r.action]++
						if r.crossed != 0 {
							crossings++
						}
						continue
					}
					if r != ref {
						t.Fatalf("step %d op %d %s@%s at %d: backends disagree:\n%+v\n%+v", step, o, acct, network, now, ref, r)
					}
				}
			}
		})
	}
	// The sequences must reach every rung, or they prove little.
	for a, n := range seen {
		if n == 0 {
			t.Errorf("no step produced %v (seen %v)", Action(a), seen)
		}
	}
	if crossings == 0 {
		t.Error("no lock was crossed")
	}
	t.Logf("actions seen %v, locks crossed %d", seen, crossings)
}
