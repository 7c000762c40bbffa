package loginguard

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// recordingBackend wraps a backend and records every call's operation and
// the shape of its keys (their lengths), never their values.
type recordingBackend struct {
	Backend
	mu    sync.Mutex
	calls []string
	ids   [][numDims]string
}

func (b *recordingBackend) run(ctx context.Context, o op, now int64, ids *[numDims]string, p *params) (reply, error) {
	b.mu.Lock()
	b.calls = append(b.calls, fmt.Sprintf("run op=%d keys=%d/%d/%d", o, len(ids[0]), len(ids[1]), len(ids[2])))
	b.ids = append(b.ids, *ids)
	b.mu.Unlock()
	return b.Backend.run(ctx, o, now, ids, p)
}

func (b *recordingBackend) remove(ctx context.Context, ids *[numDims]string) ([numDims]bool, error) {
	b.mu.Lock()
	b.calls = append(b.calls, fmt.Sprintf("remove keys=%d/%d/%d", len(ids[0]), len(ids[1]), len(ids[2])))
	b.mu.Unlock()
	return b.Backend.remove(ctx, ids)
}

// TestUniformForUnknownAccounts: the same login flow for an account that
// exists and one that does not runs the same operations on keys of the
// same shape and gets the same verdicts; the guard has no way to tell them
// apart, and its keys reveal neither name.
func TestUniformForUnknownAccounts(t *testing.T) {
	flow := func(account string) ([]string, []Verdict, [][numDims]string) {
		rec := &recordingBackend{Backend: newPure()}
		c := &clock{t: t0}
		g := newGuard(t, rec, Options{Clock: c.now})
		var vs []Verdict
		ip := addr("203.0.113.9")
		for range 12 {
			out, v := login(t, g, account, ip, false, wrongCaptcha)
			vs = append(vs, v)
			if out == delayed {
				c.set(v.Until)
			}
		}
		return rec.calls, vs, rec.ids
	}
	knownCalls, knownVerdicts, knownIDs := flow("alice@example.com")
	unknownCalls, unknownVerdicts, unknownIDs := flow("nobody-by-this-name@example.com")
	if fmt.Sprint(knownCalls) != fmt.Sprint(unknownCalls) {
		t.Fatalf("store calls differ:\n%v\n%v", knownCalls, unknownCalls)
	}
	if fmt.Sprint(knownVerdicts) != fmt.Sprint(unknownVerdicts) {
		t.Fatalf("verdicts differ:\n%v\n%v", knownVerdicts, unknownVerdicts)
	}
	if len(knownCalls) < 12 {
		t.Fatalf("only %d store calls recorded", len(knownCalls))
	}
	for _, ids := range append(knownIDs, unknownIDs...) {
		for _, id := range ids {
			if len(id) != 32 || strings.Contains(id, "alice") || strings.Contains(id, "nobody") || strings.Contains(id, "203.0.113") {
				t.Fatalf("key id %q is not an opaque digest", id)
			}
		}
	}
	if knownIDs[0][0] == unknownIDs[0][0] {
		t.Fatal("two accounts share a key")
	}
}

// TestBadInputChangesNothing: invalid names and addresses are refused with
// a specific error before any store call.
func TestBadInputChangesNothing(t *testing.T) {
	rec := &recordingBackend{Backend: newPure()}
	g := newGuard(t, rec, Options{})
	ctx := context.Background()
	ip := addr("203.0.113.9")
	tests := []struct {
		name    string
		account string
		ip      netip.Addr
		want    error
	}{
		{"empty", "", ip, ErrInvalidAccount},
		{"blank", " \t\u00a0\u3000", ip, ErrInvalidAccount},
		{"not UTF-8", "al\xffice", ip, ErrInvalidAccount},
		{"too long", strings.Repeat("a", MaxAccountLen+1), ip, ErrInvalidAccount},
		{"zero address", "alice", netip.Addr{}, ErrInvalidIP},
	}
	for _, tt := range tests {
		// The verdict that comes with the error refuses too: a caller that
		// ignored the error used to get the zero Verdict, Allow.
		if v, err := g.Check(ctx, tt.account, tt.ip); !errors.Is(err, tt.want) || v.Proceed() {
			t.Errorf("Check %s: %v, err = %v; want %v and a verdict that does not proceed", tt.name, v, err, tt.want)
		}
		if _, err := g.Failure(ctx, tt.account, tt.ip); !errors.Is(err, tt.want) {
			t.Errorf("Failure %s: err = %v, want %v", tt.name, err, tt.want)
		}
		if err := g.Success(ctx, tt.account, tt.ip); !errors.Is(err, tt.want) {
			t.Errorf("Success %s: err = %v, want %v", tt.name, err, tt.want)
		}
	}
	if err := g.Unlock(ctx, ""); !errors.Is(err, ErrInvalidAccount) {
		t.Errorf("Unlock empty: %v", err)
	}
	if err := g.UnlockIP(ctx, netip.Addr{}); !errors.Is(err, ErrInvalidIP) {
		t.Errorf("UnlockIP zero: %v", err)
	}
	if len(rec.calls) != 0 {
		t.Fatalf("bad input reached the store: %v", rec.calls)
	}
}

func TestNormalizeAccount(t *testing.T) {
	tests := []struct{ in, want string }{
		{"alice", "alice"},
		{"  Alice\t", "alice"},
		{"ALICE@Example.COM", "alice@example.com"},
		{"ａｌｉｃｅ", "alice"},         // full-width
		{"Stra\u00dfe", "strasse"}, // ß folds to ss
		{"e\u0301", "\u00e9"},      // composed
		{"\u00c9", "\u00e9"},       // É
		{"ﬁle", "file"},            // ligature
		{"ΣΊΣΥΦΟΣ", "σίσυφοσ"},     // final sigma folds like any sigma
		{"user name", "user name"}, // inner space kept
	}
	// Spellings an application's lookup may take for "alice" (invisible
	// characters ignored by *_unicode_ci collations and most UIs).
	for _, in := range []string{
		"alice\u200b",            // zero-width space
		"al\u00adice",            // soft hyphen
		"ali\u200dce",            // zero-width joiner
		"ali\u200cce",            // zero-width non-joiner
		"al\u2060ice",            // word joiner
		"\ufeffalice",            // byte order mark
		"alice\x00",              // NUL
		"al\x07ice",              // a control
		"alice\u200e",            // left-to-right mark
		"\u202ealice",            // right-to-left override
		"al\u034fice",            // combining grapheme joiner
		"alice\ufe0f",            // variation selector 16
		"alice\U000E0001",        // language tag
		"a\u180el\u2061ice",      // Mongolian vowel separator, function application
		"\u3164alice",            // Hangul filler
		"ＡＬ\u200bＩＣＥ",            // full width and invisible
		" \u200b Alice \ufeff\t", // white space around invisible
	} {
		if got, err := NormalizeAccount(in); err != nil || got != "alice" {
			t.Errorf("NormalizeAccount(%+q) = %q, %v; want \"alice\"", in, got, err)
		}
	}
	// An accent split from its letter by an invisible character still
	// composes with it.
	if got, _ := NormalizeAccount("jose\u200b\u0301"); got != "jos\u00e9" {
		t.Errorf("invisible between letter and accent: %+q", got)
	}
	// Look-alike letters stay distinct; names of invisible characters only
	// are refused.
	if got, _ := NormalizeAccount("\u0430lice"); got == "alice" {
		t.Errorf("Cyrillic a merged with Latin a")
	}
	for _, in := range []string{"\u200b", "\u00ad\u200d\ufeff", "\x00", " \u2060 "} {
		if _, err := NormalizeAccount(in); !errors.Is(err, ErrInvalidAccount) {
			t.Errorf("NormalizeAccount(%+q): %v, want ErrInvalidAccount", in, err)
		}
	}
	for _, tt := range tests {
		got, err := NormalizeAccount(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("NormalizeAccount(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestNewValidatesOptions(t *testing.T) {
	mem, _ := NewMemory(MemoryOptions{})
	ok := func(o Options) Options {
		if o.Secret == nil {
			o.Secret = testSecret
		}
		return o
	}
	tests := []struct {
		name string
		opts Options
	}{
		{"no secret", Options{Secret: []byte{}}},
		{"short secret", Options{Secret: []byte("short")}},
		{"rungs out of order", ok(Options{Account: Ladder{Captcha: 5, Delay: 3, Lock: 10}})},
		{"lock below captcha", ok(Options{Pair: Ladder{Captcha: 5, Lock: 4}})},
		{"negative threshold", ok(Options{IP: Ladder{Captcha: -1, Lock: 4}})},
		{"huge threshold", ok(Options{IP: Ladder{Lock: MaxThreshold + 1}})},
		{"window too short", ok(Options{Account: Ladder{Lock: 3, Window: time.Millisecond}})},
		{"window too long", ok(Options{Account: Ladder{Lock: 3, Window: MaxWindow + time.Second}})},
		{"permanent-ish lockout", ok(Options{Account: Ladder{Lock: 3, Lockout: 365 * 24 * time.Hour}})},
		{"negative lockout", ok(Options{Account: Ladder{Lock: 3, Lockout: -time.Second}})},
		{"ipv4 prefix", ok(Options{IPv4Prefix: 33})},
		{"ipv4 prefix too wide", ok(Options{IPv4Prefix: 4})},
		{"ipv6 prefix", ok(Options{IPv6Prefix: 129})},
		{"base delay", ok(Options{BaseDelay: time.Microsecond})},
		{"max below base", ok(Options{BaseDelay: time.Minute, MaxDelay: time.Second})},
		{"max delay", ok(Options{MaxDelay: 48 * time.Hour})},
		{"attempt timeout", ok(Options{AttemptTimeout: time.Hour})},
	}
	for _, tt := range tests {
		if _, err := New(mem, tt.opts); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: err = %v, want ErrInvalidOptions", tt.name, err)
		}
	}
	if _, err := New(nil, ok(Options{})); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("nil backend: %v", err)
	}
	// A nil pointer inside the interface used to be accepted, then panic on
	// the first Check.
	for _, b := range []Backend{(*Memory)(nil), (*Redis)(nil)} {
		if g, err := New(b, ok(Options{})); g != nil || !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%T(nil) backend: %v, %v; want ErrInvalidOptions", b, g, err)
		}
	}
	if _, err := NewMemory(MemoryOptions{MaxKeys: -1}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("negative MaxKeys: %v", err)
	}
	// The zero ladders get the lesson's defaults.
	g := newGuard(t, mem, Options{})
	if g.p.dims[DimAccount-1].window != (15*time.Minute).Microseconds() || g.p.dims[DimIP-1].window != time.Hour.Microseconds() ||
		g.p.dims[DimAccount-1].lockout != (30*time.Minute).Microseconds() {
		t.Fatalf("defaults %+v", g.p)
	}
	// The secret is copied: changing the caller's slice changes nothing.
	secret := append([]byte(nil), testSecret...)
	g2 := newGuard(t, mem, Options{Secret: secret})
	before := g2.digest('a', "x", "")
	secret[0] ^= 1
	if g2.digest('a', "x", "") != before {
		t.Fatal("guard shares the caller's secret slice")
	}
}

// TestLadderWithoutThresholdsRefused: a Ladder that sets Window or
// Lockout but no threshold is refused, naming the dimension: builds before
// 2026-12-04 gave it the default thresholds, and taking it as no rung at
// all would switch the dimension off unnoticed. The zero Ladder still
// means the default, and a default with only its window changed works.
func TestLadderWithoutThresholdsRefused(t *testing.T) {
	mem, err := NewMemory(MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []Ladder{{Window: time.Hour}, {Lockout: time.Hour}} {
		_, err := New(mem, Options{Secret: testSecret, Pair: l})
		if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "pair ladder: no threshold set") {
			t.Errorf("Pair %+v: %v, want ErrInvalidOptions naming the pair ladder", l, err)
		}
	}
	g := newGuard(t, mem, Options{})
	if got, want := g.p.dims[DimPair-1].delay, DefaultPair.Delay; got != want {
		t.Fatalf("zero Ladder: pair delay %d, want the default %d", got, want)
	}
	l := DefaultPair
	l.Window = time.Hour
	g = newGuard(t, mem, Options{Pair: l})
	if got := g.p.dims[DimPair-1]; got.delay != DefaultPair.Delay || got.window != time.Hour.Microseconds() {
		t.Fatalf("default with its window changed: %+v", got)
	}
}

// TestMemoryFull: at its cap, the memory backend refuses new state with
// floodgate.ErrStoreFull and writes nothing, while known keys keep working.
func TestMemoryFull(t *testing.T) {
	mem, err := NewMemory(MemoryOptions{MaxKeys: 4})
	if err != nil {
		t.Fatal(err)
	}
	g := newGuard(t, mem, Options{})
	ctx := context.Background()
	ip := addr("203.0.113.9")
	if _, err := g.Failure(ctx, "a", ip); err != nil { // account a, ip, pair a: 3 keys
		t.Fatal(err)
	}
	if _, err := g.Failure(ctx, "b", ip); !errors.Is(err, floodgate.ErrStoreFull) { // needs 2 more
		t.Fatalf("err = %v, want ErrStoreFull", err)
	}
	if mem.Len() != 3 {
		t.Fatalf("%d states after a refused write, want 3", mem.Len())
	}
	if o, err := g.Failure(ctx, "a", ip); err != nil || o.Failures != [3]int64{2, 2, 2} {
		t.Fatalf("known keys at the cap: %+v %v", o, err)
	}
}

func TestContextCanceled(t *testing.T) {
	mem, _ := NewMemory(MemoryOptions{})
	g := newGuard(t, mem, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if v, err := g.Check(ctx, "a", addr("203.0.113.9")); !errors.Is(err, floodgate.ErrStoreUnavailable) || !errors.Is(err, context.Canceled) || v.Proceed() {
		t.Fatalf("Check = %v, %v; want a refusal and the store's error", v, err)
	}
	// Every answer that comes with an error refuses, for a caller that
	// looks only at the verdict.
	if o, err := g.Failure(ctx, "a", addr("203.0.113.9")); err == nil || o.Next.Proceed() {
		t.Fatalf("Failure = %+v, %v; want Next to refuse", o, err)
	}
	if st, err := g.Status(ctx, "a", addr("203.0.113.9")); err == nil || st.Verdict.Proceed() {
		t.Fatalf("Status = %+v, %v; want its Verdict to refuse", st, err)
	}
	if mem.Len() != 0 {
		t.Fatal("a canceled call wrote")
	}
}

// TestNilContext: every method refuses a nil context with
// floodgate.ErrNilContext (it used to panic in the backend), refusing the
// attempt, on both backends, and writes nothing.
//
//lint:file-ignore SA1012 a nil context is the bad input under test
func TestNilContext(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			g := newGuard(t, mk(t, "nilctx"), Options{})
			ip := addr("203.0.113.9")
			if v, err := g.Check(nil, "a", ip); !errors.Is(err, floodgate.ErrNilContext) || v.Proceed() {
				t.Errorf("Check = %v, %v; want a refusal and ErrNilContext", v, err)
			}
			if o, err := g.Failure(nil, "a", ip); !errors.Is(err, floodgate.ErrNilContext) || o.Next.Proceed() {
				t.Errorf("Failure = %+v, %v", o, err)
			}
			if st, err := g.Status(nil, "a", ip); !errors.Is(err, floodgate.ErrNilContext) || st.Verdict.Proceed() {
				t.Errorf("Status = %+v, %v", st, err)
			}
			for what, err := range map[string]error{
				"Success":    g.Success(nil, "a", ip),
				"Abandon":    g.Abandon(nil, "a", ip),
				"Unlock":     g.Unlock(nil, "a"),
				"UnlockPair": g.UnlockPair(nil, "a", ip),
				"UnlockIP":   g.UnlockIP(nil, ip),
			} {
				if !errors.Is(err, floodgate.ErrNilContext) {
					t.Errorf("%s: err = %v, want ErrNilContext", what, err)
				}
			}
			if _, err := g.Lift(nil, "a", ip); !errors.Is(err, floodgate.ErrNilContext) {
				t.Errorf("Lift: err = %v", err)
			}
			st, err := g.Status(context.Background(), "a", ip)
			if err != nil || st.Account.Failures+st.Account.Pending+st.IP.Failures+st.Pair.Failures != 0 {
				t.Errorf("after the nil contexts: %+v, %v; want nothing recorded", st, err)
			}
		})
	}
}

// TestUnlockPair: UnlockPair lifts the lock an owner's own failures set on
// their account from their address, and leaves the account's and the
// address's own counts alone; Unlock and UnlockIP do not lift it.
func TestUnlockPair(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			g := newGuard(t, mk(t, "unlockpair"), Options{})
			ctx := context.Background()
			owner := netip.MustParseAddr("203.0.113.77")
			for range 10 {
				if _, err := g.Failure(ctx, "bob", owner); err != nil {
					t.Fatal(err)
				}
			}
			st, err := g.Status(ctx, "bob", owner)
			if err != nil || st.Pair.LockedUntil.IsZero() {
				t.Fatalf("pair not locked after 10 failures: %+v %v", st.Pair, err)
			}
			if err := g.Unlock(ctx, "bob"); err != nil {
				t.Fatal(err)
			}
			if err := g.UnlockIP(ctx, owner); err != nil {
				t.Fatal(err)
			}
			if st, _ := g.Status(ctx, "bob", owner); st.Pair.LockedUntil.IsZero() {
				t.Fatalf("Unlock and UnlockIP lifted the pair's lock: %+v", st.Pair)
			}
			if err := g.UnlockPair(ctx, "Bob", owner); err != nil {
				t.Fatal(err)
			}
			if st, _ := g.Status(ctx, "bob", owner); !st.Pair.LockedUntil.IsZero() || st.Pair.Failures != 0 {
				t.Fatalf("pair after UnlockPair: %+v", st.Pair)
			}
			if err := g.UnlockPair(ctx, "", owner); !errors.Is(err, ErrInvalidAccount) {
				t.Errorf("UnlockPair of an empty account: %v", err)
			}
			if err := g.UnlockPair(ctx, "bob", netip.Addr{}); !errors.Is(err, ErrInvalidIP) {
				t.Errorf("UnlockPair of the zero address: %v", err)
			}
		})
	}
}

// TestLift: Lift forgets the dimensions it is given in one step and
// reports which had state: the account, the address, and with both the
// pair; a second Lift, or one under another secret, finds nothing.
func TestLift(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t, "lift")
			g := newGuard(t, b, Options{})
			ctx := context.Background()
			owner := netip.MustParseAddr("203.0.113.77")
			for range 10 {
				if _, err := g.Failure(ctx, "bob", owner); err != nil {
					t.Fatal(err)
				}
			}
			other := newGuard(t, b, Options{Secret: []byte(strings.Repeat("o", MinSecretLen))})
			if l, err := other.Lift(ctx, "bob", owner); err != nil || l.Any() {
				t.Fatalf("Lift under another secret = %+v, %v; want nothing found", l, err)
			}
			if l, err := g.Lift(ctx, "", netip.MustParseAddr("198.51.100.1")); err != nil || l.Any() {
				t.Fatalf("Lift of an address never seen = %+v, %v", l, err)
			}
			if l, err := g.Lift(ctx, "BOB", owner); err != nil || l != (Lifted{Account: true, IP: true, Pair: true}) {
				t.Fatalf("Lift of a locked owner = %+v, %v; want all three", l, err)
			}
			st, err := g.Status(ctx, "bob", owner)
			if err != nil || st.Verdict.Action != Allow || st.Account.Failures+st.IP.Failures+st.Pair.Failures != 0 {
				t.Fatalf("after Lift: %+v, %v", st, err)
			}
			if l, err := g.Lift(ctx, "bob", owner); err != nil || l.Any() {
				t.Fatalf("second Lift = %+v, %v; want nothing found", l, err)
			}
			if _, err := g.Failure(ctx, "bob", owner); err != nil {
				t.Fatal(err)
			}
			if l, err := g.Lift(ctx, "bob", netip.Addr{}); err != nil || l != (Lifted{Account: true}) {
				t.Fatalf("Lift of the account only = %+v, %v", l, err)
			}
			if l, err := g.Lift(ctx, "", owner); err != nil || l != (Lifted{IP: true}) {
				t.Fatalf("Lift of the address only = %+v, %v", l, err)
			}
			if _, err := g.Lift(ctx, "", netip.Addr{}); !errors.Is(err, ErrInvalidAccount) {
				t.Errorf("Lift of nothing: %v", err)
			}
			if _, err := g.Lift(ctx, "\x00", owner); !errors.Is(err, ErrInvalidAccount) {
				t.Errorf("Lift of a NUL account: %v", err)
			}
		})
	}
}

// TestAccentsShareCounters: spellings of one name that differ only in
// accents, or in marks stacked on it, share one set of counters (a lookup
// under MySQL's *_unicode_ci takes them all for "alice"); each used to get
// a budget of its own. NormalizeAccount still keeps the accents.
func TestAccentsShareCounters(t *testing.T) {
	g := newGuard(t, newPure(), Options{})
	ctx := context.Background()
	ip := netip.MustParseAddr("198.51.100.20")
	spellings := []string{"alice", "alicé", "alice\u0301\u0301", "ÁLİCE", "alicè"}
	for i := range 20 {
		if _, err := g.Failure(ctx, spellings[i%len(spellings)], netip.AddrFrom4([4]byte{192, 0, 2, byte(i)})); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range spellings {
		st, err := g.Status(ctx, s, ip)
		if err != nil || st.Account.Failures != 20 {
			t.Errorf("%q: %d account failures (%v), want the 20 of all spellings", s, st.Account.Failures, err)
		}
	}
	if n, _ := NormalizeAccount("Alicé"); n != "alicé" {
		t.Errorf("NormalizeAccount(Alicé) = %q, want the accent kept", n)
	}
	if st, _ := g.Status(ctx, "bob", ip); st.Account.Failures != 0 {
		t.Errorf("bob: %d failures, want 0", st.Account.Failures)
	}
}
