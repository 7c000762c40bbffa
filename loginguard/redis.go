package loginguard

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/luascript"
	"github.com/floodgate-rl/floodgate/internal/nilcheck"
	"github.com/floodgate-rl/floodgate/replicawait"
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

// The scripts: one per operation, each the shared prelude followed by the
// operation. Every error reply they give comes before their first write
// (they read and check everything first), so all are
// floodgate.ErrStoreUnavailable. Immutable.
var (
	checkScript   = luascript.New(commonLua+checkLua, luascript.Options{})
	failureScript = luascript.New(commonLua+failureLua, luascript.Options{})
	successScript = luascript.New(commonLua+successLua, luascript.Options{})
	unlockScript  = luascript.New(unlockLua, luascript.Options{})
)

// Client is the part of a go-redis v9 client the Redis backend uses.
// *redis.Client, *redis.ClusterClient and the failover clients satisfy it.
// Set ContextTimeoutEnabled on the client so a call's deadline bounds the
// whole round trip, and call the Guard with a context that has a deadline
// (a login handler's own, or a second or less): without one, a stalled
// Redis holds each call until the client's own timeouts give up (5 s per
// call with go-redis's defaults in a walk, so 15 s for Check, Failure and
// Success), and the login request with it.
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
	if nilcheck.IsNil(client) {
		return nil, fmt.Errorf("%w: nil redis client (%T)", ErrInvalidOptions, client)
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
	var keys [numDims]string
	for d := range numDims {
		keys[d] = b.key(d, ids[d])
	}
	args := make([]any, 0, 1+5*numDims+5)
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
	val, err := sc.Run(ctx, b.client, keys[:], args...)
	if err != nil {
		return reply{}, fmt.Errorf("loginguard: %w", err)
	}
	return decodeReply(val)
}

func (b *Redis) remove(ctx context.Context, ids *[numDims]string) ([numDims]bool, error) {
	var had [numDims]bool
	keys, dims := make([]string, 0, numDims), make([]int, 0, numDims)
	for d, id := range ids {
		if id != "" {
			keys, dims = append(keys, b.key(d, id)), append(dims, d)
		}
	}
	val, err := unlockScript.Run(ctx, b.client, keys)
	if err != nil && !errors.Is(err, replicawait.ErrNotReplicated) {
		return had, fmt.Errorf("loginguard: %w", err)
	}
	// Not replicated, the unlock was applied on the primary, and its
	// reply came with the error: what was lifted is known.
	n := make([]int64, len(keys))
	if err := luascript.Ints(val, n); err != nil {
		return had, fmt.Errorf("loginguard: %w", err)
	}
	for i, d := range dims {
		had[d] = n[i] > 0
	}
	if err != nil {
		return had, fmt.Errorf("loginguard: %w", err)
	}
	return had, nil
}

// decodeReply checks and decodes a script's reply: action, until, by,
// crossed, then n, p, t, u for each dimension, all non-negative.
func decodeReply(val any) (reply, error) {
	var n [4 + 4*numDims]int64
	if err := luascript.Ints(val, n[:]); err != nil {
		return reply{}, fmt.Errorf("loginguard: %w", err)
	}
	for i, x := range n {
		if x < 0 {
			return reply{}, fmt.Errorf("%w: loginguard: reply element %d is %d, want >= 0", floodgate.ErrBadReply, i, x)
		}
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
