// Package redisstore is the Redis implementation of floodgate.Store: every
// decision whose keys share a slot, whatever its number of layers, is one
// Lua script run with EVALSHA in one round trip, atomic on the Redis
// primary that holds its keys.
//
// On Redis Cluster the keys of one decision may live in several slots (a
// global layer and a per-user layer have different hash tags). Such a
// decision is split by slot: every slot's part is decided and, if it
// admits, committed at once by a reservation, the part most decisions
// share (the global layer's) last, so in two round trips; if any part
// denies, the parts that committed are released, which gives back what
// they took. See Store.Decide and docs/layered.md.
//
// A single-layer decision, the common call, runs its algorithm's
// single-layer script (the sliding log excepted): the same
// decision on the same state, written out without the general script's
// dispatch, release code and function definitions, which Redis would
// otherwise rebuild on every call. A layered decision without a sliding log
// layer runs the layered script (lua/fast_layers.lua), flat in the same
// way; the general script (decide.lua) keeps the sliding log, the split
// decisions of Redis Cluster (reserve and release) and the reference the
// others are tested against. All of them read and write the same keys in
// the same encodings: every script reads the algorithms' states in binary
// and in text, and writes the format of Options.StateFormat (binary by
// default; text for a rolling upgrade from builds that read only text).
//
// Each algorithm's Lua is one file (lua/<algorithm>.lua), cut into blocks
// that every script deciding it inlines (assemble.go). It mirrors algo.Step
// operation for operation in integer microseconds, so the Redis store and
// the in-memory store give identical results. It reads every layer's state,
// decides each layer, and writes new state — always with a TTL, in the same
// command: its own, or for a quota state over one of the same period, the
// TTL the key already has, which ends at the same moment — only if every
// layer admitted the request. It never calls TIME: the caller's timestamp
// travels in the arguments.
//
// Concurrent decisions are coalesced (see Options.Coalesce): while a few
// script calls are in flight, the decisions that arrive wait and then
// leave together — single-layer ones of one algorithm as one call of its
// single-layer script, layered ones as one call of the layered script —
// and the script decides them one after another, each exactly as it would
// be alone. A lone caller's decision is sent at once, alone. Coalescing
// cuts what Redis and the client spend per decision on receiving,
// dispatching and answering commands, which at many callers is most of it;
// see docs/benchmarks.md for the measurements. A coalesced call holds many
// identities' keys, so by default it is on for a *redis.Client (one
// server) and, per primary, for a *redis.ClusterClient: there a decision
// whose keys all lie on one primary, by the client's slot map, is
// coalesced with others bound for that primary and sent to it, and a
// layered decision whose keys lie in several slots of that primary is
// decided there in one atomic call rather than split (see node.go for how
// a stale slot map, MOVED, ASK and resharding are handled). It is off for
// a Ring and for wrappers of cluster clients.
//
// Any go-redis client works: a plain *redis.Client (recommended: its pool
// plus coalescing), a failover client, a *redis.ClusterClient, or an
// AutoPipeliner (go-redis's own automatic pipelining, Client.AutoPipeline;
// experimental in go-redis, and measured slower than the plain client with
// coalescing here). The store marks every script command NoRetry, which
// go-redis's pool, pipelines and AutoPipeliner all honour. go-redis's
// AutoPipeliner does not end a queued command at its context's deadline;
// the store sends each command of a *redis.AutoPipeliner from a goroutine
// of its own and stops waiting when the caller's context ends (the call
// fails as indeterminate: the command may still be sent and run); with
// 256 such commands unanswered, a call fails at once, unsent.
package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/deadline"
	"github.com/floodgate-rl/floodgate/internal/luascript"
	"github.com/floodgate-rl/floodgate/internal/nilcheck"
	"github.com/redis/go-redis/v9"
)

// Client is the part of a go-redis v9 client the Store uses. *redis.Client,
// *redis.ClusterClient, the failover clients (NewFailoverClient,
// NewFailoverClusterClient) and *redis.AutoPipeliner all satisfy it.
//
// Set ContextTimeoutEnabled on the client so that a call's context deadline
// bounds the whole round trip. Set DialerRetries to 1, and MaxRetries to 1
// with MinRetryBackoff and MaxRetryBackoff -1 (no pause), as serve does
// (config.DialAttempts, config.CommandRetries): go-redis v9.23 dials a
// refused connection five times with backoff (about 400 ms) by default,
// so behind a fallback.Store a Redis that is down outlasts the decision's
// budget and is reported as a timeout rather than as unavailable (see
// package fallback, Redis client options). Cancelling a context that has no deadline
// does not end a call whose command is already sent: it waits for the
// reply or the client's ReadTimeout (5s by default in go-redis v9.23; measured with Redis
// paused by CLIENT PAUSE). Give calls a deadline (httplimit's
// Options.Timeout, say) to bound them.
type Client interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// SlotCheck says whether Decide looks at the Redis Cluster slots of a
// call's keys, and splits a call whose keys span several slots into one
// script per slot (reserve, then release on a denial) instead of sending
// one script that a cluster would refuse with CROSSSLOT.
type SlotCheck uint8

// The slot checks.
const (
	// SlotCheckAuto checks when the client is a *redis.ClusterClient and not
	// otherwise (a standalone or Sentinel-managed primary holds every slot,
	// so one script decides every call atomically).
	SlotCheckAuto SlotCheck = iota
	// SlotCheckOn always checks, for clients that wrap a cluster client, or
	// to run a standalone Redis exactly as a cluster would be run.
	SlotCheckOn
	// SlotCheckOff never checks: every call is one script.
	SlotCheckOff
)

// Coalesce says whether a Store coalesces concurrent decisions into one
// script call. A coalesced call holds the keys of many identities, so every
// key must live on the one server the call is sent to.
type Coalesce uint8

// The coalescing modes.
const (
	// CoalesceAuto coalesces on a *redis.Client — one server, a primary
	// found through Sentinel included — and, per primary, on a
	// *redis.ClusterClient (decisions whose keys lie on one primary by the
	// client's slot map; see the package documentation), and on no other
	// client: a Ring, an AutoPipeliner or a wrapper may hold keys on
	// several servers.
	CoalesceAuto Coalesce = iota
	// CoalesceOn coalesces whatever the client. Use it only when every key
	// lives on one server: an AutoPipeliner of a *redis.Client, or a
	// wrapper of one. It cannot be combined with the slot check on.
	CoalesceOn
	// CoalesceOff sends every decision as its own script call (on Redis
	// Cluster: a layered decision whose keys span slots is split by slot,
	// even when one primary holds them all).
	CoalesceOff
)

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// SlotCheck says whether a call whose keys span several Redis Cluster
	// slots is split by slot. Default SlotCheckAuto.
	SlotCheck SlotCheck
	// Coalesce says whether concurrent decisions are coalesced into one
	// script call (see the package documentation). Default CoalesceAuto.
	Coalesce Coalesce
	// MaxBatch is the most concurrent decisions sent together as one
	// script call. 0 means DefaultMaxBatch; 1 turns coalescing off, so that
	// every decision is its own script call.
	MaxBatch int
	// MaxInFlight is the most script calls of coalesced decisions in
	// flight at once (per primary on a *redis.ClusterClient); decisions
	// beyond it wait and leave together when one completes. 0 means
	// DefaultMaxInFlight.
	MaxInFlight int
	// Split says how a decision whose keys span several Redis Cluster
	// slots reserves its parts. Default SplitOrdered.
	Split SplitOrder
	// StateFormat is the format the Store writes the algorithms' states
	// in. Every Store reads both. Default BinaryState; TextState only
	// during a rolling upgrade (see StateFormat).
	StateFormat StateFormat
	// OnReleaseFailure, when set, is called for each part of a split
	// decision (keys in several Redis Cluster slots) whose reservation
	// could not be given back: another part denied the request or failed,
	// and the release of this part failed (err says how, and names the
	// slot). Its layers keep the reservation until their keys' windows or
	// periods end, charged for a request that this Store did not admit
	// (the caller may have answered it otherwise, by a fallback). The
	// decision itself is answered as without the failure: a denial when
	// another part denied (nothing else tells of the kept charge), an
	// error wrapping floodgate.ErrIndeterminate when another part failed.
	// It is called on the deciding goroutine, or, for a release sent in
	// the background because the call's context had ended before it was
	// sent (at most 64 at once, each bounded by 1 s of its own; beyond
	// that it counts as failed), on that release's goroutine after the
	// call has returned: it must be safe for concurrent use.
	// Store.ReleaseFailures counts them.
	OnReleaseFailure func(err error)
}

// StateFormat is the format a Store writes the algorithms' states in (the
// values of their keys; the sliding log's sorted sets have one format
// only). Whichever it writes, a Store reads states in both formats, so
// Stores of either format can share keys.
type StateFormat uint8

// The state formats.
const (
	// BinaryState writes each state as a tag byte and its numbers packed
	// with Redis's bundled struct library: Redis spends 5,000 to 9,500
	// instructions less per state read and written than on text
	// (docs/benchmarks.md). A window state also records its window's
	// length, so a write in the same window keeps the key's TTL (SET
	// KEEPTTL) instead of setting it again; a token bucket or GCRA state
	// records where its key's TTL ends, so a write whose state needs no
	// longer keeps it. Builds of floodgate from before the binary format
	// read such a state as a value floodgate did not write, and fail the
	// decision, as builds from before the buckets recorded their TTL's end
	// do for those (docs/operations.md).
	BinaryState StateFormat = iota
	// TextState writes each state as decimal numbers separated by spaces,
	// which every build of floodgate reads. It is for a rolling upgrade
	// from builds that read only text: run every upgraded instance with
	// TextState until no instance of an older build is left, then drop it
	// (restart them with BinaryState, the default).
	TextState
)

// String returns "binary" or "text".
func (f StateFormat) String() string {
	switch f {
	case BinaryState:
		return "binary"
	case TextState:
		return "text"
	}
	return fmt.Sprintf("StateFormat(%d)", uint8(f))
}

// ParseStateFormat returns the StateFormat named s ("binary" or "text"),
// as a command-line flag gives it.
func ParseStateFormat(s string) (StateFormat, error) {
	switch s {
	case "binary":
		return BinaryState, nil
	case "text":
		return TextState, nil
	}
	return 0, fmt.Errorf("redisstore: unknown state format %q (want binary or text)", s)
}

// SplitOrder says how a decision split over Redis Cluster slots reserves
// its parts (see Store.Decide and docs/layered.md).
type SplitOrder uint8

// The split orders.
const (
	// SplitOrdered reserves every part but the one most decisions share
	// (a global layer's) at once, then that one: two round trips for an
	// admitted decision, and that part's capacity is only ever reserved by
	// requests the other parts admitted (all of the binding capacity was
	// admitted in every run of TestClusterAdmission).
	SplitOrdered SplitOrder = iota
	// SplitConcurrent reserves every part at once: one round trip for an
	// admitted decision, but a request another part is about to deny holds
	// the shared part's capacity until its release, and requests denied
	// meanwhile would have passed (in TestClusterAdmission's settings,
	// before the ordered split: 15 to 50 of 50, and 34 to 62 of 90).
	SplitConcurrent
)

// Store decides requests on Redis. It is safe for concurrent use by
// multiple goroutines; it holds no connection of its own, only the client.
// Make it with New: the zero Store is not usable (floodgate.New refuses
// it).
//
// Failure behaviour: an error wrapping floodgate.ErrStoreUnavailable means
// the script certainly did not write (the command was not sent, or Redis
// refused it); floodgate.ErrIndeterminate means it may have run (for
// example a read timeout after the command was sent). The Store never
// retries a command that may have been sent, and it asks go-redis not to
// either; it re-sends only after NOSCRIPT, which means nothing ran. A split
// decision (see Decide) wraps ErrStoreUnavailable only when nothing it
// wrote is kept.
type Store struct {
	// client is the Client given to New, held as the luascript.Client the
	// script runs on (the same method set), converted once here rather
	// than on every call.
	client luascript.Client
	// relClient is client, for a split decision's releases (see
	// releaseClient).
	relClient luascript.Client
	slots     bool
	// inflight counts, per Redis Cluster slot, the split decisions in
	// flight that have keys there (nil when the slot check is off).
	inflight *[SlotCount]atomic.Int32
	// concurrent: Options.Split is SplitConcurrent.
	concurrent bool
	scripts    *scriptSet  // the scripts writing Options.StateFormat
	frames     sync.Pool   // *frame
	batch      *batcher    // nil: coalescing off, or per primary (nodes)
	nodes      *nodeRouter // coalescing per Redis Cluster primary (node.go); nil: off
	periods    periods     // the quota period last sent
	// releaseFailures counts the parts of split decisions whose release
	// failed; onReleaseFailure is Options.OnReleaseFailure.
	releaseFailures  atomic.Int64
	onReleaseFailure func(error)
	// laterReleases holds a token for each release in the background
	// (releaseLater), at most maxLaterReleases; later counts them for
	// WaitReleases.
	laterReleases chan struct{}
	later         inflight
}

// WaitReleases waits until the releases the Store sends in the background
// are done, or ctx ends (then it returns ctx's error). Such releases are
// those of split decisions on a Redis Cluster whose call ended (a timeout
// in another part) before the release of a reserved part was sent: each
// runs for at most a second. Call it before closing the client, so that
// they are not cut short and their layers do not keep the charge of
// requests the store did not admit.
func (s *Store) WaitReleases(ctx context.Context) error {
	return s.later.wait(ctx)
}

// inflight counts work in the background, and lets callers wait until
// none is left, while more may start at any time (which a
// sync.WaitGroup forbids during a Wait: a release could start as
// WaitReleases waited, and panic). The zero value is ready.
type inflight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n falls back to 0; nil while n is 0
}

// add counts one more.
func (f *inflight) add() {
	f.mu.Lock()
	if f.n == 0 {
		f.idle = make(chan struct{})
	}
	f.n++
	f.mu.Unlock()
}

// done counts one fewer.
func (f *inflight) done() {
	f.mu.Lock()
	if f.n--; f.n == 0 {
		close(f.idle)
		f.idle = nil
	}
	f.mu.Unlock()
}

// wait returns once none is left (at least for a moment since it was
// called), or with ctx's error when ctx ends first.
func (f *inflight) wait(ctx context.Context) error {
	f.mu.Lock()
	idle := f.idle
	f.mu.Unlock()
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ReleaseFailures returns how many parts of split decisions (keys in
// several Redis Cluster slots) kept a reservation because their release
// failed (see Options.OnReleaseFailure), since the Store was made.
func (s *Store) ReleaseFailures() int64 { return s.releaseFailures.Load() }

// New returns a Store deciding on client (see Client for the options to
// build it with). It sends nothing: the script is loaded on first use
// (EVAL after a NOSCRIPT reply, then EVALSHA).
func New(client Client, opts Options) (*Store, error) {
	if nilcheck.IsNil(client) {
		return nil, fmt.Errorf("%w: redisstore: nil client (%T)", floodgate.ErrInvalidPolicy, client)
	}
	s := &Store{client: client, onReleaseFailure: opts.OnReleaseFailure}
	if ap, ok := client.(*redis.AutoPipeliner); ok {
		// Its batches do not end at their callers' deadlines (apClient).
		s.client = apClient{ap: ap, orphans: new(atomic.Int64)}
	}
	s.relClient = releaseClient{s.client}
	s.laterReleases = make(chan struct{}, maxLaterReleases)
	switch opts.SlotCheck {
	case SlotCheckAuto:
		_, s.slots = client.(*redis.ClusterClient)
	case SlotCheckOn:
		s.slots = true
	case SlotCheckOff:
	default:
		return nil, fmt.Errorf("%w: redisstore: unknown SlotCheck %d", floodgate.ErrInvalidPolicy, opts.SlotCheck)
	}
	if s.slots {
		s.inflight = new([SlotCount]atomic.Int32)
	}
	if opts.MaxBatch < 0 || opts.MaxBatch > maxBatch {
		return nil, fmt.Errorf("%w: redisstore: MaxBatch %d out of range 0..%d", floodgate.ErrInvalidPolicy, opts.MaxBatch, maxBatch)
	}
	if opts.MaxInFlight < 0 || opts.MaxInFlight > maxInFlight {
		return nil, fmt.Errorf("%w: redisstore: MaxInFlight %d out of range 0..%d", floodgate.ErrInvalidPolicy, opts.MaxInFlight, maxInFlight)
	}
	if opts.Split > SplitConcurrent {
		return nil, fmt.Errorf("%w: redisstore: unknown Split %d", floodgate.ErrInvalidPolicy, opts.Split)
	}
	s.concurrent = opts.Split == SplitConcurrent
	if opts.StateFormat > TextState {
		return nil, fmt.Errorf("%w: redisstore: unknown StateFormat %d", floodgate.ErrInvalidPolicy, opts.StateFormat)
	}
	s.scripts = scriptSets[opts.StateFormat]
	if opts.MaxBatch == 0 {
		opts.MaxBatch = DefaultMaxBatch
	}
	if opts.MaxInFlight == 0 {
		opts.MaxInFlight = DefaultMaxInFlight
	}
	var coalesce bool
	cc, cluster := client.(*redis.ClusterClient)
	switch opts.Coalesce {
	case CoalesceAuto:
		_, single := client.(*redis.Client)
		coalesce = single && !s.slots
		if cluster && opts.MaxBatch > 1 {
			s.nodes = newNodeRouter(s, cc, opts.MaxBatch, opts.MaxInFlight)
		}
	case CoalesceOn:
		if s.slots {
			return nil, fmt.Errorf("%w: redisstore: CoalesceOn with the slot check on: a coalesced call holds keys of many slots", floodgate.ErrInvalidPolicy)
		}
		coalesce = true
	case CoalesceOff:
	default:
		return nil, fmt.Errorf("%w: redisstore: unknown Coalesce %d", floodgate.ErrInvalidPolicy, opts.Coalesce)
	}
	if coalesce && opts.MaxBatch > 1 {
		s.batch = newBatcher(s, opts.MaxBatch, opts.MaxInFlight)
	}
	s.frames.New = func() any { return newFrame(&s.periods) }
	return s, nil
}

// Usable returns nil for a Store made by New, and an error wrapping
// floodgate.ErrInvalidPolicy for the zero Store, which has no client
// (see algo.UsableChecker).
func (s *Store) Usable() error {
	if s.client == nil {
		return fmt.Errorf("%w: redisstore: a zero Store has no client; make it with redisstore.New", floodgate.ErrInvalidPolicy)
	}
	return nil
}

// Decide implements floodgate.Store: it decides every layer at now (Unix
// microseconds) in one script call (one per Redis Cluster slot when the
// call is split, below; a single layer's own script when there is one) and fills out (len(out) == len(layers)).
// If every layer admits its cost, every consuming layer's state is written;
// otherwise nothing is. Results are per layer, as algo.Step computes
// them; a layer that would have admitted a denied request reports its
// algo.Standing (floodgate.NewDecision then marks it as denied by
// another layer).
//
// When the slot check is on and the keys span several Redis Cluster slots,
// the call is split: one reserve script per slot, each deciding its layers
// and committing them if they all admit; every part's but one are sent
// concurrently, then, if they all admitted, the last: the part whose slot
// has the most split decisions in flight (a global layer's), so that its
// capacity is only ever reserved by requests the other parts admitted. If
// every part admits, that is the decision, in two round trips
// (Options.Split = SplitConcurrent sends every part at once instead: one
// round trip, less admitted under contention). If any part denies, every
// part that committed is released in one more: each
// layer gets back what the reservation still holds (all of it, unless a
// window ended or a bucket's backlog leaked meanwhile), never more, so a
// denied request consumes nothing and no layer over-admits. A reservation
// holds capacity from its reserve to its release. If the caller's context
// has ended before a release is sent (another part timed out, say), the
// release is sent in the background with a context of its own (1 s; the
// caller does not wait for it). If a release fails (Redis is unreachable,
// the caller's context ends while it is in flight), the capacity stays
// taken until the layer recovers by itself (its window ends, its bucket
// refills, its log entry expires) and Decide still returns the denial,
// which is the decision whatever the release did. A release refused
// because its slot is being moved between primaries (TRYAGAIN) is sent
// again at once in a form the node holding the keys runs (see
// Store.release). See docs/layered.md.
//
// Decide validates its input (errors wrap floodgate.ErrNilContext for a
// nil ctx, and otherwise those of floodgate.CheckLayers:
// floodgate.ErrInvalidPolicy, ErrInvalidCost, ErrInvalidKey for an empty
// key, ErrInvalidTime for a time or a quota layer's period out of range,
// ErrInvalidLayers for the number of layers or results, a key used twice
// or a time out of range; nothing is sent then); store failures
// wrap floodgate.ErrStoreUnavailable or floodgate.ErrIndeterminate (see
// Store); a malformed reply, a nil one included, wraps
// floodgate.ErrBadReply.
func (s *Store) Decide(ctx context.Context, now int64, layers []floodgate.Layer, out []floodgate.Result) error {
	if ctx == nil {
		return fmt.Errorf("redisstore: %w", floodgate.ErrNilContext)
	}
	if err := s.check(now, layers, out); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", floodgate.ErrStoreUnavailable, err)
	}
	if s.nodes != nil {
		if sc := s.scripts.coalescable(layers); sc != nil {
			if b := s.nodes.batcherFor(ctx, layers); b != nil {
				return b.decide(ctx, now, sc, layers, out)
			}
		}
	}
	if s.batch != nil {
		if sc := s.scripts.coalescable(layers); sc != nil {
			return s.batch.decide(ctx, now, sc, layers, out)
		}
	}
	return s.decideDirect(ctx, now, layers, out, true)
}

// decideDirect decides layers (checked) without coalescing them: split by
// slot when the slot check is on and their keys span slots, else in one
// script call through the Store's client. Its calls are sent under
// deadline.Bind's context: go-redis waits for a free connection of its
// pool under a call's context, and serve's shared deadline does not end
// when the client goes, so on a stalled Redis (a sliding log decision,
// never coalesced; on a Cluster, a decision whose keys lie on several
// primaries, or one a node's batch returned) the calls of clients that
// went while they waited were sent once connections came free, and
// charged. A call whose caller goes before it is sent now is not sent
// and fails with store unavailable wrapping the caller's error
// (context.Canceled), as the queue's (internal/coalesce); one already
// sent is not undone. A split decision's parts may
// still go through the primaries' queues (node.go) when queues is true;
// a caller that holds a queue's call slot passes false, since a part
// queued behind it could wait for that very slot.
func (s *Store) decideDirect(ctx context.Context, now int64, layers []floodgate.Layer, out []floodgate.Result, queues bool) error {
	if s.slots && len(layers) > 1 {
		var g slotGroups
		if g.split(layers) {
			return s.decideSplit(ctx, now, layers, out, &g, queues)
		}
	}
	ctx, stop, err := s.bind(ctx)
	if err != nil {
		return goneError(err)
	}
	defer stop()
	return s.decideOnce(ctx, now, layers, out)
}

// bind is deadline.Bind for a call through the Store's client, but for
// an AutoPipeliner (apClient): it waits for no connection, and a command
// it has queued runs whatever becomes of the call's context, so a bound
// context only made the caller's departure end the wait, the call then
// failing with context.Canceled, which a fallback does not count
// against Redis, while the command still ran (review16: a stalled
// Redis's breaker stayed closed over 20 callers cancelling early, one at
// a time, and all 20 were charged when it woke). Its calls keep ctx, and
// one whose caller has gone already is not queued.
func (s *Store) bind(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if _, ok := s.client.(apClient); ok {
		if err := deadline.Gone(ctx); err != nil {
			return ctx, func() {}, err
		}
		return ctx, func() {}, nil
	}
	return deadline.Bind(ctx)
}

// goneError is the error of a decision whose caller had gone
// (deadline.Gone) before it was sent: nothing was sent.
func goneError(err error) error {
	return fmt.Errorf("%w: redis: %w (its caller had gone before it was sent)", floodgate.ErrStoreUnavailable, err)
}

// Bounds of Options.MaxBatch and MaxInFlight: a batch's reply and
// arguments stay small, and Redis runs one batch in well under a
// millisecond.
const (
	maxBatch    = 1024
	maxInFlight = 1024
)

// decideOnce decides layers (checked, on one slot) in one script call of
// their own.
func (s *Store) decideOnce(ctx context.Context, now int64, layers []floodgate.Layer, out []floodgate.Result) error {
	f := s.frames.Get().(*frame)
	defer s.frames.Put(f)
	defer f.reset()
	sc := s.scripts.scriptFor(layers)
	if sc != s.scripts.general {
		if sc == s.scripts.layers {
			f.buildLoneLayers(now, layers)
		} else {
			f.buildLone(now, &layers[0])
		}
		reply, err := sc.RunString(ctx, s.client, f.args)
		if err != nil {
			return err
		}
		return decodeLone(reply, layers, out)
	}
	f.build(now, layers, false)
	vals, err := sc.RunInts(ctx, s.client, f.args)
	if err != nil {
		return err
	}
	return decodeInts(vals, layers, out, nil)
}

// maxNow bounds the timestamps Decide accepts (floodgate.MaxTimeMicros):
// 2^52 µs, the year 2112, so every sum the script computes stays below 2^53.
const maxNow = floodgate.MaxTimeMicros

// check validates a call before anything is sent.
func (s *Store) check(now int64, layers []floodgate.Layer, out []floodgate.Result) error {
	return floodgate.CheckLayers(now, layers, out)
}

// frame holds one call's command arguments. Numbers are passed as *int64
// into nums and keys as *string into the caller's layers, which go-redis
// writes without boxing, so building a call allocates nothing.
type frame struct {
	ps     *periods // the Store's (nil: none)
	args   []any
	nums   [2 + (replyWidth+undoWidth)*floodgate.MaxLayers]int64
	marker string // a release's marker key
	// journals are a release's layers' journal keys (journalKey).
	journals [floodgate.MaxLayers]string
	// lone is a lone request's packed numbers (see buildLone), and
	// loneArg, by algorithm, lone cut to that algorithm's length, as a
	// command argument: go-redis writes a []byte as it is, and boxing
	// the slices once per frame keeps building a call free of
	// allocations.
	lone    [1 + 8*6]byte
	loneArg [floodgate.Quota + 1]any
	// layered is a lone layered decision's packed numbers (see
	// buildLoneLayers), and layeredArg, by number of layers n, layered
	// cut to n layers' length, as a command argument.
	layered    [8 + loneLayerSize*floodgate.MaxLayers]byte
	layeredArg [floodgate.MaxLayers + 1]any
}

// newFrame returns a frame for a Store with the quota periods ps.
func newFrame(ps *periods) *frame {
	f := &frame{ps: ps}
	for a, places := range lonePlaces {
		if places != nil {
			f.loneArg[a] = f.lone[:1+8*len(places)]
		}
	}
	for n := range f.layeredArg {
		f.layeredArg[n] = f.layered[:8+loneLayerSize*n]
	}
	return f
}

// lonePlaces are, by algorithm, the places among a request's seven
// numbers (now, then putLayer's six) of those its single-layer script
// reads from a lone request's argument, in order: the names its args
// block lists (assemble.go). Nil for the sliding log, which has no
// single-layer script.
var lonePlaces = func() (p [floodgate.Quota + 1][]int) {
	for _, f := range fragments {
		for _, a := range f.args {
			p[f.algo] = append(p[f.algo], argPlace[a])
		}
	}
	return p
}()

// buildLone fills f for a lone request of l (checked, of an algorithm
// with a single-layer script) at now: EVALSHA sha 1 key packed, packed
// being the algorithm as a byte, then each number the script reads
// (lonePlaces) as a little-endian double. Every such number is an
// integer below 2^53 (check), which a double holds exactly.
func (f *frame) buildLone(now int64, l *floodgate.Layer) {
	a := l.Policy.Algorithm
	packRequest(f.lone[:0], f.ps, now, l)
	f.args = append(f.args[:0], nil, nil, argNumKeys[1], &l.Key, f.loneArg[a])
}

// loneLayerSize is the length in bytes of one layer's numbers in a lone
// layered decision's argument: the algorithm as a byte, then limit,
// window, burst, max delay and cost, each a little-endian double.
const loneLayerSize = 1 + 8*5

// buildLoneLayers fills f for a lone decision of layers (checked, two or
// more, none a sliding log) with the layered script at now (see
// lua/fast_layers.lua): EVALSHA sha n key... packed, packed being now as
// a little-endian double, then per layer its algorithm as a byte and
// putLayer's five other numbers as little-endian doubles (8 + 41n bytes,
// read with one struct.unpack). Every such number is an integer below
// 2^53 (check), which a double holds exactly.
func (f *frame) buildLoneLayers(now int64, layers []floodgate.Layer) {
	n := len(layers)
	f.args = append(f.args[:0], nil, nil, argNumKeys[n])
	for i := range layers {
		f.args = append(f.args, &layers[i].Key)
	}
	b := binary.LittleEndian.AppendUint64(f.layered[:0], math.Float64bits(float64(now)))
	for i := range layers {
		var v [6]int64
		f.ps.putLayer(v[:], now, &layers[i])
		b = append(b, byte(v[0]))
		for _, x := range v[1:] {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(x)))
		}
	}
	f.args = append(f.args, f.layeredArg[n])
}

// packRequest appends to dst the record of a request of l (checked, of
// an algorithm with a single-layer script) at now, as a lone request's
// argument and a packed batch's records hold it: the algorithm as a
// byte, then each number the script reads (lonePlaces) as a
// little-endian double. Every such number is an integer below 2^53
// (check), which a double holds exactly. ps are the Store's quota
// periods (nil: none).
func packRequest(dst []byte, ps *periods, now int64, l *floodgate.Layer) []byte {
	var v [7]int64
	v[0] = now
	ps.putLayer(v[1:], now, l)
	a := l.Policy.Algorithm
	dst = append(dst, byte(a))
	for _, p := range lonePlaces[a] {
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(float64(v[p])))
	}
	return dst
}

// build fills f for a call: EVALSHA sha numkeys key... now (algorithm limit
// window burst maxdelay cost)..., leaving f.args[0] and f.args[1] (the
// command and the script) to script.RunCommand; counted puts the number of
// layers before now, as the layered script's decimal layout has it (a
// lone decision goes to that script packed, buildLoneLayers; the tests
// compare the two).
func (f *frame) build(now int64, layers []floodgate.Layer, counted bool) {
	n := len(layers)
	f.args = append(f.args[:0], nil, nil, argNumKeys[n])
	for i := range layers {
		f.args = append(f.args, &layers[i].Key)
	}
	if counted {
		f.args = append(f.args, argNumKeys[n]) // the layered script's n, before now
	}
	f.nums[0] = now
	f.args = append(f.args, &f.nums[0])
	for i := range layers {
		v := f.nums[1+6*i : 7+6*i]
		f.ps.putLayer(v, now, &layers[i])
		for j := range v {
			f.args = append(f.args, &v[j])
		}
	}
}

// buildRelease fills f for a release of layers (each with the three numbers
// its reservation replied): EVALSHA sha numkeys key... marker journal...
// "release" now markerPX (algorithm limit window burst maxdelay cost u1 u2
// u3)...; with an empty marker, a bare release (see Store.release):
// EVALSHA sha numkeys key... [journal...] "bare" now markerPX ..., with the
// journals when journals is set, a layer that keeps none (not a bucket)
// named by its own key there, so that every key named exists.
func (f *frame) buildRelease(now int64, layers []floodgate.Layer, undo [][undoWidth]int64, marker string, journals bool, markerPX int64) {
	n := len(layers)
	f.marker = marker
	mode, k := argRelease, 2*n+1
	if marker == "" {
		mode, k = argBare, n
		if journals {
			k = 2 * n
		}
	}
	f.args = append(f.args[:0], nil, nil, argNumKeys[k])
	for i := range layers {
		f.args = append(f.args, &layers[i].Key)
	}
	if marker != "" {
		f.args = append(f.args, &f.marker)
	}
	if marker != "" || journals {
		for i := range layers {
			f.journals[i] = journalKey(layers[i].Key)
			if marker == "" && !keepsJournal(layers[i].Policy.Algorithm) {
				f.journals[i] = layers[i].Key
			}
			f.args = append(f.args, &f.journals[i])
		}
	}
	f.nums[0], f.nums[1] = now, markerPX
	f.args = append(f.args, mode, &f.nums[0], &f.nums[1])
	for i := range layers {
		v := f.nums[2+9*i : 11+9*i]
		f.ps.putLayer(v[:6], now, &layers[i])
		v[6], v[7], v[8] = undo[i][0], undo[i][1], undo[i][2]
		for j := range v {
			f.args = append(f.args, &v[j])
		}
	}
}

// periods remembers the quota period of the last quota layer sent: every
// decision of a quota policy inside one period sends the same bounds, and
// working them out from the calendar (time zone, civil date) costs more
// than the rest of a layer's arguments. It is safe for concurrent use.
type periods struct {
	last atomic.Pointer[period]
}

// period is one calendar's period, [start, end) in Unix µs.
type period struct {
	cal        floodgate.Calendar
	start, end int64
}

// bounds returns the start and end (Unix µs) of the period of c containing
// now, as floodgate.Calendar.BoundsMicros: the remembered period when now
// falls inside it (a calendar's periods partition time, so it is the one
// containing now). A nil ps remembers nothing.
func (ps *periods) bounds(c floodgate.Calendar, now int64) (start, end int64) {
	if ps == nil {
		return c.BoundsMicros(now)
	}
	if p := ps.last.Load(); p != nil && p.cal == c && p.start <= now && now < p.end {
		return p.start, p.end
	}
	p := &period{cal: c}
	p.start, p.end = c.BoundsMicros(now)
	ps.last.Store(p)
	return p.start, p.end
}

// putLayer writes a layer's six script arguments into v, with the
// quota periods of ps (nil: none remembered).
func (ps *periods) putLayer(v []int64, now int64, l *floodgate.Layer) {
	p := &l.Policy
	v[0] = int64(p.Algorithm)
	v[1] = p.Limit
	v[2] = p.Window.Microseconds()
	v[3] = p.Burst
	v[4] = p.MaxDelay.Microseconds()
	v[5] = l.Cost
	if p.Algorithm == floodgate.Quota {
		// The calendar lives in Go: send the period's bounds.
		v[2], v[3] = ps.bounds(p.Calendar, now)
	}
}

// reset drops f's references to the caller's keys before f is reused.
func (f *frame) reset() {
	clear(f.args)
	f.args = f.args[:0]
	f.marker = ""
	clear(f.journals[:])
}
