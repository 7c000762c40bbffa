package loginguard

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/floodgate-rl/floodgate"
	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/common.lua
	commonLua string
	//go:embed lua/check.lua
	checkLua string
	//go:embed lua/failure.lua
	failureLua string
	//go:embed lua/success.lua
	successLua string
	//go:embed lua/unlock.lua
	unlockLua string
)

// script is one Lua script with its SHA1, for EVALSHA.
type script struct{ src, sha string }

func newScript(src string) script {
	sum := sha1.Sum([]byte(src))
	return script{src: src, sha: hex.EncodeToString(sum[:])}
}

// The scripts: one per operation, each the shared prelude followed by the
// operation. Immutable.
var (
	checkScript   = newScript(commonLua + checkLua)
	failureScript = newScript(commonLua + failureLua)
	successScript = newScript(commonLua + successLua)
	unlockScript  = newScript(unlockLua)
)

// Client is the part of a go-redis v9 client the Redis backend uses.
// *redis.Client, *redis.ClusterClient and the failover clients satisfy it.
// Set ContextTimeoutEnabled on the client so a call's deadline bounds the
// whole round trip.
type Client interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// Redis is the Backend on Redis: each operation is one Lua script (loaded
// once, run with EVALSHA, sent again with EVAL after NOSCRIPT) that reads
// the three states, applies the step and writes each state with its TTL,
// atomically. Times come from the guard's clock through ARGV; the scripts
// never call TIME.
//
// Every key of one backend carries the hash tag of its prefix, e.g.
// "{login}:a:3f9c...", so one attempt's three keys (account, IP, pair) are
// in one Redis Cluster slot and each operation is a single script even on
// a cluster. The cost is that one guard's keys live on one shard; login
// traffic is small next to what a shard serves.
//
// It is safe for concurrent use.
type Redis struct {
	client Client
	prefix string
}

// NewRedis returns a Redis backend storing its keys under prefix (1..64
// bytes of [A-Za-z0-9_.:-]). It sends nothing.
func NewRedis(client Client, prefix string) (*Redis, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalidOptions)
	}
	if err := floodgate.ValidatePrefix(prefix); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	return &Redis{client: client, prefix: "{" + prefix + "}:"}, nil
}

var redisTags = [numDims]string{"a:", "i:", "p:"}

// key returns the Redis key of dimension d's state (d counted from 0).
func (b *Redis) key(d int, id string) string { return b.prefix + redisTags[d] + id }

func (b *Redis) run(ctx context.Context, o op, now int64, ids *[numDims]string, p *params) (reply, error) {
	sc := checkScript
	switch o {
	case opFailure:
		sc = failureScript
	case opSuccess, opAbandon:
		sc = successScript
	}
	args := make([]any, 0, 3+numDims+21)
	args = append(args, "evalsha", sc.sha, numDims)
	for d := range numDims {
		args = append(args, b.key(d, ids[d]))
	}
	args = append(args, now)
	for _, l := range p.dims {
		args = append(args, l.captcha, l.delay, l.lock, l.window, l.lockout)
	}
	strict, mode := 0, 0
	if p.strict {
		strict = 1
	}
	if o == opPeek || o == opAbandon {
		mode = 1 // check.lua: peek; success.lua: abandon
	}
	args = append(args, p.baseDelay, p.maxDelay, p.attemptTimeout, strict, mode)
	val, err := b.eval(ctx, sc, args)
	if err != nil {
		return reply{}, err
	}
	return decodeReply(val)
}

func (b *Redis) remove(ctx context.Context, d Dimension, id string) error {
	_, err := b.eval(ctx, unlockScript, []any{"evalsha", unlockScript.sha, 1, b.key(int(d)-1, id)})
	return err
}

// eval sends args (an EVALSHA command) and, on NOSCRIPT, once more as
// EVAL. NOSCRIPT means nothing ran, so the second send cannot count an
// attempt twice; no other error is retried.
func (b *Redis) eval(ctx context.Context, sc script, args []any) (any, error) {
	val, err := b.process(ctx, args)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		args[0], args[1] = "eval", sc.src
		val, err = b.process(ctx, args)
	}
	if err != nil {
		return nil, classify(err)
	}
	return val, nil
}

func (b *Redis) process(ctx context.Context, args []any) (any, error) {
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	_ = b.client.Process(ctx, onceCmd{cmd})
	return cmd.Val(), cmd.Err()
}

// onceCmd is a command go-redis must not resend after it may have reached
// the server: a failure counted twice would move the ladder.
type onceCmd struct{ *redis.Cmd }

// NoRetry tells go-redis not to retry the command.
func (onceCmd) NoRetry() bool { return true }

// classify wraps a client error: floodgate.ErrStoreUnavailable when the
// script certainly did not write (an error reply, which the scripts can
// only get before their first write since they read everything first; a
// closed client, pool or dial failure; a context error before sending),
// floodgate.ErrIndeterminate otherwise (for example a read timeout).
func classify(err error) error {
	var rerr redis.Error
	var oerr *net.OpError
	switch {
	case errors.As(err, &rerr),
		errors.Is(err, redis.ErrClosed),
		errors.Is(err, redis.ErrPoolTimeout),
		errors.Is(err, redis.ErrPoolExhausted),
		errors.As(err, &oerr) && oerr.Op == "dial",
		errors.Is(err, context.Canceled),
		errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: loginguard: redis: %w", floodgate.ErrStoreUnavailable, err)
	}
	return fmt.Errorf("%w: loginguard: redis: %w", floodgate.ErrIndeterminate, err)
}

// decodeReply checks and decodes a script's reply: action, until, by,
// crossed, then n, p, t, u for each dimension.
func decodeReply(val any) (reply, error) {
	arr, ok := val.([]any)
	if !ok || len(arr) != 4+4*numDims {
		return reply{}, fmt.Errorf("%w: loginguard: reply %T of length %s, want %d integers", floodgate.ErrBadReply, val, lenOf(val), 4+4*numDims)
	}
	var n [4 + 4*numDims]int64
	for i, v := range arr {
		x, ok := v.(int64)
		if !ok || x < 0 {
			return reply{}, fmt.Errorf("%w: loginguard: reply element %d is %T %v", floodgate.ErrBadReply, i, v, v)
		}
		n[i] = x
	}
	if n[0] > int64(Locked) || n[2] > numDims || n[3] >= 1<<numDims {
		return reply{}, fmt.Errorf("%w: loginguard: reply header %v out of range", floodgate.ErrBadReply, n[:4])
	}
	r := reply{action: Action(n[0]), until: n[1], by: Dimension(n[2]), crossed: Dimensions(n[3])}
	for d := range numDims {
		b := 4 + 4*d
		r.states[d] = state{N: n[b], P: n[b+1], T: n[b+2], U: n[b+3]}
	}
	return r, nil
}

func lenOf(v any) string {
	if a, ok := v.([]any); ok {
		return strconv.Itoa(len(a))
	}
	return "-"
}
