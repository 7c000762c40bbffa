package quota

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/floodgate-rl/floodgate"
	"github.com/redis/go-redis/v9"
)

//go:embed quota.lua
var quotaLua string

// Client is the part of a go-redis v9 client a RedisStore uses:
// *redis.Client, *redis.ClusterClient and the failover clients satisfy it.
// Set ContextTimeoutEnabled on the client so that a call's context deadline
// bounds the whole round trip.
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
// use.
type RedisStore struct {
	client Client
	sha    string
}

// NewRedisStore returns a RedisStore using client. It sends nothing.
func NewRedisStore(client Client) (*RedisStore, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: quota redis store: nil client", floodgate.ErrInvalidPolicy)
	}
	sum := sha1.Sum([]byte(quotaLua))
	return &RedisStore{client: client, sha: hex.EncodeToString(sum[:])}, nil
}

func (s *RedisStore) apply(ctx context.Context, req *request) (reply, error) {
	if err := ctx.Err(); err != nil {
		return reply{}, fmt.Errorf("%w: %w", floodgate.ErrStoreUnavailable, err)
	}
	nkeys := 4
	if req.op == opSettle {
		nkeys = 7
	}
	args := []any{
		"EVALSHA", s.sha, nkeys,
		req.cur.usage, req.cur.holds, req.cur.settled, req.cur.marker,
		req.prev.usage, req.prev.holds, req.prev.settled,
		req.op.code(), req.now, req.limit, req.amount, req.id,
		req.hold, req.keep, req.expireAt, req.prevExpireAt, req.markerAt,
		req.maxPending, req.maxSettled, maxTrim, int64(MaxUsed),
	}
	if nkeys == 4 {
		args = append(args[:7], args[10:]...)
	}
	v, err := s.run(ctx, args)
	if err != nil {
		return reply{}, err
	}
	return decodeReply(v)
}

// run sends args (an EVALSHA command) and, if the server does not have the
// script cached, sends it again as EVAL: a NOSCRIPT reply means nothing ran.
func (s *RedisStore) run(ctx context.Context, args []any) (any, error) {
	v, err := s.process(ctx, args)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		args[0], args[1] = "EVAL", quotaLua
		v, err = s.process(ctx, args)
	}
	if err != nil {
		return nil, storeError(err)
	}
	return v, nil
}

func (s *RedisStore) process(ctx context.Context, args []any) (any, error) {
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3) // route by the first key on a cluster
	_ = s.client.Process(ctx, onceCmd{cmd})
	return cmd.Result()
}

// onceCmd is a command go-redis must not resend after a network error: the
// script may already have run.
type onceCmd struct{ *redis.Cmd }

// NoRetry tells go-redis not to retry the command.
func (onceCmd) NoRetry() bool { return true }

func decodeReply(v any) (reply, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) != 8 {
		return reply{}, fmt.Errorf("%w: quota script returned %T %v, want 8 integers", floodgate.ErrBadReply, v, v)
	}
	var n [8]int64
	for i, x := range arr {
		if n[i], ok = x.(int64); !ok {
			return reply{}, fmt.Errorf("%w: quota script reply element %d is %T, want integer", floodgate.ErrBadReply, i, x)
		}
	}
	if n[0] < 0 || status(n[0]) > stLast || n[5] < 0 || n[5] > 1 || n[6] < 0 || n[6] > 1 {
		return reply{}, fmt.Errorf("%w: quota script reply %v out of range", floodgate.ErrBadReply, n)
	}
	return reply{
		status: status(n[0]), used: n[1], held: n[2], charged: n[3], refunded: n[4],
		unmatched: n[5] == 1, inPrev: n[6] == 1, hint: n[7],
	}, nil
}

// storeError classifies a Redis failure: whether the script certainly did
// not run (floodgate.ErrStoreUnavailable) or may have
// (floodgate.ErrIndeterminate).
func storeError(err error) error {
	var rerr redis.Error
	var op *net.OpError
	switch {
	case errors.As(err, &rerr):
		if strings.Contains(rerr.Error(), "floodgate quota") {
			// The script refused its arguments or found a corrupt record.
			return fmt.Errorf("%w: %w", floodgate.ErrBadReply, err)
		}
		// The server refused the command (OOM, READONLY, LOADING, BUSY...)
		// before the script's first write: nothing was written.
		return fmt.Errorf("%w: %w", floodgate.ErrStoreUnavailable, err)
	case errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout),
		errors.Is(err, redis.ErrPoolExhausted), errors.As(err, &op) && op.Op == "dial",
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The command was never written to a connection (go-redis reports
		// context errors only while waiting for a connection; a deadline
		// hit after sending surfaces as a network timeout).
		return fmt.Errorf("%w: %w", floodgate.ErrStoreUnavailable, err)
	}
	// Sent, then the connection failed or timed out: the script may have
	// run.
	return fmt.Errorf("%w: %w", floodgate.ErrIndeterminate, err)
}
