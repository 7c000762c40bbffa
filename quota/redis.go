package quota

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

//go:embed quota.lua
var quotaLua string

// quotaScript runs quota.lua. The script's own error replies (arguments it
// refuses, a corrupt settlement record) are floodgate.ErrBadReply: the
// corrupt-record reply comes after the script's writes, so it does not
// mean that nothing was written.
var quotaScript = luascript.New(quotaLua, luascript.Options{Refusal: "floodgate quota:"})

// Client is the part of a go-redis v9 client a RedisStore uses:
// *redis.Client, *redis.ClusterClient and the failover clients satisfy it.
// Set ContextTimeoutEnabled on the client so that a call's context deadline
// bounds the whole round trip. A *replicawait.Client in its place has each
// operation answered only once Redis replicas have it, so that a failover
// cannot lose an answered operation; a denial (the quota exhausted, a cost
// above the limit, too many pending), which wrote nothing a failover
// could lose, is answered as it is whatever the replicas say (see
// Quota.Check).
type Client interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// RedisStore is a quota Store in Redis: each operation is one run of an
// embedded Lua script (EVALSHA, falling back to EVAL when the server lost
// its script cache) over the identity's keys, which share one hash tag and
// so one Redis Cluster slot. The script takes the caller's time from ARGV
// and never calls TIME, and sets every key's TTL in the same run that
// writes it. The client is told never to resend a script that may have
// run, so a timeout cannot count a check twice. It is safe for concurrent
// use. Make it with NewRedisStore: the zero RedisStore is not usable (New
// refuses it).
type RedisStore struct {
	client Client
}

func (s *RedisStore) usable() error {
	if s.client == nil {
		return fmt.Errorf("%w: quota: a zero RedisStore has no client; make it with NewRedisStore", floodgate.ErrInvalidPolicy)
	}
	return nil
}

// NewRedisStore returns a RedisStore using client. It sends nothing.
func NewRedisStore(client Client) (*RedisStore, error) {
	if err := luascript.CheckClient(client, "quota redis store"); err != nil {
		return nil, err
	}
	return &RedisStore{client: client}, nil
}

func (s *RedisStore) apply(ctx context.Context, req *request) (reply, error) {
	if req.op == opCheck && (req.amount == 0 || req.amount > req.limit) {
		// A status consumes nothing, nor does a check of more than the
		// limit (refused whatever the usage): with a replicawait.Client
		// neither need wait for replicas (a status answered 503 while
		// they lagged, and a check of too much took a whole wait to be
		// answered its denial). Both write at most a trim of what
		// expired.
		ctx = replicawait.WithoutWait(ctx)
	}
	keys := make([]string, 4, 8)
	keys[0], keys[1], keys[2], keys[3] = req.cur.usage, req.cur.holds, req.cur.settled, req.cur.marker
	if req.op == opSettle || req.op == opReserve {
		keys = append(keys, req.prev.usage, req.prev.holds, req.prev.settled, req.prev.marker)
	}
	guard := 0
	if req.prevGuard {
		guard = 1
	}
	v, err := quotaScript.Run(ctx, s.client, keys,
		req.op.code(), req.now, req.limit, req.amount, req.id,
		req.hold, req.keep, req.expireAt, req.prevExpireAt, req.markerAt,
		req.maxPending, req.maxSettled, maxTrim, int64(MaxUsed), guard)
	if err != nil {
		if errors.Is(err, replicawait.ErrNotReplicated) && v != nil {
			// The primary applied it: its reply comes with the error.
			if rep, derr := decodeReply(v); derr == nil {
				rep.applied = true
				return rep, err
			}
		}
		return reply{}, err
	}
	return decodeReply(v)
}

// decodeReply checks and decodes the script's reply: status, used, held,
// charged, refunded, unmatched, in_prev, hint, before.
func decodeReply(v any) (reply, error) {
	var n [9]int64
	if err := luascript.Ints(v, n[:]); err != nil {
		return reply{}, fmt.Errorf("quota script: %w", err)
	}
	if n[0] < 0 || status(n[0]) > stLast || n[5] < 0 || n[5] > 1 || n[6] < 0 || n[6] > 1 || n[8] < beforeLost {
		return reply{}, fmt.Errorf("%w: quota script reply %v out of range", floodgate.ErrBadReply, n)
	}
	return reply{
		status: status(n[0]), used: n[1], held: n[2], charged: n[3], refunded: n[4],
		unmatched: n[5] == 1, inPrev: n[6] == 1, hint: n[7], before: n[8],
	}, nil
}
