package concurrency

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/luascript"
	"github.com/floodgate-rl/floodgate/replicawait"
	"github.com/redis/go-redis/v9"
)

//go:embed lease.lua
var leaseLua string

// leaseScript runs lease.lua. The script's own error replies (arguments it
// refuses, a lease id already held) are floodgate.ErrBadReply: the second
// comes after the script trimmed expired leases, so it does not mean that
// nothing was written.
var leaseScript = luascript.New(leaseLua, luascript.Options{Refusal: "floodgate lease:"})

// Client is the part of a go-redis v9 client a RedisStore uses:
// *redis.Client, *redis.ClusterClient and the failover clients satisfy it.
// Set ContextTimeoutEnabled on the client so that a call's context deadline
// bounds the whole round trip. A *replicawait.Client in its place has each
// operation answered only once Redis replicas have it, so that a failover
// cannot lose an answered operation; one that changed nothing (an acquire
// denied, a release or renewal of a lease not held) is answered as it is
// whatever the replicas say, and an acquire they did not confirm is
// released again (see Limiter.Acquire).
type Client interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// RedisStore keeps leases in Redis: one sorted set per identity (lease id
// scored by expiry), changed only by an embedded Lua script run with
// EVALSHA (EVAL when the server lost its script cache). The script takes
// the caller's time from ARGV, never calls TIME, trims at most 64 expired
// leases per call and keeps the key's TTL at its last lease's expiry. The
// client is told never to resend a script that may have run, so a timeout
// cannot take two slots. It is safe for concurrent use. Make it with
// NewRedisStore: the zero RedisStore is not usable (New refuses it).
type RedisStore struct {
	client Client
}

func (s *RedisStore) usable() error {
	if s.client == nil {
		return fmt.Errorf("%w: concurrency: a zero RedisStore has no client; make it with NewRedisStore", floodgate.ErrInvalidPolicy)
	}
	return nil
}

// NewRedisStore returns a RedisStore using client. It sends nothing.
func NewRedisStore(client Client) (*RedisStore, error) {
	if err := luascript.CheckClient(client, "concurrency redis store"); err != nil {
		return nil, err
	}
	return &RedisStore{client: client}, nil
}

// apply runs req's script. A script the primary ran but a
// replicawait.Client's replicas did not confirm returns its decoded reply
// with the error wrapping replicawait.ErrNotReplicated, so that the
// Limiter can tell an operation that changed nothing (an acquire denied,
// a release or renewal of a lease not held) from one a failover may lose.
func (s *RedisStore) apply(ctx context.Context, req *request) (reply, error) {
	v, err := leaseScript.Run(ctx, s.client, []string{req.key}, req.op.code(), req.now, req.limit, req.ttl, req.id, maxTrim)
	if err != nil && !errors.Is(err, replicawait.ErrNotReplicated) {
		return reply{}, err
	}
	// A reply refused below is the error, not replicawait's: the caller
	// learns nothing from it of what the script did.
	var n [3]int64
	if err := luascript.Ints(v, n[:]); err != nil {
		return reply{}, fmt.Errorf("lease script: %w", err)
	}
	if n[0] != 0 && n[0] != 1 || n[1] < 0 {
		return reply{}, fmt.Errorf("%w: lease script reply %v out of range", floodgate.ErrBadReply, n)
	}
	return reply{ok: n[0] == 1, count: n[1], at: n[2]}, err
}
