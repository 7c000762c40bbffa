package quota

import (
	"container/heap"
	"fmt"
)

// opKind is a quota operation.
type opKind uint8

const (
	opCheck opKind = iota + 1
	opReserve
	opSettle
	opRestore
)

func (o opKind) String() string {
	switch o {
	case opCheck:
		return "check"
	case opReserve:
		return "reserve"
	case opSettle:
		return "settle"
	case opRestore:
		return "restore"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// code is the operation's name in the Lua script's ARGV.
func (o opKind) code() string {
	switch o {
	case opCheck:
		return "c"
	case opReserve:
		return "r"
	case opSettle:
		return "s"
	}
	return "x"
}

// keySet names the storage of one identity in one period. All four keys
// share the identity's hash tag.
type keySet struct {
	usage   string // hash: used, held, h:<id> hold estimates, s:<id> outcomes
	holds   string // sorted set: request id -> hold expiry (Unix µs)
	settled string // sorted set: request id -> outcome expiry (Unix µs)
	marker  string // string "1", outliving usage
}

func newKeySet(base string) keySet {
	return keySet{usage: base + ":u", holds: base + ":h", settled: base + ":s", marker: base + ":k"}
}

// request is one operation as the stores receive it. Times are Unix
// microseconds of the caller's clock, durations microseconds.
type request struct {
	op                     opKind
	now                    int64
	limit                  int64
	amount                 int64 // cost, estimate, actual, or used for restore
	id                     string
	hold, keep             int64 // hold TTL, settled-outcome TTL
	expireAt, prevExpireAt int64 // when the period's (previous period's) usage expires
	markerAt               int64 // when the current period's marker expires
	maxPending, maxSettled int64
	cur                    keySet
	prev                   keySet // settle and reserve only
}

// status is the first element of a store's reply.
type status int64

const (
	stAllowed status = iota
	stDenied
	stTooLarge
	stTooManyPending
	stReplayed
	stLost
	stSettledID
	stLast = stSettledID
)

// reply is what a store computed.
type reply struct {
	status            status
	used, held        int64
	charged, refunded int64
	unmatched         bool
	inPrev            bool  // the operation applied to the previous period
	hint              int64 // earliest hold expiry (Unix µs) when holds block a denial
}

// outcome is a remembered settlement.
type outcome struct {
	used, held, charged, refunded int64
	unmatched                     bool
}

// ledger is one identity's state in one period, the in-memory form of the
// keys in a keySet: usage fields, holds and settlement records.
type ledger struct {
	used, held int64
	holds      expiring[int64]
	settled    expiring[outcome]
}

func newLedger() *ledger {
	return &ledger{holds: newExpiring[int64](), settled: newExpiring[outcome]()}
}

// trim removes up to maxTrim expired holds, giving their estimates back,
// and up to maxTrim expired settlement records. It reports whether it
// removed anything.
func (l *ledger) trim(now int64) bool {
	changed := false
	for range maxTrim {
		_, amt, ok := l.holds.popExpired(now)
		if !ok {
			break
		}
		l.held -= amt
		changed = true
	}
	for range maxTrim {
		if _, _, ok := l.settled.popExpired(now); !ok {
			break
		}
		changed = true
	}
	return changed
}

// earliestHold returns the expiry of the oldest live hold, or 0.
func (l *ledger) earliestHold() int64 {
	if _, at, ok := l.holds.first(); ok {
		return at
	}
	return 0
}

// step applies req to the current period's ledger cur (nil when missing;
// markerLive says whether its marker exists) and, for settle, the previous
// period's ledger prev (nil when missing). It mutates the ledgers in place
// and returns the ledger to store as current (cur, or a new one),
// whether the current and previous ledgers were written, and the reply.
// redis/quota.lua is the same function in Lua; keep them in step.
func step(req *request, cur *ledger, markerLive bool, prev *ledger) (_ *ledger, curDirty, prevDirty bool, rep reply) {
	now := req.now
	exists := cur != nil
	if !exists {
		if req.op != opRestore && markerLive {
			return nil, false, false, reply{status: stLost}
		}
		cur = newLedger()
	} else {
		curDirty = cur.trim(now)
	}
	denyHint := func(need int64) {
		if cur.used+need <= req.limit {
			rep.hint = cur.earliestHold()
		}
	}
	switch req.op {
	case opCheck:
		switch {
		case req.amount > req.limit:
			rep.status = stTooLarge
		case req.amount == 0:
			if cur.used+cur.held >= req.limit {
				rep.status = stDenied
				denyHint(1)
			}
		case cur.used+cur.held+req.amount <= req.limit:
			cur.used += req.amount
			rep.charged = req.amount
			curDirty = true
		default:
			rep.status = stDenied
			denyHint(req.amount)
		}
	case opReserve:
		if _, ok := cur.settled.get(req.id); ok {
			rep.status = stSettledID
			break
		}
		held, at, ok := cur.holds.lookup(req.id)
		if ok && at <= now { // expired, not trimmed yet
			cur.holds.remove(req.id)
			cur.held -= held
			curDirty, ok = true, false
		}
		if !ok && prev != nil && reservedBefore(req, prev, &rep) {
			break
		}
		switch {
		case ok:
			rep.status = stReplayed
		case req.amount > req.limit:
			rep.status = stTooLarge
		case int64(cur.holds.len()) >= req.maxPending:
			rep.status = stTooManyPending
			rep.hint = cur.earliestHold()
		case cur.used+cur.held+req.amount <= req.limit:
			cur.held += req.amount
			cur.holds.add(req.id, req.amount, now+req.hold)
			curDirty = true
		default:
			rep.status = stDenied
			denyHint(req.amount)
		}
	case opSettle:
		prevDirty = settle(req, cur, prev, &curDirty, &rep)
	case opRestore:
		cur.used = req.amount
		curDirty = true
	}
	if req.op != opSettle && !rep.inPrev {
		rep.used, rep.held = cur.used, cur.held
	}
	return cur, curDirty, prevDirty, rep
}

// settle is step's settle branch. It reports whether prev was written.
// reservedBefore handles a reserve of an id the previous period knows: one
// settled there is refused (stSettledID), one still held there is
// replayed with that period's standing. A retry of a reserve, or of the
// whole reserve-and-settle, that crosses the period boundary must neither
// hold the estimate again nor charge the work twice. It reports whether
// the previous period answered.
func reservedBefore(req *request, prev *ledger, rep *reply) bool {
	if _, ok := prev.settled.get(req.id); ok {
		rep.status, rep.inPrev = stSettledID, true
		return true
	}
	if _, at, ok := prev.holds.lookup(req.id); ok && at > req.now {
		rep.status, rep.inPrev = stReplayed, true
		rep.used, rep.held = prev.used, prev.held
		return true
	}
	return false
}

func settle(req *request, cur, prev *ledger, curDirty *bool, rep *reply) bool {
	now := req.now
	target := cur
	if o, ok := cur.settled.get(req.id); ok {
		replay(rep, o)
		return false
	}
	est, at, held := cur.holds.lookup(req.id)
	if held {
		cur.holds.remove(req.id)
		cur.held -= est
		*curDirty = true
		held = at > now // an expired hold no longer covers the cost
	} else if prev != nil {
		if o, ok := prev.settled.get(req.id); ok {
			replay(rep, o)
			rep.inPrev = true
			return false
		}
		if pest, pat, ok := prev.holds.lookup(req.id); ok && pat > now {
			target, est, held = prev, pest, true
			prev.holds.remove(req.id)
			prev.held -= est
			rep.inPrev = true
		}
	}
	before := target.used
	target.used = min(target.used+req.amount, MaxUsed)
	rep.charged = target.used - before
	if held {
		rep.refunded = max(est-req.amount, 0)
	} else {
		rep.unmatched = true
	}
	target.settled.add(req.id, outcome{
		used: target.used, held: target.held, charged: rep.charged,
		refunded: rep.refunded, unmatched: rep.unmatched,
	}, now+req.keep)
	if int64(target.settled.len()) > req.maxSettled {
		target.settled.popFirst()
	}
	rep.used, rep.held = target.used, target.held
	if target == cur {
		*curDirty = true
		return false
	}
	return true
}

func replay(rep *reply, o outcome) {
	rep.status = stReplayed
	rep.used, rep.held = o.used, o.held
	rep.charged, rep.refunded, rep.unmatched = o.charged, o.refunded, o.unmatched
}

// expiring is a map of ids to values with expiry times, ordered like a
// Redis sorted set: by expiry, then by id bytes. Removed entries leave
// stale heap items behind, skipped by their sequence number and compacted
// away when they dominate.
type expiring[V any] struct {
	vals map[string]expItem[V]
	h    expHeap
	seq  uint64
}

type expItem[V any] struct {
	v   V
	at  int64
	seq uint64
}

func newExpiring[V any]() expiring[V] { return expiring[V]{vals: make(map[string]expItem[V])} }

func (e *expiring[V]) len() int { return len(e.vals) }

func (e *expiring[V]) get(id string) (V, bool) {
	it, ok := e.vals[id]
	return it.v, ok
}

func (e *expiring[V]) lookup(id string) (V, int64, bool) {
	it, ok := e.vals[id]
	return it.v, it.at, ok
}

// add inserts id, which must not be present.
func (e *expiring[V]) add(id string, v V, at int64) {
	e.seq++
	e.vals[id] = expItem[V]{v: v, at: at, seq: e.seq}
	heap.Push(&e.h, heapItem{at: at, id: id, seq: e.seq})
}

func (e *expiring[V]) remove(id string) {
	delete(e.vals, id)
	if len(e.h) > 2*len(e.vals)+32 {
		e.compact()
	}
}

// first returns the entry that sorts first, skipping stale heap items.
func (e *expiring[V]) first() (string, int64, bool) {
	for len(e.h) > 0 {
		top := e.h[0]
		if it, ok := e.vals[top.id]; ok && it.seq == top.seq {
			return top.id, top.at, true
		}
		heap.Pop(&e.h)
	}
	return "", 0, false
}

// popFirst removes the entry that sorts first.
func (e *expiring[V]) popFirst() {
	if id, _, ok := e.first(); ok {
		heap.Pop(&e.h)
		delete(e.vals, id)
	}
}

// popExpired removes and returns the first entry if it expired at now.
func (e *expiring[V]) popExpired(now int64) (string, V, bool) {
	id, at, ok := e.first()
	if !ok || at > now {
		var zero V
		return "", zero, false
	}
	v := e.vals[id].v
	heap.Pop(&e.h)
	delete(e.vals, id)
	return id, v, true
}

func (e *expiring[V]) compact() {
	h := make(expHeap, 0, len(e.vals))
	for id, it := range e.vals {
		h = append(h, heapItem{at: it.at, id: id, seq: it.seq})
	}
	heap.Init(&h)
	e.h = h
}

type heapItem struct {
	at  int64
	id  string
	seq uint64
}

// expHeap is a min-heap in Redis sorted-set order.
type expHeap []heapItem

func (h expHeap) Len() int { return len(h) }
func (h expHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].id < h[j].id
}
func (h expHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *expHeap) Push(x any)   { *h = append(*h, x.(heapItem)) }
func (h *expHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}
