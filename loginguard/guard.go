package loginguard

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/floodgate-rl/floodgate"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"

	"github.com/floodgate-rl/floodgate/internal/nilcheck"
	"github.com/floodgate-rl/floodgate/replicawait"
)

// Sentinel errors. Store failures wrap floodgate.ErrStoreUnavailable
// (nothing was written), floodgate.ErrIndeterminate (the write may have
// happened), floodgate.ErrStoreFull or floodgate.ErrBadReply.
var (
	// ErrInvalidOptions reports options New cannot use.
	ErrInvalidOptions = errors.New("loginguard: invalid options")
	// ErrInvalidAccount reports an account name that is empty after
	// trimming, longer than MaxAccountLen bytes or not valid UTF-8.
	ErrInvalidAccount = errors.New("loginguard: invalid account name")
	// ErrInvalidIP reports a zero netip.Addr.
	ErrInvalidIP = errors.New("loginguard: invalid client address")
)

// MaxAccountLen is the longest account name accepted, in bytes, before
// normalisation.
const MaxAccountLen = 1024

// Backend stores the guard's state atomically. Use NewMemory for one
// process or NewRedis for a fleet; the two decide identically.
type Backend interface {
	// run applies o to the states of the three ids (account, IP, pair) at
	// now, atomically, and returns the step's reply.
	run(ctx context.Context, o op, now int64, ids *[numDims]string, p *params) (reply, error)
	// remove deletes, atomically, the state of every dimension whose id
	// is not empty and reports which of them had any.
	remove(ctx context.Context, ids *[numDims]string) ([numDims]bool, error)
}

// Guard protects a login endpoint against password guessing. It is safe
// for concurrent use by multiple goroutines.
//
// Use it around every password check, for accounts that exist and for
// accounts that do not, in the same way:
//
//	v, err := guard.Check(ctx, username, ip)   // counts the attempt if it may proceed
//	if err != nil { refuse: fail closed }
//	if !v.Proceed() { refuse with v.RetryAfter }
//	if v.Action == CaptchaRequired && no CAPTCHA sent { guard.Abandon(...); ask for one }
//	if v.Action == CaptchaRequired && CAPTCHA wrong { guard.Failure(...); ask again }
//	if passwordOK { guard.Success(ctx, username, ip) } else { guard.Failure(ctx, username, ip) }
//
// Check counts an attempt it lets through as in progress in every
// dimension before the password is checked (increment first, then
// compare: a burst of parallel guesses cannot all pass a check made
// before any failure is recorded, and no dimension lets more than its
// Lock threshold of failures and attempts in progress through, see
// Ladder); Failure turns it into a failure, Success and Abandon settle
// it. Settle with a context the client cannot cancel
// (context.WithoutCancel(r.Context())): net/http cancels a request's
// context when the client closes its side of the connection, and a
// Failure that fails on it leaves the guess uncounted (only in progress
// until Options.AttemptTimeout), while a half-closed client can still
// read the answer. The guard never learns whether an account exists: its
// decisions, keys and store calls depend only on the name as typed.
type Guard struct {
	backend Backend
	p       params
	secret  []byte
	clock   func() time.Time
	v4, v6  int
}

// New returns a Guard storing its state in backend.
func New(backend Backend, opts Options) (*Guard, error) {
	if nilcheck.IsNil(backend) {
		return nil, fmt.Errorf("%w: nil backend (%T)", ErrInvalidOptions, backend)
	}
	p, err := compile(&opts)
	if err != nil {
		return nil, err
	}
	return &Guard{
		backend: backend,
		p:       p,
		secret:  append([]byte(nil), opts.Secret...),
		clock:   opts.Clock,
		v4:      opts.IPv4Prefix,
		v6:      opts.IPv6Prefix,
	}, nil
}

// Check decides a login attempt by account from ip before its password is
// checked. When the verdict lets it proceed (Allow or CaptchaRequired) the
// attempt is counted as in progress until Failure, Success or Abandon
// settles it (or Options.AttemptTimeout passes). Settle each attempt
// Check let through exactly once, and only those: attempts in progress
// are one count per dimension, not a record per attempt, so a settle
// without its Check (or a second one) settles another attempt in
// progress from the same account, address or pair, which then no longer
// holds back parallel guesses. On error nothing can be said about
// the attempt: refuse it (fail closed). The Verdict returned with an error
// is Locked (Proceed reports false), so that a caller that looks only at
// the Verdict refuses too; its RetryAfter and By are zero, as nothing is
// known of when the attempt could proceed: answer such a refusal as the
// store's failure (503, as examples/loginserver does), not with a
// Retry-After of 0.
func (g *Guard) Check(ctx context.Context, account string, ip netip.Addr) (Verdict, error) {
	r, now, err := g.run(ctx, opCheck, account, ip)
	if err != nil {
		return Verdict{Action: Locked}, err
	}
	return g.verdict(r, now), nil
}

// Failure records that the attempt's password (or CAPTCHA, or second
// factor) was wrong. It reports the dimensions this failure locked and
// what the next attempt would get. On error the failure may not be
// counted, and the Outcome's Next is Locked, as Check's Verdict on error.
func (g *Guard) Failure(ctx context.Context, account string, ip netip.Addr) (Outcome, error) {
	r, now, err := g.run(ctx, opFailure, account, ip)
	if err != nil {
		return Outcome{Next: Verdict{Action: Locked}}, err
	}
	o := Outcome{Next: g.verdict(r, now), Locked: r.crossed}
	for d := range numDims {
		o.Failures[d] = r.states[d].N
	}
	return o, nil
}

// Success records a correct password: it forgets the account's failures
// and the pair's failures and lock, and settles the attempt in progress in
// every dimension. The IP's failures stay (one success from an address
// does not excuse its guesses at other accounts), and so does an account
// lock (only Unlock or its end lifts it).
func (g *Guard) Success(ctx context.Context, account string, ip netip.Addr) error {
	_, _, err := g.run(ctx, opSuccess, account, ip)
	return err
}

// Abandon settles an attempt that Check let through but whose password
// was not checked, for example because a CAPTCHA was required and the
// client sent none: nothing is counted, the attempt just stops being in
// progress. (A CAPTCHA sent and wrong is a Failure.) This keeps the
// owner's clean record clean when they first meet a CAPTCHA they did not
// expect, and costs an attacker who sends none nothing but gains nothing
// either: no password is checked without the CAPTCHA.
func (g *Guard) Abandon(ctx context.Context, account string, ip netip.Addr) error {
	_, _, err := g.run(ctx, opAbandon, account, ip)
	return err
}

// Status returns the account's and address's standing without counting
// anything, for administration and tests. On error its Verdict is
// Locked, as Check's.
func (g *Guard) Status(ctx context.Context, account string, ip netip.Addr) (Status, error) {
	r, now, err := g.run(ctx, opPeek, account, ip)
	if err != nil {
		return Status{Verdict: Verdict{Action: Locked}}, err
	}
	st := Status{Verdict: g.verdict(r, now)}
	for d, ds := range []*DimensionStatus{&st.Account, &st.IP, &st.Pair} {
		s := r.states[d]
		ds.Failures, ds.Pending = s.N, s.P
		if s.N+s.P > 0 {
			ds.LastAttempt = time.UnixMicro(s.T)
		}
		if s.U != 0 {
			ds.LockedUntil = time.UnixMicro(s.U)
		}
	}
	return st, nil
}

// Unlock forgets an account's failures and lock (an administrator's
// action). Per-pair and per-IP state is untouched: UnlockPair and
// UnlockIP lift those, and Lift lifts any of them at once.
func (g *Guard) Unlock(ctx context.Context, account string) error {
	acct, err := accountKey(account)
	if err != nil {
		return err
	}
	_, err = g.remove(ctx, &[numDims]string{DimAccount - 1: g.digest('a', acct, "")})
	return err
}

// UnlockPair forgets the failures and lock of account from the network
// ip belongs to: an owner who mistyped their password until the pair
// locked (an administrator's action). The account's and the network's own
// state is untouched.
func (g *Guard) UnlockPair(ctx context.Context, account string, ip netip.Addr) error {
	acct, err := accountKey(account)
	if err != nil {
		return err
	}
	network, err := g.network(ip)
	if err != nil {
		return err
	}
	_, err = g.remove(ctx, &[numDims]string{DimPair - 1: g.digest('p', acct, network)})
	return err
}

// UnlockIP forgets the failures and lock of the network ip belongs to.
func (g *Guard) UnlockIP(ctx context.Context, ip netip.Addr) error {
	network, err := g.network(ip)
	if err != nil {
		return err
	}
	_, err = g.remove(ctx, &[numDims]string{DimIP - 1: g.digest('i', network, "")})
	return err
}

// Lifted reports which states a Lift found and forgot: a dimension with
// no failures, attempts or lock on record (never seen, expired, already
// lifted, or kept under another secret, prefix or network size than this
// Guard's) is false.
type Lifted struct {
	Account, IP, Pair bool
}

// Any reports whether Lift forgot anything.
func (l Lifted) Any() bool { return l.Account || l.IP || l.Pair }

// Lift forgets, in one atomic step, the failures and lock of account
// (unless it is ""), of the network ip belongs to (unless ip is the zero
// Addr), and with both, of account from that network (the owner's own
// mistyped passwords, which neither of the others lifts). It reports
// which of them had any state. Giving neither is ErrInvalidAccount.
//
// A Redis backend whose client is a replicawait.Client (serve's
// --redis-wait-replicas) fails a lift applied on the primary but not
// confirmed by enough replicas with an error wrapping
// replicawait.ErrNotReplicated; Lift then returns what was lifted on the
// primary with it.
func (g *Guard) Lift(ctx context.Context, account string, ip netip.Addr) (Lifted, error) {
	if account == "" && !ip.IsValid() {
		return Lifted{}, fmt.Errorf("%w: give an account, an address or both", ErrInvalidAccount)
	}
	var ids [numDims]string
	var acct, network string
	var err error
	if account != "" {
		if acct, err = accountKey(account); err != nil {
			return Lifted{}, err
		}
		ids[DimAccount-1] = g.digest('a', acct, "")
	}
	if ip.IsValid() {
		if network, err = g.network(ip); err != nil {
			return Lifted{}, err
		}
		ids[DimIP-1] = g.digest('i', network, "")
	}
	if account != "" && ip.IsValid() {
		ids[DimPair-1] = g.digest('p', acct, network)
	}
	had, err := g.remove(ctx, &ids)
	if err != nil && !errors.Is(err, replicawait.ErrNotReplicated) {
		return Lifted{}, err
	}
	return Lifted{Account: had[DimAccount-1], IP: had[DimIP-1], Pair: had[DimPair-1]}, err
}

// remove forgets the states of ids (those not "") in one atomic step.
func (g *Guard) remove(ctx context.Context, ids *[numDims]string) ([numDims]bool, error) {
	if ctx == nil {
		return [numDims]bool{}, errNilContext
	}
	return g.backend.remove(ctx, ids)
}

// errNilContext refuses a nil context, which would panic in a backend.
var errNilContext = fmt.Errorf("loginguard: %w", floodgate.ErrNilContext)

// run normalises the inputs, derives the three ids and runs o.
func (g *Guard) run(ctx context.Context, o op, account string, ip netip.Addr) (reply, int64, error) {
	if ctx == nil {
		return reply{}, 0, errNilContext
	}
	acct, err := accountKey(account)
	if err != nil {
		return reply{}, 0, err
	}
	network, err := g.network(ip)
	if err != nil {
		return reply{}, 0, err
	}
	ids := [numDims]string{
		g.digest('a', acct, ""),
		g.digest('i', network, ""),
		g.digest('p', acct, network),
	}
	now := g.clock().UnixMicro()
	r, err := g.backend.run(ctx, o, now, &ids, &g.p)
	if err != nil {
		return reply{}, 0, err
	}
	return r, now, nil
}

// verdict turns a reply into a Verdict relative to now.
func (g *Guard) verdict(r reply, now int64) Verdict {
	v := Verdict{Action: r.action, By: r.by}
	if r.action == Delay || r.action == Locked {
		v.Until = time.UnixMicro(r.until)
		v.RetryAfter = time.Duration(max(r.until-now, 1)) * time.Microsecond
	}
	return v
}

// network returns the text of the network ip is counted under, e.g.
// "203.0.113.9/32" or "2001:db8:1:2::/64".
func (g *Guard) network(ip netip.Addr) (string, error) {
	if !ip.IsValid() {
		return "", fmt.Errorf("%w: zero address", ErrInvalidIP)
	}
	ip = ip.WithZone("").Unmap()
	bits := g.v6
	if ip.Is4() {
		bits = g.v4
	}
	p, err := ip.Prefix(bits)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalidIP, err)
	}
	return p.String(), nil
}

// digest returns the hex HMAC-SHA256 (first 128 bits) of a tagged,
// length-prefixed tuple, so no two different inputs share a key and the
// keys reveal nothing without the secret.
func (g *Guard) digest(tag byte, a, b string) string {
	mac := hmac.New(sha256.New, g.secret)
	buf := make([]byte, 0, 2+2*binary.MaxVarintLen64+len(a)+len(b))
	buf = append(buf, tag)
	buf = binary.AppendUvarint(buf, uint64(len(a)))
	buf = append(buf, a...)
	buf = binary.AppendUvarint(buf, uint64(len(b)))
	buf = append(buf, b...)
	mac.Write(buf)
	return hex.EncodeToString(mac.Sum(nil)[:16])
}

// accountKey returns the form of account its counters are keyed by:
// NormalizeAccount's, without accents (the nonspacing marks of its
// canonical decomposition). Applications look accounts up accent
// sensitively (NormalizeAccount's form) or not (MySQL's *_unicode_ci and
// *_ai_ci collations take "alicé" for "alice"); keyed without accents,
// "alicé", "alicè" or "alice" with marks stacked on it never get budgets
// of their own for what such a lookup takes as one account.
func accountKey(account string) (string, error) {
	acct, err := NormalizeAccount(account)
	if err != nil {
		return "", err
	}
	d := norm.NFD.String(acct)
	if strings.IndexFunc(d, isMark) < 0 {
		return acct, nil
	}
	if k := norm.NFC.String(strings.Map(dropMark, d)); k != "" {
		return k, nil
	}
	return acct, nil // marks alone: keep them rather than key "" for all
}

func isMark(r rune) bool { return unicode.Is(unicode.Mn, r) }

// dropMark maps nonspacing marks to -1.
func dropMark(r rune) rune {
	if isMark(r) {
		return -1
	}
	return r
}

// NormalizeAccount returns the canonical form of an account name, the one
// to look it up by (its counters are keyed by that form without accents,
// see Guard). In order, it:
//
//  1. drops every invisible code point: controls (general category Cc,
//     NUL, tab and newline included), format characters (Cf: soft hyphen
//     U+00AD, zero-width space U+200B, zero-width non-joiner and joiner
//     U+200C/U+200D, word joiner U+2060, byte order mark U+FEFF, bidi
//     marks and overrides, ...), variation selectors, and the other
//     default-ignorable code points (combining grapheme joiner U+034F,
//     Hangul fillers, ...);
//  2. applies Unicode compatibility normalisation (NFKC), so full-width
//     "ＡＬＩＣＥ", ligatures and composed or decomposed accents agree;
//  3. case-folds as Unicode's CaseFolding.txt does, and normalises
//     again;
//  4. trims surrounding white space.
//
// Its result is its own canonical form (NormalizeAccount of it is itself),
// so a name stored in this form, or given to Unlock or Lift, reaches the
// counters of the spellings it came from.
//
// Case folding takes Cherokee to its capitals, as the standard does.
// Builds before 2026-12-05 swapped Cherokee's cases instead (lowercase to
// capitals and capitals to lowercase), so each case variant of such a name
// had counters of its own: after an upgrade from one, the failures and
// locks of names with Cherokee letters start afresh, once, and an
// application that stores names in this form finds such a name again
// under NormalizeAccount of its stored form.
//
// So "Alice", " alice ", "ＡＬＩＣＥ", "alice\u200b" and "al\u00adice" share
// one set of counters: an application whose user lookup ignores such
// differences (as case-insensitive collations do) sees one account, and so
// must the guard. Accents are kept here, but the guard keys counters
// without them (MySQL's *_unicode_ci collations also ignore accents:
// "alicé" and "alice" share one set of counters). Builds before
// 2026-12-04 keyed them with their accents: after an upgrade from one,
// the failures and locks of names with accents start afresh, once.
// Merging spellings errs on the safe side: two spellings
// the application might treat as one account must never get two budgets.
// Letters that only look alike ("аlice" with a Cyrillic а) stay distinct:
// lookups do not merge them either. Inner spaces are kept.
//
// It fails, wrapping ErrInvalidAccount, for names that are not valid UTF-8,
// longer than MaxAccountLen bytes, or empty after all this.
func NormalizeAccount(account string) (string, error) {
	if len(account) > MaxAccountLen {
		return "", fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidAccount, len(account), MaxAccountLen)
	}
	if !utf8.ValidString(account) {
		return "", fmt.Errorf("%w: not valid UTF-8", ErrInvalidAccount)
	}
	s := strings.Map(dropInvisible, account)
	s = norm.NFKC.String(s)
	s = norm.NFKC.String(fold(s))
	s = strings.TrimSpace(strings.Map(dropInvisible, s))
	if s == "" {
		return "", fmt.Errorf("%w: empty once invisible characters and surrounding white space are dropped", ErrInvalidAccount)
	}
	return s, nil
}

// fold case-folds s as Unicode's CaseFolding.txt does. cases.Fold
// (golang.org/x/text v0.44.0) gets one script wrong: it swaps Cherokee's
// cases instead of folding them (golang/go#46101), so "ᏣᎳᎩ" folded to
// "ꮳꮃꭹ" and "ꮳꮃꭹ" to "ᏣᎳᎩ", and a name of k Cherokee letters had 2^k
// spellings with budgets of their own. fold maps Cherokee small letters
// to the capitals CaseFolding.txt folds them to; with a cases.Fold that
// folds them right it changes nothing.
func fold(s string) string {
	return strings.Map(foldCherokee, cases.Fold().String(s))
}

// foldCherokee maps Cherokee small letters (U+AB70–U+ABBF and
// U+13F8–U+13FD) to their capitals (U+13A0–U+13EF and U+13F0–U+13F5), the
// direction of Unicode's case folding for Cherokee.
func foldCherokee(r rune) rune {
	switch {
	case r >= 0xab70 && r <= 0xabbf:
		return r - 0xab70 + 0x13a0
	case r >= 0x13f8 && r <= 0x13fd:
		return r - 0x13f8 + 0x13f0
	}
	return r
}

// dropInvisible maps the code points NormalizeAccount drops to -1.
func dropInvisible(r rune) rune {
	if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point) {
		return -1
	}
	return r
}
