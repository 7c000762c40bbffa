package quota

import (
	"fmt"

	"github.com/floodgate-rl/floodgate/internal/zset"
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
	// prevGuard says, for a settle, that the previous period's usage
	// cannot have expired yet (now is before that period's end plus
	// Grace): missing while its marker remains, it was lost.
	prevGuard bool
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

// wroteNothing reports whether an operation answered s wrote nothing but
// what expired (a denial: exhausted, cost above the limit, too many
// pending), so that a failover losing its writes changes nothing its
// caller was told. A replay, an id already settled and lost state write
// nothing either, but they report an earlier write, or its absence, that
// the replicas' confirmation of this operation does not cover (WAIT
// counts what the connection it runs on wrote, and an operation that
// writes nothing advances that by nothing): they are not among them.
func (s status) wroteNothing() bool {
	return s == stDenied || s == stTooLarge || s == stTooManyPending
}

// reply is what a store computed.
type reply struct {
	status            status
	used, held        int64
	charged, refunded int64
	unmatched         bool
	inPrev            bool  // the operation applied to the previous period
	hint              int64 // when enough holds expire for a denied request to fit (Unix µs), or 0
	// before is, for a restore, the usage it replaced: 0 when the period
	// had none, beforeLost when its usage was lost (the marker remained).
	before int64
	// applied marks the reply that comes with an error: that of an
	// operation the primary applied but its replicas did not confirm
	// (replicawait.ErrNotReplicated).
	applied bool
}

// beforeLost is reply.before for a restore that found the usage lost.
const beforeLost = -1

// outcome is a remembered settlement.
type outcome struct {
	used, held, charged, refunded int64
	unmatched                     bool
}

// ledger is one identity's state in one period, the in-memory form of the
// keys in a keySet: usage fields, holds (request id → estimate) and
// settlement records (request id → outcome), each ordered by expiry like
// the sorted sets of the Redis form. A new ledger allocates nothing
// beyond itself (80 bytes) until it holds something.
type ledger struct {
	used, held int64
	holds      zset.Set[int64]
	settled    zset.Set[outcome]
}

// records returns how many holds and settlement records l keeps: what the
// memory store counts against MemoryOptions.MaxRecords.
func (l *ledger) records() int { return l.holds.Len() + l.settled.Len() }

// trim removes up to maxTrim expired holds, giving their estimates back,
// and up to maxTrim expired settlement records. It reports whether it
// removed anything.
func (l *ledger) trim(now int64) bool {
	changed := false
	for range maxTrim {
		_, amt, ok := l.holds.PopExpired(now)
		if !ok {
			break
		}
		l.held -= amt
		changed = true
	}
	for range maxTrim {
		if _, _, ok := l.settled.PopExpired(now); !ok {
			break
		}
		changed = true
	}
	return changed
}

// fitsAt returns when enough of l's holds will have expired for need
// more units to fit under limit: walking the holds in expiry order, the
// expiry of the first one at which the estimates given back reach what
// used, held and need exceed the limit by (the first hold's when they
// exceed it by nothing, as for a reserve refused for too many pending).
// It returns 0 when they never will (used and need alone exceed the
// limit) and, when the first maxWalk holds do not free enough, the last
// one's expiry: it cannot fit sooner. quota.lua's fits_at is the same
// walk.
func (l *ledger) fitsAt(limit, need int64) int64 {
	if l.used+need > limit {
		return 0
	}
	over := l.used + l.held + need - limit
	var freed, last int64
	walked := 0
	for est, at := range l.holds.Ascending() {
		freed += est
		if last = at; freed >= over {
			break
		}
		if walked++; walked == maxWalk {
			break
		}
	}
	return last
}

// pendingAt returns when enough of l's holds will have expired for one
// more to fit under maxPending: the expiry of the hold, in expiry order,
// whose going leaves maxPending-1, or of the maxWalk-th when more must go
// (it cannot fit sooner). quota.lua's too-many-pending hint is the same.
func (l *ledger) pendingAt(maxPending int64) int64 {
	k := min(int64(l.holds.Len())-maxPending, maxWalk-1)
	var i int64
	for _, at := range l.holds.Ascending() {
		if i == k {
			return at
		}
		i++
	}
	return 0
}

// step applies req to the current period's ledger cur (nil when missing;
// markerLive says whether its marker exists) and, for settle, the previous
// period's ledger prev (nil when missing; prevMarkerLive says whether its
// marker exists). It mutates the ledgers in place
// and returns the ledger to store as current (cur, or a new one),
// whether the current and previous ledgers were written, and the reply.
// redis/quota.lua is the same function in Lua; keep them in step.
func step(req *request, cur *ledger, markerLive bool, prev *ledger, prevMarkerLive bool) (_ *ledger, curDirty, prevDirty bool, rep reply) {
	now := req.now
	exists := cur != nil
	if !exists {
		if req.op != opRestore && markerLive {
			return nil, false, false, reply{status: stLost}
		}
		cur = new(ledger)
	} else {
		curDirty = cur.trim(now)
	}
	denyHint := func(need int64) {
		rep.hint = cur.fitsAt(req.limit, need)
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
		if cur.settled.Has(req.id) {
			rep.status = stSettledID
			break
		}
		held, at, ok := cur.holds.Get(req.id)
		if ok && at <= now { // expired, not trimmed yet
			cur.holds.Remove(req.id)
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
		case int64(cur.holds.Len()) >= req.maxPending:
			rep.status = stTooManyPending
			rep.hint = cur.fitsAt(req.limit, req.amount)
			if rep.hint > 0 {
				rep.hint = max(rep.hint, cur.pendingAt(req.maxPending))
			}
		case cur.used+cur.held+req.amount <= req.limit:
			cur.held += req.amount
			cur.holds.Add(req.id, req.amount, now+req.hold)
			curDirty = true
		default:
			rep.status = stDenied
			denyHint(req.amount)
		}
	case opSettle:
		prevDirty = settle(req, cur, prev, prevMarkerLive, &curDirty, &rep)
	case opRestore:
		switch {
		case exists:
			rep.before = cur.used
		case markerLive:
			rep.before = beforeLost
		}
		cur.used = req.amount
		curDirty = true
	}
	if req.op != opSettle && !rep.inPrev {
		rep.used, rep.held = cur.used, cur.held
	}
	return cur, curDirty, prevDirty, rep
}

// addsRecord reports whether step may add a hold or a settlement outcome
// for req, given the current and previous periods' ledgers (nil when
// missing): for a reserve or settle of an id that neither knows, as
// step's branches below decide. A reserve of an id whose hold expired
// replaces it; a settle of a held id turns the hold into an outcome; a
// replay adds nothing.
func addsRecord(req *request, cur, prev *ledger) bool {
	if req.op != opReserve && req.op != opSettle {
		return false
	}
	if cur != nil && (cur.holds.Has(req.id) || cur.settled.Has(req.id)) {
		return false
	}
	if prev != nil {
		if prev.settled.Has(req.id) {
			return false
		}
		if _, at, ok := prev.holds.Get(req.id); ok && at > req.now {
			return false
		}
	}
	return true
}

// reservedBefore handles a reserve of an id the previous period knows: one
// settled there is refused (stSettledID), one still held there is
// replayed with that period's standing. A retry of a reserve, or of the
// whole reserve-and-settle, that crosses the period boundary must neither
// hold the estimate again nor charge the work twice. It reports whether
// the previous period answered.
func reservedBefore(req *request, prev *ledger, rep *reply) bool {
	if prev.settled.Has(req.id) {
		rep.status, rep.inPrev = stSettledID, true
		return true
	}
	if _, at, ok := prev.holds.Get(req.id); ok && at > req.now {
		rep.status, rep.inPrev = stReplayed, true
		rep.used, rep.held = prev.used, prev.held
		return true
	}
	return false
}

// settle is step's settle branch. It reports whether prev was written. An
// id the current period does not know, while the previous period's usage
// is lost inside its settle window (req.prevGuard), is refused with
// stLost naming that period: the id may have been reserved or settled
// there, and charging it to the current period would bill it twice or to
// the wrong period.
func settle(req *request, cur, prev *ledger, prevMarkerLive bool, curDirty *bool, rep *reply) bool {
	now := req.now
	target := cur
	if o, _, ok := cur.settled.Get(req.id); ok {
		replay(rep, o)
		return false
	}
	est, at, held := cur.holds.Get(req.id)
	if held {
		cur.holds.Remove(req.id)
		cur.held -= est
		*curDirty = true
		held = at > now // an expired hold no longer covers the cost
	} else if prev != nil {
		if o, _, ok := prev.settled.Get(req.id); ok {
			replay(rep, o)
			rep.inPrev = true
			return false
		}
		if pest, pat, ok := prev.holds.Get(req.id); ok && pat > now {
			target, est, held = prev, pest, true
			prev.holds.Remove(req.id)
			prev.held -= est
			rep.inPrev = true
		}
	} else if req.prevGuard && prevMarkerLive {
		rep.status, rep.inPrev = stLost, true
		return false
	}
	before := target.used
	target.used = min(target.used+req.amount, MaxUsed)
	rep.charged = target.used - before
	if held {
		rep.refunded = max(est-req.amount, 0)
	} else {
		rep.unmatched = true
	}
	target.settled.Add(req.id, outcome{
		used: target.used, held: target.held, charged: rep.charged,
		refunded: rep.refunded, unmatched: rep.unmatched,
	}, now+req.keep)
	if int64(target.settled.Len()) > req.maxSettled {
		target.settled.PopFirst()
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
