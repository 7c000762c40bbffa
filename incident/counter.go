package incident

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/redisnil"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// Counter is the naive limiter's storage: commands that are each atomic on
// their own, like Redis's GET and INCR.
type Counter interface {
	// Set stores v under key (with a time to live where the backend has one).
	Set(ctx context.Context, key string, v int64) error
	// Get returns the value under key, 0 when there is none.
	Get(ctx context.Context, key string) (int64, error)
	// Incr adds one to the value under key and returns the new value.
	Incr(ctx context.Context, key string) (int64, error)
	// Delete removes key.
	Delete(ctx context.Context, key string) error
}

// MemoryCounter is a Counter in process memory. Each command holds a lock
// for its own duration only, exactly like a Redis command: nothing makes a
// GET and the following INCR one step. The zero value is ready to use.
type MemoryCounter struct {
	mu sync.Mutex
	m  map[string]int64
}

// Set implements Counter.
func (c *MemoryCounter) Set(_ context.Context, key string, v int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int64{}
	}
	c.m[key] = v
	return nil
}

// Get implements Counter.
func (c *MemoryCounter) Get(_ context.Context, key string) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[key], nil
}

// Incr implements Counter.
func (c *MemoryCounter) Incr(_ context.Context, key string) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int64{}
	}
	c.m[key]++
	return c.m[key], nil
}

// Delete implements Counter.
func (c *MemoryCounter) Delete(_ context.Context, key string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
	return nil
}

// RedisCounter is a Counter in Redis, using plain GET, INCR and SET.
type RedisCounter struct {
	// Client is the Redis client.
	Client redis.UniversalClient
}

// Set implements Counter; the key expires after an hour, as the
// incident's hourly counter would.
func (c RedisCounter) Set(ctx context.Context, key string, v int64) error {
	return c.Client.Set(ctx, key, v, time.Hour).Err()
}

// Get implements Counter.
func (c RedisCounter) Get(ctx context.Context, key string) (int64, error) {
	n, err := c.Client.Get(ctx, key).Int64()
	if redisnil.IsReply(err) {
		return 0, nil
	}
	return n, err
}

// Incr implements Counter.
func (c RedisCounter) Incr(ctx context.Context, key string) (int64, error) {
	return c.Client.Incr(ctx, key).Result()
}

// Delete implements Counter.
func (c RedisCounter) Delete(ctx context.Context, key string) error {
	return c.Client.Del(ctx, key).Err()
}

// Memory returns an environment in process memory, with keys under prefix.
// Its Forget resets the keys in its store, so that every Run on it starts
// from the same state.
func Memory(prefix string) (Env, error) {
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		return Env{}, err
	}
	return Env{
		Backend: "in memory",
		Counter: &MemoryCounter{},
		Store:   st,
		Prefix:  prefix,
		Forget: func(_ context.Context, keys ...string) error {
			for _, k := range keys {
				st.Reset(k)
			}
			return nil
		},
	}, nil
}

// Redis returns an environment on a real Redis through client, with keys
// under prefix (make it unique: the run deletes its keys afterwards, and
// only those). describe names the server in the report.
//
// Before the bursts, the environment's Warm opens as many connections of
// client's pool as the burst has requests (at most its PoolSize; on a
// Redis Cluster, on every primary), each answering a PING, and leaves them
// idle in the pool. A fresh pool would otherwise dial during the naive
// burst, spreading it out so that many requests read the counter after
// others had written it: an outside walk of the demo with a 64-connection
// pool saw 4 to 29 of 50 requests through, where a warm client let all
// 50. Another client type (a Ring) is not warmed.
func Redis(client redis.UniversalClient, prefix, describe string) (Env, error) {
	st, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		return Env{}, fmt.Errorf("incident: %w", err)
	}
	return Env{
		Backend: "on Redis " + describe,
		Counter: RedisCounter{Client: client},
		Store:   st,
		Prefix:  prefix,
		Forget: func(ctx context.Context, keys ...string) error {
			return client.Del(ctx, keys...).Err()
		},
		Warm: func(ctx context.Context, n int) error {
			switch c := client.(type) {
			case *redis.Client:
				return warmPool(ctx, c, n)
			case *redis.ClusterClient:
				return c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
					return warmPool(ctx, m, n)
				})
			}
			return nil
		},
	}, nil
}

// warmPool opens n connections of c's pool (at most its PoolSize), sends a
// PING on each, and returns them to the pool. Each is held until all have
// answered, so the pool cannot hand one connection out twice and ends with
// n open. They are opened one after the other: go-redis's Conns, dialing
// at once, race on their client's options (its race detector says so).
func warmPool(ctx context.Context, c *redis.Client, n int) error {
	n = min(n, c.Options().PoolSize)
	conns := make([]*redis.Conn, 0, n)
	defer func() {
		for _, cn := range conns {
			_ = cn.Close()
		}
	}()
	for i := range n {
		cn := c.Conn()
		conns = append(conns, cn)
		if err := cn.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("connection %d of %d: %w", i+1, n, err)
		}
	}
	return nil
}
