package doctor

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/redisnil"
)

// ErrRefused reports a command doctor's Redis client would not send because
// it is not one of ReadOnlyCommands.
var ErrRefused = fmt.Errorf("doctor: refusing a command that is not a read")

// readOnly lists the commands doctor may send, lower case, with the
// subcommand after a space where the command has them.
var readOnly = map[string]bool{
	"ping": true, "info": true, "time": true, "config get": true,
	"cluster info": true, "cluster slots": true, "cluster shards": true, "cluster nodes": true,
	"scan": true, "pttl": true, "ttl": true, "type": true, "zcard": true, "hlen": true,
	// The fleet's heartbeats, with the time of each one's last beat.
	"zrange": true,
	// Reading the configuration document (config.LoadRedis).
	"get": true, "getrange": true, "strlen": true, "exists": true,
	"memory usage": true, "latency latest": true,
	"sentinel master": true, "sentinel replicas": true, "sentinel sentinels": true, "sentinel ckquorum": true,
	"sentinel get-master-addr-by-name": true,
	// The latency probe: a fixed script that only reads (PTTL of one key),
	// see probeScript; allow refuses any other script (ownScript).
	"evalsha": true, "eval": true, "script load": true,
	// Sent by go-redis itself when a connection opens.
	"hello": true, "auth": true, "select": true, "client setinfo": true, "client setname": true, "readonly": true,
	"client maint_notifications": true,
	// Sent by go-redis's Cluster client to learn each command's keys.
	"command": true,
	// Sent before a PTTL or ZCARD of a key SCAN found in a slot its node
	// is importing (a resharding under way): it changes nothing but lets
	// the next command read that key.
	"asking": true,
}

// connSetup are the commands go-redis sends itself when a connection
// opens.
var connSetup = map[string]bool{
	"hello": true, "auth": true, "select": true, "client setinfo": true, "client setname": true, "readonly": true,
	"client maint_notifications": true,
}

// ReadOnlyCommands returns the commands doctor's Redis client sends; it
// refuses any other with ErrRefused before sending it. EVALSHA, EVAL and
// SCRIPT LOAD are allowed only with doctor's own latency probe, a script
// that reads one key's TTL: any other script is refused too.
func ReadOnlyCommands() []string {
	out := make([]string, 0, len(readOnly))
	for c := range readOnly {
		out = append(out, strings.ToUpper(c))
	}
	sort.Strings(out)
	return out
}

// commandName returns the lower-case name of cmd, with its subcommand for
// the container commands (CONFIG GET, CLUSTER INFO...).
func commandName(cmd redis.Cmder) string {
	args := cmd.Args()
	if len(args) == 0 {
		return ""
	}
	name := strings.ToLower(fmt.Sprint(args[0]))
	switch name {
	case "config", "cluster", "memory", "latency", "sentinel", "script", "client":
		if len(args) > 1 {
			name += " " + strings.ToLower(fmt.Sprint(args[1]))
		}
	}
	return name
}

// counter is a go-redis hook that counts the commands doctor sends (not
// the connection setup go-redis sends itself, see connSetup), refuses any
// that is not a read, and records the reads that failed.
type counter struct {
	n atomic.Int64

	mu     sync.Mutex
	failed []failedRead // in the order they failed
}

// failedRead is one command whose reply was an error other than the
// expected ones (see expectedErr).
type failedRead struct {
	cmd string // the command's name, upper case, e.g. "HLEN"
	err error
	// key is the key a WRONGTYPE error was about: a key of another type
	// than its name says, which the report names. Empty otherwise.
	key string
}

// failures returns the reads that failed since the first from failed
// (an index returned by mark).
func (c *counter) failures(from int) []failedRead {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]failedRead(nil), c.failed[min(from, len(c.failed)):]...)
}

// mark returns the number of failed reads so far, for failures.
func (c *counter) mark() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.failed)
}

// record notes the commands of cmds that failed with an error a check
// must not ignore: each command's own error, or, when none has one, err,
// the error of the call (go-redis does not always set it on the command,
// e.g. for a context already done). The commands go-redis sends itself when a
// connection opens are not noted: an older server refuses some of them
// (CLIENT SETINFO before Redis 7.2) and go-redis carries on.
func (c *counter) record(err error, cmds ...redis.Cmder) {
	for _, cmd := range cmds {
		if cmd.Err() != nil {
			// The commands carry their own errors: err is one of them.
			err = nil
			break
		}
	}
	for _, cmd := range cmds {
		if connSetup[commandName(cmd)] {
			continue
		}
		e := cmd.Err()
		if e == nil {
			e = err
		}
		if err := e; err != nil && !expectedErr(err) {
			c.mu.Lock()
			f := failedRead{cmd: strings.ToUpper(commandName(cmd)), err: err}
			if args := cmd.Args(); strings.HasPrefix(err.Error(), "WRONGTYPE") && len(args) > 1 {
				f.key = fmt.Sprint(args[1])
			}
			c.failed = append(c.failed, f)
			c.mu.Unlock()
		}
	}
}

// expectedErr reports the errors that are part of a successful read: a
// missing key (redis.Nil), a script to load before its first EVALSHA
// (NOSCRIPT, then EVAL), and the Cluster redirections the client or the
// scan follows (MOVED, ASK, TRYAGAIN).
func expectedErr(err error) bool {
	if redisnil.IsReply(err) {
		return true
	}
	msg := err.Error()
	for _, p := range []string{"NOSCRIPT ", "MOVED ", "ASK ", "TRYAGAIN "} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// attach adds the hook to client and, for a Cluster, to every node client
// it creates.
func (c *counter) attach(client redis.UniversalClient) {
	if cc, ok := client.(*redis.ClusterClient); ok {
		cc.OnNewNode(func(n *redis.Client) { n.AddHook(c) })
		return
	}
	client.AddHook(c)
}

// ownScript reports whether a script command carries doctor's own
// probe script, the only one it sends: EVAL and SCRIPT LOAD of its
// source, EVALSHA of its SHA-1. Any other script could write.
func ownScript(name string, cmd redis.Cmder) bool {
	args := cmd.Args()
	arg := func(i int) string {
		if len(args) <= i {
			return ""
		}
		return fmt.Sprint(args[i])
	}
	switch name {
	case "eval":
		return arg(1) == probeSource
	case "evalsha":
		return strings.EqualFold(arg(1), probeScript.Hash())
	case "script load":
		return arg(2) == probeSource
	}
	return true
}

func (c *counter) allow(cmd redis.Cmder) error {
	name := commandName(cmd)
	if !readOnly[name] || !ownScript(name, cmd) {
		if readOnly[name] {
			name += " of a script that is not doctor's probe"
		}
		err := fmt.Errorf("%w: %s", ErrRefused, strings.ToUpper(name))
		cmd.SetErr(err)
		return err
	}
	if !connSetup[name] {
		// Doctor's own commands only: the ones go-redis sends itself
		// on each new connection (HELLO, AUTH, ...) are the client's.
		c.n.Add(1)
	}
	return nil
}

// DialHook implements redis.Hook.
func (c *counter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

// ProcessHook implements redis.Hook.
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := c.allow(cmd); err != nil {
			c.record(err, cmd)
			return err
		}
		err := next(ctx, cmd)
		c.record(err, cmd)
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if err := c.allow(cmd); err != nil {
				c.record(err, cmd)
				return err
			}
		}
		err := next(ctx, cmds)
		c.record(err, cmds...)
		return err
	}
}
