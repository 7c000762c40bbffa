package coalesce

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// req is a request in these tests: answered with its id plus 1000, or
// with its context's error when a batch takes it after its context ended.
type req struct {
	ctx    context.Context
	id     int
	group  int
	size   int
	answer int
	err    error
	done   chan struct{}
}

func (r *req) Context() context.Context { return r.ctx }

func newReq(ctx context.Context, id, group, size int) *req {
	return &req{ctx: ctx, id: id, group: group, size: size, done: make(chan struct{}, 1)}
}

// answer is what send gives r.
func answer(r *req) { r.answer = r.id + 1000; r.done <- struct{}{} }

// expireReq is the tests' expire.
func expireReq(r *req, err error) { r.err = err; r.done <- struct{}{} }

// ids lists the ids of rs, comma-separated.
func ids(rs []*req) string {
	var s []byte
	for i, r := range rs {
		if i > 0 {
			s = append(s, ',')
		}
		s = strconv.AppendInt(s, int64(r.id), 10)
	}
	return string(s)
}

// holdSlots takes n call slots of q, as n callers sending alone do.
func holdSlots(t *testing.T, q *Queue[*req, int], n int) {
	t.Helper()
	for i := range n {
		if _, queued := q.Join(0, 1, func() *req { t.Error("mk called with a call free"); return nil }); queued {
			t.Fatalf("caller %d queued with a call free", i)
		}
	}
}

// waitIdle waits until q has no call in flight (its goroutine frees its
// slot just after the last batch is answered) and checks that nothing
// waits. A Queue that keeps a slot hangs the test until go test's timeout.
func waitIdle(t *testing.T, q *Queue[*req, int]) {
	t.Helper()
	for q.InFlight() != 0 {
		runtime.Gosched()
	}
	if n := q.Len(); n != 0 {
		t.Fatalf("%d requests left in the queue", n)
	}
}

// TestTake: a batch takes the oldest request and the next ones of its
// group while their sizes fit in maxBatch; the first of the group that
// does not fit ends it (a later, smaller one still waits, keeping queue
// order); the oldest goes even when it alone is larger; the others stay
// queued in order.
func TestTake(t *testing.T) {
	type item struct{ group, size int }
	for _, tc := range []struct {
		name     string
		maxBatch int
		queue    []item // ids 1, 2, ...
		want     []string
	}{
		{"groups, one place each", 3, []item{{1, 1}, {2, 1}, {1, 1}, {1, 1}, {2, 1}, {1, 1}}, []string{"1,3,4", "2,5", "6"}},
		{"the cut in places", 2, []item{{0, 1}, {0, 1}, {0, 1}, {0, 1}, {0, 1}}, []string{"1,2", "3,4", "5"}},
		{"sizes", 3, []item{{0, 2}, {0, 1}, {0, 2}, {0, 1}}, []string{"1,2", "3,4"}},
		{"the first that does not fit ends the batch", 3, []item{{0, 2}, {0, 2}, {0, 1}}, []string{"1", "2,3"}},
		{"an oversized oldest goes alone", 3, []item{{0, 5}, {0, 1}}, []string{"1", "2"}},
		{"sizes within a group, others skipped", 4, []item{{0, 2}, {1, 1}, {0, 2}, {0, 1}, {1, 1}}, []string{"1,3", "2,5", "4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := New[*req, int](tc.maxBatch, 1, nil, nil)
			for i, it := range tc.queue {
				r := newReq(context.Background(), i+1, it.group, it.size)
				q.waiting = append(q.waiting, entry[*req, int]{c: r, group: it.group, size: it.size})
			}
			for i, want := range tc.want {
				if got := ids(q.take()); got != want {
					t.Fatalf("batch %d: %s, want %s", i, got, want)
				}
			}
			if n := q.Len(); n != 0 {
				t.Fatalf("%d left after the batches", n)
			}
		})
	}
}

// TestLoneCaller: with a call free and nobody waiting, Join lets the
// caller send alone and does not build its record; Release frees the slot.
func TestLoneCaller(t *testing.T) {
	q := New[*req, int](4, 2, func([]*req) { t.Error("send called") }, expireReq)
	for range 3 {
		holdSlots(t, q, 1)
		if n := q.InFlight(); n != 1 {
			t.Fatalf("%d in flight, want 1", n)
		}
		q.Release()
		waitIdle(t, q)
	}
}

// TestMaxInFlight: once maxInFlight callers send alone, the next request
// queues even though its group is new; when one of them releases its
// slot, the waiting requests go in one batch, and the slot is freed once
// nobody waits.
func TestMaxInFlight(t *testing.T) {
	sent := make(chan []*req, 4)
	q := New[*req, int](8, 2, func(b []*req) {
		sent <- append([]*req(nil), b...)
		for _, r := range b {
			answer(r)
		}
	}, expireReq)
	holdSlots(t, q, 2)
	var rs []*req
	for i := range 3 {
		r, queued := q.Join(i%2, 1, func() *req { return newReq(context.Background(), i, i%2, 1) })
		if !queued {
			t.Fatalf("request %d sent alone with every call busy", i)
		}
		rs = append(rs, r)
	}
	if n, f := q.Len(), q.InFlight(); n != 3 || f != 2 {
		t.Fatalf("%d queued and %d in flight, want 3 and 2", n, f)
	}
	q.Release()
	for _, r := range rs {
		if !q.Wait(r, r.done) || r.answer != r.id+1000 {
			t.Fatalf("request %d: answer %d", r.id, r.answer)
		}
	}
	if got := ids(<-sent); got != "0,2" {
		t.Errorf("first batch %s, want 0,2 (group 0)", got)
	}
	if got := ids(<-sent); got != "1" {
		t.Errorf("second batch %s, want 1", got)
	}
	for q.InFlight() != 1 { // the batches' goroutine frees its slot
		runtime.Gosched()
	}
	q.Release()
	waitIdle(t, q)
}

// TestWithdrawn: a request whose context ends while it waits in the queue
// is taken out and answered through expire, with the context's error: Wait
// reports it answered, and it is never sent.
func TestWithdrawn(t *testing.T) {
	expired := 0
	q := New[*req, int](8, 1, func(b []*req) { t.Errorf("sent %s", ids(b)) }, func(r *req, err error) { expired++; expireReq(r, err) })
	holdSlots(t, q, 1)
	ctx, cancel := context.WithCancel(context.Background())
	r, queued := q.Join(0, 1, func() *req { return newReq(ctx, 1, 0, 1) })
	if !queued {
		t.Fatal("sent alone with the call busy")
	}
	cancel()
	if !q.Wait(r, r.done) || !errors.Is(r.err, context.Canceled) || expired != 1 {
		t.Fatalf("Wait: err %v, expired %d times; want answered once with context.Canceled", r.err, expired)
	}
	if len(r.done) != 0 {
		t.Fatal("the done signal is left for the record's next use")
	}
	q.Release()
	waitIdle(t, q)
}

// TestAbandoned: a request whose context ends once a batch took it stays
// in the batch: Wait reports false, and the batch still answers it.
func TestAbandoned(t *testing.T) {
	taken, gate := make(chan struct{}), make(chan struct{})
	var sent []*req
	q := New[*req, int](8, 1, func(b []*req) {
		sent = append(sent, b...)
		close(taken)
		<-gate
		for _, r := range b {
			answer(r)
		}
	}, expireReq)
	holdSlots(t, q, 1)
	ctx, cancel := context.WithCancel(context.Background())
	r, _ := q.Join(0, 1, func() *req { return newReq(ctx, 1, 0, 1) })
	q.Release()
	<-taken
	cancel()
	if q.Wait(r, r.done) {
		t.Fatal("Wait reports an answer the batch has not written yet")
	}
	close(gate)
	<-r.done
	if r.answer != 1001 || r.err != nil || ids(sent) != "1" {
		t.Fatalf("answer %d, err %v, sent %s", r.answer, r.err, ids(sent))
	}
	waitIdle(t, q)
}

// TestExpired: a batch that takes a request whose context has ended
// answers it through expire, with the context's error, and sends only the
// others; a batch of expired requests sends nothing.
func TestExpired(t *testing.T) {
	expired := make(chan *req, 2)
	sent := make(chan string, 2)
	q := New[*req, int](8, 1, func(b []*req) {
		sent <- ids(b)
		for _, r := range b {
			answer(r)
		}
	}, func(r *req, err error) { expireReq(r, err); expired <- r })
	holdSlots(t, q, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r1, _ := q.Join(0, 1, func() *req { return newReq(ctx, 1, 0, 1) })
	r2, _ := q.Join(0, 1, func() *req { return newReq(context.Background(), 2, 0, 1) })
	r3, _ := q.Join(1, 1, func() *req { return newReq(ctx, 3, 1, 1) })
	q.Release()
	// Once expire ran, r1's answer is there: Wait takes it, whichever of
	// the two channels it sees first.
	if r := <-expired; r != r1 {
		t.Fatalf("expired %d first, want 1", r.id)
	}
	if !q.Wait(r1, r1.done) || !errors.Is(r1.err, context.Canceled) || r1.answer != 0 {
		t.Fatalf("request 1: err %v, answer %d", r1.err, r1.answer)
	}
	if !q.Wait(r2, r2.done) || r2.answer != 1002 {
		t.Fatalf("request 2: answer %d", r2.answer)
	}
	if r := <-expired; r != r3 {
		t.Fatalf("expired %d, want 3", r.id)
	}
	waitIdle(t, q)
	close(sent)
	if got, more := <-sent, len(sent); got != "2" || more != 0 {
		t.Fatalf("sent %q and %d more batches, want only request 2", got, more)
	}
}

// TestConcurrent has many callers of three groups, some with contexts
// that end, go through one Queue: every request is answered once, with its
// own answer or its context's error, or abandoned; never more than maxInFlight calls
// run at once (alone or batches); a batch holds one group and at most
// maxBatch of room; and the Queue ends idle. Run with -race.
func TestConcurrent(t *testing.T) {
	const maxBatch, maxInFlight, callers, rounds = 5, 2, 32, 100
	var running, most, batches atomic.Int64
	enter := func() {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
	}
	q := New[*req, int](maxBatch, maxInFlight, func(b []*req) {
		enter()
		defer running.Add(-1)
		batches.Add(1)
		room := 0
		for _, r := range b {
			if r.group != b[0].group {
				t.Errorf("batch %s mixes groups", ids(b))
			}
			room += r.size
		}
		if room > maxBatch && len(b) > 1 {
			t.Errorf("batch %s takes %d places, more than %d", ids(b), room, maxBatch)
		}
		time.Sleep(50 * time.Microsecond) // let requests pile up
		for _, r := range b {
			answer(r)
		}
	}, expireReq)
	var answered, abandoned, expired, alone atomic.Int64
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := range rounds {
				id := g*rounds + i
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if i%7 == 3 {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(i%5)*20*time.Microsecond)
				}
				size := 1 + id%3
				r, queued := q.Join(id%3, size, func() *req { return newReq(ctx, id, id%3, size) })
				if !queued {
					enter()
					time.Sleep(50 * time.Microsecond)
					running.Add(-1)
					alone.Add(1)
					q.Release()
					cancel()
					continue
				}
				if !q.Wait(r, r.done) {
					abandoned.Add(1)
					<-r.done // the batch still answers it
				} else if r.err != nil {
					expired.Add(1)
					if !errors.Is(r.err, context.DeadlineExceeded) {
						t.Errorf("request %d: %v", id, r.err)
					}
				} else if r.answer != id+1000 {
					t.Errorf("request %d: answer %d", id, r.answer)
				} else {
					answered.Add(1)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	waitIdle(t, q)
	if m := most.Load(); m > maxInFlight {
		t.Errorf("%d calls ran at once, more than %d", m, maxInFlight)
	}
	total := answered.Load() + abandoned.Load() + expired.Load() + alone.Load()
	if total != callers*rounds {
		t.Errorf("%d requests accounted for, want %d", total, callers*rounds)
	}
	if answered.Load() == 0 || batches.Load() == 0 {
		t.Errorf("no request went in a batch (%d answered, %d batches)", answered.Load(), batches.Load())
	}
	t.Logf("alone %d, batched %d in %d batches, abandoned %d, expired (in the queue or a batch) %d",
		alone.Load(), answered.Load(), batches.Load(), abandoned.Load(), expired.Load())
}

// TestBatchContext: a batch runs under the latest deadline of its
// requests, or none when one has none, with the first request's values,
// and no caller's cancellation ends it.
func TestBatchContext(t *testing.T) {
	type key struct{}
	base := context.WithValue(context.Background(), key{}, "first")
	now := time.Now()
	early, cancelEarly := context.WithDeadline(base, now.Add(time.Hour))
	defer cancelEarly()
	late, cancelLate := context.WithDeadline(context.Background(), now.Add(2*time.Hour))
	defer cancelLate()

	ctx, cancel := BatchContext([]*req{{ctx: early}, {ctx: late}})
	defer cancel()
	if d, ok := ctx.Deadline(); !ok || !d.Equal(now.Add(2*time.Hour)) {
		t.Errorf("deadline %v %v, want the latest", d, ok)
	}
	if v := ctx.Value(key{}); v != "first" {
		t.Errorf("value %v, want the first request's", v)
	}
	cancelEarly()
	if err := ctx.Err(); err != nil {
		t.Errorf("a caller's cancellation ended the batch: %v", err)
	}

	ctx2, cancel2 := BatchContext([]*req{{ctx: late}, {ctx: context.Background()}})
	defer cancel2()
	if d, ok := ctx2.Deadline(); ok {
		t.Errorf("deadline %v, want none (a request has none)", d)
	}
}

// TestBatchingCallersComingBack: on one processor, the callers a
// batch wakes that join again at once (callers deciding request after
// request) ride in the slot's next batch: the slot yields before it cuts
// the queue. Without the yield, the slot finds the queue empty every
// time, frees itself, and the first caller back goes alone, once per
// round; with it, that happens at most when the scheduler's fairness
// check runs the slot first (about one schedule in 61), so the test
// allows a quarter of the rounds. It runs without the race detector
// (which randomizes the scheduler): `make test` runs the tests named
// Batching a second time without it.
func TestBatchingCallersComingBack(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector randomizes the scheduler this test reads")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const n, rounds = 8, 40
	q := New[*req, int](64, 1, func(b []*req) {
		for _, r := range b {
			answer(r)
		}
	}, expireReq)
	holdSlots(t, q, 1)
	var wg sync.WaitGroup
	var alone atomic.Int64
	var queued sync.WaitGroup
	queued.Add(n)
	for i := range n {
		wg.Go(func() {
			for round := range rounds {
				r, ok := q.Join(0, 1, func() *req { return newReq(context.Background(), i, 0, 1) })
				if round == 0 {
					queued.Done()
				}
				if !ok {
					alone.Add(1)
					runtime.Gosched() // its call's round trip, in which others join
					q.Release()
					continue
				}
				if !q.Wait(r, r.done) || r.answer != i+1000 {
					t.Errorf("caller %d: answer %d", i, r.answer)
				}
			}
		})
	}
	queued.Wait()
	q.Release() // the first batch: all n
	wg.Wait()
	if a := alone.Load(); a > rounds/4 {
		t.Errorf("%d of %d requests went alone, want at most %d: the callers coming back did not ride together", a, n*rounds, rounds/4)
	}
	waitIdle(t, q)
}

// TestLeaderAfterBatch: once a batch has been cut, a request that finds a
// call free and nobody waiting leads the next batch instead of going
// alone: the requests on their way when it yields ride with it, in one
// call. A caller alone again (the batch it led held only itself) sends
// alone as before.
func TestLeaderAfterBatch(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector randomizes the scheduler this test reads")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var calls []int
	q := New[*req, int](64, 1, func(b []*req) {
		calls = append(calls, len(b))
		for _, r := range b {
			answer(r)
		}
	}, expireReq)

	// A batch of two: the queue is now under load.
	holdSlots(t, q, 1)
	var first sync.WaitGroup
	for i := range 2 {
		r, queued := q.Join(0, 1, func() *req { return newReq(context.Background(), i, 0, 1) })
		if !queued {
			t.Fatal("queued false with the only call busy")
		}
		first.Go(func() { q.Wait(r, r.done) })
	}
	q.Release()
	first.Wait()
	waitIdle(t, q)

	const n = 8
	var wg sync.WaitGroup
	var alone atomic.Int64
	for i := range n {
		wg.Go(func() {
			r, queued := q.Join(0, 1, func() *req { return newReq(context.Background(), 10+i, 0, 1) })
			if !queued {
				alone.Add(1)
				q.Release()
				return
			}
			if !q.Wait(r, r.done) || r.answer != 1010+i {
				t.Errorf("caller %d: answer %d", i, r.answer)
			}
		})
	}
	wg.Wait()
	waitIdle(t, q)
	// Usually one batch of all n; a preemption between the callers (a
	// loaded machine) may cut them into more, but none goes alone and
	// the first leader has company.
	rode := 0
	for _, c := range calls[1:] {
		rode += c
	}
	if a := alone.Load(); a != 0 || len(calls) < 2 || calls[1] < 2 || rode != n {
		t.Fatalf("%d went alone; calls %v, want [2 %d] (or the %d in batches after the first two, the first of at least 2)", a, calls, n, n)
	}

	// One caller now: it leads a batch of itself, then goes alone.
	before := len(calls)
	for i := range 3 {
		r, queued := q.Join(0, 1, func() *req { return newReq(context.Background(), 20+i, 0, 1) })
		if queued != (i == 0) {
			t.Fatalf("request %d: queued %v", i, queued)
		}
		if queued {
			if !q.Wait(r, r.done) || r.answer != 1020 {
				t.Fatalf("request %d: answer %d", i, r.answer)
			}
		} else {
			q.Release()
		}
		waitIdle(t, q)
	}
	if len(calls) != before+1 || calls[before] != 1 {
		t.Fatalf("calls %v, want one more, of 1, after the first %d", calls, before)
	}
}

// goroutineID returns the id of the calling goroutine, from the first
// line of its stack trace ("goroutine N [running]:").
func goroutineID() string {
	var buf [64]byte
	line := buf[:runtime.Stack(buf[:], false)]
	line = line[len("goroutine "):]
	for i, c := range line {
		if c == ' ' {
			return string(line[:i])
		}
	}
	return string(line)
}

// goroutineAlive reports whether the goroutine with id is still running.
func goroutineAlive(id string) bool {
	buf := make([]byte, 1<<20)
	all := string(buf[:runtime.Stack(buf, true)])
	return strings.Contains(all, "goroutine "+id+" [")
}

// TestSendersReused: the batches of successive busy periods are sent by
// the same sender goroutine, which waits for the next busy slot instead
// of ending (a new goroutine per busy period grew its stack every time);
// it ends once no slot has been busy for SenderIdle.
func TestSendersReused(t *testing.T) {
	var mu sync.Mutex
	senders := map[string]int{}
	q := New[*req, int](8, 1, func(b []*req) {
		id := goroutineID()
		mu.Lock()
		senders[id]++
		mu.Unlock()
		for _, r := range b {
			answer(r)
		}
	}, expireReq)
	const periods = 20
	for p := range periods {
		// A caller sends alone and one request queues behind it (a batch
		// of one, so that the next period's first caller goes alone too).
		holdSlots(t, q, 1)
		r, queued := q.Join(0, 1, func() *req { return newReq(context.Background(), p, 0, 1) })
		if !queued {
			t.Fatalf("period %d: request sent alone with the call busy", p)
		}
		q.Release() // a sender takes the waiting batch
		if !q.Wait(r, r.done) || r.answer != r.id+1000 {
			t.Fatalf("period %d: request %d answered %d", p, r.id, r.answer)
		}
		waitIdle(t, q)
		time.Sleep(2 * time.Millisecond) // the sender is back waiting for work
	}
	mu.Lock()
	defer mu.Unlock()
	if len(senders) != 1 {
		t.Fatalf("%d sender goroutines for %d busy periods (%v), want one reused", len(senders), periods, senders)
	}
	for id, n := range senders {
		if n != periods {
			t.Errorf("sender %s sent %d batches, want %d", id, n, periods)
		}
		deadline := time.Now().Add(SenderIdle + 5*time.Second)
		for goroutineAlive(id) {
			if time.Now().After(deadline) {
				t.Fatalf("sender %s still running %v after the last batch", id, SenderIdle+5*time.Second)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
