package redisstore

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"

	"github.com/floodgate-rl/floodgate"
	"github.com/redis/go-redis/v9"
)

// apClient is a *redis.AutoPipeliner as the Store's client. go-redis
// v9.23's AutoPipeliner does not honour a command's context once the
// command is queued: its blocking face waits for the batch, its deferred
// face's Err waits for it, and a batch on a stalled Redis ends only when
// Redis answers or the connection's read timeout passes (a call with a
// 100 ms deadline returned after 2.9 s, successfully, with Redis asleep
// for 3 s). A rate limiter must fail at its caller's deadline, so that a
// fallback answers within its budget: apClient sends a copy of each
// command from a goroutine of its own and stops waiting when the
// caller's context ends. The command may still be sent and run.
//
// A command whose caller stopped waiting stays queued in the
// AutoPipeliner, its goroutine with it, until Redis answers, and is run
// then: on a stalled Redis, callers that each retried at once after
// their deadline left tens of thousands of them (49,000 goroutines after
// 15 s; every one of 44,000 failed calls was run, and charged, when Redis
// woke; review15). Once maxOrphans such commands are unanswered, a call
// fails at once, unsent, with floodgate.ErrStoreUnavailable, until Redis
// answers some. The calls in flight when Redis stalled (one per
// concurrent caller, which each waited for its own before this wrapper)
// all become orphans at their deadlines, past the bound: so at most
// maxOrphans more than the concurrent callers are run late (review16:
// 1,000 callers, 750 to 951 run late).
type apClient struct {
	ap      *redis.AutoPipeliner
	orphans *atomic.Int64 // commands sent whose callers stopped waiting, not answered yet
}

// maxOrphans is the most commands an apClient leaves unanswered in its
// AutoPipeliner after their callers stopped waiting. A healthy Redis
// answers a call in well under a millisecond, so that only a Redis that
// stalls, or is far slower than its callers' deadlines, leaves this many
// behind; the bound is that of the commands then run late, and charged.
const maxOrphans = 256

// The states of an apClient command (apClient.Process).
const (
	apWaiting   int32 = iota // sent, its caller waiting
	apAnswered               // answered while its caller waited
	apAbandoned              // its caller stopped waiting first: an orphan
)

// Process sends cmd through the AutoPipeliner and waits for its reply or
// for ctx to end, whichever comes first. When ctx ends first, cmd fails
// with an error wrapping floodgate.ErrIndeterminate and ctx's error; the
// copy sent is left to the AutoPipeliner, as an orphan. With maxOrphans
// orphans unanswered, cmd fails at once with
// floodgate.ErrStoreUnavailable and is not sent.
func (c apClient) Process(ctx context.Context, cmd redis.Cmder) error {
	if ctx.Done() == nil {
		return c.ap.Process(ctx, cmd) // nothing to end the wait
	}
	if n := c.orphans.Load(); n >= maxOrphans {
		err := fmt.Errorf("%w: redis: %d commands sent through the AutoPipeliner are still unanswered after their callers stopped waiting (Redis stalled?): not sent", floodgate.ErrStoreUnavailable, n)
		cmd.SetErr(err)
		return err
	}
	own, answer := detach(ctx, cmd)
	if own == nil {
		return c.ap.Process(ctx, cmd)
	}
	var state atomic.Int32
	done := make(chan struct{})
	go func() {
		_ = c.ap.Process(ctx, own)
		_ = own.Err() // waits for the reply on the deferred face
		if !state.CompareAndSwap(apWaiting, apAnswered) {
			c.orphans.Add(-1) // its caller left: nobody reads done
		}
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		if state.CompareAndSwap(apWaiting, apAbandoned) {
			c.orphans.Add(1)
			err := fmt.Errorf("%w: redis: %w (waiting for the AutoPipeliner; the command may still be sent and run)", floodgate.ErrIndeterminate, ctx.Err())
			cmd.SetErr(err)
			return err
		}
		<-done // answered meanwhile: done is closed next
	}
	answer()
	return cmd.Err()
}

// detach returns a command of cmd's kind with a copy of its arguments,
// which the caller's buffers (reused once Process returns) do not share,
// and a function copying its reply into cmd; nil for a command of
// another kind (the scripts' commands are all of these three).
func detach(ctx context.Context, cmd redis.Cmder) (redis.Cmder, func()) {
	args := copyArgs(cmd.Args())
	switch c := cmd.(type) {
	case noRetryAny:
		own := redis.NewCmd(ctx, args...)
		own.SetFirstKeyPos(3) // as luascript: routed by the first key
		return noRetry{own}, func() {
			if own.Err() != nil {
				c.SetErr(own.Err())
				return
			}
			c.SetVal(own.Val())
		}
	case noRetryInts:
		own := redis.NewIntSliceCmd(ctx, args...)
		own.SetFirstKeyPos(3) // as luascript: routed by the first key
		return noRetry{own}, func() {
			c.SetVal(own.Val())
			c.SetErr(own.Err())
		}
	case noRetryString:
		own := redis.NewStringCmd(ctx, args...)
		own.SetFirstKeyPos(3) // as luascript: routed by the first key
		return noRetry{own}, func() {
			c.SetVal(own.Val())
			c.SetErr(own.Err())
		}
	}
	return nil, nil
}

// The kinds of command detach copies: luascript's commands.
type (
	noRetryAny interface {
		redis.Cmder
		Val() any
		SetVal(any)
	}
	noRetryInts interface {
		redis.Cmder
		Val() []int64
		SetVal([]int64)
	}
	noRetryString interface {
		redis.Cmder
		Val() string
		SetVal(string)
	}
)

// noRetry is a copied command, which go-redis must not send twice either.
type noRetry struct{ redis.Cmder }

// NoRetry tells go-redis not to retry the command once it may have been
// sent.
func (noRetry) NoRetry() bool { return true }

// copyArgs copies a script command's arguments: the values behind the
// pointers the Store passes (*string, *int64) and the packed []byte.
func copyArgs(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case *string:
			out[i] = *v
		case *int64:
			out[i] = *v
		case []byte:
			out[i] = bytes.Clone(v)
		default:
			out[i] = a
		}
	}
	return out
}
