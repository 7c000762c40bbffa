// Package connsetup reports a new Redis connection that failed during its
// setup, before any of the caller's commands was written to it, as such:
// not as a command that may have run.
//
// go-redis (v9.23) opens each new connection with HELLO. Redis at its
// maxclients limit accepts the TCP connection, writes "-ERR max number of
// clients reached" and closes it: HELLO's write then fails ("write: broken
// pipe"), or HELLO reads that line, which go-redis takes for a server
// without HELLO, carrying on in RESP2 until its CLIENT SETINFO fails on
// the closed socket. Either way the command that needed the connection
// got a bare "write: broken pipe", an error that also comes from a
// connection lost after its command was sent (luascript.Classify:
// indeterminate). Hook turns a failed HELLO into an *Error, which go-redis
// returns for that command without writing it.
package connsetup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Error is the error of a new connection that failed during its setup:
// the command that needed it was not sent. Err is HELLO's failure (a
// broken pipe, a reset, EOF, a timeout) or, for Redis's maxclients
// refusal, an error with the reply's text: not the reply itself, which
// go-redis would take for a server without HELLO again.
type Error struct {
	Err error
}

// Error says the connection failed during its setup and, unless it timed
// out, names the likely cause.
func (e *Error) Error() string {
	if e.SetupTimedOut() {
		return "a new connection did not finish its setup, the command was not sent: " + e.Err.Error()
	}
	return "Redis closed a new connection during its setup, the command was not sent (most likely the server is at its maxclients limit: see connected_clients in its INFO clients and rejected_connections in its INFO stats): " + e.Err.Error()
}

// SetupTimedOut reports whether the setup failed for lack of an answer
// in time (a timeout or an ended context), not because Redis closed the
// connection or refused it.
func (e *Error) SetupTimedOut() bool {
	var nerr net.Error
	return errors.Is(e.Err, context.DeadlineExceeded) || errors.Is(e.Err, context.Canceled) || errors.As(e.Err, &nerr) && nerr.Timeout()
}

// MaxClients reports whether Redis's refusal was read: "ERR max number of
// clients reached" (or, in a Cluster, "... + cluster connections
// reached"), not only a closed connection.
func (e *Error) MaxClients() bool {
	return strings.Contains(e.Err.Error(), "ERR max number of clients")
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// Hook is a go-redis hook that replaces the error of a HELLO (go-redis's
// first command on each new connection) that got no reply, or Redis's
// maxclients refusal, with an error wrapping an *Error. Other errors
// replies to HELLO (a server without it) pass, as do other commands: it
// adds no work to a command that succeeds. Its zero value is ready and it
// holds no state.
type Hook struct{}

// DialHook is the next hook's.
func (Hook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook checks the errors of HELLO.
func (Hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil {
			return nil
		}
		if _, hello := cmd.(*redis.MapStringInterfaceCmd); !hello || cmd.Name() != "hello" {
			return err
		}
		var rerr redis.Error
		switch {
		case errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "ERR max number of clients"):
			// "... reached", or in a Redis Cluster "... + cluster
			// connections reached" (redis.IsMaxClientsError knows only
			// the first).
			err = errors.New(rerr.Error())
		case errors.As(err, &rerr):
			return err
		}
		// go-redis (v9.23 initPooledConn) returns errors.Unwrap of the
		// error a connection's setup failed with, not the error itself:
		// one more layer keeps the *Error in what the command gets.
		werr := fmt.Errorf("%w", &Error{Err: err})
		cmd.SetErr(werr)
		return werr
	}
}

// ProcessPipelineHook is the next hook's: go-redis sends HELLO alone.
func (Hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Attach adds Hook to c and, for a *redis.ClusterClient, to every node
// client it makes (a cluster client's own hooks do not see the commands
// that set up its nodes' connections). Call it before c's first command.
func Attach(c redis.UniversalClient) {
	if cc, ok := c.(*redis.ClusterClient); ok {
		cc.OnNewNode(func(n *redis.Client) { n.AddHook(Hook{}) })
		return
	}
	c.AddHook(Hook{})
}
