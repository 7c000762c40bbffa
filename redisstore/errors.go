package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/floodgate-rl/floodgate"
	"github.com/redis/go-redis/v9"
)

// isNoScript reports whether err is Redis's NOSCRIPT reply to EVALSHA.
func isNoScript(err error) bool {
	return redis.HasErrorPrefix(err, "NOSCRIPT")
}

// classify wraps a client error in floodgate.ErrStoreUnavailable when the
// script certainly did not write, and in floodgate.ErrIndeterminate when it
// may have.
//
//   - An error reply from Redis (OOM, BUSY, LOADING, READONLY, MASTERDOWN,
//     NOREPLICAS, a script error...) means nothing was written. Redis checks
//     OOM and the write preconditions when a script issues its first write,
//     and only then: once a script has written, later writes are let through
//     so a script is never cut in half. The script reads and decides every
//     layer before its first write (reads fail before anything is written;
//     SET, ZADD, PEXPIRE on keys already read with the right type cannot
//     fail), so an error reply always comes before any write.
//   - The client closed, the pool timing out or exhausted, a failed dial:
//     the command was never written to a connection.
//   - A context error: go-redis returns one only while waiting for a pooled
//     connection or between attempts (commands it never sends again, see
//     noRetryCmd); once a command is written, the wait for its reply is
//     bounded by a socket deadline, which fails as a network timeout.
//   - Anything else (a read or write timeout, EOF, a reset connection) may
//     have come after Redis received the command: indeterminate.
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
		return fmt.Errorf("%w: redis: %w", floodgate.ErrStoreUnavailable, err)
	}
	return fmt.Errorf("%w: redis: %w", floodgate.ErrIndeterminate, err)
}
