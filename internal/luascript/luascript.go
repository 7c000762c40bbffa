// Package luascript runs Floodgate's Lua scripts on Redis: by SHA-1 with
// EVALSHA, sending the source with EVAL only when the server answers
// NOSCRIPT, never sent a second time by go-redis after a network error,
// and with every failure classified by whether the script may have run
// (floodgate.ErrIndeterminate) or certainly wrote nothing
// (floodgate.ErrStoreUnavailable).
//
// It is the one copy of that machinery for the packages that keep state in
// Redis through scripts (quota, concurrency, loginguard).
package luascript

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/nilcheck"
	"github.com/floodgate-rl/floodgate/internal/redisnil"
	"github.com/floodgate-rl/floodgate/replicawait"
	"github.com/redis/go-redis/v9"
)

// Client is the part of a go-redis v9 client a Script runs on:
// *redis.Client, *redis.ClusterClient, the failover clients and
// *redis.AutoPipeliner satisfy it. Set ContextTimeoutEnabled on the client
// so that a call's context deadline bounds the whole round trip.
type Client interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// CheckClient returns nil when c can run scripts for the store named
// store (e.g. "quota redis store"), and otherwise an error wrapping
// floodgate.ErrInvalidPolicy: c is nil (or a nil pointer), or it is a
// client with a Usable method, such as a replicawait.Client, that reports
// it unusable. It sends nothing.
func CheckClient(c Client, store string) error {
	if nilcheck.IsNil(c) {
		return fmt.Errorf("%w: %s: nil client (%T)", floodgate.ErrInvalidPolicy, store, c)
	}
	if u, ok := c.(interface{ Usable() error }); ok {
		if err := u.Usable(); err != nil {
			return fmt.Errorf("%w: %s: %w", floodgate.ErrInvalidPolicy, store, err)
		}
	}
	return nil
}

// Options configures a Script. The zero value is ready to use.
type Options struct {
	// Refusal is text contained in every error reply the script raises on
	// purpose (with redis.error_reply) when it refuses its arguments or
	// finds state it will not act on, for example "floodgate quota:". Run
	// reports those replies as floodgate.ErrBadReply rather than
	// floodgate.ErrStoreUnavailable: the call or the stored data is wrong,
	// so sending the call again, here or to a fallback store, cannot help;
	// and such a refusal may come after writes the script keeps on purpose
	// (trimming expired entries, say), so "nothing was written" would not
	// be true of it. Default "": every error reply is ErrStoreUnavailable.
	Refusal string
}

// Script is one Lua script and the SHA-1 that EVALSHA knows it by. It is
// immutable and safe for concurrent use, so a package keeps its scripts in
// package-level variables.
//
// Run counts an error reply as "nothing written" (see Classify). That
// holds for a script that makes every read and every check before its
// first write, and marks any error it raises later as a refusal (see
// Options.Refusal): Redis stops a script only at its first write (OOM,
// READONLY...) or at a read of the wrong type, and a Lua error raised
// after a write would leave that write in place.
type Script struct {
	src     string
	sha     string
	refusal string
	// The two forms of the script as command arguments, converted to any
	// once so that building a call does not allocate for them.
	shaArg, srcArg any
}

// New returns the Script for the Lua source src. It sends nothing: the
// first Run on each server loads the script (EVALSHA answered with
// NOSCRIPT, then EVAL), and later runs use EVALSHA alone.
func New(src string, opts Options) *Script {
	sum := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(sum[:])
	s := &Script{src: src, sha: sha, refusal: opts.Refusal, shaArg: sha, srcArg: src}
	sources.Store(sha, s.srcArg)
	return s
}

// SHA returns the script's SHA-1 in lower-case hex, the name Redis's script
// cache knows it by (SCRIPT EXISTS, EVALSHA).
func (s *Script) SHA() string { return s.sha }

// Source returns the script's Lua source.
func (s *Script) Source() string { return s.src }

// Run runs the script on c with keys (its KEYS) and args (its ARGV) and
// returns the reply as go-redis decodes it, unchecked: int64, string,
// []any, or nil for a Lua nil or false. It needs at least one key, and on a
// Redis Cluster the call goes to the node serving keys[0], so all keys must
// share one hash tag. Run keeps no reference to keys or args once it has
// returned.
//
// Failures (see RunCommand): an error wrapping floodgate.ErrInvalidKey
// when keys is empty (nothing is sent); floodgate.ErrStoreUnavailable when
// the script certainly wrote nothing; floodgate.ErrIndeterminate when it
// may have run; floodgate.ErrBadReply for the script's own refusals (see
// Options.Refusal). An error wrapping floodgate.ErrForeignValue starts
// with the keys ("keys [...]: "), since Redis's WRONGTYPE does not say
// which key it met: the operator who must delete it learns from the log.
func (s *Script) Run(ctx context.Context, c Client, keys []string, args ...any) (any, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: luascript: a script call needs at least one key to be routed by", floodgate.ErrInvalidKey)
	}
	argv := make([]any, 3, 3+len(keys)+len(args))
	argv[2] = len(keys)
	for i := range keys {
		// A *string is written as the string it points to, without the
		// allocation that converting a string to any costs.
		argv = append(argv, &keys[i])
	}
	argv = append(argv, args...)
	v, err := s.RunCommand(ctx, c, argv)
	if err != nil && errors.Is(err, floodgate.ErrForeignValue) {
		err = fmt.Errorf("keys %q: %w", keys, err)
	}
	return v, err
}

// RunCommand is Run for a caller that builds, and may reuse, the whole
// command line: RunCommand sets argv[0] and argv[1] (to EVALSHA and the
// SHA-1, or EVAL and the source); argv[2] is the number of keys, then come
// the keys, then the arguments. argv must hold at least one key: the call
// is routed by argv[3]. RunCommand changes only argv[0] and argv[1] and
// keeps no reference to argv once it has returned.
//
// It sends EVALSHA first. A NOSCRIPT reply is Redis refusing the command
// itself, so nothing ran, and RunCommand sends EVAL once: the script runs
// at most once per call. A TRYAGAIN reply is a Redis Cluster node
// refusing a call whose keys a resharding has split between it and
// another node, so nothing ran either, and RunCommand sends the call again
// (2 ms later, then twice as long each time up to 50 ms) until it is
// answered otherwise or ctx ends. It sends nothing else again, and marks both
// commands so that go-redis does not resend them after a timeout or a
// broken connection either (whatever the client's MaxRetries), since the
// script may have run; a cluster client still follows MOVED and ASK
// redirections, which are replies meaning the node ran nothing. If ctx is
// already done, nothing is sent and the error wraps
// floodgate.ErrStoreUnavailable.
//
// A script that ran but that a replicawait.Client's replicas did not
// confirm fails with an error wrapping replicawait.ErrNotReplicated (and
// floodgate.ErrIndeterminate) and, alone among failures, comes with its
// reply: what the primary applied, for a caller that must report it
// (an administrative write's audit line, say).
func (s *Script) RunCommand(ctx context.Context, c Client, argv []any) (any, error) {
	var val any
	err := s.send(ctx, argv, func() error {
		cmd := redis.NewCmd(ctx, argv...)
		cmd.SetFirstKeyPos(3) // route by the first key on a cluster
		_ = c.Process(ctx, noRetryCmd{cmd})
		// Err, rather than Process's result, waits for the reply even on a
		// deferred client such as an asynchronous AutoPipeliner.
		err := cmd.Err()
		if redisnil.IsReply(err) {
			// go-redis reports a nil reply (the script returned nil or
			// false) as an error; it is a reply like any other, for the
			// caller's decoder to accept or refuse.
			return nil
		}
		val = cmd.Val()
		return err
	})
	if err != nil && !errors.Is(err, replicawait.ErrNotReplicated) {
		return nil, err
	}
	return val, err
}

// RunInts is RunCommand for a script whose reply is an array of
// integers: go-redis reads the reply straight into int64s (its
// IntSliceCmd) rather than boxing each number into an any. A nil reply is
// an error wrapping floodgate.ErrBadReply. A reply of another shape fails
// as go-redis reports it (a parse error, classified as indeterminate: the
// script ran, and the scripts that use RunInts never reply that way).
func (s *Script) RunInts(ctx context.Context, c Client, argv []any) ([]int64, error) {
	var val []int64
	err := s.send(ctx, argv, func() error {
		cmd := redis.NewIntSliceCmd(ctx, argv...)
		cmd.SetFirstKeyPos(3)
		_ = c.Process(ctx, noRetryIntsCmd{cmd})
		val = cmd.Val()
		return cmd.Err()
	})
	if err != nil {
		return nil, err
	}
	return val, nil
}

// RunString is RunCommand for a script whose reply is one string (a
// bulk string, such as values packed with struct.pack): go-redis reads it
// straight into a string rather than boxing it into an any. A nil reply is
// an error wrapping floodgate.ErrBadReply; a reply of another shape fails
// as go-redis reports it (an integer is read as its decimal string, an
// array is a parse error, classified as indeterminate: the script ran).
func (s *Script) RunString(ctx context.Context, c Client, argv []any) (string, error) {
	var val string
	err := s.send(ctx, argv, func() error {
		cmd := redis.NewStringCmd(ctx, argv...)
		cmd.SetFirstKeyPos(3)
		_ = c.Process(ctx, noRetryStringCmd{cmd})
		val = cmd.Val()
		return cmd.Err()
	})
	if err != nil {
		return "", err
	}
	return val, nil
}

// send checks argv, then sends it with do: as EVALSHA, and as EVAL once
// if the server answers NOSCRIPT. It returns do's error classified.
func (s *Script) send(ctx context.Context, argv []any, do func() error) error {
	if len(argv) < 4 {
		return fmt.Errorf("%w: luascript: a script command needs at least 4 elements (command, script, numkeys, a key), got %d", floodgate.ErrInvalidKey, len(argv))
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", floodgate.ErrStoreUnavailable, err)
	}
	attempt := func() error {
		argv[0], argv[1] = "evalsha", s.shaArg
		err := do()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			argv[0], argv[1] = "eval", s.srcArg
			err = do()
		}
		return err
	}
	err := attempt()
	// TRYAGAIN: a Redis Cluster slot is being moved and this call's keys
	// are split between the two nodes, so neither ran it. Moving a batch
	// of keys takes milliseconds: send it again while ctx allows.
	for wait := tryAgainFirst; err != nil && redis.HasErrorPrefix(err, "TRYAGAIN"); wait = min(2*wait, tryAgainMax) {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return s.classify(err)
		case <-t.C:
		}
		err = attempt()
	}
	switch {
	case err == nil:
		return nil
	case redisnil.IsReply(err):
		return fmt.Errorf("%w: luascript: a nil reply", floodgate.ErrBadReply)
	}
	return s.classify(err)
}

// tryAgainFirst and tryAgainMax bound the waits between the sends of a
// call refused with TRYAGAIN (doubling from the first to the most).
const (
	tryAgainFirst = 2 * time.Millisecond
	tryAgainMax   = 50 * time.Millisecond
)

// noRetryCmd is a redis.Cmd that go-redis must not send twice: a script
// resent after a read timeout or a reset connection could run twice and
// count a request twice.
type noRetryCmd struct{ *redis.Cmd }

// NoRetry tells go-redis not to retry the command once it may have been
// sent.
func (noRetryCmd) NoRetry() bool { return true }

// noRetryIntsCmd is noRetryCmd for RunInts.
type noRetryIntsCmd struct{ *redis.IntSliceCmd }

// NoRetry tells go-redis not to retry the command once it may have been
// sent.
func (noRetryIntsCmd) NoRetry() bool { return true }

// UseEval turns the command into the EVAL of its script
// (replicawait.EvalFallback).
func (c noRetryCmd) UseEval() bool { return useEval(c.Args()) }

// UseEval turns the command into the EVAL of its script
// (replicawait.EvalFallback).
func (c noRetryIntsCmd) UseEval() bool { return useEval(c.Args()) }

// UseEval turns the command into the EVAL of its script
// (replicawait.EvalFallback).
func (c noRetryStringCmd) UseEval() bool { return useEval(c.Args()) }

// useEval changes the arguments of an EVALSHA of a Script to its EVAL,
// in place, and reports whether they were one. The source is found by
// the SHA-1 (sources), so that the commands stay one pointer wide: a
// wider one would cost an allocation per call when made an interface.
func useEval(args []any) bool {
	if len(args) < 2 || args[0] != "evalsha" {
		return false
	}
	src, ok := sources.Load(args[1])
	if !ok {
		return false
	}
	args[0], args[1] = "eval", src
	return true
}

// sources maps each Script's SHA-1 (a string) to its source (a string
// in an any), for useEval.
var sources sync.Map

// noRetryStringCmd is noRetryCmd for RunString.
type noRetryStringCmd struct{ *redis.StringCmd }

// NoRetry tells go-redis not to retry the command once it may have been
// sent.
func (noRetryStringCmd) NoRetry() bool { return true }

// classify is Classify, with the script's own refusals (Options.Refusal)
// reported as floodgate.ErrBadReply.
func (s *Script) classify(err error) error {
	var rerr redis.Error
	if s.refusal != "" && errors.As(err, &rerr) && strings.Contains(rerr.Error(), s.refusal) {
		return fmt.Errorf("%w: redis: %w", floodgate.ErrBadReply, err)
	}
	return Classify(err)
}

var (
	_ replicawait.EvalFallback = noRetryCmd{}
	_ replicawait.EvalFallback = noRetryIntsCmd{}
	_ replicawait.EvalFallback = noRetryStringCmd{}
)
