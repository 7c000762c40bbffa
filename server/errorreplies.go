package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/fallback"
)

// ErrorReplyRecent is how long ErrorReplies keeps an error reply as the
// likely cause of a later timeout of the same Redis.
const ErrorReplyRecent = 10 * time.Second

// ErrorReplies remembers the last error reply (LOADING, NOAUTH, OOM, ...)
// each Redis gave to a probe, readiness's or the breaker's (or in the
// error that opened a breaker: serve records it), so that a
// readiness check whose probe then times out can say what that Redis
// said: a Redis loading its dataset answers only between the chunks it
// loads, and its readiness alternated between LOADING and "i/o timeout",
// which sent an operator looking for a network fault. Nothing is
// recorded on the decision path. The zero
// value is not usable: make one with NewErrorReplies. Safe for
// concurrent use; a nil *ErrorReplies records nothing.
type ErrorReplies struct {
	mu   sync.Mutex
	last map[string]errorReply // by partition (fallback.DefaultPartition, or a Cluster primary's address)
}

// errorReply is one remembered error reply.
type errorReply struct {
	msg string
	at  time.Time
}

// NewErrorReplies returns an empty ErrorReplies.
func NewErrorReplies() *ErrorReplies {
	return &ErrorReplies{last: map[string]errorReply{}}
}

// Record notes err, the result of a probe of partition's Redis (or the
// error that opened its breaker), if it is or wraps an error reply;
// anything else (nil, a timeout, a refused
// connection) leaves the last reply as it was. At most
// fallback.MaxPartitions+1 partitions are remembered.
func (r *ErrorReplies) Record(partition string, err error) {
	var reply redis.Error
	if r == nil || err == nil || !errors.As(err, &reply) {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.last[partition]; ok || len(r.last) <= fallback.MaxPartitions {
		r.last[partition] = errorReply{msg: reply.Error(), at: now}
	}
}

// Probe returns probe (a fallback.Options.Probe) recording each result.
func (r *ErrorReplies) Probe(probe func(ctx context.Context, partition string) error) func(ctx context.Context, partition string) error {
	return func(ctx context.Context, partition string) error {
		err := probe(ctx, partition)
		r.Record(partition, err)
		return err
	}
}

// note returns, for err a timeout of partition's Redis that gave an
// error reply less than ErrorReplyRecent ago, " (its last error reply,
// 1.2s ago: LOADING ...)"; "" otherwise.
func (r *ErrorReplies) note(partition string, err error) string {
	if r == nil || !isTimeout(err) {
		return ""
	}
	r.mu.Lock()
	last, ok := r.last[partition]
	r.mu.Unlock()
	ago := time.Since(last.at)
	if !ok || ago >= ErrorReplyRecent || ago < 0 {
		return ""
	}
	return fmt.Sprintf(" (its last error reply, %v ago: %s)", ago.Round(100*time.Millisecond), last.msg)
}

// isTimeout reports a call that ran out of time.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}
