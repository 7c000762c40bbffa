package loginguard

import (
	"fmt"
	"time"
)

// Ladder is the progressive response of one dimension (account, IP or
// account+IP pair) to failed logins. With F the failures counted in the
// dimension plus its attempts still in progress:
//
//   - F >= Captcha: a CAPTCHA is required before the password is checked;
//   - F >= Delay: each attempt must also wait, after the dimension's last
//     attempt, BaseDelay doubled for every failure beyond Delay, capped at
//     MaxDelay; a wait its attempts in progress lengthen ends when they
//     expire (Options.AttemptTimeout after the dimension's last attempt)
//     unless the failures alone hold it longer, as they count no more
//     from then on;
//   - F >= Lock with an attempt in progress: those attempts could lock
//     the dimension when they fail, so no other attempt proceeds (Delay)
//     until they are settled or, at the latest, until they expire
//     (Options.AttemptTimeout after the dimension's last attempt);
//   - the failure that brings the failures to Lock locks the dimension for
//     Lockout.
//
// So a dimension lets at most Lock password checks through before it
// locks, however many attempts arrive at once (see the package
// documentation for what bounds this). When a lock ends while its
// failures are still counted, one attempt at a time proceeds, and its
// failure locks again.
//
// A threshold of 0 skips its rung; the others must not decrease (Captcha
// <= Delay <= Lock). Failures are forgotten Window after the dimension's
// last attempt, and a lock always ends after Lockout: nothing is permanent.
//
// The zero Ladder, Ladder{}, means the dimension's defaults (see Options).
// Any other Ladder is taken as it is, its thresholds included: a zero
// Window or Lockout means that field's default, but zero thresholds are
// never filled in. A Ladder that sets Window or Lockout and no threshold
// is refused (ErrInvalidOptions): builds before 2026-12-04 gave it the
// default thresholds, and taking it now as no rung at all would switch
// the dimension off unnoticed. To change only a default's window, copy
// the default and set its Window (l := DefaultPair; l.Window = time.Hour).
type Ladder struct {
	// Captcha is the failure count from which a CAPTCHA is required.
	Captcha int64
	// Delay is the failure count from which attempts are spaced out.
	Delay int64
	// Lock is the failure count whose failure locks the dimension; while
	// attempts in progress could bring the failures to it, others wait.
	Lock int64
	// Window is how long failures are remembered after the last attempt
	// (1s..30 days).
	Window time.Duration
	// Lockout is how long a lock lasts (1s..30 days).
	Lockout time.Duration
}

// Default ladders. The windows and the account lockout are the usual
// choices for login protection (account failures counted over 15
// minutes, IP failures over 1 hour, a 30-minute lockout);
// the thresholds are chosen so that one person mistyping a password meets
// nothing, and the IP thresholds are high enough for a shared NAT.
var (
	// DefaultAccount is the per-account ladder: CAPTCHA after 5 failures,
	// delays from 10, a 30-minute lock at 20, failures kept 15 minutes.
	DefaultAccount = Ladder{Captcha: 5, Delay: 10, Lock: 20, Window: 15 * time.Minute, Lockout: 30 * time.Minute}
	// DefaultIP is the per-IP (or per-subnet) ladder: CAPTCHA after 20
	// failures, delays from 50, a 30-minute lock at 100, failures kept 1
	// hour.
	DefaultIP = Ladder{Captcha: 20, Delay: 50, Lock: 100, Window: time.Hour, Lockout: 30 * time.Minute}
	// DefaultPair is the per-account-and-IP ladder: CAPTCHA after 3
	// failures, delays from 5, a 30-minute lock at 10, failures kept 15
	// minutes.
	DefaultPair = Ladder{Captcha: 3, Delay: 5, Lock: 10, Window: 15 * time.Minute, Lockout: 30 * time.Minute}
)

// Bounds on options.
const (
	// MinSecretLen is the shortest accepted HMAC secret, in bytes: 256
	// bits, the HMAC-SHA256 key size.
	MinSecretLen = 32
	// MaxThreshold is the largest ladder threshold.
	MaxThreshold = 1_000_000_000
	// MaxWindow bounds Ladder.Window, Ladder.Lockout.
	MaxWindow = 30 * 24 * time.Hour
	// MaxDelayLimit bounds Options.MaxDelay.
	MaxDelayLimit = 24 * time.Hour
)

// Options configures a Guard. Only Secret is required.
type Options struct {
	// Secret keys the HMAC-SHA256 that turns account names and addresses
	// into storage keys, so the store never holds them in clear and they
	// cannot be guessed from the keys. At least 32 bytes, and random (for
	// example "openssl rand -hex 32", 64 characters): a guessable secret
	// lets whoever reads the store test account names against its keys.
	// Keep it stable (a new secret starts every counter afresh) and
	// readable by the service only.
	Secret []byte
	// Account, IP and Pair are the ladders of the three dimensions. A
	// zero Ladder means DefaultAccount, DefaultIP and DefaultPair; one
	// with no thresholds switches its dimension off (see Ladder).
	Account, IP, Pair Ladder
	// IPv4Prefix and IPv6Prefix group client addresses into networks for
	// the IP and pair dimensions. Defaults 32 (each IPv4 address) and 64
	// (each IPv6 /64, the block one subscriber usually holds). Ranges
	// 8..32 and 16..128.
	IPv4Prefix, IPv6Prefix int
	// BaseDelay is the first delay of the Delay rung; MaxDelay caps the
	// doubling. Defaults 1 second and 1 minute. BaseDelay 1ms..1h,
	// MaxDelay BaseDelay..24h.
	BaseDelay, MaxDelay time.Duration
	// AttemptTimeout is how long an attempt that passed Check counts as
	// in progress if neither Failure nor Success follows (the caller
	// crashed or lost its context): a dimension forgets its attempts in
	// progress AttemptTimeout after its last attempt or failure. Keep it
	// above the longest password check, CAPTCHA included: an attempt
	// still running when it passes no longer holds back the Lock rung
	// (nor the others). Default 30 seconds, range 1s..10m.
	AttemptTimeout time.Duration
	// StrictAccountLock makes an account lock (and the account's delays)
	// apply to every address. By default, while an account is locked or
	// delayed, an attempt from an account+IP pair with a clean record (no
	// failure and no attempt in progress within the pair's window) gets
	// CaptchaRequired instead: the owner can still log in from a clean
	// place by solving a CAPTCHA, while each attacking address gets at most
	// one CAPTCHA-gated guess before its own pair is no longer clean: the
	// CAPTCHA is then all that stands between an attacker with many
	// addresses and the password (one guess per address per pair window).
	// Strict mode closes that, at a price: anyone who knows the account
	// name can lock its owner out from every address, and lock it again
	// with Lock failures each time a lock ends; only an administrator's
	// Unlock ends a lock early.
	StrictAccountLock bool
	// Clock returns the current time. Default time.Now.
	Clock func() time.Time
}

// ladder is a Ladder in microseconds.
type ladder struct {
	captcha, delay, lock, window, lockout int64
}

// params is what the step function (and the Lua scripts) need, in
// microseconds.
type params struct {
	dims           [numDims]ladder
	baseDelay      int64
	maxDelay       int64
	attemptTimeout int64
	strict         bool
}

// withDefaults returns def for the zero Ladder, and l with def's Window
// and Lockout in place of zero ones otherwise: its thresholds, zero or
// not, are kept (validate refuses all zero).
func (l Ladder) withDefaults(def Ladder) Ladder {
	if l == (Ladder{}) {
		return def
	}
	if l.Window == 0 {
		l.Window = def.Window
	}
	if l.Lockout == 0 {
		l.Lockout = def.Lockout
	}
	return l
}

func (l Ladder) validate(name string) (ladder, error) {
	bad := func(format string, args ...any) (ladder, error) {
		return ladder{}, fmt.Errorf("%w: %s ladder: %s", ErrInvalidOptions, name, fmt.Sprintf(format, args...))
	}
	if l.Captcha == 0 && l.Delay == 0 && l.Lock == 0 {
		return bad("no threshold set (Captcha, Delay and Lock are 0): give at least one (0 skips its rung), or leave the Ladder zero for the defaults")
	}
	last := int64(0)
	for _, t := range []struct {
		rung string
		n    int64
	}{{"captcha", l.Captcha}, {"delay", l.Delay}, {"lock", l.Lock}} {
		if t.n < 0 || t.n > MaxThreshold {
			return bad("%s threshold %d out of range 0..%d", t.rung, t.n, MaxThreshold)
		}
		if t.n != 0 && t.n < last {
			return bad("%s threshold %d below an earlier rung's %d (want captcha <= delay <= lock)", t.rung, t.n, last)
		}
		if t.n != 0 {
			last = t.n
		}
	}
	if l.Window < time.Second || l.Window > MaxWindow {
		return bad("window %v out of range 1s..%v", l.Window, MaxWindow)
	}
	if l.Lockout < time.Second || l.Lockout > MaxWindow {
		return bad("lockout %v out of range 1s..%v", l.Lockout, MaxWindow)
	}
	return ladder{
		captcha: l.Captcha, delay: l.Delay, lock: l.Lock,
		window: l.Window.Microseconds(), lockout: l.Lockout.Microseconds(),
	}, nil
}

// compile applies defaults to opts and validates it.
func compile(opts *Options) (params, error) {
	var p params
	if len(opts.Secret) < MinSecretLen {
		return p, fmt.Errorf("%w: secret of %d bytes, want at least %d", ErrInvalidOptions, len(opts.Secret), MinSecretLen)
	}
	var err error
	if p.dims[DimAccount-1], err = opts.Account.withDefaults(DefaultAccount).validate("account"); err != nil {
		return p, err
	}
	if p.dims[DimIP-1], err = opts.IP.withDefaults(DefaultIP).validate("ip"); err != nil {
		return p, err
	}
	if p.dims[DimPair-1], err = opts.Pair.withDefaults(DefaultPair).validate("pair"); err != nil {
		return p, err
	}
	if opts.IPv4Prefix == 0 {
		opts.IPv4Prefix = 32
	}
	if opts.IPv6Prefix == 0 {
		opts.IPv6Prefix = 64
	}
	if opts.IPv4Prefix < 8 || opts.IPv4Prefix > 32 {
		return p, fmt.Errorf("%w: IPv4 prefix %d out of range 8..32", ErrInvalidOptions, opts.IPv4Prefix)
	}
	if opts.IPv6Prefix < 16 || opts.IPv6Prefix > 128 {
		return p, fmt.Errorf("%w: IPv6 prefix %d out of range 16..128", ErrInvalidOptions, opts.IPv6Prefix)
	}
	if opts.BaseDelay == 0 {
		opts.BaseDelay = time.Second
	}
	if opts.MaxDelay == 0 {
		opts.MaxDelay = max(time.Minute, opts.BaseDelay)
	}
	if opts.BaseDelay < time.Millisecond || opts.BaseDelay > time.Hour {
		return p, fmt.Errorf("%w: base delay %v out of range 1ms..1h", ErrInvalidOptions, opts.BaseDelay)
	}
	if opts.MaxDelay < opts.BaseDelay || opts.MaxDelay > MaxDelayLimit {
		return p, fmt.Errorf("%w: max delay %v out of range %v..%v", ErrInvalidOptions, opts.MaxDelay, opts.BaseDelay, MaxDelayLimit)
	}
	if opts.AttemptTimeout == 0 {
		opts.AttemptTimeout = 30 * time.Second
	}
	if opts.AttemptTimeout < time.Second || opts.AttemptTimeout > 10*time.Minute {
		return p, fmt.Errorf("%w: attempt timeout %v out of range 1s..10m", ErrInvalidOptions, opts.AttemptTimeout)
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	p.baseDelay = opts.BaseDelay.Microseconds()
	p.maxDelay = opts.MaxDelay.Microseconds()
	p.attemptTimeout = opts.AttemptTimeout.Microseconds()
	p.strict = opts.StrictAccountLock
	return p, nil
}
