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
	return LoadRedisVerified(ctx, client, keys, nil)
}

// LoadRedisVerified is LoadRedis that, when key is not nil, also requires
// the document to be signed under key (see Verify).
func LoadRedisVerified(ctx context.Context, client redis.UniversalClient, keys Keys, key []byte) (*Config, error) {
	data, err := getDoc(ctx, client, keys)
	if err != nil {
		return nil, err
	}
	if key != nil {
		if err := Verify(data, key); err != nil {
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
		return nil, fmt.Errorf("config: reading %q from Redis: %w", keys.Config, err)
	}
	if n > MaxSize {
		return nil, &Error{File: "redis:" + keys.Config, Msg: fmt.Sprintf("document is %d bytes (max %d); not read", n, MaxSize)}
	}
	if n == 0 {
		// STRLEN is 0 for a missing key and an empty value alike.
		if k, err := client.Exists(ctx, keys.Config).Result(); err == nil && k == 0 {
			return nil, fmt.Errorf("%w (key %q)", ErrNotFound, keys.Config)
		}
	}
	data, err := client.GetRange(ctx, keys.Config, 0, MaxSize).Bytes()
	if err != nil {
		return nil, fmt.Errorf("config: reading %q from Redis: %w", keys.Config, err)
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
	// instances that verify (ReloaderOptions.VerifyKey).
	SignKey []byte
	// Force publishes a version older than the stored one (a rollback).
	// A version already published with other content is refused even so:
	// instances that applied it would keep it (see ApplyVersioned).
	Force bool
}

// Publish is PublishWith without options.
func Publish(ctx context.Context, client redis.UniversalClient, keys Keys, data []byte) (*Config, error) {
	return PublishWith(ctx, client, keys, data, PublishOptions{})
}

// casScript stores ARGV[2] under KEYS[1] only if the value there still has
// the SHA-1 ARGV[1] ("" for no value), so two pushes racing cannot both
// pass the version checks against the same old document.
var casScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
local sum = ''
if cur then sum = redis.sha1hex(cur) end
if sum ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
`)

// PublishWith validates data and, only if it is valid and has a version,
// stores it under keys.Config and announces its version on keys.Channel,
// so that every instance watching with WatchRedis applies it. It refuses,
// wrapping ErrVersionConflict, a version already stored with different
// content (so that instances never run two documents under one version)
// and, unless opts.Force, a version lower than the stored one. Versions
// compare in natural order: runs of digits as numbers, the rest byte by
// byte ("9" < "10", "2026-12-01.2" < "2026-12-01.10"). Publishing the
// stored document again only announces it. It returns the parsed
// configuration.
func PublishWith(ctx context.Context, client redis.UniversalClient, keys Keys, data []byte, opts PublishOptions) (*Config, error) {
	if opts.SignKey != nil {
		signed, err := Sign(data, opts.SignKey)
		if err != nil {
			return nil, err
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
	overwrite := false
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
		old, overwrite = nil, true // an oversized document or a key of another type, replaced on purpose
	}
	sum := ""
	if old != nil {
		if opts.SignKey == nil && !opts.Force && isSigned(old) {
			// Instances started with --config-verify-key-file would
			// refuse it and stay on the old document while the others
			// apply it: the fleet split.
			return nil, fmt.Errorf("%w: the stored document is signed and this one is not: instances started with --config-verify-key-file would refuse it while the others apply it; sign it (--sign-key-file), or use --force if no instance verifies any more", ErrSignature)
		}
		sum = fmt.Sprintf("%x", sha1.Sum(old))
		cur, perr := Parse(old, "redis:"+keys.Config)
		if perr == nil && cur.Version() == "" {
			perr = errors.New("it has no version")
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
			case cmp == 0 && cur.Hash() != c.Hash():
				return nil, fmt.Errorf("%w: version %q is already published with different content; bump the version", ErrVersionConflict, c.Version())
			case cmp < 0 && !opts.Force:
				return nil, fmt.Errorf("%w: version %q is older than the published %q; use --force to roll back", ErrVersionConflict, c.Version(), cur.Version())
			}
		}
	}
	if overwrite {
		if err := client.Set(ctx, keys.Config, data, 0).Err(); err != nil {
			return nil, fmt.Errorf("config: storing %q in Redis: %w", keys.Config, err)
		}
	} else if old == nil || !bytes.Equal(old, data) {
		ok, err := casScript.Run(ctx, client, []string{keys.Config}, sum, data).Int()
		if err != nil {
			return nil, fmt.Errorf("config: storing %q in Redis: %w", keys.Config, err)
		}
		if ok != 1 {
			return nil, fmt.Errorf("%w: the stored document changed while publishing; try again", ErrVersionConflict)
		}
	}
	if err := client.Publish(ctx, keys.Channel, c.Version()).Err(); err != nil {
		return nil, fmt.Errorf("config: stored, but announcing on %q failed (instances pick it up at their next poll): %w", keys.Channel, err)
	}
	return c, nil
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

// WatchRedis applies the document under keys.Config whenever a message
// arrives on keys.Channel, whenever the subscription is made again after a
// lost connection, and also every poll (default 10s) in case a message was
// missed otherwise, and at once after CheckNow. Documents go through
// ApplyVersioned. It returns when ctx ends.
func (r *Reloader) WatchRedis(ctx context.Context, client redis.UniversalClient, keys Keys, poll time.Duration) {
	if poll <= 0 {
		poll = 10 * time.Second
	}
	sub := client.Subscribe(ctx, keys.Channel)
	defer sub.Close()
	// Wait for the subscription to be confirmed (or fail: the client keeps
	// retrying in the background and the poll covers the gap), then fetch
	// once to catch a document stored before the subscription existed.
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, _ = sub.Receive(rctx)
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
		if r.verify != nil {
			if err := Verify(data, r.verify); err != nil {
				r.reject(source, err)
				return
			}
		}
		_, _ = r.ApplyVersioned(data, source)
	}
	fetch(false)
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
