package contender

import (
	"context"
	"fmt"
	"strconv"

	"github.com/floodgate-rl/floodgate/bench/internal/closedloop"
	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/throttled/throttled/v2"
	goredisstore "github.com/throttled/throttled/v2/store/goredisstore.v9"
	"github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// RedisRateClient is what go-redis/redis_rate needs from a client;
// *redis.Client and *redis.AutoPipeliner have it.
type RedisRateClient interface {
	Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd
	EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd
	ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd
	ScriptLoad(ctx context.Context, script string) *redis.StringCmd
	Del(ctx context.Context, keys ...string) *redis.IntCmd
	EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd
	EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd
}

// RedisRate returns an Op deciding through go-redis/redis_rate v10 (GCRA in
// one Lua script) with an open limit.
func RedisRate(c RedisRateClient) (closedloop.Op, error) {
	if c == nil {
		return nil, ErrNilDependency
	}
	lim := redis_rate.NewLimiter(c)
	limit := redis_rate.Limit{Rate: int(OpenLimit), Burst: int(OpenLimit), Period: OpenPeriod}
	return func(ctx context.Context, key string) (bool, error) {
		r, err := lim.Allow(ctx, key, limit)
		if err != nil {
			return false, err
		}
		return r.Allowed > 0, nil
	}, nil
}

// Ulule returns an Op deciding through ulule/limiter v3's Redis store (a
// fixed window counter in one Lua script) with an open limit.
func Ulule(c *redis.Client, prefix string) (closedloop.Op, error) {
	if c == nil {
		return nil, ErrNilDependency
	}
	store, err := ulredis.NewStoreWithOptions(c, limiter.StoreOptions{Prefix: prefix})
	if err != nil {
		return nil, fmt.Errorf("contender: ulule store: %w", err)
	}
	lim := limiter.New(store, limiter.Rate{Period: OpenPeriod, Limit: 1 << 40})
	return func(ctx context.Context, key string) (bool, error) {
		r, err := lim.Get(ctx, key)
		if err != nil {
			return false, err
		}
		return !r.Reached, nil
	}, nil
}

// Throttled returns an Op deciding through throttled/v2's GCRA limiter on
// its go-redis v9 store: a read (TIME + GET in a pipeline) then a
// compare-and-swap script, retried on conflict — two round trips per
// decision, and errors under contention on one key once its CAS retries
// run out.
func Throttled(c *redis.Client, prefix string) (closedloop.Op, error) {
	if c == nil {
		return nil, ErrNilDependency
	}
	store, err := goredisstore.NewCtx(c, prefix)
	if err != nil {
		return nil, fmt.Errorf("contender: throttled store: %w", err)
	}
	n := int(OpenLimit)
	lim, err := throttled.NewGCRARateLimiterCtx(store, throttled.RateQuota{MaxRate: throttled.PerDuration(n, OpenPeriod), MaxBurst: n})
	if err != nil {
		return nil, fmt.Errorf("contender: throttled limiter: %w", err)
	}
	return func(ctx context.Context, key string) (bool, error) {
		limited, _, err := lim.RateLimitCtx(ctx, key, 1)
		if err != nil {
			return false, err
		}
		return !limited, nil
	}, nil
}

// TinyScript is the smallest atomic counter a limiter can run: INCR, and
// EXPIRE when the key is new. It measures what one EVALSHA round trip costs
// with no algorithm around it.
const TinyScript = `local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return n`

// tinyTTL is the TTL, in seconds, the tiny script sets.
const tinyTTL = 3600

// Scripter is what the tiny-script contender needs from a go-redis client;
// *redis.Client and *redis.AutoPipeliner have it.
type Scripter interface {
	ScriptLoad(ctx context.Context, script string) *redis.StringCmd
	EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd
}

// Tiny loads TinyScript on c and returns an Op running it with EVALSHA, and
// its SHA-1. A decision counts as allowed when the counter is positive.
func Tiny(ctx context.Context, c Scripter) (closedloop.Op, string, error) {
	if c == nil {
		return nil, "", ErrNilDependency
	}
	sha, err := c.ScriptLoad(ctx, TinyScript).Result()
	if err != nil {
		return nil, "", fmt.Errorf("contender: SCRIPT LOAD: %w", err)
	}
	return func(ctx context.Context, key string) (bool, error) {
		n, err := c.EvalSha(ctx, sha, []string{key}, tinyTTL).Int64()
		return n > 0, err
	}, sha, nil
}

// RueidisTiny returns an Op running TinyScript through rueidis, whose
// client pipelines concurrent commands on shared connections by default.
func RueidisTiny(c rueidis.Client) (closedloop.Op, error) {
	if c == nil {
		return nil, ErrNilDependency
	}
	script := rueidis.NewLuaScript(TinyScript)
	ttl := []string{strconv.Itoa(tinyTTL)}
	return func(ctx context.Context, key string) (bool, error) {
		n, err := script.Exec(ctx, c, []string{key}, ttl).AsInt64()
		return n > 0, err
	}, nil
}
