package loginguard

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
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

// TestConcurrentGuessesBoundedByLock: 200 clients guess at once, each
// doing Check, a 5 ms password check and Failure, again after every
// delay, until it meets a lock. No dimension may let more password checks
// through than its Lock threshold: the attempts in progress count towards
// the lock as towards the other rungs, so once failures plus attempts in
// progress reach Lock, Check waits for them to be settled instead of
// letting another through. Before, a Lock-only ladder let all 200 past a
// pair lock of 10 (it only compared failures already recorded), and the
// default ladders with 1 ms delays some 20 past the pair's 10 and 106-121
// of a spray from one address past the IP's 100.
func TestConcurrentGuessesBoundedByLock(t *testing.T) {
	const n = 200
	srv := redistest.Start(t)
	cl := redistest.StartCluster(t)
	mks := map[string]func(t *testing.T, prefix string) Backend{
		"memory": func(t *testing.T, prefix string) Backend {
			m, err := NewMemory(MemoryOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return m
		},
		"redis": func(t *testing.T, prefix string) Backend {
			b, err := NewRedis(srv.Client(t), prefix)
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		"cluster": func(t *testing.T, prefix string) Backend {
			b, err := NewRedis(cl.Client(t), prefix)
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
	}
	lockOnly := Options{Account: Ladder{Lock: 20}, IP: Ladder{Lock: 100}, Pair: Ladder{Lock: 10}}
	fast := Options{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond} // default ladders
	cases := []struct {
		name  string
		opts  Options
		spray bool // one account per client, all from one address
		dim   Dimension
		lock  int64
	}{
		{"lock-only ladders", lockOnly, false, DimPair, 10},
		{"1ms delays", fast, false, DimPair, 10},
		{"1ms delays spray", fast, true, DimIP, 100},
	}
	ip := addr("198.51.100.77")
	for name, mk := range mks {
		t.Run(name, func(t *testing.T) {
			for i, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					g := newGuard(t, mk(t, fmt.Sprintf("lgbound%d", i)), c.opts)
					ctx := context.Background()
					deadline := time.Now().Add(20 * time.Second)
					var checked atomic.Int64
					var wg sync.WaitGroup
					for k := range n {
						account := "target"
						if c.spray {
							account = fmt.Sprintf("user%d", k)
						}
						wg.Go(func() {
							for time.Now().Before(deadline) {
								v, err := g.Check(ctx, account, ip)
								if err != nil {
									t.Error(err)
									return
								}
								switch v.Action {
								case Locked:
									return
								case Delay:
									time.Sleep(2 * time.Millisecond)
									continue
								}
								checked.Add(1) // Allow, or a CAPTCHA solved
								time.Sleep(5 * time.Millisecond)
								if _, err := g.Failure(ctx, account, ip); err != nil {
									t.Error(err)
									return
								}
							}
							t.Error("no lock met before the deadline")
						})
					}
					wg.Wait()
					got := checked.Load()
					if got > c.lock {
						t.Fatalf("%d password checks let through, %v lock at %d", got, c.dim, c.lock)
					}
					st, err := g.Status(ctx, "target", ip)
					if err != nil {
						t.Fatal(err)
					}
					ds := []DimensionStatus{st.Account, st.IP, st.Pair}[c.dim-1]
					if ds.LockedUntil.IsZero() || ds.Failures != got || ds.Pending != 0 {
						t.Fatalf("%v after %d password checks: %+v, want locked with every check a failure", c.dim, got, ds)
					}
				})
			}
		})
	}
}
