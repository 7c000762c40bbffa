// Package replicawait makes a Redis client's writes wait for replicas
// before they are answered: a Client sends each command followed, on the
// same connection and in one round trip, by Redis's WAIT, and fails the
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
// An operation that wrote nothing a failover could lose is answered as it
// is, whatever the replicas say: quota.Quota answers a check or reserve
// denied (exhausted, cost above the limit, too many pending) as the
// denial it is, and concurrency.Limiter an acquire denied and a release
// or renewal of a lease not held. concurrency.Limiter does not grant an
// acquire its replicas did not confirm: it releases the lease again (see
// concurrency.UnconfirmedError).
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
	"sync"
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
var ErrNotReplicated = errors.New("replicawait: write not acknowledged by enough replicas")

// ErrBusy is wrapped by the error of a command that was not sent: when
// its context ended, Options.MaxConcurrent commands were still waiting
// for their replicas (which lag, or are gone), or the wait for a place
// left too little of its context for WAIT's answer (see Options.Timeout).
// Nothing was applied. The error also wraps the context's error, or
// context.DeadlineExceeded.
var ErrBusy = errors.New("replicawait: too many commands waiting for replicas")

// WithoutWait returns ctx marked so that a Client sends the commands made
// under it through its go-redis client as they are, without WAIT and
// outside the MaxConcurrent bound: for a command whose writes the caller
// does not need kept through a failover, such as a quota's status (a
// check of cost 0, which only trims what expired).
func WithoutWait(ctx context.Context) context.Context {
	return context.WithValue(ctx, withoutWaitKey{}, true)
}

type withoutWaitKey struct{}

// ErrUnsupported is wrapped by New's error for a client whose connections
// it cannot pin (anything but *redis.Client, which includes the Sentinel
// failover client, and *redis.ClusterClient), and by Process's for a
// command it cannot route on a Redis Cluster (only scripts: EVAL,
// EVALSHA, FCALL and their read-only forms, with at least one key), and by
// Usable's for a zero Client.
var ErrUnsupported = errors.New("replicawait: unsupported")

// Options configures a Client.
type Options struct {
	// Replicas is how many replicas must acknowledge each command before
	// it is answered: 1..MaxReplicas. A primary with fewer replicas
	// connected fails every write after Timeout.
	Replicas int
	// Timeout bounds each wait for the replicas (WAIT's timeout, rounded
	// to a millisecond, at least 1 ms); the time left until the command's
	// context deadline, less 150 ms for Redis's answer (below), bounds it
	// too, so that a command sent is answered before its deadline. A
	// command that had to wait for a place (MaxConcurrent) and then has
	// 150 ms or less left is not sent (ErrBusy). Zero means
	// DefaultTimeout.
	//
	// Redis ends a WAIT at the first tick of its server clock after the
	// timeout (a tick is 1000/hz ms: 100 ms at the default hz 10), so a
	// command its replicas do not acknowledge is answered up to one tick
	// later than Timeout: against redis-server 7.0.15 at hz 10, Timeout
	// 20 ms or 50 ms took about 100 ms, 150 ms about 200 ms, 250 ms about
	// 300 ms. A command whose context ends before Redis's answer comes
	// (Redis stalled, or the 150 ms margin outrun) fails with an error
	// that wraps neither ErrNotReplicated nor the context's error: it
	// was sent, and its outcome is unknown (the stores report it as
	// floodgate.ErrIndeterminate).
	Timeout time.Duration
	// MaxConcurrent bounds the commands in progress at once: each holds a
	// connection of the client's pool until its replicas answer (up to
	// Timeout while they lag, which should stay below the client's
	// ReadTimeout: it is cut to 90 % of it), and rate limit decisions sharing the pool
	// must still find one. A command beyond the bound waits for a place,
	// within its context. Zero means half the client's pool size (per
	// node on a Redis Cluster), at least 1.
	MaxConcurrent int
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
	places  chan struct{} // MaxConcurrent
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
	if o.MaxConcurrent < 0 {
		return nil, fmt.Errorf("replicawait: MaxConcurrent %d: want a positive bound, or 0 for half the pool", o.MaxConcurrent)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	w := &Client{n: o.Replicas, timeout: o.Timeout}
	pool := 0
	switch c := c.(type) {
	case *redis.Client:
		if c == nil {
			return nil, errors.New("replicawait: nil client")
		}
		w.single, pool = c, c.Options().PoolSize
	case *redis.ClusterClient:
		if c == nil {
			return nil, errors.New("replicawait: nil client")
		}
		w.cluster, pool = c, c.Options().PoolSize
	default:
		return nil, fmt.Errorf("%w: client %T: want *redis.Client (single server or Sentinel) or *redis.ClusterClient", ErrUnsupported, c)
	}
	if o.MaxConcurrent == 0 {
		o.MaxConcurrent = max(pool/2, 1)
	}
	w.places = make(chan struct{}, o.MaxConcurrent)
	return w, nil
}

// maxRedirects bounds the MOVED and ASK replies a command follows on a
// Redis Cluster (go-redis's default for its own commands).
const maxRedirects = 3

// promotedTries and promotedWait bound the wait for the slot map to name
// the primary a MOVED reply names: during a failover the replica just
// promoted is known to the other nodes within milliseconds (an outside
// walk saw MOVED answered 503 for about 5 ms when it was not waited for).
const (
	promotedTries = 20
	promotedWait  = 10 * time.Millisecond
)

// Process sends cmd, followed on the same connection by WAIT, in one
// pipeline. WAIT counts the replicas that have received this connection's
// writes up to then, cmd's included. When fewer than Options.Replicas did within
// Options.Timeout, or WAIT fails, cmd's error is set to one wrapping
// ErrNotReplicated (and no error of Redis's or the context's: cmd did run),
// cmd's reply is kept, and Process returns it. At most Options.MaxConcurrent
// commands are in progress; one that finds no place before ctx ends, or
// too late to be answered before ctx's deadline, fails unsent (ErrBusy). A ctx marked by WithoutWait sends cmd through the
// go-redis client as it is.
//
// WAIT goes out with cmd, before cmd's answer is known, so Redis runs it
// whatever cmd's outcome. A cmd that failed (a NOSCRIPT, a WRONGTYPE) is
// returned with its own error, unchanged, but only once WAIT has answered:
// while the replicas lag or are missing, a failed cmd takes as long as an
// unacknowledged one, Options.Timeout rounded up to Redis's next tick (see
// Options.Timeout), and a script sent again as EVAL after a NOSCRIPT
// waits twice. Skipping the wait after a failure would cost every
// successful command a second round trip.
//
// A cmd that implements EvalFallback (luascript's script calls do) and
// that Redis refused NOSCRIPT is sent again as EVAL at once, keeping its
// place: were the EVAL to queue for a place behind the calls waiting,
// each of which finds the script cache as empty (a restarted or newly
// promoted primary's), no call might load the script before its
// deadline while the replicas lag. When too little of ctx is left for
// the EVAL's WAIT (the NOSCRIPT itself came with a WAIT), cmd fails
// ErrBusy unsent, and the script is loaded with SCRIPT LOAD instead (no
// WAIT: it writes no data), so that the calls after it find it. That
// SCRIPT LOAD is sent even when ctx has ended meanwhile, and awaited for
// up to 250 ms (less when the client's ReadTimeout is shorter), so
// Process may then return that much after ctx's deadline (a SCRIPT LOAD
// takes well under a millisecond on a Redis that answers).
//
// On a Redis Cluster, cmd must be a script call naming a key: it is sent to
// the primary of that key's slot as the client's map has it. A MOVED reply
// (the slot moved: nothing ran) sends it again to the node named, once
// the client's map (reloaded) names it a primary, for up to 200 ms within
// ctx, and an ASK reply (the slot is moving and this key has gone) to the
// node named after ASKING, up to three redirections, as go-redis does for
// its own commands.
func (c *Client) Process(ctx context.Context, cmd redis.Cmder) error {
	if err := c.Usable(); err != nil {
		cmd.SetErr(err)
		return err
	}
	if ctx.Value(withoutWaitKey{}) != nil {
		if c.cluster != nil {
			return c.cluster.Process(ctx, cmd)
		}
		return c.single.Process(ctx, cmd)
	}
	waited := false
	select {
	case c.places <- struct{}{}:
	default:
		waited = true
		select {
		case c.places <- struct{}{}:
		case <-ctx.Done():
			return c.busy(cmd, ctx.Err())
		}
	}
	defer func() { <-c.places }()
	if err := ctx.Err(); err != nil {
		// A place and the end of ctx came together, and select took
		// the place: go-redis would not send cmd now either, and would
		// answer ctx's error as if it might have run.
		return c.busy(cmd, err)
	}
	if d, ok := ctx.Deadline(); ok && waited && time.Until(d) <= answerMargin {
		// The wait for a place left too little time for WAIT's answer
		// to come before ctx's deadline: sent now, cmd would run and
		// its outcome be cut off unknown.
		return c.busy(cmd, fmt.Errorf("%v left, less than Redis may take to answer WAIT: %w", time.Until(d).Round(time.Millisecond), context.DeadlineExceeded))
	}
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
	asking := false
	for redirects := 0; ; redirects++ {
		err := c.run(ctx, node, cmd, asking)
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			err = c.evalAgain(ctx, node, cmd, asking, err)
		}
		if c.cluster == nil || err == nil || redirects == maxRedirects {
			return err
		}
		addr, moved := redis.IsMovedError(err)
		askAddr, ask := redis.IsAskError(err)
		if !moved && !ask {
			return err
		}
		if moved {
			c.cluster.ReloadState(ctx)
		} else {
			addr = askAddr
		}
		next := c.master(ctx, addr)
		for try := 0; next == nil && try < promotedTries; try++ {
			// MOVED names a replica promoted a moment ago (a failover):
			// the node the map is read from may not know it yet.
			select {
			case <-ctx.Done():
				return err // nothing ran
			case <-time.After(promotedWait):
			}
			next = c.master(ctx, addr)
		}
		if next == nil {
			return err // nothing ran; the map does not name that primary yet
		}
		node, asking = next, ask
		cmd.SetErr(nil)
	}
}

// Usable returns nil for a Client made by New, and an error wrapping
// ErrUnsupported for a zero Client, which has no go-redis client and no
// places (its first command would wait for a place for ever): the quota
// and concurrency Redis stores refuse it when made, and Process fails each
// command with it.
func (c *Client) Usable() error {
	if c == nil || c.places == nil {
		return fmt.Errorf("%w: a zero replicawait.Client has no client; make it with replicawait.New", ErrUnsupported)
	}
	return nil
}

// EvalFallback is implemented by a script call sent as EVALSHA that can
// be sent again as EVAL: UseEval changes the command's arguments to EVAL
// and the script's source (Args()[0] and Args()[1], the source a string),
// and reports whether it did (false when the command is not an EVALSHA).
// See Client.Process.
type EvalFallback interface {
	UseEval() bool
}

// evalAgain sends cmd, which node refused with noscript, again as EVAL
// while it holds its place, when cmd can (EvalFallback) and ctx leaves
// time for WAIT's answer; NOSCRIPT means nothing ran. Otherwise it
// returns noscript, or ErrBusy when ctx's deadline is too close, after
// loading the script on node with SCRIPT LOAD (loadScript: without WAIT,
// and even when ctx has ended meanwhile) for the calls that follow.
func (c *Client) evalAgain(ctx context.Context, node *redis.Client, cmd redis.Cmder, asking bool, noscript error) error {
	e, ok := cmd.(EvalFallback)
	if !ok {
		return noscript
	}
	if !e.UseEval() {
		return noscript
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= answerMargin {
		// While the replicas lag, the NOSCRIPT came only with WAIT's
		// answer, a whole Timeout late, and every call that waited for
		// a place would meet it in turn and give up here: no call
		// would send the EVAL that loads the script.
		left := time.Until(d).Round(time.Millisecond)
		loaded := "not loaded"
		if src, ok := cmd.Args()[1].(string); ok && loadScript(ctx, node, src) == nil {
			loaded = "loaded for the next calls"
		}
		return c.busy(cmd, fmt.Errorf("NOSCRIPT (script %s), and %v left to send the script as EVAL, less than Redis may take to answer WAIT: %w", loaded, left, context.DeadlineExceeded))
	}
	cmd.SetErr(nil)
	return c.run(ctx, node, cmd, asking)
}

// loadTimeout bounds a SCRIPT LOAD sent after a NOSCRIPT that came too
// late for an EVAL (loadScript), and so how far past its deadline such a
// call can return.
const loadTimeout = 250 * time.Millisecond

// loadScript loads src into node's script cache with SCRIPT LOAD, outside
// ctx's deadline and cancellation but within its values, for at most
// loadTimeout (and node's ReadTimeout), while the caller holds its place.
// The caller's ctx cannot bound it: a NOSCRIPT that came too late for an
// EVAL came with WAIT's answer, which Redis sends up to a tick after
// WAIT's timeout, itself ctx's deadline less answerMargin, so ctx has a
// few tens of milliseconds left at best, and none on a stalled or loaded
// host; were SCRIPT LOAD cut off with it, every call after it would meet
// NOSCRIPT too late in turn and fail ErrBusy for as long as the replicas
// lag. SCRIPT LOAD writes no data and loading a script twice is harmless.
func loadScript(ctx context.Context, node *redis.Client, src string) error {
	timeout := loadTimeout
	if rt := node.Options().ReadTimeout; rt > 0 {
		timeout = min(timeout, rt)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	return node.ScriptLoad(ctx, src).Err()
}

// run sends cmd (after ASKING when asking) and WAIT to node in one
// pipeline, on one connection, in one round trip. go-redis does not send
// again a pipeline holding a command marked NoRetry (the scripts' are), so
// a broken connection cannot run the script twice. WAIT goes out even
// when cmd fails (a NOSCRIPT, say), and Redis runs it (taking up to the
// timeout); its answer is then ignored.
func (c *Client) run(ctx context.Context, node *redis.Client, cmd redis.Cmder, asking bool) error {
	timeout := c.timeout
	if d, ok := ctx.Deadline(); ok {
		// WAIT answers at the first tick of Redis's clock after its
		// timeout: it must end a tick before ctx does, or a command that
		// ran is answered as a context timeout, its outcome unknown.
		timeout = min(timeout, time.Until(d)-answerMargin)
	}
	if rt := node.Options().ReadTimeout; rt > 0 {
		// The pipeline's reply must come within the client's read
		// timeout, WAIT's included.
		timeout = min(timeout, rt-rt/10)
	}
	timeout = max(timeout.Round(time.Millisecond), time.Millisecond) // WAIT 0 would wait for ever
	pipe := node.Pipeline()
	if asking {
		_ = pipe.Process(ctx, redis.NewStatusCmd(ctx, "asking"))
	}
	_ = pipe.Process(ctx, cmd)
	wait := redis.NewIntCmd(ctx, "wait", c.n, timeout.Milliseconds())
	_ = pipe.Process(ctx, wait)
	_, _ = pipe.Exec(ctx)
	if err := cmd.Err(); err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			// ctx ended while the answer was awaited: go-redis reports
			// it as ctx's error, which says nothing was sent, but cmd
			// went out (ctx was live when it was written) and may have
			// run. %v, not %w: the outcome is unknown.
			err = fmt.Errorf("replicawait: %s sent, its answer cut off: %v", cmd.Name(), err)
			cmd.SetErr(err)
		}
		return err
	}
	got, err := wait.Result()
	switch {
	case err != nil:
		// %v, not %w: cmd ran, whatever WAIT's failure (an error reply, a
		// timeout) would say about a command that failed by itself.
		err = fmt.Errorf("%w: WAIT %d: %v", ErrNotReplicated, c.n, err)
	case got < int64(c.n):
		err = fmt.Errorf("%w: %d of %d replicas within %v; a failover may lose it", ErrNotReplicated, got, c.n, timeout)
	default:
		return nil
	}
	cmd.SetErr(err)
	return err
}

// answerMargin is the time kept, before a command's context deadline,
// for Redis's answer to WAIT: Redis ends a WAIT at the first tick of its
// clock after the timeout (a tick is 100 ms at Redis's default hz 10,
// shorter at a higher hz), and the answer must then travel back.
const answerMargin = 150 * time.Millisecond

// busy fails cmd unsent with ErrBusy wrapping cause (ctx's error, or one
// wrapping context.DeadlineExceeded), as the stores classify it: nothing
// was applied.
func (c *Client) busy(cmd redis.Cmder, cause error) error {
	err := fmt.Errorf("%w (at most %d at once): %w", ErrBusy, cap(c.places), cause)
	cmd.SetErr(err)
	return err
}

// master returns the client of the Cluster primary at addr, or nil when
// the client's map has none there.
func (c *Client) master(ctx context.Context, addr string) *redis.Client {
	var mu sync.Mutex
	var found *redis.Client
	_ = c.cluster.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		if m.Options().Addr == addr {
			mu.Lock()
			found = m
			mu.Unlock()
		}
		return nil
	})
	return found
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
