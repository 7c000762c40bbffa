package loginguard

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentFailuresCountedExactly: 200 failures for one account at
// once, from 200 addresses, are all counted, and the account lock is
// crossed by exactly one of them. The same from a single address counts
// 200 in every dimension and crosses each lock once.
func TestConcurrentFailuresCountedExactly(t *testing.T) {
	const n = 200
	opts := Options{
		Account: Ladder{Captcha: 10, Delay: 20, Lock: 50, Window: time.Hour, Lockout: time.Hour},
		IP:      Ladder{Captcha: 10, Delay: 20, Lock: 120, Window: time.Hour, Lockout: time.Hour},
		Pair:    Ladder{Captcha: 5, Delay: 10, Lock: 30, Window: time.Hour, Lockout: time.Hour},
	}
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			for _, spread := range []bool{true, false} {
				t.Run(fmt.Sprintf("many-addresses=%v", spread), func(t *testing.T) {
					g := newGuard(t, mk(t, fmt.Sprintf("lgconc-%v", spread)), opts)
					ctx := context.Background()
					var crossed [numDims + 1]atomic.Int64
					var wg sync.WaitGroup
					for i := range n {
						ip := addr("203.0.113.1")
						if spread {
							ip = netip.AddrFrom4([4]byte{10, 1, byte(i / 250), byte(i%250 + 1)})
						}
						wg.Go(func() {
							o, err := g.Failure(ctx, "target", ip)
							if err != nil {
								t.Error(err)
								return
							}
							for d := DimAccount; d <= DimPair; d++ {
								if o.Locked.Has(d) {
									crossed[d].Add(1)
								}
							}
						})
					}
					wg.Wait()
					st, err := g.Status(ctx, "target", addr("203.0.113.1"))
					if err != nil {
						t.Fatal(err)
					}
					if st.Account.Failures != n {
						t.Fatalf("account failures %d, want %d", st.Account.Failures, n)
					}
					if got := crossed[DimAccount].Load(); got != 1 {
						t.Fatalf("account lock crossed %d times, want once", got)
					}
					wantOther := int64(0) // each address failed once: below its thresholds
					if !spread {
						wantOther = 1
						if st.IP.Failures != n || st.Pair.Failures != n {
							t.Fatalf("ip %d pair %d failures, want %d", st.IP.Failures, st.Pair.Failures, n)
						}
					}
					if crossed[DimIP].Load() != wantOther || crossed[DimPair].Load() != wantOther {
						t.Fatalf("ip lock crossed %d, pair %d, want %d each", crossed[DimIP].Load(), crossed[DimPair].Load(), wantOther)
					}
				})
			}
		})
	}
}

// TestConcurrentChecksCannotAllPass is the lesson's incident in login form:
// 200 parallel attempts on a fresh account. A read-only check would let
// all 200 guesses through before the first failure is recorded; counting
// at check time lets exactly the ladder's worth through: 3 allowed, 2 with
// a CAPTCHA, and the pair's delay rung stops the other 195.
func TestConcurrentChecksCannotAllPass(t *testing.T) {
	const n = 200
	opts := Options{
		Account: Ladder{Captcha: 5, Delay: 10, Lock: 20},
		IP:      Ladder{Captcha: 20, Delay: 50, Lock: 100},
		Pair:    Ladder{Captcha: 3, Delay: 5, Lock: 10},
		Clock:   func() time.Time { return t0 },
	}
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			for run := range 5 {
				g := newGuard(t, mk(t, fmt.Sprintf("lgchecks%d", run)), opts)
				var counts [Locked + 1]atomic.Int64
				var wg sync.WaitGroup
				for range n {
					wg.Go(func() {
						v, err := g.Check(context.Background(), "fresh-account", addr("198.51.100.7"))
						if err != nil {
							t.Error(err)
							return
						}
						counts[v.Action].Add(1)
					})
				}
				wg.Wait()
				got := [4]int64{counts[Allow].Load(), counts[CaptchaRequired].Load(), counts[Delay].Load(), counts[Locked].Load()}
				if got != [4]int64{3, 2, n - 5, 0} {
					t.Fatalf("run %d: allow/captcha/delay/locked = %v, want [3 2 %d 0]", run, got, n-5)
				}
				st, err := g.Status(context.Background(), "fresh-account", addr("198.51.100.7"))
				if err != nil {
					t.Fatal(err)
				}
				if st.Account.Pending != 5 || st.IP.Pending != 5 || st.Pair.Pending != 5 {
					t.Fatalf("pending %+v", st)
				}
			}
		})
	}
}
