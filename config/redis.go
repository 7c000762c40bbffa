package config

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
)

// ErrNotFound reports that Redis holds no configuration under the key.
var ErrNotFound = errors.New("config: no configuration stored in Redis")

// Keys are the Redis names a Floodgate deployment shares, all under its key
// prefix.
type Keys struct {
	// Config is the string key holding the YAML configuration document,
	// e.g. "fg:config".
	Config string
	// Channel is the pub/sub channel announcing a new document, e.g.
	// "fg:config:changed"; the message is the new version.
	Channel string
	// Tiers is the hash of per-identity tier assignments, e.g. "fg:tiers".
	Tiers string
}

// KeysFor returns the Keys under prefix, which must be a valid key prefix
// (see floodgate.ValidatePrefix).
func KeysFor(prefix string) (Keys, error) {
	if err := floodgate.ValidatePrefix(prefix); err != nil {
		return Keys{}, err
	}
	return Keys{
		Config:  prefix + ":config",
		Channel: prefix + ":config:changed",
		Tiers:   prefix + ":tiers",
	}, nil
}

// LoadRedis reads the configuration document stored under keys.Config and
// parses it, requiring a version field. It fails with ErrNotFound when the
// key does not exist.
func LoadRedis(ctx context.Context, client redis.UniversalClient, keys Keys) (*Config, error) {
	return LoadRedisVerified(ctx, client, keys)
}

// LoadRedisVerified is LoadRedis that, when verifyKeys are given, also
// requires the document to be signed under one of them (see VerifyAny).
func LoadRedisVerified(ctx context.Context, client redis.UniversalClient, keys Keys, verifyKeys ...[]byte) (*Config, error) {
	data, err := getDoc(ctx, client, keys)
	if err != nil {
		return nil, err
	}
	if len(verifyKeys) > 0 {
		if err := VerifyAny(data, verifyKeys); err != nil {
			return nil, err
		}
	}
	c, err := Parse(data, "redis:"+keys.Config)
	if err != nil {
		return nil, err
	}
	if c.Version() == "" {
		return nil, &Error{File: c.Source(), Msg: "a shared configuration needs a version field"}
	}
	return c, nil
}

// getDoc reads the document under keys.Config, never more than MaxSize+1
// bytes of it: STRLEN first, then GETRANGE up to MaxSize, so that a huge
// value (written by mistake or by someone who can write Redis) costs one
// small reply per poll, not an allocation of its size.
func getDoc(ctx context.Context, client redis.UniversalClient, keys Keys) ([]byte, error) {
	n, err := client.StrLen(ctx, keys.Config).Result()
	if err != nil {
		var rerr redis.Error
		if errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "WRONGTYPE") {
			// Not a document at all: the key's content is at fault, as
			// with one too large, not the connection.
			kind := "another type"
			if t, terr := client.Type(ctx, keys.Config).Result(); terr == nil {
				kind = "a " + t
			}
			return nil, &Error{File: "redis:" + keys.Config, Msg: fmt.Sprintf("the key holds %s, not a string document; not read", kind)}
		}
		return nil, fmt.Errorf("config: reading %q from Redis: %w", keys.Config, replyTo("STRLEN", err))
	}
	if n > MaxSize {
		return nil, &Error{File: "redis:" + keys.Config, Msg: fmt.Sprintf("document is %d bytes (max %d); not read", n, MaxSize)}
	}
	if n == 0 {
		// STRLEN is 0 for a missing key and an empty value alike. A
		// refused EXISTS was taken for an empty document (a walk of ACL
		// users): push then said the stored one was invalid.
		k, err := client.Exists(ctx, keys.Config).Result()
		if err != nil {
			return nil, fmt.Errorf("config: reading %q from Redis: %w", keys.Config, replyTo("EXISTS", err))
		}
		if k == 0 {
			return nil, fmt.Errorf("%w (key %q)", ErrNotFound, keys.Config)
		}
	}
	data, err := client.GetRange(ctx, keys.Config, 0, MaxSize).Bytes()
	if err != nil {
		return nil, fmt.Errorf("config: reading %q from Redis: %w", keys.Config, replyTo("GETRANGE", err))
	}
	if len(data) > MaxSize { // it grew between the two commands
		return nil, &Error{File: "redis:" + keys.Config, Msg: fmt.Sprintf("document is over %d bytes; not read", MaxSize)}
	}
	return data, nil
}

// ErrVersionConflict reports a document config push refuses: its version
// is already published with other content, or is older than the published
// one (without PublishOptions.Force), or the stored document changed while
// it was being published.
var ErrVersionConflict = errors.New("config: version conflict")

// PublishOptions are the choices of PublishWith. The zero value refuses
// going back in version.
type PublishOptions struct {
	// SignKey, when set, signs the document (Sign) before storing it, for
	// instances that verify (ReloaderOptions.VerifyKeys).
	SignKey []byte
	// Force publishes a version older than the stored one (a rollback),
	// replaces a stored document that cannot be checked (invalid, over
	// MaxSize, not a string), and replaces a signed document with one
	// unsigned or signed under another key (a key rotation, once every
	// verifying instance verifies with the new key too). A version
	// already published with other content (not only other spacing or
	// another signature line) is refused even so: instances that
	// applied it would keep it (see ApplyVersioned).
	Force bool

	// Replicas is how many replicas must acknowledge the stored document
	// (WAIT, on the connection that stored it) before it is announced:
	// 0 for none, or ReplicasOnline for every replica the primary lists
	// online and at least one when Sentinels lists a replica it does not
	// see down. A document stored but not acknowledged is not announced,
	// and PublishWith fails with ErrNotConfirmed.
	Replicas int
	// ReplicaTimeout bounds the wait for Replicas. Zero means
	// DefaultReplicaTimeout; other values are rounded up to a whole
	// millisecond, the unit of Redis WAIT's timeout (so one below 1ms
	// waits 1ms).
	ReplicaTimeout time.Duration
	// Sentinels, when set (a Sentinel deployment), are asked after the
	// document is stored, and acknowledged, whether the server that took
	// it is still the primary a majority of them names; when not,
	// PublishWith fails with ErrNotConfirmed without announcing it. A
	// push made while a failover is under way then fails rather than
	// report a document the failover loses.
	Sentinels *SentinelTarget

	// beforeStore, when set, runs between the checks against the stored
	// document and the compare-and-swap that stores the new one: tests
	// race another push there.
	beforeStore func()
}

// Publish is PublishWith without options.
func Publish(ctx context.Context, client redis.UniversalClient, keys Keys, data []byte) (*Config, error) {
	return PublishWith(ctx, client, keys, data, PublishOptions{})
}

// casScript stores ARGV[2] under KEYS[1] only if what is there still has
// the fingerprint ARGV[1] (see fingerprintScript), so two pushes racing
// cannot both pass the version checks against the same old document, nor
// a forced push replace, unseen, one another push stored meanwhile.
var casScript = redis.NewScript(fingerprintLua + `
if fingerprint(KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
`)

// fingerprintScript returns the fingerprint of what KEYS[1] holds: "" for
// nothing, the SHA-1 of a string's value (what fingerprintOf computes of a
// document read), "type:" and the type of another value. It is read only
// to replace what cannot be read as a document (over MaxSize, not a
// string), and so is computed by Redis, whatever its size.
var fingerprintScript = redis.NewScript(fingerprintLua + `
return fingerprint(KEYS[1])
`)

// fingerprintLua defines the fingerprint function of casScript and
// fingerprintScript.
const fingerprintLua = `
local function fingerprint(key)
  local t = redis.call('TYPE', key)['ok']
  if t == 'none' then return '' end
  if t ~= 'string' then return 'type:' .. t end
  return redis.sha1hex(redis.call('GET', key))
end
`

// fingerprintOf returns the fingerprint casScript compares of a document
// read: "" for none, else its SHA-1 in hex.
func fingerprintOf(doc []byte) string {
	if doc == nil {
		return ""
	}
	return fmt.Sprintf("%x", sha1.Sum(doc))
}

// PublishWith validates data and, only if it is valid and has a version,
// stores it under keys.Config and announces its version on keys.Channel,
// so that every instance watching with WatchRedis applies it. It refuses,
// wrapping ErrVersionConflict, a version already stored with different
// content (so that instances never run two documents under one version)
// and, unless opts.Force, a version lower than the stored one. A stored
// document of the same version and content but for its spacing or its
// signature line (Difference), which instances running the version
// refuse, is replaced by data. Versions
// compare in natural order: runs of digits as numbers, the rest byte by
// byte ("9" < "10", "2026-12-01.2" < "2026-12-01.10"). Publishing the
// stored document again only announces it. It returns the parsed
// configuration.
//
// A command Redis refuses (an error reply) fails it, naming the command;
// when Redis refused the ACL user a command, key or channel, the error
// also gives the ACL rules publishing needs.
func PublishWith(ctx context.Context, client redis.UniversalClient, keys Keys, data []byte, opts PublishOptions) (*Config, error) {
	c, err := publish(ctx, client, keys, data, opts)
	return c, withPushGrant(keys, err)
}

// publish is PublishWith without the ACL fix on its errors.
func publish(ctx context.Context, client redis.UniversalClient, keys Keys, data []byte, opts PublishOptions) (*Config, error) {
	if opts.SignKey != nil {
		signed, err := Sign(data, opts.SignKey)
		if err != nil {
			return nil, err
		}
		if len(signed) > MaxSize && len(data) <= MaxSize {
			// config validate passed the file: say what took it over.
			return nil, &Error{File: "redis:" + keys.Config, Msg: fmt.Sprintf("signed, the document is %d bytes (max %d): the signature line adds %d bytes to the %d of the file; shorten it by %d bytes", len(signed), MaxSize, len(signed)-len(data), len(data), len(signed)-MaxSize)}
		}
		data = signed
	}
	c, err := Parse(data, "redis:"+keys.Config)
	if err != nil {
		return nil, err
	}
	if c.Version() == "" {
		return nil, &Error{File: c.Source(), Msg: "a shared configuration needs a version field"}
	}
	old, err := getDoc(ctx, client, keys)
	sum := ""
	switch {
	case errors.Is(err, ErrNotFound):
		old = nil
	case err != nil:
		var bad *Error
		if !errors.As(err, &bad) {
			// Redis unreachable, refusing the credentials, a TLS
			// mismatch: nothing a forced push would get past.
			return nil, err
		}
		if !opts.Force {
			return nil, fmt.Errorf("config: the stored document cannot be checked (use --force to replace it): %w", err)
		}
		// An oversized document or a key of another type, replaced on
		// purpose: still only if nothing else is stored meanwhile.
		old = nil
		if sum, err = fingerprintScript.Run(ctx, client, []string{keys.Config}).Text(); err != nil {
			return nil, fmt.Errorf("config: reading %q from Redis: %w", keys.Config, replyTo("EVALSHA or EVAL of the fingerprint script (TYPE, GET)", err))
		}
	}
	if old != nil {
		sum = fingerprintOf(old)
		cur, perr := Parse(old, "redis:"+keys.Config)
		if perr == nil && cur.Version() == "" {
			perr = errors.New("it has no version")
		}
		// A stored copy of this document but for its spacing carries
		// its signature line, made under opts.SignKey, even where the
		// respacing broke it (CR LF, trailing spaces): no conflict.
		respaced := perr == nil && c.Version() == cur.Version() && c.DifferenceFrom(cur) == SpacingOnly
		if !opts.Force && isSigned(old) && !respaced {
			if err := signedConflict(old, opts.SignKey); err != nil {
				return nil, err
			}
		}
		if perr != nil && !opts.Force {
			// Written by other means than push and refused by every
			// instance, which still runs an older document: a push
			// below the version it declares could roll them back
			// unseen, so that takes Force, as any rollback does.
			declared := declaredVersion(old)
			switch {
			case declared == "":
				return nil, fmt.Errorf("config: the stored document is not a valid configuration and declares no version, so the version it replaces is unknown (use --force to replace it): %w", perr)
			case CompareVersions(c.Version(), declared) < 0:
				return nil, fmt.Errorf("%w: version %q is older than the %q the stored document declares (it is not a valid configuration: %v); use --force to replace it", ErrVersionConflict, c.Version(), declared, perr)
			}
		}
		if perr == nil {
			switch cmp := CompareVersions(c.Version(), cur.Version()); {
			case cmp == 0 && c.DifferenceFrom(cur) == OtherContent:
				return nil, fmt.Errorf("%w: version %q is already published with different content; bump the version", ErrVersionConflict, c.Version())
			case cmp < 0 && !opts.Force:
				return nil, fmt.Errorf("%w: version %q is older than the published %q; use --force to roll back", ErrVersionConflict, c.Version(), cur.Version())
			}
		}
	}
	if opts.Replicas < ReplicasOnline {
		return nil, fmt.Errorf("config: %d replicas to wait for: want %d (those online) or more", opts.Replicas, ReplicasOnline)
	}
	var sc []*redis.SentinelClient
	minReplicas := 0
	if opts.Sentinels != nil {
		sc = sentinelClients(opts.Sentinels)
		defer func() {
			for _, c := range sc {
				_ = c.Close()
			}
		}()
		if opts.Replicas == ReplicasOnline {
			// Asked before the write: a primary whose replica is being
			// promoted has just lost it, and lists none online.
			minReplicas = min(sentinelReplicas(ctx, sc, opts.Sentinels.Master), 1)
		}
	}
	if opts.beforeStore != nil {
		opts.beforeStore()
	}
	// The write and the checks of its durability go on one connection:
	// WAIT counts the replicas that have this connection's writes.
	node, err := writeNode(ctx, client, keys)
	if err != nil {
		return nil, fmt.Errorf("config: storing %q in Redis: %w", keys.Config, err)
	}
	conn := node.Conn()
	defer conn.Close()
	// A replica given as the primary: say so before anything is
	// written, not that it is now one (it never was the primary).
	if _, role, err := onlineReplicas(ctx, conn); err != nil {
		return nil, fmt.Errorf("config: asking the server its role (INFO replication) before storing %q; nothing was written: %w", keys.Config, replyTo("INFO", err))
	} else if role != "" && role != "master" {
		if opts.Sentinels != nil {
			return nil, fmt.Errorf("config: the server the sentinels name the primary of %q is a replica (role %s), as during a failover; nothing was written: run the push again once the failover is over", opts.Sentinels.Master, role)
		}
		return nil, fmt.Errorf("config: the server at %s is a replica; give the primary, or the sentinels with --redis-sentinel (role %s; nothing was written)", node.Options().Addr, role)
	}
	wrote := false
	if old == nil || !bytes.Equal(old, data) {
		ok, err := casScript.Run(ctx, conn, []string{keys.Config}, sum, data).Int()
		if err != nil {
			return nil, fmt.Errorf("config: storing %q in Redis: %w", keys.Config, replyTo("EVALSHA or EVAL of the compare-and-swap script (TYPE, GET, SET)", err))
		}
		if ok != 1 {
			return nil, fmt.Errorf("%w: the stored document changed while publishing; try again", ErrVersionConflict)
		}
		wrote = true
	}
	if fewer, err := confirm(ctx, conn, opts, sc, minReplicas); err != nil {
		return nil, notConfirmedError(c.Version(), wrote, fewer, err)
	}
	if err := client.Publish(ctx, keys.Channel, c.Version()).Err(); err != nil {
		return nil, fmt.Errorf("config: stored, but announcing on %q failed (instances pick it up at their next poll): %w", keys.Channel, replyTo("PUBLISH", err))
	}
	return c, nil
}

// signedConflict returns why a push of a document signed under key (nil:
// unsigned) over the signed document old would split the fleet, or nil
// when it would not: instances started with --config-verify-key-file
// verify with the key that signed old, would refuse the new document and
// stay on old while the others apply it.
func signedConflict(old, key []byte) error {
	if key == nil {
		return fmt.Errorf("%w: the stored document is signed and this one is not: instances started with --config-verify-key-file would refuse it while the others apply it; sign it (--sign-key-file), or use --force if no instance verifies any more", ErrSignature)
	}
	if err := Verify(old, key); err != nil {
		return fmt.Errorf("%w: the stored document is signed under another key than --sign-key-file's (or was changed after signing): instances verifying with that key (--config-verify-key-file) would refuse this one and stay on the stored one while the others apply it; sign it with that key, or use --force once every verifying instance verifies with this key too (serve --config-verify-key-file, given once for each key)", ErrSignature)
	}
	return nil
}

// declaredRE finds a document's top-level version field without parsing
// the document, which may not parse.
var declaredRE = regexp.MustCompile(`(?m)^version:[ \t]*["']?([^"'\s#]+)`)

// declaredVersion returns the version a document that does not parse
// declares on a top-level version line, or "".
func declaredVersion(doc []byte) string {
	if m := declaredRE.FindSubmatch(doc); m != nil {
		return string(m[1])
	}
	return ""
}

// CompareVersions compares two configuration versions in natural order
// (runs of ASCII digits as numbers, everything else byte by byte) and
// returns -1, 0 or +1.
func CompareVersions(a, b string) int {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := cmp.Compare(len(na), len(nb)); c != 0 {
				return c
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

// digits returns the length of the run of ASCII digits s starts with.
func digits(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

// PendingPoll is how often WatchRedis reads the document while its
// Holder has no configuration (NewPendingHolder).
const PendingPoll = time.Second

// WatchRedis applies the document under keys.Config whenever a message
// arrives on keys.Channel, whenever the subscription is made again after a
// lost connection, and also every poll (default 10s) in case a message was
// missed otherwise (every PendingPoll while the Holder has no
// configuration yet), and at once after CheckNow, and after PrimaryMoved
// (which also subscribes again). Documents go through
// ApplyVersioned. It returns when ctx ends.
func (r *Reloader) WatchRedis(ctx context.Context, client redis.UniversalClient, keys Keys, poll time.Duration) {
	if poll <= 0 {
		poll = 10 * time.Second
	}
	sub := client.Subscribe(ctx, keys.Channel)
	defer func() { _ = sub.Close() }() // the latest one (PrimaryMoved)
	// Wait for the subscription to be confirmed (or fail: the client keeps
	// retrying in the background and the poll covers the gap), then fetch
	// once to catch a document stored before the subscription existed.
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if _, err := sub.Receive(rctx); err != nil && strings.HasPrefix(err.Error(), "NOPERM") {
		// An ACL user without the channel (Redis 7's default
		// acl-pubsub-default resetchannels gives none) is refused the
		// subscription for good: say so, once, as only the poll is left.
		grant := "&" + keys.Channel
		if p, ok := strings.CutSuffix(keys.Channel, ":config:changed"); ok {
			grant += " (or &" + p + ":*)"
		}
		r.log.Warn("configuration changes are not announced to this instance: Redis refused the subscription to their channel; they are applied by the poll, up to its interval after a push, until the ACL user is granted the channel and the instance restarted",
			"channel", keys.Channel, "error", err, "grant", grant, "poll", poll)
	}
	cancel()
	// With the subscriptions: go-redis resubscribes after a lost
	// connection (a node failed over, a primary demoted, a network cut)
	// and the confirmation arrives here, so that a document published while
	// nobody was listening is read at once rather than at the next poll.
	msgs := sub.ChannelWithSubscriptions()
	t := time.NewTicker(poll)
	defer t.Stop()
	source := "redis:" + keys.Config
	lastSum := r.holder.Load().Hash()
	var lastErr, lastBad string
	fetch := func(forced bool) {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		data, err := getDoc(fctx, client, keys)
		var bad *Error
		if errors.As(err, &bad) {
			// Read, but never a valid document (too large, not a
			// string): counted and logged once as invalid, like a
			// document that does not parse, until it changes.
			r.readable(&lastErr, source)
			if msg := bad.Error(); msg != lastBad || forced {
				lastBad, lastSum = msg, ""
				r.reject(source, bad)
			}
			return
		}
		if err != nil {
			if ctx.Err() == nil {
				r.sourceError(&lastErr, source, err, forced)
			}
			return
		}
		lastBad = ""
		r.readable(&lastErr, source)
		sum := hashOf(data)
		if sum == lastSum && !forced {
			return
		}
		lastSum = sum
		if forced && sum == r.holder.Load().Hash() {
			r.unchanged(source)
			return
		}
		// A document failing the signature check was read fine and is
		// refused like an invalid one: counted and logged once, as
		// result="invalid", which RateLimitConfigRejected alerts on.
		if len(r.verify) > 0 {
			if err := VerifyAny(data, r.verify); err != nil {
				r.reject(source, r.unverified(data, source, err))
				return
			}
		}
		_, _ = r.ApplyVersioned(data, source)
	}
	fetch(false)
	// While no configuration is active (NewPendingHolder), the instance
	// decides nothing: the document is then read every second too, so
	// that Redis coming back (whose subscription go-redis may make again
	// only after the document was announced) or a document stored by
	// other means than push is applied within a second, not a poll.
	var pending <-chan time.Time
	if !r.holder.Loaded() {
		pt := time.NewTicker(min(poll, PendingPoll))
		defer pt.Stop()
		pending = pt.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-msgs:
			if !ok {
				return
			}
			fetch(false)
		case <-t.C:
			fetch(false)
		case <-r.moved:
			// The client moved to a new primary (PrimaryMoved): the
			// subscription may still be on the old one, which the
			// sentinels demote seconds later, and what the old one took
			// last may be lost. Subscribe there and read it now.
			_ = sub.Close()
			sub = client.Subscribe(ctx, keys.Channel)
			msgs = sub.ChannelWithSubscriptions()
			fetch(false)
		case <-pending:
			if r.holder.Loaded() {
				pending = nil // the deferred Stop ends it
				continue
			}
			fetch(false)
		case <-r.now:
			// Judge the document again against the active configuration:
			// one rejected before is rejected (and logged) again, and an
			// unreadable key is logged again. fetch(true) does so without
			// touching lastSum first: set to the active hash here, it
			// outlived a read that failed, and the active document
			// pushed back was then skipped as seen, its rejection kept.
			fetch(true)
		}
	}
}
