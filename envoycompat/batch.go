package envoycompat

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/coalesce"
	"github.com/floodgate-rl/floodgate/internal/luascript"
)

// incrSource is the counter update script (see incr.lua). It is
// envoyproxy/ratelimit's fixed window counter, not one of Floodgate's
// algorithms (which live in redisstore/lua), and has no other copy.
//
//go:embed incr.lua
var incrSource string

// incrScript runs incr.lua. Its error replies are the shape check before
// any write and Redis's own error when it refused every INCRBY as a
// server that refuses writes (OOM, READONLY, MISCONF, NOREPLICAS), so
// every error reply means nothing was written, and carries Redis's text.
// A key refused for itself (WRONGTYPE, not an integer, an overflow) is in
// the reply's index list, even when it is the call's only key.
var incrScript = luascript.New(incrSource, luascript.Options{})

// Coalescing (RedisStore on a single-server client). Each decision's
// counter update costs Redis and the service about as much to send,
// dispatch and answer as to apply, so while many decisions are under way
// their updates share script calls. The batcher's queue
// (internal/coalesce) keeps at most maxInFlight script calls in flight. An
// Incr that finds a call free and nobody waiting is sent at once, alone,
// as without coalescing: a lone caller pays nothing for it. Otherwise it
// joins the queue, and when a call completes the oldest waiting updates
// (up to maxBatch counters, and at least one whole Incr) leave together in
// the next call, in queue order. No goroutine runs while nothing waits.
//
// Each Incr's counters are updated exactly as alone (INCRBY then EXPIRE
// each, with its own increment and time to live), in one atomic script
// with the others of its call. Failures keep their meaning per Incr: an
// error reply (the server refused the script) means nothing was written
// for any of them; a lost connection or a timeout once the call was sent
// may have written all of them; a counter whose INCRBY Redis refuses fails
// its own Incr, and the others go on.
type incrBatcher struct {
	client luascript.Client
	off    bool // coalescing off: each Incr alone, at once
	// q queues the Incr calls waiting for a script call (internal/coalesce):
	// one group, each taking as many of a batch's maxBatch places as it
	// has counters.
	q *coalesce.Queue[*incrCall, struct{}]
}

// incrMaxInFlight is the number of script calls a batcher keeps in flight:
// two keep Redis busy (while it runs one, the next is on its way) and let
// the most updates ride together, as for redisstore's batcher.
const incrMaxInFlight = 2

// newIncrBatcher returns the batcher for c, or nil if c does not hold
// every key (c is not a client of one server). With maxBatch 1 it sends
// each Incr at once, alone.
func newIncrBatcher(c redis.UniversalClient, maxBatch int) *incrBatcher {
	if _, single := c.(*redis.Client); !single {
		return nil
	}
	if maxBatch <= 0 {
		maxBatch = DefaultMaxBatch
	}
	b := &incrBatcher{client: c, off: maxBatch == 1}
	b.q = coalesce.New[*incrCall, struct{}](maxBatch, incrMaxInFlight, b.run, expireIncr)
	return b
}

// incrCall is one queued Incr. It holds its own copy of the keys,
// arguments and results, because a caller whose context ends stops waiting
// and leaves the call to the batcher, which may still write to it.
type incrCall struct {
	ctx  context.Context
	keys []string
	nums []int64 // per key: increment, time to live in seconds
	vals []int64 // per key: the counter after the update
	err  error
	done chan struct{}
}

// Context returns the context the Incr was made under.
func (c *incrCall) Context() context.Context { return c.ctx }

var incrCallPool = sync.Pool{New: func() any { return &incrCall{done: make(chan struct{}, 1)} }}

func getIncrCall(ctx context.Context, ops []*Op) *incrCall {
	c := incrCallPool.Get().(*incrCall)
	c.ctx, c.err = ctx, nil
	c.keys, c.nums = c.keys[:0], c.nums[:0]
	for _, op := range ops {
		c.keys = append(c.keys, op.Key)
		c.nums = append(c.nums, int64(op.N), ttlSeconds(op.TTL))
	}
	c.vals = append(c.vals[:0], make([]int64, len(ops))...)
	return c
}

// putIncrCall returns c, answered and no longer referenced by the
// batcher, for reuse.
func putIncrCall(c *incrCall) {
	clear(c.keys)
	c.ctx = nil
	incrCallPool.Put(c)
}

// ttlSeconds is EXPIRE's argument for d: whole seconds, at least 1 (as
// go-redis's Expire rounds it).
func ttlSeconds(d time.Duration) int64 {
	return max(int64(d/time.Second), 1)
}

// checkOps refuses what the script cannot apply, before anything is sent.
func checkOps(ops []*Op) error {
	for _, op := range ops {
		if op.N > math.MaxInt64 {
			return fmt.Errorf("%w: envoycompat: increment %d of %q does not fit INCRBY", floodgate.ErrStoreUnavailable, op.N, op.Key)
		}
	}
	return nil
}

// incr applies ops (one Incr's counters on the batcher's client) and sets
// their results, coalescing them with other Incr calls when the script
// calls are busy.
func (b *incrBatcher) incr(ctx context.Context, ops []*Op) error {
	if err := checkOps(ops); err != nil {
		return err
	}
	if b.off {
		return incrAlone(ctx, b.client, ops)
	}
	c, queued := b.q.Join(struct{}{}, len(ops), func() *incrCall { return getIncrCall(ctx, ops) })
	if !queued {
		err := incrAlone(ctx, b.client, ops)
		b.q.Release()
		return err
	}
	if !b.q.Wait(c, c.done) {
		return fmt.Errorf("%w: redis: %w (the update was sent and may have been applied)", floodgate.ErrIndeterminate, ctx.Err())
	}
	err := c.err
	if err == nil {
		for i, op := range ops {
			op.Result = uint64(c.vals[i])
		}
	}
	putIncrCall(c)
	return err
}

// incrAlone applies ops with one script call of their own.
func incrAlone(ctx context.Context, client luascript.Client, ops []*Op) error {
	f := getFrame()
	defer putFrame(f)
	for _, op := range ops {
		f.addOp(op)
	}
	vals, err := incrScript.RunInts(ctx, client, f.argv())
	if err != nil {
		return refusedAll(err, f.keys)
	}
	refused, err := splitReply(vals, len(ops))
	if err != nil {
		return err
	}
	if err := checkValues(vals[:len(ops)], refused, 0, f.keys); err != nil {
		return err
	}
	for i, op := range ops {
		op.Result = uint64(vals[i])
	}
	return nil
}

// incrOne is incrAlone for one counter, whatever the client.
func incrOne(ctx context.Context, client luascript.Client, op *Op) error {
	if err := checkOps([]*Op{op}); err != nil {
		return err
	}
	return incrAlone(ctx, client, []*Op{op})
}

// expireIncr answers c, whose context ended with err before it was sent:
// nothing was written for it. It is the Queue's expire.
func expireIncr(c *incrCall, err error) {
	c.err = fmt.Errorf("%w: redis: %w (while waiting to be sent)", floodgate.ErrStoreUnavailable, err)
	c.done <- struct{}{}
}

// run sends calls (none of them expired) as one script call and hands
// each its result. It is the Queue's send.
func (b *incrBatcher) run(calls []*incrCall) {
	ctx, cancel := coalesce.BatchContext(calls)
	defer cancel()
	f := getFrame()
	defer putFrame(f)
	for _, c := range calls {
		f.keys = append(f.keys, c.keys...)
		f.nums = append(f.nums, c.nums...)
	}
	vals, err := incrScript.RunInts(ctx, b.client, f.argv())
	var refused []int64
	if err == nil {
		refused, err = splitReply(vals, len(f.keys))
	}
	at := 0
	for _, c := range calls {
		n := len(c.keys)
		if err != nil {
			c.err = refusedAll(err, c.keys)
		} else {
			copy(c.vals, vals[at:at+n])
			c.err = checkValues(c.vals, refused, at, c.keys)
		}
		at += n
		c.done <- struct{}{}
	}
}

// refusedAll returns err, the error of a script call with the counters
// keys, naming them when it is Redis's error reply (such as incr.lua's
// "OOM command not allowed when used memory > 'maxmemory'", every INCRBY
// refused): nothing was written for them.
func refusedAll(err error, keys []string) error {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return err
	}
	return fmt.Errorf("%w (counters %q: nothing was written for them)", err, keys)
}

// splitReply checks a reply of incr.lua for k keys and returns the
// 0-based indices of the refused keys, in increasing order.
func splitReply(vals []int64, k int) ([]int64, error) {
	if len(vals) < k || len(vals) > 2*k {
		return nil, fmt.Errorf("%w: envoycompat: %d values for %d counters", floodgate.ErrBadReply, len(vals), k)
	}
	refused := vals[k:]
	prev := int64(0)
	for j, i := range refused {
		if i <= prev || i > int64(k) {
			return nil, fmt.Errorf("%w: envoycompat: refused counter index %d of %d", floodgate.ErrBadReply, i, k)
		}
		prev = i
		refused[j] = i - 1
	}
	return refused, nil
}

// checkValues returns the error of one Incr whose counters are keys, at
// offset at of a call whose refused counters are refused (0-based,
// increasing), and whose values are vals: nil when every counter was
// updated and holds a count.
func checkValues(vals, refused []int64, at int, keys []string) error {
	var bad []string
	for _, i := range refused {
		if i >= int64(at) && i < int64(at+len(keys)) {
			bad = append(bad, keys[i-int64(at)])
		}
	}
	if len(bad) > 0 {
		why := "nothing was written for it"
		sentinel := floodgate.ErrStoreUnavailable
		if len(bad) < len(keys) {
			why = "nothing was written for it; the request's other counters were updated"
			sentinel = floodgate.ErrIndeterminate
		}
		return fmt.Errorf("%w: redis: INCRBY refused for %q (the key holds a value that is not a counter, or the sum would overflow); %s", sentinel, bad, why)
	}
	for i, v := range vals {
		if v < 0 {
			return fmt.Errorf("%w: redis: INCRBY %s: the counter is negative (%d), not a count of hits", floodgate.ErrBadReply, keys[i], v)
		}
	}
	return nil
}

// incrFrame holds one script call's command line: EVALSHA sha numkeys
// key... then increment and time to live per key. Keys and numbers are
// passed as *string and *int64, which go-redis writes without boxing.
type incrFrame struct {
	keys []string
	nums []int64
	args []any
}

var framePool = sync.Pool{New: func() any { return new(incrFrame) }}

func getFrame() *incrFrame { return framePool.Get().(*incrFrame) }

func putFrame(f *incrFrame) {
	clear(f.keys)
	clear(f.args)
	f.keys, f.nums, f.args = f.keys[:0], f.nums[:0], f.args[:0]
	framePool.Put(f)
}

// addOp adds op's counter to the call.
func (f *incrFrame) addOp(op *Op) {
	f.keys = append(f.keys, op.Key)
	f.nums = append(f.nums, int64(op.N), ttlSeconds(op.TTL))
}

// argv returns the command line of f's keys and numbers (valid until f
// changes).
func (f *incrFrame) argv() []any {
	f.args = append(f.args[:0], nil, nil, len(f.keys))
	for i := range f.keys {
		f.args = append(f.args, &f.keys[i])
	}
	for i := range f.nums {
		f.args = append(f.args, &f.nums[i])
	}
	return f.args
}
