// Package replicawait makes a Redis client's writes wait for replicas
// before they are answered: a Client sends each command on a connection of
// its own and then, on that same connection, Redis's WAIT, and fails the
// command unless enough replicas acknowledged it.
//
// Redis replicates asynchronously. A primary answers a write before any
// replica has it, so a failover that promotes a replica loses the writes
// that had not reached it, after their callers were told they succeeded.
// For rate limits that is harmless (a second of counting lost); for a
// billing quota's settlements or for concurrency leases it is usage that
// was charged and then forgotten. quota.RedisStore and
// concurrency.RedisStore accept a Client in place of the go-redis client:
// an operation is then answered only once Options.Replicas replicas hold
// it, and otherwise fails with an error wrapping ErrNotReplicated (and, in
// those stores, floodgate.ErrIndeterminate: the primary did apply it, and
// it may survive or not). Retrying such an operation with the same request
// id is safe: a reserve or a settle already applied is replayed, not
// applied twice; a quota check, which has no id, may be counted twice.
//
// This narrows what a failover can lose to what was never acknowledged; it
// does not make Redis strongly consistent (a replica that acknowledged a
// write and then failed with the primary loses it all the same).
package replicawait

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultTimeout is Options.Timeout's default: how long a write waits for
// its replicas before it fails.
const DefaultTimeout = 200 * time.Millisecond

// MaxReplicas bounds Options.Replicas.
const MaxReplicas = 16

// ErrNotReplicated is wrapped by the error of a command that Redis ran
// on the primary but that fewer than Options.Replicas replicas
// acknowledged within Options.Timeout: a failover now may lose it.
var ErrNotReplicated = errors.New("write not acknowledged by enough replicas")

// ErrUnsupported is wrapped by New's error for a client whose connections
// it cannot pin (anything but *redis.Client, which includes the Sentinel
// failover client, and *redis.ClusterClient), and by Process's for a
// command it cannot route on a Redis Cluster (only scripts: EVAL,
// EVALSHA, FCALL and their read-only forms, with at least one key).
var ErrUnsupported = errors.New("replicawait: unsupported")

// Options configures a Client.
type Options struct {
	// Replicas is how many replicas must acknowledge each command before
	// it is answered: 1..MaxReplicas. A primary with fewer replicas
	// connected fails every write after Timeout.
	Replicas int
	// Timeout bounds each wait for the replicas (WAIT's timeout, rounded
	// up to a millisecond); the command's context deadline bounds it too.
	// Zero means DefaultTimeout.
	Timeout time.Duration
}

// Client sends commands through a go-redis client and waits for replicas
// after each (see the package documentation). It implements the Process
// method that quota.RedisStore and concurrency.RedisStore call, and
// nothing else. It is safe for concurrent use.
type Client struct {
	single  *redis.Client
	cluster *redis.ClusterClient
	n       int
	timeout time.Duration
}

// New returns a Client sending through c: a *redis.Client (a single server
// or a Sentinel failover client, whose connections go to the current
// primary) or a *redis.ClusterClient (each command to the primary of its
// first key's slot). It sends nothing. The Client does not own c: closing
// c is the caller's.
func New(c redis.UniversalClient, o Options) (*Client, error) {
	if o.Replicas < 1 || o.Replicas > MaxReplicas {
		return nil, fmt.Errorf("replicawait: Replicas %d out of range 1..%d", o.Replicas, MaxReplicas)
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("replicawait: Timeout %v: want a positive duration, or 0 for the default %v", o.Timeout, DefaultTimeout)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	w := &Client{n: o.Replicas, timeout: o.Timeout}
	switch c := c.(type) {
	case *redis.Client:
		if c == nil {
			return nil, errors.New("replicawait: nil client")
		}
		w.single = c
	case *redis.ClusterClient:
		if c == nil {
			return nil, errors.New("replicawait: nil client")
		}
		w.cluster = c
	default:
		return nil, fmt.Errorf("%w: client %T: want *redis.Client (single server or Sentinel) or *redis.ClusterClient", ErrUnsupported, c)
	}
	return w, nil
}

// Process sends cmd on a connection taken from the pool for it alone and,
// once Redis answered it without an error, sends WAIT on that connection.
// WAIT counts the replicas that have received this connection's writes up
// to then, cmd's included. When fewer than Options.Replicas did within
// Options.Timeout, or WAIT fails, cmd's error is set to one wrapping
// ErrNotReplicated (cmd's reply is kept), and Process returns it. A cmd
// that failed is returned as it failed, without waiting.
//
// On a Redis Cluster, cmd must be a script call naming a key: it is sent to
// the primary of that key's slot as the client's map has it, and a MOVED
// or ASK reply (the slot moved, so nothing ran) fails cmd as Redis
// answered it, after asking the client to reload its map.
func (c *Client) Process(ctx context.Context, cmd redis.Cmder) error {
	node := c.single
	if c.cluster != nil {
		key, ok := scriptKey(cmd.Args())
		if !ok {
			err := fmt.Errorf("%w: %q on a Redis Cluster: only script calls with a key can be routed to their primary", ErrUnsupported, cmd.Name())
			cmd.SetErr(err)
			return err
		}
		var err error
		if node, err = c.cluster.MasterForKey(ctx, key); err != nil {
			cmd.SetErr(err)
			return err
		}
	}
	conn := node.Conn()
	defer conn.Close()
	if err := conn.Process(ctx, cmd); err != nil {
		if c.cluster != nil && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")) {
			c.cluster.ReloadState(ctx)
		}
		return err
	}
	timeout := c.timeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	if timeout < time.Millisecond {
		timeout = time.Millisecond // WAIT 0 would wait for ever
	}
	got, err := conn.Wait(ctx, c.n, timeout.Round(time.Millisecond)).Result()
	switch {
	case err != nil:
		err = fmt.Errorf("%w: WAIT %d: %w", ErrNotReplicated, c.n, err)
	case got < int64(c.n):
		err = fmt.Errorf("%w: %d of %d replicas within %v; a failover may lose it", ErrNotReplicated, got, c.n, timeout.Round(time.Millisecond))
	default:
		return nil
	}
	cmd.SetErr(err)
	return err
}

// scriptKey returns the first key of a script call's arguments (EVAL,
// EVALSHA, FCALL and their _RO forms: name, script, numkeys, keys...).
func scriptKey(args []any) (string, bool) {
	if len(args) < 4 {
		return "", false
	}
	name, _ := args[0].(string)
	switch strings.ToLower(name) {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
	default:
		return "", false
	}
	if n := fmt.Sprint(args[2]); n == "0" || strings.HasPrefix(n, "-") {
		return "", false
	}
	switch k := args[3].(type) {
	case string:
		return k, true
	case *string:
		if k != nil {
			return *k, true
		}
	case []byte:
		return string(k), true
	}
	return "", false
}
