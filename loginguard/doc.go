// Package loginguard protects login endpoints against password guessing:
// failures are counted in several dimensions, the response escalates
// (CAPTCHA, then a delay, then a temporary lockout), and nothing is
// permanent, so an attacker cannot lock the real owner out for good.
//
// Failures are counted in three dimensions, each with its own thresholds
// and time to live (see [Ladder] and [Options]):
//
//   - per account, from any address: catches many addresses against one
//     account (a distributed attack);
//   - per client address or network: catches one address spraying many
//     accounts;
//   - per account and address: the finest, the one that follows a single
//     person (or attacker) at one place.
//
// Each dimension climbs the same ladder: after Captcha failures a CAPTCHA
// is required, after Delay failures each attempt must also wait a growing
// delay after the previous one, and the failure that reaches Lock locks
// the dimension for Lockout. Every key has a TTL; a lock always ends.
// Attempts in progress (let through by Check, password not yet verified)
// count with the failures on every rung, and while they could bring the
// failures to Lock no other attempt proceeds: it is told to wait (Delay)
// until they are settled or expire. A delay they lengthen is answered as
// ending, at the latest, when they expire, unless the failures alone
// hold it longer.
//
// An attacker cannot turn the account dimension into a denial of service
// against the owner: by default, while an account is locked (or delayed),
// an attempt from an account+address pair with a clean record only needs a
// CAPTCHA (see Options.StrictAccountLock). The owner's address dimension is
// not touched by failures from other addresses at all.
//
// The guard is uniform: it never learns whether an account exists, so
// its decisions, the keys it touches and the number of store calls are the
// same for every name. Names are normalised ([NormalizeAccount]) and, like
// addresses, stored only as HMAC-SHA256 digests under a secret.
//
// Every operation is one atomic step: in memory ([NewMemory]) the pure step
// function runs under a lock; on Redis ([NewRedis]) one Lua script per
// operation (check, failure, success) reads the three states, applies the
// same step and writes each state with its TTL, with the caller's clock
// passed in ARGV. Check counts an attempt it lets through before the
// password is verified, so parallel guesses cannot all slip past a check
// made before the first failure was recorded: however many arrive at
// once, a dimension with a Lock threshold lets at most Lock attempts
// proceed (password checks, and CAPTCHAs found wrong) before it locks,
// as its failures and attempts in progress together never pass Lock
// until then; after a lock that ended while its failures are still
// counted, one proceeds at a time. What bounds this: an attempt counts
// as in progress until Failure, Success or Abandon settles it, or at the
// latest Options.AttemptTimeout after the dimension's last attempt, so a
// password check that outlasts the timeout (or a settle that is lost)
// makes room for another; Success forgets the account's and the pair's
// failures, so their count starts again (not the IP's); by default an
// account's delay or lock (its wait for attempts in progress included)
// is only a CAPTCHA for a pair with a clean record (see above), so
// against many addresses the account's bound holds only with
// StrictAccountLock; and NewMemory counts within one process, NewRedis
// across every instance sharing the Redis.
//
// On Redis the guard's memory is Redis's: a Redis restarted without
// persistence (or with only periodic snapshots, from the last one) has
// forgotten every failure count and lockout, and an attacker's next
// guesses start from a clean record. Run it on a Redis with AOF (as
// billing quotas need; floodgate doctor's persistence check) when
// lockouts must outlive a restart, and keep maxmemory-policy noeviction:
// an evicted state lifts its lockout early.
package loginguard
