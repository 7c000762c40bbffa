package envoycompat

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/deadline"
	"github.com/floodgate-rl/floodgate/internal/redisnil"
)

// Op is one counter update: add N to the counter Key, creating it with
// time to live TTL, and report the counter's value after the addition in
// Result.
type Op struct {
	Key string
	N   uint64
	TTL time.Duration
	// PerSecond marks a counter of a per-second limit (see
	// RedisStore.PerSecond).
	PerSecond bool
	// Result is set by Incr.
	Result uint64
}

// Store holds fixed-window counters. Implementations are safe for
// concurrent use.
type Store interface {
	// Incr applies every op and sets each Result. On error some ops may
	// have been applied.
	Incr(ctx context.Context, ops []*Op) error
	// Get returns the current value of each counter (0 when absent).
	Get(ctx context.Context, ops []*Op) ([]uint64, error)
}

// RedisStore keeps the counters in Redis under envoyproxy/ratelimit's
// keys, so that both services count on the same keys. Each counter update
// is INCRBY then EXPIRE of its key (in seconds, at least 1), as theirs
// sends them, but run together in one Lua script (incr.lua, by EVALSHA), so
// that a counter can never be left without its time to live (theirs
// pipelines the two commands, and a connection lost between them leaves
// the counter without one).
//
// On a client of one server (a *redis.Client, which is also what
// redis.NewFailoverClient returns for Sentinel), every key lives on that
// server, and the updates of concurrent Incr calls are coalesced: a call
// that finds a script call free goes at once, alone; otherwise it waits
// and leaves with the others waiting, in one script call (see
// incrBatcher). On any other client (a *redis.ClusterClient, whose keys
// carry no hash tag and lie in any slot, or a *redis.Ring) each counter is
// its own script call, sent concurrently with the decision's others.
//
// Failures wrap floodgate.ErrStoreUnavailable when nothing was written for
// the call, floodgate.ErrIndeterminate when some or all of its counters
// may have been updated. The zero value is not usable: set Client. Set the
// fields before the first call and do not change them after. RedisStore is
// safe for concurrent use.
type RedisStore struct {
	// Client holds every counter, or every counter of a limit longer
	// than a second when PerSecond is set.
	Client redis.UniversalClient
	// PerSecond, when not nil, holds the counters of per-second limits
	// (their REDIS_PERSECOND).
	PerSecond redis.UniversalClient
	// MaxBatch is the most counters one coalesced script call updates on
	// a single-server client (an Incr's counters always go together,
	// even beyond it). 0 means DefaultMaxBatch; 1 turns coalescing off:
	// each Incr is one script call of its own, sent at once.
	MaxBatch int
	// Timeout bounds each Incr and Get on Client from the moment it is
	// called, the wait for a busy script call included (REDIS_TIMEOUT);
	// PerSecondTimeout on PerSecond (REDIS_PERSECOND_TIMEOUT). 0: only
	// the caller's context and the client's own timeouts bound them, so
	// a call could wait for one in flight and then for its own.
	Timeout, PerSecondTimeout time.Duration

	once            sync.Once
	main, perSecond *incrBatcher // nil: no coalescing on that client
	ticks           *deadline.Ticks

	probeMu sync.Mutex
	probes  [2]probeTargets // Probe's Cluster primaries: Client's, PerSecond's
}

// DefaultMaxBatch is RedisStore.MaxBatch's default.
const DefaultMaxBatch = 64

func (s *RedisStore) client(perSecond bool) redis.UniversalClient {
	if perSecond && s.PerSecond != nil {
		return s.PerSecond
	}
	return s.Client
}

// batcherFor returns the batcher of c (the Store's Client or PerSecond), or
// nil when c is not a client of one server.
func (s *RedisStore) batcherFor(c redis.UniversalClient) *incrBatcher {
	s.init()
	if c == s.Client {
		return s.main
	}
	return s.perSecond
}

// init makes the batchers and the deadline ticks, once.
func (s *RedisStore) init() {
	s.once.Do(func() {
		s.ticks = deadline.New()
		s.main = newIncrBatcher(s.Client, s.MaxBatch)
		if s.PerSecond != nil && s.PerSecond != s.Client {
			s.perSecond = newIncrBatcher(s.PerSecond, s.MaxBatch)
		} else {
			s.perSecond = s.main
		}
	})
}

// Incr implements Store. The counters of Client and those of PerSecond
// are updated one client after the other.
func (s *RedisStore) Incr(ctx context.Context, ops []*Op) error {
	if s.Client == nil {
		return fmt.Errorf("%w: envoycompat: RedisStore.Client is nil", floodgate.ErrStoreUnavailable)
	}
	applied := false // some counters were written by an earlier call
	for _, perSecond := range []bool{false, true} {
		c := s.client(perSecond)
		if perSecond && c == s.Client {
			break
		}
		mine := ops
		if s.PerSecond != nil && s.PerSecond != s.Client {
			mine = nil
			for _, op := range ops {
				if s.client(op.PerSecond) == c {
					mine = append(mine, op)
				}
			}
		}
		if len(mine) == 0 {
			continue
		}
		if err := s.incrOn(ctx, c, perSecond, mine); err != nil {
			if applied && errors.Is(err, floodgate.ErrStoreUnavailable) {
				// The main server's counters were written: the request
				// was not "certainly not applied" (an outside walk saw
				// that said with the per-second server down).
				if errors.Is(err, context.Canceled) {
					// Not sent: the caller went while they waited
					// (incrOn, incrEach keep context.Canceled only
					// then), which the service counts as no Redis
					// error (review17: counted as redis_error).
					return fmt.Errorf("%w: the request's counters on the main Redis were updated, those of its per-second limits were not sent (their caller had gone): %w", floodgate.ErrIndeterminate, context.Canceled)
				}
				return fmt.Errorf("%w: the request's counters on the main Redis were updated, those of its per-second limits were not: %v", floodgate.ErrIndeterminate, err)
			}
			return err
		}
		applied = true
	}
	return nil
}

// incrOn applies ops, all of client c's, within the client's timeout.
func (s *RedisStore) incrOn(ctx context.Context, c redis.UniversalClient, perSecond bool, ops []*Op) error {
	ctx, cancel := s.bound(ctx, perSecond)
	defer cancel()
	var err error
	if b := s.batcherFor(c); b != nil {
		err = b.incr(ctx, ops)
	} else {
		err = incrEachLive(ctx, c, ops)
	}
	if err != nil {
		reloadSlots(c)
	}
	return err
}

// reloadSlots makes a Cluster client reload its slot map, in the
// background, after a failed call: the failed node's replica may have
// taken its slots. go-redis alone reloads it once a minute, and an outside
// walk saw envoy-compat fail the requests of a killed primary's slots for
// 38-40 s after the replica was promoted (theirs: 1-2 s). Reloads are
// coalesced (one at a time, 200 ms apart).
func reloadSlots(c redis.UniversalClient) {
	if cc, ok := c.(*redis.ClusterClient); ok {
		cc.ReloadState(context.Background())
	}
}

// bound returns ctx with the timeout of the Client (or the PerSecond
// client) unless ctx ends sooner.
func (s *RedisStore) bound(ctx context.Context, perSecond bool) (context.Context, context.CancelFunc) {
	d := s.timeout(perSecond)
	if d <= 0 {
		return ctx, func() {}
	}
	// Shared timers (internal/deadline): a context.WithTimeout per
	// request cost about 1.5 µs and four allocations. The parent's
	// cancellation is not passed on; the deadline bounds the call anyway.
	s.init()
	return s.ticks.WithTimeout(ctx, time.Now(), d)
}

// timeout is Timeout, or PerSecondTimeout for the PerSecond client.
func (s *RedisStore) timeout(perSecond bool) time.Duration {
	if perSecond && s.PerSecond != nil {
		return s.PerSecondTimeout
	}
	return s.Timeout
}

// incrEachLive is incrEach under deadline.Bind's context: go-redis waits
// for a free connection of a node's pool under a call's context, which
// the shared deadline of bound does not end when the client goes, so on a
// stalled Redis Cluster node the updates of clients that went while they
// waited were sent once connections came free, and counted. A call whose
// caller goes before it is sent now is not sent, and fails with store
// unavailable wrapping the caller's error (context.Canceled), as the
// queue's (incrBatcher); one already sent is not undone.
func incrEachLive(ctx context.Context, c redis.UniversalClient, ops []*Op) error {
	ctx, stop, err := deadline.Bind(ctx)
	if err != nil {
		return fmt.Errorf("%w: redis: %w (its caller had gone before it was sent)", floodgate.ErrStoreUnavailable, err)
	}
	defer stop()
	return incrEach(ctx, c, ops)
}

// incrEach updates each op's counter with its own script call, all sent at
// once: on a Redis Cluster (or a Ring) the keys of one decision lie on any
// node. When some counters were updated and the others failed (a node
// down), the error wraps floodgate.ErrIndeterminate, not
// floodgate.ErrStoreUnavailable: the request was partly counted. When the
// others all failed because the caller went before they were sent
// (incrEachLive), it also wraps context.Canceled, as a call dropped whole
// does: the service counts neither as a Redis error (review16 saw such a
// request counted as redis_error and logged as a store error).
func incrEach(ctx context.Context, c redis.UniversalClient, ops []*Op) error {
	if len(ops) == 1 {
		return incrOne(ctx, c, ops[0])
	}
	errs := make([]error, len(ops))
	var wg sync.WaitGroup
	for i := range ops {
		wg.Go(func() { errs[i] = incrOne(ctx, c, ops[i]) })
	}
	wg.Wait()
	err := errors.Join(errs...)
	if err == nil {
		return nil
	}
	failed, dropped := 0, 0
	var real []error // the failures that are not the caller's departure
	for _, e := range errs {
		if e != nil {
			failed++
			if errors.Is(e, context.Canceled) {
				dropped++
			} else {
				real = append(real, e)
			}
		}
	}
	gone := len(real) == 0
	if failed < len(ops) && !errors.Is(err, floodgate.ErrIndeterminate) {
		if gone {
			return fmt.Errorf("%w: %d of the request's %d counters were updated, the others were not sent (their caller had gone): %w", floodgate.ErrIndeterminate, len(ops)-failed, len(ops), context.Canceled)
		}
		return fmt.Errorf("%w: %d of the request's %d counters were updated, the others failed: %v", floodgate.ErrIndeterminate, len(ops)-failed, len(ops), err)
	}
	if gone || dropped == 0 {
		return err
	}
	// Some counters failed in Redis (refused, or sent and timed out) and
	// others were dropped for a caller that went: the joined error wrapped
	// context.Canceled, and the service took a Redis failure for a gone
	// client, neither counted nor logged (review17). The error is the
	// Redis failures', the dropped counters told in words.
	return fmt.Errorf("%w (and %d of the request's counters were not sent: their caller had gone)", errors.Join(real...), dropped)
}

// Get implements Store.
func (s *RedisStore) Get(ctx context.Context, ops []*Op) ([]uint64, error) {
	out := make([]uint64, len(ops))
	for i, op := range ops {
		gctx, cancel := s.bound(ctx, op.PerSecond)
		v, err := s.client(op.PerSecond).Get(gctx, op.Key).Result()
		cancel()
		if redisnil.IsReply(err) {
			continue
		}
		if err != nil {
			reloadSlots(s.client(op.PerSecond))
			return nil, fmt.Errorf("redis: GET %s: %w", op.Key, err)
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("redis: GET %s: not a counter: %q", op.Key, v)
		}
		out[i] = n
	}
	return out, nil
}

// MemoryStore keeps the counters in process, for one instance or tests.
// At most MaxKeys counters live at once; when full, expired ones are
// dropped, and if none is expired Incr fails rather than forgetting a
// live counter. The zero value is ready (MaxKeys 0 means 1,000,000).
type MemoryStore struct {
	// MaxKeys bounds the live counters.
	MaxKeys int
	// Now returns the current time; default time.Now.
	Now func() time.Time

	mu sync.Mutex
	m  map[string]memEntry
}

type memEntry struct {
	n   uint64
	exp time.Time
}

// ErrStoreFull is returned by MemoryStore.Incr when MaxKeys live counters
// exist.
var ErrStoreFull = errors.New("envoycompat: memory store full")

func (s *MemoryStore) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Incr implements Store.
func (s *MemoryStore) Incr(_ context.Context, ops []*Op) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]memEntry{}
	}
	now := s.now()
	limit := s.MaxKeys
	if limit <= 0 {
		limit = 1_000_000
	}
	for _, op := range ops {
		// As Redis's INCRBY: a count past 2^63-1 is refused, not wrapped
		// around (before any op is applied).
		if e, ok := s.m[op.Key]; ok && now.Before(e.exp) && op.N > math.MaxInt64-min(e.n, math.MaxInt64) || op.N > math.MaxInt64 {
			return fmt.Errorf("%w: envoycompat: increment %d of %q would overflow its counter", floodgate.ErrStoreUnavailable, op.N, op.Key)
		}
	}
	for _, op := range ops {
		e, ok := s.m[op.Key]
		if ok && !now.Before(e.exp) {
			e, ok = memEntry{}, false
		}
		if !ok && len(s.m) >= limit {
			for k, o := range s.m {
				if !now.Before(o.exp) {
					delete(s.m, k)
				}
			}
			if len(s.m) >= limit {
				return ErrStoreFull
			}
		}
		e.n = min(e.n+op.N, MaxCounter) // as incr.lua: saturates
		e.exp = now.Add(op.TTL)
		s.m[op.Key] = e
		op.Result = e.n
	}
	return nil
}

// Get implements Store.
func (s *MemoryStore) Get(_ context.Context, ops []*Op) ([]uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out := make([]uint64, len(ops))
	for i, op := range ops {
		if e, ok := s.m[op.Key]; ok && now.Before(e.exp) {
			out[i] = e.n
		}
	}
	return out, nil
}

// overCache remembers counters found over their limit until their window
// ends (their LOCAL_CACHE_SIZE_IN_BYTES), so that later requests for them
// are answered OVER_LIMIT without asking the store. It holds at most max
// keys; when full, expired keys are dropped, then arbitrary others until
// three quarters of max remain.
type overCache struct {
	mu  sync.Mutex
	max int
	m   map[string]time.Time
}

func newOverCache(bytes int) *overCache {
	if bytes == 0 {
		return nil
	}
	bytes = max(bytes, MinLocalCacheBytes)
	// about 64 bytes of overhead per entry besides the key
	return &overCache{max: max(bytes/128, 1), m: map[string]time.Time{}}
}

func (c *overCache) has(key string, now time.Time) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	exp, ok := c.m[key]
	if ok && !now.Before(exp) {
		delete(c.m, key)
		return false
	}
	return ok
}

func (c *overCache) add(key string, ttl time.Duration, now time.Time) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; !ok && len(c.m) >= c.max {
		// Expired keys go first, then arbitrary others until a quarter
		// of the room is free: forgetting a key only sends its next
		// request to the store, and each pass over the cache is paid
		// for by a quarter of max new keys (keeping it full of live keys
		// made every new over-limit key pass over all of them under the
		// lock that every request's has takes).
		keep := c.max - max(c.max/4, 1)
		for k, exp := range c.m {
			if !now.Before(exp) {
				delete(c.m, k)
			}
		}
		for k := range c.m {
			if len(c.m) <= keep {
				break
			}
			delete(c.m, k)
		}
	}
	c.m[key] = now.Add(ttl)
}
