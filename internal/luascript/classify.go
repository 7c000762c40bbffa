package luascript

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/connsetup"
	"github.com/redis/go-redis/v9"
)

// Classify wraps err, the error go-redis returned for a script call, in
// floodgate.ErrStoreUnavailable when the script certainly wrote nothing
// and in floodgate.ErrIndeterminate when it may have run. It returns nil
// for nil.
//
//   - An error reply from Redis (OOM, BUSY, LOADING, READONLY, MASTERDOWN,
//     NOREPLICAS, CROSSSLOT, a wrong-type read, a Lua error...) means
//     nothing was written, for a script that reads and checks everything
//     before its first write (see Script). Redis checks OOM and the write
//     preconditions when a script issues its first write, and only then:
//     once a script has written, its later writes are let through so that
//     a script is never cut in half. Reads of keys of the wrong type fail
//     before that write, and the writes themselves (SET, HSET, ZADD,
//     PEXPIRE on keys already read with the right type) cannot fail.
//     The exception is a Redis Cluster node migrating the keys' slot: a
//     script touching a key that is not there (deleted during the script,
//     as a set emptied by ZREM) is stopped with "non local key", possibly
//     after it wrote, so that error is indeterminate. Floodgate's scripts
//     avoid it (a set is added to before it is trimmed). A key holding a
//     value floodgate did not write (a script's own refusal saying so, or
//     WRONGTYPE) also wraps floodgate.ErrForeignValue: one key is
//     unusable, the store is not. A Cluster redirection (MOVED or ASK),
//     which a client for a single Redis gets from a Redis Cluster node,
//     also wraps floodgate.ErrClusterRedirect, whose text says to use a
//     cluster client: it was reported as the store being unavailable.
//   - The client closed, the pool timing out or exhausted, a failed dial,
//     a TLS handshake the client broke off (the server's certificate not
//     trusted or not for its name, a server that does not speak TLS): the
//     command was never written to a connection. A TLS alert from the
//     server stays indeterminate: under TLS 1.3 one refusing the client's
//     certificate can come after the client wrote.
//   - A new connection that failed during its setup (a *connsetup.Error,
//     from the hook on the clients config builds): Redis at its maxclients
//     limit closes a connection as it accepts it, and the bare broken pipe
//     go-redis then returned was classified indeterminate.
//   - A context error, for a Script's commands: go-redis returns one while
//     waiting for a pooled connection or dialing, before anything is
//     written. The wait for a written command's reply is bounded by a
//     socket deadline (the context's with ContextTimeoutEnabled, else
//     ReadTimeout), which fails as a network timeout. go-redis v9.23 does
//     answer a plain command cut off that way with a bare context error,
//     but that error comes from its retry loop (the pause before a second
//     attempt, whose context has ended), and a Script's commands are
//     marked NoRetry: go-redis makes a second attempt at one only where
//     the first ran nothing (a connection closed before the write, a
//     Cluster redirection). A client that resends a written command
//     breaks this (see TestRedisStalledCheck in quota).
//   - An error that wraps floodgate.ErrIndeterminate or
//     floodgate.ErrStoreUnavailable already (redisstore's wrapper of an
//     AutoPipeliner, which stops waiting at the caller's deadline for a
//     command it may have sent, and sends none while too many such are
//     unanswered) is returned as it is.
//   - Anything else (a read or write timeout, EOF, a reset connection) may
//     have come after Redis received the command: indeterminate.
func Classify(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, floodgate.ErrIndeterminate) || errors.Is(err, floodgate.ErrStoreUnavailable) {
		// Classified already: redisstore's AutoPipeliner client stopped
		// waiting for a command it may have sent, or sent nothing.
		return err
	}
	var rerr redis.Error
	var oerr *net.OpError
	var verr *tls.CertificateVerificationError
	var herr tls.RecordHeaderError
	var serr *connsetup.Error
	if errors.As(err, &rerr) && strings.Contains(rerr.Error(), "non local key") {
		return fmt.Errorf("%w: redis: %w", floodgate.ErrIndeterminate, err)
	}
	if errors.As(err, &rerr) && (strings.Contains(rerr.Error(), "holds a value floodgate did not write") || redis.HasErrorPrefix(err, "WRONGTYPE")) {
		return fmt.Errorf("%w: %w: redis: %w", floodgate.ErrStoreUnavailable, floodgate.ErrForeignValue, err)
	}
	if _, moved := redis.IsMovedError(err); moved {
		return fmt.Errorf("%w: %w: redis: %w", floodgate.ErrStoreUnavailable, floodgate.ErrClusterRedirect, err)
	}
	if _, ask := redis.IsAskError(err); ask {
		return fmt.Errorf("%w: %w: redis: %w", floodgate.ErrStoreUnavailable, floodgate.ErrClusterRedirect, err)
	}
	switch {
	case errors.As(err, &rerr),
		errors.Is(err, redis.ErrClosed),
		errors.Is(err, redis.ErrPoolTimeout),
		errors.Is(err, redis.ErrPoolExhausted),
		errors.As(err, &oerr) && oerr.Op == "dial",
		// A TLS handshake that failed on the client's side (the server's
		// certificate refused, or a server that does not speak TLS):
		// nothing is written to a connection before its handshake ends.
		errors.As(err, &verr),
		errors.As(err, &herr),
		errors.As(err, &serr),
		errors.Is(err, context.Canceled),
		errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: redis: %w", floodgate.ErrStoreUnavailable, err)
	}
	return fmt.Errorf("%w: redis: %w", floodgate.ErrIndeterminate, err)
}
