package loginguard

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// outcome of one simulated login attempt.
type outcome uint8

const (
	passwordChecked outcome = iota // the password was compared (wrong or right)
	captchaRefused                 // refused: CAPTCHA required and missing or wrong
	delayed                        // refused: wait RetryAfter
	locked                         // refused: locked
)

// captcha is what a simulated client sends when a CAPTCHA is required.
type captcha uint8

const (
	noCaptcha     captcha = iota // sends none: the attempt is abandoned
	wrongCaptcha                 // sends junk: a failure
	solvedCaptcha                // solves it
)

// login is what a login handler does with the guard: Check; refuse when it
// says so; a required CAPTCHA not sent abandons the attempt, a wrong one is
// a failure; otherwise compare the password and record the result.
func login(t testing.TB, g *Guard, account string, ip netip.Addr, passwordOK bool, c captcha) (outcome, Verdict) {
	t.Helper()
	ctx := context.Background()
	v, err := g.Check(ctx, account, ip)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case v.Action == Delay:
		return delayed, v
	case v.Action == Locked:
		return locked, v
	case v.Action == CaptchaRequired && c == noCaptcha:
		if err := g.Abandon(ctx, account, ip); err != nil {
			t.Fatal(err)
		}
		return captchaRefused, v
	case v.Action == CaptchaRequired && c == wrongCaptcha:
		if _, err := g.Failure(ctx, account, ip); err != nil {
			t.Fatal(err)
		}
		return captchaRefused, v
	case passwordOK:
		if err := g.Success(ctx, account, ip); err != nil {
			t.Fatal(err)
		}
	default:
		if _, err := g.Failure(ctx, account, ip); err != nil {
			t.Fatal(err)
		}
	}
	return passwordChecked, v
}

// TestAttackSpray: one address tries a wrong password on 300 accounts,
// patiently waiting out every delay and sending junk for every CAPTCHA. The IP
// dimension catches it: 20 password checks, then CAPTCHAs, then delays,
// then a 30-minute lock; the sprayed accounts stay usable from elsewhere.
func TestAttackSpray(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			c := &clock{t: t0}
			g := newGuard(t, mk(t, "lgspray"), Options{Clock: c.now}) // the lesson's defaults
			attacker := addr("203.0.113.66")
			var counts [4]int
			var lockedAt time.Time
			var lockV Verdict
			for i := 0; i < 10_000 && lockedAt.IsZero(); i++ {
				out, v := login(t, g, fmt.Sprintf("user%03d", i%300), attacker, false, wrongCaptcha)
				counts[out]++
				switch out {
				case delayed:
					c.set(v.Until)
				case locked:
					lockedAt, lockV = c.now(), v
				default:
					c.set(c.now().Add(100 * time.Millisecond))
				}
			}
			if lockedAt.IsZero() {
				t.Fatalf("never locked: %v", counts)
			}
			if counts[passwordChecked] != int(DefaultIP.Captcha) {
				t.Fatalf("%d passwords checked, want %d (outcomes %v)", counts[passwordChecked], DefaultIP.Captcha, counts)
			}
			if counts[passwordChecked]+counts[captchaRefused] != int(DefaultIP.Lock) {
				t.Fatalf("%d failures before the lock, want %d", counts[passwordChecked]+counts[captchaRefused], DefaultIP.Lock)
			}
			if lockV.By != DimIP || lockV.RetryAfter <= 0 || lockV.RetryAfter > DefaultIP.Lockout {
				t.Fatalf("lock verdict %v", lockV)
			}
			// A sprayed account, from its owner's address: untouched.
			if out, v := login(t, g, "user007", addr("198.51.100.1"), true, noCaptcha); out != passwordChecked || v.Action != Allow {
				t.Fatalf("owner of a sprayed account: %v %v", out, v)
			}
			// The lock ends; the address's failures (1 h window) remain, so
			// the next failure locks it again at once.
			c.set(lockV.Until)
			if out, v := login(t, g, "user008", attacker, false, solvedCaptcha); out != passwordChecked {
				t.Fatalf("after the lock: %v %v", out, v)
			}
			if out, _ := login(t, g, "user009", attacker, false, solvedCaptcha); out != locked && out != delayed {
				t.Fatalf("a failure after the lock was not punished: %v", out)
			}
		})
	}
}

// TestAttackDistributed: 1,000 addresses, one attempt each (junk for any
// CAPTCHA), against one account. The account dimension catches it: 5 password checks in all,
// every later attempt needs a CAPTCHA, and the account lock is crossed
// once. A second round from the same addresses meets the lock.
func TestAttackDistributed(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			c := &clock{t: t0}
			g := newGuard(t, mk(t, "lgdist"), Options{Clock: c.now})
			bot := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{100, 64 + byte(i/250), byte(i % 250), 1}) }
			var counts [4]int
			for i := range 1000 {
				out, _ := login(t, g, "target", bot(i), false, wrongCaptcha)
				counts[out]++
				c.set(c.now().Add(50 * time.Millisecond))
			}
			if counts != [4]int{int(DefaultAccount.Captcha), 1000 - int(DefaultAccount.Captcha), 0, 0} {
				t.Fatalf("outcomes (checked, captcha, delayed, locked) = %v", counts)
			}
			st, err := g.Status(context.Background(), "target", bot(0))
			if err != nil {
				t.Fatal(err)
			}
			if st.Account.Failures != 1000 || st.Account.LockedUntil.IsZero() {
				t.Fatalf("account %+v", st.Account)
			}
			counts = [4]int{}
			for i := range 100 {
				out, _ := login(t, g, "target", bot(i), false, wrongCaptcha)
				counts[out]++
			}
			if counts[locked] != 100 {
				t.Fatalf("second round outcomes %v, want all locked", counts)
			}
		})
	}
}

// TestAttackVictimLockout: an attacker with a handful of addresses, solving
// every CAPTCHA and waiting out every delay, drives the victim's account
// into its lock. The victim, from a clean address, can still log in with a
// CAPTCHA; the victim's address dimension is untouched; the lock ends after
// Lockout by itself. With StrictAccountLock the victim is locked out too,
// but only until the lock ends.
func TestAttackVictimLockout(t *testing.T) {
	for name, mk := range backends(t) {
		for _, strict := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/strict=%v", name, strict), func(t *testing.T) {
				c := &clock{t: t0}
				g := newGuard(t, mk(t, fmt.Sprintf("lgvictim%v", strict)), Options{Clock: c.now, StrictAccountLock: strict})
				home := addr("2001:db8:77::1")
				attackers := []netip.Addr{addr("203.0.113.61"), addr("203.0.113.62"), addr("203.0.113.63"), addr("203.0.113.64"), addr("203.0.113.65")}
				ctx := context.Background()
				accountLocked := func() bool {
					st, err := g.Status(ctx, "victim", home)
					if err != nil {
						t.Fatal(err)
					}
					return !st.Account.LockedUntil.IsZero()
				}
				for i := 0; i < 1000 && !accountLocked(); i++ {
					out, v := login(t, g, "victim", attackers[i%len(attackers)], false, solvedCaptcha)
					if out == delayed {
						c.set(v.Until)
					}
					c.set(c.now().Add(100 * time.Millisecond))
				}
				if !accountLocked() {
					t.Fatal("the attackers never locked the account")
				}
				st, err := g.Status(ctx, "victim", home)
				if err != nil {
					t.Fatal(err)
				}
				if st.IP.Failures != 0 || st.Pair.Failures != 0 || st.Account.Failures != DefaultAccount.Lock {
					t.Fatalf("status from the victim's address: %+v", st)
				}
				if lock := st.Account.LockedUntil.Sub(c.now()); lock <= 0 || lock > DefaultAccount.Lockout {
					t.Fatalf("account locked for %v, want at most %v", lock, DefaultAccount.Lockout)
				}
				out, v := login(t, g, "victim", home, true, noCaptcha)
				if strict {
					if out != locked || v.By != DimAccount || v.RetryAfter > DefaultAccount.Lockout {
						t.Fatalf("strict: victim got %v %v, want a temporary account lock", out, v)
					}
					c.set(v.Until)
					out, v = login(t, g, "victim", home, true, noCaptcha)
					if out != passwordChecked || v.Action != Allow {
						t.Fatalf("strict: victim after the lock: %v %v", out, v)
					}
				} else {
					// Not expecting a CAPTCHA, the victim sends none: asked for
					// one, nothing counted, the address stays clean...
					if out != captchaRefused || v.Action != CaptchaRequired || v.By != DimAccount {
						t.Fatalf("victim from a clean address: %v %v, want a CAPTCHA", out, v)
					}
					// ...and with it solved, the password is checked.
					out, v = login(t, g, "victim", home, true, solvedCaptcha)
					if out != passwordChecked || v.Action != CaptchaRequired {
						t.Fatalf("victim with a CAPTCHA: %v %v", out, v)
					}
				}
				// The attackers' addresses are not clean: still refused while
				// the lock lasts (in strict mode it has just ended).
				if out, v := login(t, g, "victim", attackers[0], false, solvedCaptcha); !strict && out != locked && out != delayed {
					t.Fatalf("attacker after the victim's login: %v %v", out, v)
				}
				// ...but not forever: every lock ends within its Lockout.
				c.set(c.now().Add(DefaultPair.Lockout + DefaultAccount.Lockout))
				if out, v := login(t, g, "victim", attackers[0], false, solvedCaptcha); out == locked || out == delayed {
					t.Fatalf("still refused after every lockout passed: %v", v)
				}
			})
		}
	}
}

// TestAttackInvisibleSpellings: an attacker spreading guesses at "alice"
// over spellings with invisible characters ("alice\u200b", "al\u00adice",
// ...), which an application's user lookup may resolve to the same
// account, gets no fresh per-account budget: every spelling counts on the
// one account.
func TestAttackInvisibleSpellings(t *testing.T) {
	spellings := []string{"alice", "alice\u200b", "al\u00adice", "al\u2060ice", "\ufeffalice", "ali\u200dce", "alice\x00", "Alice\u200e", "a\u034flice", "alice\ufe0f"}
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			c := &clock{t: t0}
			g := newGuard(t, mk(t, "lginvis"), Options{Clock: c.now})
			bot := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{100, 64, byte(i), 1}) }
			for i := range 100 {
				login(t, g, spellings[i%len(spellings)], bot(i), false, solvedCaptcha)
				c.set(c.now().Add(time.Minute))
			}
			st, err := g.Status(context.Background(), "alice", bot(0))
			if err != nil {
				t.Fatal(err)
			}
			if st.Account.Failures < 50 {
				t.Fatalf("alice's failures %d after 100 guesses over %d spellings: the spellings got budgets of their own", st.Account.Failures, len(spellings))
			}
			for _, sp := range spellings[1:] {
				other, err := g.Status(context.Background(), sp, bot(0))
				if err != nil {
					t.Fatal(err)
				}
				if other.Account != st.Account {
					t.Fatalf("%+q has its own account state %+v, alice %+v", sp, other.Account, st.Account)
				}
			}
		})
	}
}

// TestAttackCherokeeSpellings: one address guessing at a Cherokee name,
// spreading its guesses over the name's 8 case variants and never
// waiting, reaches the password check 5 times, the pair's Delay rung, as
// with one spelling; and an admin unlocking by the stored (normalised)
// name reaches the counters. The variants used to normalise apart (40
// password checks: 5 per spelling), and the normal form to another key.
func TestAttackCherokeeSpellings(t *testing.T) {
	spellings := cherokeeSpellings("ᏣᎳᎩ")
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			c := &clock{t: t0}
			g := newGuard(t, mk(t, "lgchr"), Options{Clock: c.now})
			ctx := context.Background()
			ip := netip.MustParseAddr("198.51.100.30")
			checked := 0
			for i := range 80 {
				if out, _ := login(t, g, spellings[i%len(spellings)], ip, false, solvedCaptcha); out == passwordChecked {
					checked++
				}
			}
			if want := int(DefaultPair.Delay); checked != want {
				t.Errorf("%d password checks over %d spellings, want %d", checked, len(spellings), want)
			}
			first, err := g.Status(ctx, spellings[0], ip)
			if err != nil {
				t.Fatal(err)
			}
			for _, sp := range spellings[1:] {
				st, err := g.Status(ctx, sp, ip)
				if err != nil {
					t.Fatal(err)
				}
				if st.Account != first.Account || st.Pair != first.Pair {
					t.Errorf("%+q: account %+v, pair %+v; %+q: %+v, %+v", sp, st.Account, st.Pair, spellings[0], first.Account, first.Pair)
				}
			}
			stored, err := NormalizeAccount(spellings[len(spellings)-1])
			if err != nil {
				t.Fatal(err)
			}
			if l, err := g.Lift(ctx, stored, ip); err != nil || l != (Lifted{Account: true, IP: true, Pair: true}) {
				t.Fatalf("Lift(%+q) = %+v, %v; want all three", stored, l, err)
			}
			for _, sp := range spellings {
				if st, err := g.Status(ctx, sp, ip); err != nil || st.Account.Failures+st.Pair.Failures != 0 {
					t.Errorf("%+q after Lift of %+q: %+v, %v", sp, stored, st, err)
				}
			}
		})
	}
}
