package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/coalesce"
	"github.com/floodgate-rl/floodgate/internal/luascript"
)

// Coalescing. A single-layer decision costs Redis about as much to
// receive, dispatch and answer as to decide, and the client about as much
// to send and read. When many goroutines decide at once, the Store
// therefore sends their decisions together: single-layer ones of one
// algorithm as one call of that algorithm's script (the single-layer scripts decide
// any number of independent requests, one after another, in one atomic
// run), layered ones as one call of the layered script
// (lua/fast_layers.lua), which decides any number of decisions the same
// way. Decisions with a sliding log layer are never coalesced (see
// coalescable).
//
// The batcher's queue (internal/coalesce) keeps at most maxInFlight
// script calls of coalesced decisions in flight. A decision that finds a
// call free and nobody waiting is sent at once, alone, exactly as without
// coalescing, so a lone caller pays nothing for it. Otherwise it waits in
// the queue; whenever a call completes, the queue's oldest decisions (up
// to maxBatch decided by the oldest one's script) leave together in the
// next call. No goroutine runs while nothing is queued.
//
// A request in a batch is decided exactly as it would be alone, at its own
// timestamp, and its state written with its own TTL; requests are decided
// in the order they joined the queue. Failures keep their meaning per
// request: an error reply means nothing was written for any of them (the
// script checks the call's shape and can only be refused by Redis before
// its first write); a transport failure may have written all of them; a
// request whose key holds something floodgate did not write fails alone,
// with nothing written for it, and the others go on.
type batcher struct {
	s *Store
	// q queues the decisions waiting for a call (internal/coalesce):
	// grouped by script, each taking one of a batch's maxBatch places.
	q *coalesce.Queue[*call, *luascript.Script]
	// client is where the batches go: the Store's client, or on a Redis
	// Cluster one primary's (node.go).
	client luascript.Client
	// node: client is one Redis Cluster primary's; batches run the node
	// variants of the scripts, and a decision the primary did not decide
	// is decided again through the Store's client (node.go).
	node bool

	frames sync.Pool // *batchFrame
}

// call is one queued decision. The caller owns it until it is queued;
// then the batcher fills res and err and signals done. A caller whose
// context ends once a batch took its call stops waiting and leaves the
// call to the batcher, which is why the call holds its own copy of the
// layers. Calls are reused (see getCall): a caller that got its answer
// (also the one a call taken back out of the queue gets) puts its call
// back; an abandoned one is left to the garbage collector, since the
// batcher may still write to it.
type call struct {
	ctx     context.Context
	now     int64
	script  *luascript.Script // the script that decides it: its algorithm's single-layer script, or the general one
	layers  []floodgate.Layer
	res     []floodgate.Result
	one     [1]floodgate.Layer // layers' storage for a single layer
	oneRes  [1]floodgate.Result
	many    []floodgate.Layer // layers' storage for several, kept for reuse
	manyRes []floodgate.Result
	err     error
	retry   bool // a node's batch did not decide it (node.go): decide it again, directly
	done    chan struct{}
}

// Context returns the context the decision was made under.
func (c *call) Context() context.Context { return c.ctx }

// callPool holds calls for reuse: a queued decision would otherwise
// allocate its call and channel.
var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// getCall returns a call deciding a copy of layers with sc at now.
func getCall(ctx context.Context, now int64, sc *luascript.Script, layers []floodgate.Layer) *call {
	c := callPool.Get().(*call)
	c.ctx, c.now, c.script, c.err, c.retry = ctx, now, sc, nil, false
	if len(layers) == 1 {
		c.one[0] = layers[0]
		c.layers, c.res = c.one[:], c.oneRes[:]
	} else {
		c.many = append(c.many[:0], layers...)
		c.manyRes = append(c.manyRes[:0], make([]floodgate.Result, len(layers))...)
		c.layers, c.res = c.many, c.manyRes
	}
	return c
}

// putCall returns c, answered and no longer referenced by the batcher, for
// reuse.
func putCall(c *call) {
	clear(c.many) // the keys
	*c = call{many: c.many[:0], manyRes: c.manyRes[:0], done: c.done}
	callPool.Put(c)
}

// Coalescing defaults (see Options). Two calls in flight keep Redis busy
// (it runs one script at a time: while it runs one call, the next is on
// its way) and let the most decisions ride together; on the 2-core
// benchmark machine, 2 against 4 gave the same throughput at 64 callers
// with a lower tail (p99 1.0 against 1.1–1.25 ms), and 10–15 % more
// decisions/s at 16 callers (docs/benchmarks.md).
const (
	DefaultMaxBatch    = 64
	DefaultMaxInFlight = 2
)

func newBatcher(s *Store, maxBatch, maxInFlight int) *batcher {
	b := &batcher{s: s}
	b.q = coalesce.New[*call, *luascript.Script](maxBatch, maxInFlight, b.run, expire)
	var ps *periods
	if s != nil {
		b.client = s.client
		ps = &s.periods
	}
	b.frames.New = func() any { return &batchFrame{ps: ps} }
	return b
}

// coalescable returns the script of ss that decides layers in a batch
// (see scriptSet.scriptFor), or nil if they are not decided in batches: a
// sliding log layer's sorted-set reads would raise on a key of another
// type, and a batch must never stop half done.
func (ss *scriptSet) coalescable(layers []floodgate.Layer) *luascript.Script {
	for i := range layers {
		if layers[i].Policy.Algorithm == floodgate.SlidingLog {
			return nil
		}
	}
	return ss.scriptFor(layers)
}

// decide decides layers (checked, on one slot) with sc, coalescing them
// with other decisions when calls are busy.
func (b *batcher) decide(ctx context.Context, now int64, sc *luascript.Script, layers []floodgate.Layer, out []floodgate.Result) error {
	c, queued := b.q.Join(sc, 1, func() *call { return getCall(ctx, now, sc, layers) })
	if !queued {
		err := b.alone(ctx, now, layers, out)
		b.q.Release()
		return err
	}
	if !b.q.Wait(c, c.done) {
		if err := waitTaken(ctx, c.done); err != nil {
			return fmt.Errorf("%w: redis: %w (the decision was sent and may have been made)", floodgate.ErrIndeterminate, err)
		}
	}
	err, retry := c.err, c.retry
	if err == nil && !retry {
		copy(out, c.res)
	}
	putCall(c)
	if retry {
		b.s.nodes.rerouted.Add(1)
		return b.s.decideDirect(ctx, now, layers, out, true) // no call slot held here
	}
	return err
}

// waitTaken waits for the answer to a decision a batch took after its
// caller's context ended: nil once it came (c holds it), else the error
// the caller gets, the decision left to the batch, which still writes the
// answer. When the context's deadline passed (the call's bound is spent)
// that is at once, with the deadline's error; when the caller cancelled
// a context with a deadline, it waits until that deadline. A caller that
// cancels does not end a decision already taken: it gets the batch's
// answer (Redis's, or the queue's drop of a request whose caller had
// gone, which wraps context.Canceled: nothing sent) or, at the call's
// deadline, a timeout. Returning the cancellation at once made a
// decision sent to a stalled Redis read as its caller's doing, which the
// fallback's breaker does not count, while its batch timed out with
// nobody to count it: Envoy's callers, whose 20 ms deadline gave a call
// a bound of its own that their early cancellation ended (a downstream
// request reset), kept the breaker closed on a stalled Redis (review12).
// (A fallback.Store now bounds its calls with a context its caller's
// cancellation does not end, Ticks.WithCallTimeout: the lone call had
// the same fault, lonecancel.)
// A cancelled context without a deadline (no fallback budget bounds it)
// is not waited for: its cancellation is the error.
func waitTaken(ctx context.Context, done <-chan struct{}) error {
	err := ctx.Err()
	d, ok := ctx.Deadline()
	if !ok || !errors.Is(err, context.Canceled) {
		return err
	}
	left := time.Until(d)
	if left <= 0 {
		return context.DeadlineExceeded
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return context.DeadlineExceeded
	}
}

// alone decides layers alone: one script call through the Store's client,
// or for a node's batcher, decideOnNode.
func (b *batcher) alone(ctx context.Context, now int64, layers []floodgate.Layer, out []floodgate.Result) error {
	if b.node {
		return b.s.decideOnNode(ctx, b.client, now, layers, out)
	}
	return b.s.decideOnce(ctx, now, layers, out)
}

// expire answers c, whose context ended with err before it was sent:
// nothing was written for it. It is the Queue's expire.
func expire(c *call, err error) {
	c.err = fmt.Errorf("%w: %w (while waiting to be sent)", floodgate.ErrStoreUnavailable, err)
	c.done <- struct{}{}
}

// run sends calls (one script, none of them expired) as one script call
// and hands each its result. It is the Queue's send.
func (b *batcher) run(calls []*call) {
	if len(calls) == 1 {
		c := calls[0]
		c.err = b.alone(c.ctx, c.now, c.layers, c.res)
		c.done <- struct{}{}
		return
	}
	ctx, cancel := coalesce.BatchContext(calls)
	defer cancel()
	sc := calls[0].script
	layered := isLayers(sc)
	f := b.frames.Get().(*batchFrame)
	if layered {
		f.buildLayered(calls)
	} else {
		f.build(calls)
	}
	if b.node {
		f.args = asNodeCall(f.args)
		sc = nodeScripts[sc]
	}
	vals, err := f.send(ctx, sc, b.client)
	if err == nil {
		err = decodeBatch(vals, calls, b.node)
	}
	f.reset()
	b.frames.Put(f)
	if err != nil && b.node && refused(err) {
		// The primary refused the whole call: nothing ran. Each decision
		// is decided again through the cluster client (node.go).
		b.s.nodes.noteRefusal(err)
		for _, c := range calls {
			c.retry = true
		}
		err = nil
	}
	for _, c := range calls {
		if err != nil {
			c.err = err
		}
		c.done <- struct{}{}
	}
}

// Per-request error codes in a batch reply's reason slots (see
// lua/fast_head.lua and lua/fast_layers.lua).
const (
	codeForeign = -1 // the key holds a value floodgate did not write
	codeBadArgs = -2 // the script refused the request's arguments
)

// decodeBatch fills each call's result or error from a batch reply. A
// reply of the wrong shape is an error for every call. In a node's batch
// (node), a request with the code -1 is marked for a retry instead: its
// key may be one the node does not serve (node.go).
func decodeBatch(vals []int64, calls []*call, node bool) error {
	want := 0
	for _, c := range calls {
		want += compactWidth * len(c.layers)
	}
	if len(vals) != want {
		return fmt.Errorf("%w: batch: %d values for %d requests, want %d", floodgate.ErrBadReply, len(vals), len(calls), want)
	}
	at := 0
	for _, c := range calls {
		part := vals[at : at+compactWidth*len(c.layers)]
		at += len(part)
		if slices.Contains(part, badValue) {
			c.err = fmt.Errorf("%w: redis: the answer for %s is not a whole number below 2^53: a key may hold a value floodgate did not write", floodgate.ErrBadReply, keyList(c.layers))
			continue
		}
		switch part[0] {
		case codeForeign:
			if node {
				c.retry = true
				continue
			}
			c.err = fmt.Errorf("%w: %w: redis: a key of %s holds a value floodgate did not write", floodgate.ErrStoreUnavailable, floodgate.ErrForeignValue, keyList(c.layers))
			continue
		case codeBadArgs:
			c.err = fmt.Errorf("%w: redis: the script refused the arguments for %s", floodgate.ErrStoreUnavailable, keyList(c.layers))
			continue
		}
		c.err = decodeCompact(part, c.layers, c.res)
	}
	return nil
}

// keyList names a decision's keys in an error.
func keyList(layers []floodgate.Layer) string {
	if len(layers) == 1 {
		return fmt.Sprintf("key %q", layers[0].Key)
	}
	keys := make([]string, len(layers))
	for i := range layers {
		keys[i] = layers[i].Key
	}
	return fmt.Sprintf("keys %q", keys)
}

// batchFrame holds one batch's command arguments. For a single-layer
// script: EVALSHA sha numkeys key... packed, packed being each request's
// record (packRequest: its algorithm as a byte, then the numbers the
// script reads as little-endian doubles), one after another; Redis turns
// each argument into a Lua string and the script each number into a
// number, which cost about as much as deciding, and struct.unpack reads a
// record for less than one of them. For the layered script, see
// buildLayered. Numbers are passed as *int64 and keys as *string, which
// go-redis writes without boxing.
type batchFrame struct {
	ps     *periods // the Store's (nil: none)
	args   []any
	nums   []int64
	packed []byte              // a packed call's numbers
	vals   []int64             // a packed reply's integers (decodePacked)
	seen   map[string]struct{} // the keys of the batch, to tell whether one repeats
	// packedReply: the call is packed, and its reply is its integers
	// packed in one string.
	packedReply bool
}

// send runs f's call with sc on c and returns its reply's integers,
// compactWidth per layer, which decodeBatch checks.
func (f *batchFrame) send(ctx context.Context, sc *luascript.Script, c luascript.Client) ([]int64, error) {
	if !f.packedReply {
		return sc.RunInts(ctx, c, f.args)
	}
	reply, err := sc.RunString(ctx, c, f.args)
	if err != nil {
		return nil, err
	}
	return f.decodePacked(reply)
}

// build fills f for a single-layer script (see batchFrame), with the
// trailing "h" that tells the script to read and write a repeated key
// once (lua/fast_head.lua) when requests share one: a hot identity.
func (f *batchFrame) build(calls []*call) {
	f.args = append(f.args[:0], nil, nil, len(calls))
	f.packed = f.packed[:0]
	for _, c := range calls {
		f.args = append(f.args, &c.layers[0].Key)
		f.packed = packRequest(f.packed, f.ps, c.now, &c.layers[0])
	}
	f.args = append(f.args, f.packed)
	f.packedReply = true
	if f.repeats(calls) {
		f.args = append(f.args, argHot)
	}
}

// repeats reports whether two of calls share a key.
func (f *batchFrame) repeats(calls []*call) bool {
	if f.seen == nil {
		f.seen = make(map[string]struct{}, len(calls))
	}
	defer clear(f.seen)
	for _, c := range calls {
		if _, dup := f.seen[c.layers[0].Key]; dup {
			return true
		}
		f.seen[c.layers[0].Key] = struct{}{}
	}
	return false
}

// buildLayered fills f for the layered script (lua/fast_layers.lua):
// EVALSHA sha numkeys key... then, per decision, its number of layers n,
// its now, and its 6n layer arguments; or, when every decision has the
// same n layers with the same five policy arguments each (one set of
// policies, many identities), "p", n and those 5n arguments once, then
// one argument packing, per decision, its now and its n costs, each a
// little-endian double (the script's packed layout, answered packed).
func (f *batchFrame) buildLayered(calls []*call) {
	n := len(calls[0].layers)
	keys, nums := 0, 0
	shared := true
	for _, c := range calls {
		keys += len(c.layers)
		nums += 2 + 6*len(c.layers)
		shared = shared && len(c.layers) == n
	}
	f.args = append(f.args[:0], nil, nil, keys)
	for _, c := range calls {
		for i := range c.layers {
			f.args = append(f.args, &c.layers[i].Key)
		}
	}
	if cap(f.nums) < nums {
		f.nums = make([]int64, nums)
	}
	f.nums = f.nums[:nums]
	at := 0
	for _, c := range calls {
		m := len(c.layers)
		v := f.nums[at : at+2+6*m]
		at += len(v)
		v[0], v[1] = int64(m), c.now
		for i := range c.layers {
			f.ps.putLayer(v[2+6*i:8+6*i], c.now, &c.layers[i])
			if shared && [5]int64(v[2+6*i:7+6*i]) != [5]int64(f.nums[2+6*i:7+6*i]) {
				shared = false
			}
		}
	}
	if !shared {
		for j := range f.nums {
			f.args = append(f.args, &f.nums[j])
		}
		return
	}
	f.args = append(f.args, argPacked, argNumKeys[n])
	for i := range n {
		for j := range 5 {
			f.args = append(f.args, &f.nums[2+6*i+j])
		}
	}
	f.packed = f.packed[:0]
	for d := range calls {
		v := f.nums[d*(2+6*n) : (d+1)*(2+6*n)]
		f.packed = binary.LittleEndian.AppendUint64(f.packed, math.Float64bits(float64(v[1])))
		for i := range n {
			f.packed = binary.LittleEndian.AppendUint64(f.packed, math.Float64bits(float64(v[7+6*i])))
		}
	}
	f.args = append(f.args, f.packed)
	f.packedReply = true
}

// reset drops f's references to the calls before f is reused.
func (f *batchFrame) reset() {
	clear(f.args)
	f.args = f.args[:0]
	f.packedReply = false
}
