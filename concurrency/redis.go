package concurrency

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

//go:embed lease.lua
var leaseLua string

// Client is the part of a go-redis v9 client a RedisStore uses:
// *redis.Client, *redis.ClusterClient and the failover clients satisfy it.
// Set ContextTimeoutEnabled on the client so that a call's context deadline
// bounds the whole round trip.
type Client interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// RedisStore keeps leases in Redis: one sorted set per identity (lease id
// scored by expiry), changed only by an embedded Lua script run with
// EVALSHA (EVAL when the server lost its script cache). The script takes
// the caller's time from ARGV, never calls TIME, trims at most 64 expired
// leases per call and keeps the key's TTL at its last lease's expiry. The
// client is told never to resend a script that may have run, so a timeout
// cannot take two slots. It is safe for concurrent use.
type RedisStore struct {
	client Client
	sha    string
}

// NewRedisStore returns a RedisStore using client. It sends nothing.
func NewRedisStore(client Client) (*RedisStore, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: concurrency redis store: nil client", floodgate.ErrInvalidPolicy)
	}
	sum := sha1.Sum([]byte(leaseLua))
	return &RedisStore{client: client, sha: hex.EncodeToString(sum[:])}, nil
}

func (s *RedisStore) apply(ctx context.Context, req *request) (reply, error) {
	if err := ctx.Err(); err != nil {
		return reply{}, fmt.Errorf("%w: %w", floodgate.ErrStoreUnavailable, err)
	}
	args := []any{"EVALSHA", s.sha, 1, req.key, req.op.code(), req.now, req.limit, req.ttl, req.id, maxTrim}
	v, err := s.process(ctx, args)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// Nothing ran: sending the script itself cannot apply it twice.
		args[0], args[1] = "EVAL", leaseLua
		v, err = s.process(ctx, args)
	}
	if err != nil {
		return reply{}, storeError(err)
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 3 {
		return reply{}, fmt.Errorf("%w: lease script returned %T %v, want 3 integers", floodgate.ErrBadReply, v, v)
	}
	var n [3]int64
	for i, x := range arr {
		if n[i], ok = x.(int64); !ok {
			return reply{}, fmt.Errorf("%w: lease script reply element %d is %T, want integer", floodgate.ErrBadReply, i, x)
		}
	}
	if n[0] != 0 && n[0] != 1 || n[1] < 0 {
		return reply{}, fmt.Errorf("%w: lease script reply %v out of range", floodgate.ErrBadReply, n)
	}
	return reply{ok: n[0] == 1, count: n[1], at: n[2]}, nil
}

func (s *RedisStore) process(ctx context.Context, args []any) (any, error) {
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3) // route by the key on a cluster
	_ = s.client.Process(ctx, onceCmd{cmd})
	return cmd.Result()
}

// onceCmd is a command go-redis must not resend after a network error: the
// script may already have run.
type onceCmd struct{ *redis.Cmd }

// NoRetry tells go-redis not to retry the command.
func (onceCmd) NoRetry() bool { return true }

// storeError classifies a Redis failure: whether the script certainly did
// not run (floodgate.ErrStoreUnavailable) or may have
// (floodgate.ErrIndeterminate).
func storeError(err error) error {
	var rerr redis.Error
	var op *net.OpError
	switch {
	case errors.As(err, &rerr):
		if strings.Contains(rerr.Error(), "floodgate lease") {
			return fmt.Errorf("%w: %w", floodgate.ErrBadReply, err)
		}
		// Refused before the script's first write (OOM, READONLY...).
		return fmt.Errorf("%w: %w", floodgate.ErrStoreUnavailable, err)
	case errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout),
		errors.Is(err, redis.ErrPoolExhausted), errors.As(err, &op) && op.Op == "dial",
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// Never written to a connection.
		return fmt.Errorf("%w: %w", floodgate.ErrStoreUnavailable, err)
	}
	return fmt.Errorf("%w: %w", floodgate.ErrIndeterminate, err)
}
