package config

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/luascript"
	"github.com/floodgate-rl/floodgate/internal/nilcheck"
	"github.com/floodgate-rl/floodgate/internal/redisnil"
	"github.com/floodgate-rl/floodgate/replicawait"
)

// Assignments stores which tier an identity is on (for example "API key
// abc123 is on enterprise"). Identities are (dimension, value) pairs, so
// user 42 and api_key 42 are distinct. Implementations are safe for
// concurrent use.
type Assignments interface {
	// Tier returns the tier assigned to value under dimension, and false
	// when none is.
	Tier(ctx context.Context, dimension, value string) (string, bool, error)
	// SetTier assigns tier to value under dimension; an empty tier removes
	// the assignment.
	SetTier(ctx context.Context, dimension, value, tier string) error
}

// assignmentField is the field of one assignment: "dimension=value".
func assignmentField(dimension, value string) (string, error) {
	if err := ValidateIdentityValue(dimension, value); err != nil {
		return "", err
	}
	return dimension + "=" + value, nil
}

func checkTierName(tier string) error {
	if tier == "" {
		return nil
	}
	if err := validDimension(tier); err != nil {
		return fmt.Errorf("%w: tier %v", ErrUnknownTier, err)
	}
	return nil
}

// MaxMemoryAssignments caps a MemoryAssignments.
const MaxMemoryAssignments = 1_000_000

// ErrTooManyAssignments reports a MemoryAssignments at its cap.
var ErrTooManyAssignments = errors.New("config: too many tier assignments")

// MemoryAssignments keeps tier assignments in process, for a service running
// without Redis. The zero value is ready to use; it holds at most
// MaxMemoryAssignments entries.
type MemoryAssignments struct {
	mu sync.RWMutex
	m  map[string]string
}

// Tier implements Assignments.
func (a *MemoryAssignments) Tier(_ context.Context, dimension, value string) (string, bool, error) {
	f, err := assignmentField(dimension, value)
	if err != nil {
		return "", false, err
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	t, ok := a.m[f]
	return t, ok, nil
}

// SetTier implements Assignments.
func (a *MemoryAssignments) SetTier(_ context.Context, dimension, value, tier string) error {
	f, err := assignmentField(dimension, value)
	if err != nil {
		return err
	}
	if err := checkTierName(tier); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if tier == "" {
		delete(a.m, f)
		return nil
	}
	if a.m == nil {
		a.m = map[string]string{}
	}
	if _, ok := a.m[f]; !ok && len(a.m) >= MaxMemoryAssignments {
		return fmt.Errorf("%w (%d)", ErrTooManyAssignments, MaxMemoryAssignments)
	}
	a.m[f] = tier
	return nil
}

// RedisAssignmentsOptions configures RedisAssignments. The zero value is
// ready to use.
type RedisAssignmentsOptions struct {
	// TTL is how long a looked-up assignment (or its absence) is cached
	// before Redis is asked again; changes made by other instances show up
	// within TTL. Default 5s.
	TTL time.Duration
	// MaxEntries caps the cache. When it is full, expired entries are
	// dropped, and then others until at most three quarters of
	// MaxEntries remain. Default 100,000.
	MaxEntries int
	// Guard, if set, runs every Redis read (fn) of a lookup, for example
	// through the circuit breaker of the limiter's store
	// (fallback.Store.Call), so that lookups are not sent to a Redis known
	// to be down; key is the assignments' hash key. Its error is Tier's.
	Guard func(ctx context.Context, key string, fn func(ctx context.Context) error) error
	// Writer, if set, sends SetTier's write in place of the client: a
	// *replicawait.Client, so that an assignment is answered only once
	// enough replicas have it (serve's --redis-wait-replicas). SetTier's
	// error then wraps replicawait.ErrNotReplicated when the primary
	// stored the assignment but too few replicas confirmed it.
	Writer interface {
		Process(ctx context.Context, cmd redis.Cmder) error
	}
}

// RedisAssignments keeps tier assignments in a Redis hash (field
// "dimension=value", value the tier name), shared by every instance, with a
// small in-process cache in front. When Redis fails, Tier returns the
// error and LastKnown still has the last value seen, however old: cached
// entries are replaced by newer answers, never dropped for age alone
// (only when the cache is full).
type RedisAssignments struct {
	client redis.UniversalClient
	writer luascript.Client
	guard  func(ctx context.Context, key string, fn func(ctx context.Context) error) error
	key    string
	ttl    time.Duration
	max    int
	mu     sync.Mutex
	cache  map[string]cached
	// gen counts ExpireAll calls: an answer read across one (from the
	// primary left, maybe) is cached stale.
	gen uint64
}

type cached struct {
	tier    string
	ok      bool
	expires time.Time
}

// NewRedisAssignments returns assignments stored in the hash key (see
// Keys.Tiers).
func NewRedisAssignments(client redis.UniversalClient, key string, opts RedisAssignmentsOptions) (*RedisAssignments, error) {
	if client == nil || key == "" {
		return nil, fmt.Errorf("%w: tier assignments need a Redis client and a key", ErrInvalid)
	}
	if opts.TTL < 0 || opts.MaxEntries < 0 {
		return nil, fmt.Errorf("%w: negative cache TTL or size", ErrInvalid)
	}
	if opts.TTL == 0 {
		opts.TTL = 5 * time.Second
	}
	if opts.MaxEntries == 0 {
		opts.MaxEntries = 100_000
	}
	var writer luascript.Client = client
	if !nilcheck.IsNil(opts.Writer) {
		writer = opts.Writer
	}
	return &RedisAssignments{client: client, writer: writer, guard: opts.Guard, key: key, ttl: opts.TTL, max: opts.MaxEntries, cache: map[string]cached{}}, nil
}

// Tier implements Assignments. An answer younger than the cache TTL is
// served from the cache; otherwise Redis is asked (through Guard), and
// when that fails Tier returns the error: see LastKnown for a stale
// answer.
func (a *RedisAssignments) Tier(ctx context.Context, dimension, value string) (string, bool, error) {
	f, err := assignmentField(dimension, value)
	if err != nil {
		return "", false, err
	}
	now := time.Now()
	a.mu.Lock()
	c, hit := a.cache[f]
	a.mu.Unlock()
	if hit && now.Before(c.expires) {
		return c.tier, c.ok, nil
	}
	return a.read(ctx, f, now)
}

// FreshTier is Tier without the cache: it always asks Redis (through
// Guard), and caches the answer as Tier does. The admin API reads with it,
// so that an assignment another instance just made shows at once.
func (a *RedisAssignments) FreshTier(ctx context.Context, dimension, value string) (string, bool, error) {
	f, err := assignmentField(dimension, value)
	if err != nil {
		return "", false, err
	}
	return a.read(ctx, f, time.Now())
}

// read asks Redis for field f and caches the answer.
func (a *RedisAssignments) read(ctx context.Context, f string, now time.Time) (string, bool, error) {
	gen := a.generation()
	var tier string
	var err error
	read := func(ctx context.Context) error {
		var err error
		tier, err = a.client.HGet(ctx, a.key, f).Result()
		switch {
		case redisnil.IsReply(err):
			tier = ""
			return nil
		case redis.HasErrorPrefix(err, "WRONGTYPE"):
			// The tiers key holds something else: Redis is fine (the
			// guard's breaker must not open for every decision), the
			// assignments are unreadable.
			return fmt.Errorf("%w: %w: %s is not a hash: %w", floodgate.ErrStoreUnavailable, floodgate.ErrForeignValue, a.key, err)
		}
		return err
	}
	if a.guard != nil {
		err = a.guard(ctx, a.key, read)
	} else {
		err = read(ctx)
	}
	switch {
	case err != nil:
		return "", false, fmt.Errorf("config: reading tier assignment: %w", err)
	case tier == "":
		a.remember(f, cached{expires: now.Add(a.ttl)}, gen)
		return "", false, nil
	}
	a.remember(f, cached{tier: tier, ok: true, expires: now.Add(a.ttl)}, gen)
	return tier, true, nil
}

// ExpireAll makes every cached answer stale: the next Tier of each asks
// Redis again, and LastKnown still has it while Redis cannot be read.
// serve calls it when the sentinels name a new primary, whose hash may
// lack an assignment the old one took in its last moments: the instance
// then uses the new primary's tiers at once, not up to the cache TTL
// later.
func (a *RedisAssignments) ExpireAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.gen++
	for k, c := range a.cache {
		c.expires = time.Time{}
		a.cache[k] = c
	}
}

// LastKnown returns the last answer Tier or SetTier saw for value under
// dimension, however old, and found false when there is none: what to use
// while Redis cannot be read.
func (a *RedisAssignments) LastKnown(dimension, value string) (tier string, ok, found bool) {
	f, err := assignmentField(dimension, value)
	if err != nil {
		return "", false, false
	}
	a.mu.Lock()
	c, hit := a.cache[f]
	a.mu.Unlock()
	return c.tier, c.ok, hit
}

// generation returns the count of ExpireAll calls so far.
func (a *RedisAssignments) generation() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.gen
}

// remember caches c for field f, stale when ExpireAll ran since gen was
// read (the answer may come from the primary left). A full cache first drops its expired
// entries and then, if that left more than three quarters of MaxEntries,
// arbitrary others down to that: each pass over the cache is paid for by
// at least a quarter of MaxEntries new entries, so a stream of new
// identities cannot make every lookup scan the whole cache (as dropping
// only the few entries that had just expired did).
func (a *RedisAssignments) remember(f string, c cached, gen uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if gen != a.gen {
		c.expires = time.Time{}
	}
	if _, ok := a.cache[f]; !ok && len(a.cache) >= a.max {
		now := time.Now()
		keep := a.max - max(a.max/4, 1)
		for k, v := range a.cache {
			if !now.Before(v.expires) {
				delete(a.cache, k)
			}
		}
		for k := range a.cache {
			if len(a.cache) <= keep {
				break
			}
			delete(a.cache, k)
		}
	}
	a.cache[f] = c
}

// SetTier implements Assignments. The change is visible at once on this
// instance and within the cache TTL on the others.
//
// The write is one script call (HSET, or HDEL for an empty tier) sent
// through Options.Writer, or the client, and never sent twice, so that
// its error tells what became of it: one wrapping
// floodgate.ErrIndeterminate was sent and may have been applied (and
// ErrNotReplicated, from a replicawait.Client, was applied on the
// primary: this instance then uses the new tier, as the primary has it);
// one wrapping floodgate.ErrStoreUnavailable and not ErrIndeterminate
// stored nothing (a refused dial, say).
func (a *RedisAssignments) SetTier(ctx context.Context, dimension, value, tier string) error {
	f, err := assignmentField(dimension, value)
	if err != nil {
		return err
	}
	if err := checkTierName(tier); err != nil {
		return err
	}
	gen := a.generation()
	_, err = setTierScript.Run(ctx, a.writer, []string{a.key}, f, tier)
	if err != nil && !errors.Is(err, replicawait.ErrNotReplicated) {
		return fmt.Errorf("config: storing tier assignment: %w", err)
	}
	a.remember(f, cached{tier: tier, ok: tier != "", expires: time.Now().Add(a.ttl)}, gen)
	if err != nil {
		return fmt.Errorf("config: storing tier assignment: %w", err)
	}
	return nil
}

// setTierScript stores one assignment: field ARGV[1] of the hash KEYS[1]
// set to the tier ARGV[2], or removed when ARGV[2] is empty. A script,
// rather than HSET and HDEL, so that a replicawait.Client can route it to
// its primary on a Redis Cluster, and so that it is never resent.
var setTierScript = luascript.New(`if ARGV[2] == '' then return redis.call('HDEL', KEYS[1], ARGV[1]) end
return redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])`, luascript.Options{})
