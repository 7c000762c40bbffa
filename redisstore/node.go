package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/luascript"
	"github.com/redis/go-redis/v9"
)

// Coalescing on Redis Cluster. A coalesced call holds the keys of many
// identities, so on a cluster it can only go to a node that holds them
// all. On a *redis.ClusterClient the Store therefore keeps one batcher per
// primary: a decision whose keys all belong, by the client's current slot
// map, to one primary joins that primary's queue, and its batches are sent
// to that primary's own client. Decisions whose keys lie on several
// primaries are not coalesced (they are split by slot, see Store.Decide).
//
// Redis 7 refuses a call whose declared keys span slots (CROSSSLOT), even
// from a script that declares the allow-cross-slot-keys flag: the flag
// only lets the script reach keys it did not declare. So a node's batches
// run node variants of the flat scripts (nodeSource): the same scripts
// with that flag, called with no declared key and the keys as the first
// arguments. Inside the script, every read and write of a key is checked
// by the node: a key of a slot it does not serve, or of a slot it is
// migrating away when the key is not (or no longer) there, fails with
// "Script attempted to access a non local key in a cluster node" (and a
// node that lost its quorum answers "the cluster is down"). The flat scripts read every
// key of a request (or decision) before they write any of it, with
// redis.pcall, and a request whose read fails is skipped with the code -1
// and nothing written for it, while the others go on (batch.go); the
// writes that follow can only touch keys already read, which a script,
// running atomically, finds where it read them. So a batch sent on a stale
// slot map never half-applies a decision: each decision is either decided
// on this node, atomically, or not at all. The decisions that come back
// with -1 are decided again, one by one, through the cluster client
// (Store.decideDirect), which follows MOVED and ASK and refreshes its slot
// map; a key holding a value floodgate did not write also comes back with
// -1 and gets, from that second call, the error it would have had alone.
// A whole call refused with an error reply (a failed-over primary's
// READONLY, LOADING, OOM...) ran nothing either: its decisions are decided
// again in the same way. Only a failure after the call may have reached
// the node (a timeout, a broken connection) is reported as
// floodgate.ErrIndeterminate, as for any call.
//
// A lone decision (the batcher sends one at once when its node is idle)
// goes through the cluster client when its keys share a slot, as without
// coalescing. A layered decision whose keys lie in several slots of one
// primary is decided there by one call of the layered script's node
// variant: atomic, all-or-nothing, in one round trip, without the
// reservations and releases of a split decision; if the node refuses it,
// nothing ran, and it is decided through the split path instead.

// nodeRouter keeps a Store's per-primary batchers on a Redis Cluster.
type nodeRouter struct {
	s           *Store
	cc          *redis.ClusterClient
	maxBatch    int
	maxInFlight int

	mu sync.RWMutex
	by map[*redis.Client]*batcher

	// rerouted counts decisions a node's batch returned undecided (a key
	// not on that node) and that were decided again through the cluster
	// client.
	rerouted atomic.Int64
	// off is set when a primary cannot compile the node variants (a Redis
	// before 7.0 reads the flags line as Lua): the Store then stops
	// coalescing per primary, as with CoalesceOff.
	off atomic.Bool
}

func newNodeRouter(s *Store, cc *redis.ClusterClient, maxBatch, maxInFlight int) *nodeRouter {
	return &nodeRouter{s: s, cc: cc, maxBatch: maxBatch, maxInFlight: maxInFlight, by: map[*redis.Client]*batcher{}}
}

// batcherFor returns the batcher of the primary that holds every key of
// layers by the client's slot map, or nil when they lie on several
// primaries or the map cannot be had.
func (r *nodeRouter) batcherFor(ctx context.Context, layers []floodgate.Layer) *batcher {
	if r.off.Load() {
		return nil
	}
	var node *redis.Client
	last := -1
	for i := range layers {
		sl := Slot(layers[i].Key)
		if sl == last {
			continue
		}
		last = sl
		c, err := r.cc.MasterForKey(ctx, layers[i].Key)
		if err != nil {
			return nil
		}
		if node == nil {
			node = c
		} else if c != node {
			return nil
		}
	}
	r.mu.RLock()
	b := r.by[node]
	r.mu.RUnlock()
	if b != nil {
		return b
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if b = r.by[node]; b == nil {
		b = newBatcher(r.s, r.maxBatch, r.maxInFlight)
		b.client, b.node = node, true
		r.by[node] = b
	}
	return b
}

// nodeFlags is the first line of the node variants: Redis 7's script
// flags, letting the script reach undeclared keys of several slots that
// its node serves.
const nodeFlags = "#!lua flags=allow-cross-slot-keys\n"

// nodeKeysLine is the line of the flat scripts that the node variants
// replace with nodePrelude.
const nodeKeysLine = "local KEYS, ARGV = KEYS, ARGV\n"

// nodePrelude rebuilds KEYS and ARGV from a call that declares no key:
// ARGV[1] is the number of keys n, ARGV[2..n+1] the keys, the rest the
// script's arguments. A bad n leaves KEYS empty, which the script's shape
// check refuses.
const nodePrelude = `-- node variant (redisstore/node.go): the call declares no key; ARGV[1]
-- is the number of keys, then come the keys, then the arguments.
local CALL = ARGV
local KEYS, ARGV = {}, {}
do
  local n = tonumber(CALL[1])
  if n and n >= 1 and n % 1 == 0 and n + 1 <= #CALL then
    for i = 1, n do
      KEYS[i] = CALL[i + 1]
    end
    for i = n + 2, #CALL do
      ARGV[i - n - 1] = CALL[i]
    end
  end
end
`

// nodeSource returns the node variant of a flat script's source. A source
// without the line it replaces is a programming error caught by every test
// of the package: it panics at init.
func nodeSource(src string) string {
	if strings.Count(src, nodeKeysLine) != 1 {
		panic("redisstore: a flat script without its KEYS, ARGV line")
	}
	return nodeFlags + strings.Replace(src, nodeKeysLine, nodePrelude, 1)
}

// nodeScripts maps each flat script (the single-layer scripts and the
// layered script) to its node variant. It is immutable.
var nodeScripts = func() map[*luascript.Script]*luascript.Script {
	m := map[*luascript.Script]*luascript.Script{}
	for _, ss := range scriptSets {
		for _, sc := range ss.fast {
			if sc != nil {
				m[sc] = luascript.New(nodeSource(sc.Source()), luascript.Options{})
			}
		}
		m[ss.layers] = luascript.New(nodeSource(ss.layers.Source()), luascript.Options{})
	}
	return m
}()

// argZero is the numkeys of a node variant's call.
var argZero any = "0"

// asNodeCall turns a flat script's command line (command, script, numkeys,
// keys, arguments) into its node variant's (command, script, 0, numkeys,
// keys, arguments).
func asNodeCall(args []any) []any {
	args = append(args, nil)
	copy(args[3:], args[2:])
	args[2] = argZero
	return args
}

// oneSlot reports whether every key of layers hashes to one slot.
func oneSlot(layers []floodgate.Layer) bool {
	sl := Slot(layers[0].Key)
	for i := 1; i < len(layers); i++ {
		if Slot(layers[i].Key) != sl {
			return false
		}
	}
	return true
}

// decideOnNode decides layers (checked, coalescable, every key on node by
// the slot map) alone: through the cluster client when they share a slot;
// otherwise by one call of the layered script's node variant on node
// (its lone layout, packed: see buildLoneLayers), and, if the node refuses that call (an error reply: nothing ran, for
// example a key it does not serve), through the split path.
func (s *Store) decideOnNode(ctx context.Context, node luascript.Client, now int64, layers []floodgate.Layer, out []floodgate.Result) error {
	if len(layers) == 1 || oneSlot(layers) {
		return s.decideOnce(ctx, now, layers, out)
	}
	f := s.frames.Get().(*frame)
	f.buildLoneLayers(now, layers)
	f.args = asNodeCall(f.args)
	reply, err := nodeScripts[s.scripts.layers].RunString(ctx, node, f.args)
	f.reset()
	s.frames.Put(f)
	if err != nil {
		if refused(err) {
			if s.nodes != nil {
				s.nodes.noteRefusal(err)
				s.nodes.rerouted.Add(1)
			}
			// This runs in a call slot of node's queue: a split part
			// queued there could wait for the slot held here, so the
			// split sends its parts itself.
			return s.decideDirect(ctx, now, layers, out, false)
		}
		return err
	}
	return decodeLone(reply, layers, out)
}

// refused reports whether err is an error reply from Redis: the call was
// refused, so nothing ran.
func refused(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && !errors.Is(err, floodgate.ErrIndeterminate)
}

// noteRefusal turns per-primary coalescing off when err says the primary
// could not compile a node variant (Redis 6 has no script flags).
func (r *nodeRouter) noteRefusal(err error) {
	if strings.Contains(err.Error(), "compiling script") {
		r.off.Store(true)
	}
}

// decideLast decides the last part of a split decision through its
// primary's batcher, when the Store coalesces per primary and the part can
// be coalesced, and reports whether it did. The last part is reserved
// only once every other part admitted, and it is never released (if it
// denies, the others are), so it needs no reservation's bookkeeping: it is
// decided like any decision on its keys, all of its layers or none, and
// coalesced with the other decisions bound for its primary — typically the
// shared layer of many concurrent split decisions, read and written once
// per call.
func (s *Store) decideLast(ctx context.Context, now int64, p *part) bool {
	if s.nodes == nil {
		return false
	}
	sc := s.scripts.coalescable(p.layers)
	if sc == nil {
		return false
	}
	b := s.nodes.batcherFor(ctx, p.layers)
	if b == nil {
		return false
	}
	if len(p.out) != len(p.layers) {
		p.out = make([]floodgate.Result, len(p.layers))
	}
	p.sent = true
	if err := b.decide(ctx, now, sc, p.layers, p.out); err != nil {
		p.err = fmt.Errorf("slot %d: %w", p.slot, err)
		return true
	}
	if allAllowed(p.out) {
		for _, l := range p.layers {
			if l.Cost > 0 {
				p.held = true
				break
			}
		}
	}
	return true
}

// reserveOnNode reserves p (a part of a split decision that may have to be
// released) through its primary's batcher, when the Store coalesces per
// primary and every layer of p is a fixed window, a sliding window or a
// quota, and reports whether it did. A reservation is a decision that
// writes only if all its layers admit, plus, per layer, what a release
// needs; for these algorithms that is only the start of the window (or
// period) the request was counted in, u1, which the flat scripts' reply
// gives as well: a fixed window resets at u1 + window, a sliding window
// that holds a request at u1 + 2 × window, and a quota's period start is
// computed here, from the calendar, as for the call. Buckets keep the
// general script's reserve: their release needs the bookkeeping that only a
// reservation starts.
func (s *Store) reserveOnNode(ctx context.Context, now int64, p *part) bool {
	if s.nodes == nil {
		return false
	}
	for i := range p.layers {
		switch p.layers[i].Policy.Algorithm {
		case floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.Quota:
		default:
			return false
		}
	}
	sc := s.scripts.coalescable(p.layers)
	b := s.nodes.batcherFor(ctx, p.layers)
	if sc == nil || b == nil {
		return false
	}
	if len(p.out) != len(p.layers) || len(p.undo) != len(p.layers) {
		p.out = make([]floodgate.Result, len(p.layers))
		p.undo = make([][undoWidth]int64, len(p.layers))
	}
	p.sent = true
	if err := b.decide(ctx, now, sc, p.layers, p.out); err != nil {
		p.err = fmt.Errorf("slot %d: %w", p.slot, err)
		return true
	}
	if !allAllowed(p.out) {
		return true
	}
	for i := range p.layers {
		l := &p.layers[i]
		w := l.Policy.Window.Microseconds()
		var start int64
		switch l.Policy.Algorithm {
		case floodgate.FixedWindow:
			start = p.out[i].ResetAt.UnixMicro() - w
		case floodgate.SlidingWindow:
			start = p.out[i].ResetAt.UnixMicro() - 2*w
		case floodgate.Quota:
			start, _, _ = algo.QuotaPeriod(l.Policy, now)
		}
		p.undo[i] = [undoWidth]int64{start, 0, 0}
		if l.Cost > 0 {
			p.held = true
		}
	}
	return true
}
