// Package coalesce holds the queue that lets concurrent requests to Redis
// share script calls: redisstore's decisions and envoycompat's counter
// updates both go through it.
//
// A Queue keeps at most maxInFlight calls in flight. A request that finds
// a call free and nobody waiting is sent at once, alone, by its own caller,
// so a lone caller pays nothing for the queue, unless the last call sent
// carried a batch: under load, such a request leads a batch instead (it
// yields the processor once, so that the requests already on their way
// join it, then sends them all together). Otherwise it waits; whenever
// a call completes, the oldest waiting requests (up to maxBatch of room,
// see Queue.Join) leave together in the next call, sent by a sender
// goroutine that keeps the slot and sends batch after batch while
// requests wait. A sender whose slot has nothing more to send waits up to
// SenderIdle for the next busy slot before it ends, so that under load the
// same few goroutines send every batch (at most one per slot in use):
// their stacks have grown to what a Redis call needs once, not once per
// busy period.
//
// A caller whose context ends while its request waits takes the request
// back out of the queue, and nothing is sent for it: it is answered as one
// a batch finds expired. Once a batch has taken the request, the caller
// stops waiting but the request goes out with the batch, which still
// writes its answer (Queue.Wait reports false).
//
// A request whose context is a shared deadline (internal/deadline) made
// from a context that has ended since (a server's request context whose
// client went away: the shared deadline does not end with it) is expired
// likewise when a batch takes it (deadline.Gone), and nothing is sent for
// it: a stalled Redis that comes back does not count the requests of
// clients that had gone before their request left the queue.
package coalesce

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate/internal/deadline"
)

// Request is the constraint on the requests a Queue holds: in practice a
// pointer to the caller's record of one queued request, compared by
// identity. Context returns the context the request was made under; a
// Queue never sends a request whose context has ended, nor one whose
// caller has gone (deadline.Gone).
type Request interface {
	comparable
	Context() context.Context
}

// Queue coalesces requests of type C into batches. G groups the requests
// that may share a batch: a batch only holds requests of one group (a
// caller whose requests all mix uses struct{}). A Queue is safe for
// concurrent use; it must be made with New.
type Queue[C Request, G comparable] struct {
	maxBatch    int
	maxInFlight int
	send        func(batch []C)
	expire      func(c C, err error)

	mu       sync.Mutex
	waiting  []entry[C, G] // oldest first
	inFlight int
	recent   int // requests in the last call cut: 1 alone, else its batch's

	// idle hands a busy slot's first batch to a sender that waits for
	// one (unbuffered: a send succeeds only while a sender waits).
	idle chan []C
}

// SenderIdle is how long a sender goroutine whose slot has nothing more
// to send waits for another busy slot before it ends. A new goroutine
// starts with a small stack, and sending a script call through go-redis
// grew it by copying (runtime.copystack: about 2 % of serve's CPU at 64
// callers when each busy period had a goroutine of its own). Short
// enough that a Queue nobody uses any more holds no goroutine for long.
const SenderIdle = 200 * time.Millisecond

// entry is one waiting request with what the batch cut reads of it.
type entry[C Request, G comparable] struct {
	c     C
	group G
	size  int
}

// New returns a Queue that keeps at most maxInFlight calls in flight (at
// least 1) and fills a batch with at most maxBatch of room (at least 1).
//
// send sends a batch, oldest request first, as one call, and before it
// returns gives every request of the batch its answer and wakes its
// caller (the done channel it waits on in Wait). expire answers a request
// whose context ended, or whose caller went (deadline.Gone), with err,
// before it was sent (nothing is sent for it), and wakes its caller
// likewise. Neither runs under the Queue's lock
// nor twice for one request.
func New[C Request, G comparable](maxBatch, maxInFlight int, send func(batch []C), expire func(c C, err error)) *Queue[C, G] {
	return &Queue[C, G]{
		maxBatch:    max(maxBatch, 1),
		maxInFlight: max(maxInFlight, 1),
		send:        send,
		expire:      expire,
		idle:        make(chan []C),
	}
}

// Join lets a caller send its request alone or queues it. When a call is
// free, nobody waits and the last call cut carried one request, Join takes
// the call's slot and returns queued false: the caller sends its request
// itself, then calls Release. mk is not called. Otherwise Join queues the
// request mk returns (mk runs under the Queue's lock: it should only fill
// a record) and returns it: the caller then calls Wait. When a call is
// free but the last call cut was a batch, the caller leads the next batch
// before Join returns: it takes the slot, queues its request, yields the
// processor once, and sends the batch the queue then holds (its request
// and those that came meanwhile) in its own goroutine, as a slot's loop
// would; its Wait then finds the answer there. On serve at 64 callers
// this made about a fifth fewer script calls than sending such a request
// alone, and more decisions/s in three interleaved pairs (1–9 %; see
// docs/benchmarks.md).
//
// group and size are the request's group (see Queue) and the room it takes
// in a batch (redisstore counts decisions, envoycompat counters).
func (q *Queue[C, G]) Join(group G, size int, mk func() C) (c C, queued bool) {
	q.mu.Lock()
	if q.inFlight < q.maxInFlight && len(q.waiting) == 0 {
		q.inFlight++
		if q.recent < 2 {
			q.recent = 1
			q.mu.Unlock()
			return c, false
		}
		c = mk()
		q.waiting = append(q.waiting, entry[C, G]{c: c, group: group, size: size})
		q.mu.Unlock()
		q.lead()
		return c, true
	}
	// Every call is busy: whenever requests wait, all maxInFlight calls
	// are in flight (only following frees a slot, and only when nobody
	// waits). One of them will take this request along.
	c = mk()
	q.waiting = append(q.waiting, entry[C, G]{c: c, group: group, size: size})
	q.mu.Unlock()
	return c, true
}

// lead sends, after one yield, the batch the queue holds in the slot that
// Join took for a leading caller, then hands the slot on: to a loop of
// its own when requests still wait, or frees it.
func (q *Queue[C, G]) lead() {
	runtime.Gosched()
	q.mu.Lock()
	if len(q.waiting) == 0 {
		// Another slot's batch took the leader's request along.
		q.inFlight--
		q.mu.Unlock()
		return
	}
	batch := q.take()
	q.mu.Unlock()
	q.sendLive(batch)
	if next := q.following(); next != nil {
		q.hand(next)
	}
}

// Release ends a call that Join let its caller send alone: the slot sends
// the waiting requests, from a sender goroutine so that the caller returns
// at once, or is freed when nobody waits.
func (q *Queue[C, G]) Release() {
	if batch := q.following(); batch != nil {
		q.hand(batch)
	}
}

// hand gives batch, the first of a busy slot, to a sender that waits for
// work, or to a new one when none waits.
func (q *Queue[C, G]) hand(batch []C) {
	select {
	case q.idle <- batch:
	default:
		go q.sender(batch)
	}
}

// sender sends batch and the slot's next ones (loop), then waits up to
// SenderIdle for another busy slot's first batch, and so on; it ends when
// none comes in time. Senders never outnumber the slots in use by more
// than those waiting, and none is left SenderIdle after the last batch.
func (q *Queue[C, G]) sender(batch []C) {
	q.loop(batch)
	t := time.NewTimer(SenderIdle)
	defer t.Stop()
	for {
		select {
		case batch = <-q.idle:
			q.loop(batch)
			t.Reset(SenderIdle)
		case <-t.C:
			return
		}
	}
}

// Wait waits until c, queued by Join, is answered (done receives) or its
// context ends, and reports whether it was answered. When the context ends
// while c still waits in the queue, Wait takes c out (nothing is or will be
// sent for it), has expire answer it, and reports true. When it ends after
// a batch took c, Wait reports false: c may be applied, and the batch
// still writes its answer into c, which the caller must leave alone. An
// answer that comes as the context ends counts.
func (q *Queue[C, G]) Wait(c C, done <-chan struct{}) (answered bool) {
	ctx := c.Context()
	stop := ctx.Done()
	if stop == nil {
		<-done // a context that never ends: a plain receive, cheaper than a select
		return true
	}
	select {
	case <-done:
		return true
	case <-stop:
		select {
		case <-done:
			return true
		default:
		}
	}
	if !q.withdraw(c) {
		return false
	}
	q.expire(c, ctx.Err())
	<-done // expire's signal, so that the record can be reused
	return true
}

// withdraw takes c out of the queue and reports whether it was still
// there.
func (q *Queue[C, G]) withdraw(c C) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range q.waiting {
		if q.waiting[i].c == c {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			clear(q.waiting[len(q.waiting):][:1])
			return true
		}
	}
	return false
}

// loop sends batch, then the next, as long as requests wait: one sender
// per busy slot rather than one goroutine per batch.
//
// Between two batches it yields the processor once: the callers the
// batch just woke are ready to run, and those that come straight back
// (a caller deciding request after request) join the queue before it is
// cut, instead of finding it nearly empty and going one by one or in the
// batch after. Meanwhile the other calls in flight keep the server busy.
// With 64 callers on two cores this made the batches larger and raised a
// single Redis's decisions/s by 10–15 % and a Cluster's by about 16 %,
// for less CPU per decision (docs/benchmarks.md).
func (q *Queue[C, G]) loop(batch []C) {
	for batch != nil {
		q.sendLive(batch)
		runtime.Gosched()
		batch = q.following()
	}
}

// sendLive expires the requests of batch whose context has ended, or
// whose caller has gone (deadline.Gone), and sends the others, if any.
func (q *Queue[C, G]) sendLive(batch []C) {
	live := batch[:0]
	for _, c := range batch {
		if err := deadline.Gone(c.Context()); err != nil {
			q.expire(c, err)
			continue
		}
		live = append(live, c)
	}
	if len(live) > 0 {
		q.send(live)
	}
}

// following returns the next batch to send in the slot of a call that
// just completed, or frees that slot and returns nil when nobody waits.
func (q *Queue[C, G]) following() []C {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiting) == 0 {
		q.inFlight--
		return nil
	}
	return q.take()
}

// take removes from the queue and returns the oldest request and the next
// ones of its group, in queue order, as long as their sizes add up to at
// most maxBatch (the oldest goes even if it alone is larger). The first of
// the group that does not fit ends the batch: it and every later request
// stay queued, in order. q.mu is held.
func (q *Queue[C, G]) take() []C {
	group := q.waiting[0].group
	batch := make([]C, 0, min(len(q.waiting), q.maxBatch))
	rest := q.waiting[:0]
	room, full := q.maxBatch, false
	for _, e := range q.waiting {
		if e.group != group {
			rest = append(rest, e)
			continue
		}
		if !full && (len(batch) == 0 || e.size <= room) {
			batch = append(batch, e.c)
			room -= e.size
			continue
		}
		full = true
		rest = append(rest, e)
	}
	clear(q.waiting[len(rest):])
	q.waiting = rest
	q.recent = len(batch)
	return batch
}

// Len returns the number of requests waiting in the queue.
func (q *Queue[C, G]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}

// InFlight returns the number of calls in flight: requests sent alone and
// batches, counting a slot between two batches as busy.
func (q *Queue[C, G]) InFlight() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.inFlight
}

// MaxBatch returns the room of a batch (see New).
func (q *Queue[C, G]) MaxBatch() int { return q.maxBatch }

// MaxInFlight returns the most calls the Queue keeps in flight.
func (q *Queue[C, G]) MaxInFlight() int { return q.maxInFlight }

// BatchContext returns the context a batch is sent under: the first
// request's values, never cancelled by any one caller (the others still
// wait for the reply), with the latest of the requests' deadlines, or none
// if one of them has none (the client's own timeouts then bound the call).
// The caller calls cancel once the call returns.
func BatchContext[C Request](batch []C) (ctx context.Context, cancel context.CancelFunc) {
	var latest time.Time
	for _, c := range batch {
		d, ok := c.Context().Deadline()
		if !ok {
			return context.WithoutCancel(batch[0].Context()), func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(batch[0].Context()), latest)
}
