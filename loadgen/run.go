package loadgen

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
)

// Run sends checks to opts.Target for opts.Duration (or until
// opts.MaxRequests were sent) and returns the report. When progress is
// not nil, a live status line ("\r"-rewritten) is written to it once per
// second, and a final newline at the end; with opts.ProgressLines, a line
// of its own each second, and one at the end.
//
// Run returns an error wrapping ErrInvalidOptions for bad options, and the
// partial report with ctx's error when ctx ends first: no request is
// started after that, those in flight are given up to InterruptGrace (at
// most opts.Timeout) to be answered, then abandoned and counted as
// errors, and the report is marked Interrupted. Failed requests are not
// errors of Run: they are counted in Report.Errors. A worker whose
// request failed in transport (no answer: the connection refused, reset
// or closed, TLS failed) waits before its next, 10ms doubling after each
// such failure in a row up to 1s, so that a service restarting is not
// met by a storm of instant failures.
func Run(ctx context.Context, opts Options, progress io.Writer) (Report, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return Report{}, err
	}
	snd, err := newSender(o)
	if err != nil {
		return Report{}, err
	}
	defer snd.close()

	r := &run{opts: o, snd: snd, model: newModel(o.Expect)}
	start := time.Now()
	deadline := start.Add(o.Duration)
	stopCtx, stop := context.WithDeadline(ctx, deadline)
	defer stop()
	// The requests in flight when ctx ends are given a grace to be
	// answered, then abandoned.
	reqCtx, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()
	var interruptedAfter atomic.Int64 // ns since start; 0: not interrupted
	stopGrace := context.AfterFunc(ctx, func() {
		interruptedAfter.Store(int64(max(time.Since(start), 1)))
		time.AfterFunc(min(InterruptGrace, o.Timeout), abandon)
	})
	defer stopGrace()

	stopProgress := r.startProgress(progress, start)
	hists := make([]Histogram, o.Concurrency)
	var wg sync.WaitGroup
	workers := make([]*workerState, o.Concurrency)
	for i := range workers {
		workers[i] = &workerState{w: snd.worker(), h: &hists[i], timeout: o.Timeout, parent: reqCtx, onBackOff: o.onBackOff}
	}
	if o.Rate > 0 {
		jobs := make(chan time.Time, o.Concurrency)
		for _, w := range workers {
			wg.Go(func() {
				defer w.stop()
				for at := range jobs {
					if stopCtx.Err() != nil {
						// Queued behind busy workers until the end:
						// not sent after it.
						r.seq.Add(-1)
						r.dropped.Add(1)
						continue
					}
					r.one(w, at)
					w.backOff(stopCtx)
				}
			})
		}
		r.schedule(stopCtx, start, deadline, jobs)
		close(jobs)
	} else {
		for _, w := range workers {
			if c, ok := w.w.(chainer); ok {
				c.chain(&chain{r: r, w: w, stop: stopCtx})
			}
			wg.Go(func() {
				defer w.stop()
				for stopCtx.Err() == nil && r.claim() {
					r.one(w, time.Now())
					w.backOff(stopCtx)
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	stopProgress(elapsed, ctx.Err() != nil)

	var h Histogram
	for i := range hists {
		h.Merge(&hists[i])
	}
	rep := r.report(elapsed, ctx.Err() != nil, &h)
	if rep.Interrupted {
		rep.InterruptedAfter = time.Duration(interruptedAfter.Load())
		if rep.InterruptedAfter == 0 || rep.InterruptedAfter > elapsed {
			// The context ended as the run did.
			rep.InterruptedAfter = elapsed
		}
	}
	return rep, ctx.Err()
}

// InterruptGrace is how long Run waits for the requests in flight once
// its context ends (or Options.Timeout, if shorter).
const InterruptGrace = time.Second

// The pause of a worker after a transport error: minBackoff after the
// first, doubling after each in a row up to maxBackoff.
const (
	minBackoff = 10 * time.Millisecond
	maxBackoff = time.Second
)

// run is the shared state of one load test.
type run struct {
	opts  Options
	snd   sender
	model *model

	seq                            atomic.Int64 // requests claimed
	rr                             atomic.Int64 // identities handed out
	allowed, denied, errs, dropped atomic.Int64
	degraded                       atomic.Int64 // of allowed and denied
	mu                             sync.Mutex
	errorSamples                   map[string]int64

	// lineAt and lineDone are the time (since the start) and the count
	// of requests done of the last progress line, to rate the next over
	// the time between them. Only the progress goroutine uses them.
	lineAt   time.Duration
	lineDone int64
}

// claim reserves the next request number; false once MaxRequests is used.
func (r *run) claim() bool {
	n := r.seq.Add(1)
	if r.opts.MaxRequests > 0 && n > r.opts.MaxRequests {
		r.seq.Add(-1)
		return false
	}
	return true
}

// schedule emits arrival times at opts.Rate from start until ctx ends,
// the next arrival would be due at or after end, or MaxRequests arrivals
// were queued (it returns then, not when the next would be due). An
// arrival that finds the queue full is dropped, and so is every arrival
// due before end that ctx's end (the duration's, or an interruption)
// finds not yet emitted: a scheduler woken late, on a loaded machine,
// used to leave those neither sent nor counted (9,804 sent and 193
// dropped of 10,000 scheduled).
func (r *run) schedule(ctx context.Context, start, end time.Time, jobs chan<- time.Time) {
	interval := float64(time.Second) / r.opts.Rate
	var emitted int64
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		now := time.Now()
		due := int64(float64(now.Sub(start))/interval) + 1
		for ; emitted < due; emitted++ {
			at := start.Add(time.Duration(float64(emitted) * interval))
			// Not one due at the end: it could only be dropped (a timer
			// firing with the end used to count a drop in healthy runs).
			if !at.Before(end) {
				return
			}
			if ctx.Err() != nil {
				r.dropDue(emitted, due, start, end, interval)
				return
			}
			if !r.claim() {
				return
			}
			select {
			case jobs <- at:
				if n := r.opts.MaxRequests; n > 0 && r.seq.Load() >= n {
					// The last: not waiting for the next arrival's time
					// (1000s at 0.001/s) to find none is left.
					return
				}
			default:
				r.seq.Add(-1)
				r.dropped.Add(1)
			}
		}
		next := start.Add(time.Duration(float64(emitted) * interval))
		if !next.Before(end) {
			return
		}
		timer.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			now := time.Now()
			r.dropDue(emitted, int64(float64(now.Sub(start))/interval)+1, start, end, interval)
			return
		case <-timer.C:
			if r.opts.onWake != nil {
				r.opts.onWake()
			}
		}
	}
}

// dropDue counts as dropped the arrivals from number emitted up to (not
// including) due that were due before end: once the run is over they
// cannot be sent. With MaxRequests, no more than the requests it left
// unclaimed.
func (r *run) dropDue(emitted, due int64, start, end time.Time, interval float64) {
	var n int64
	for ; emitted < due; emitted++ {
		if !start.Add(time.Duration(float64(emitted) * interval)).Before(end) {
			break
		}
		if m := r.opts.MaxRequests; m > 0 && r.seq.Load()+n >= m {
			break
		}
		n++
	}
	r.dropped.Add(n)
}

// one sends a claimed request and records it. at is when it was
// due: latency counts from then, so queueing behind a slow server shows.
//
// The expectation's model is given the answered requests only, at the
// time each was sent: a request that failed may not have reached the
// service, and the deny ratio it is compared with is over the answers.
// After a transport error it sets the worker's backoff; an answer, or
// another error, resets it.
func (r *run) one(w *workerState, at time.Time) {
	w.id, w.sent, w.at = r.nextIdentity(), time.Now(), at
	v, err := w.w.send(w.begin(), w.id)
	at = w.at // a chaining worker's last request began later
	timedOut := w.end()
	switch {
	case err == nil:
		w.backoff = 0
		r.model.observe(w.id, w.sent, r.opts.Cost)
		w.h.Record(time.Since(at))
		r.count(v)
		return
	case timedOut && errors.Is(err, errNoStreamSlot):
		err = fmt.Errorf("waited %v (the timeout) for a stream slot (the server's MAX_CONCURRENT_STREAMS, all in use on its connection): not sent", r.opts.Timeout)
		w.backoff = 0
	case timedOut:
		err = fmt.Errorf("no answer within %v (the timeout)", r.opts.Timeout)
		w.backoff = 0
	case w.parent.Err() != nil:
		err = errAbandoned
		w.backoff = 0
	case transportError(err):
		w.backoff = min(max(2*w.backoff, minBackoff), maxBackoff)
	default:
		w.backoff = 0
	}
	r.errs.Add(1)
	r.sample(err)
}

// errAbandoned is the error of a request still in flight InterruptGrace
// after the run was interrupted.
var errAbandoned = errors.New("abandoned unanswered when the run was interrupted")

// count records an answered request.
func (r *run) count(v verdict) {
	if v.allowed {
		r.allowed.Add(1)
	} else {
		r.denied.Add(1)
	}
	if v.degraded {
		r.degraded.Add(1)
	}
}

// chainer is a worker that can start its next request itself, in the
// goroutine that received the answer, instead of waking its own goroutine
// for each request (closed loop only).
type chainer interface {
	chain(*chain)
}

// chain lets a chaining worker record a request and start the next one
// without its goroutine, which meanwhile waits in send for the last
// request of the chain; that one it returns and run.one records.
type chain struct {
	r    *run
	w    *workerState
	stop context.Context // the run's end
}

// next records the worker's request in flight, answered (allowed or
// denied), and claims the next: its identity, the moment it is due set
// in the worker state and the timeout timer re-armed. It returns false,
// recording nothing, when the run is over or the request has timed out:
// the worker's send then returns the answer and run.one records it.
// It is called in the goroutine that has the answer, while the worker's
// goroutine waits in send.
func (ch *chain) next(v verdict) (id int, ok bool) {
	r, w := ch.r, ch.w
	if ch.stop.Err() != nil || !r.claim() {
		return 0, false
	}
	if !w.timer.Stop() {
		r.seq.Add(-1) // timed out: the worker reports it
		return 0, false
	}
	// An answer ends a run of transport errors: the worker's goroutine
	// sees only the outcome of a chain's last request, and without this
	// every failure ending a chain counted as one more in a row.
	w.backoff = 0
	now := time.Now()
	w.h.Record(now.Sub(w.at))
	r.count(v)
	r.model.observe(w.id, w.sent, r.opts.Cost)
	id = r.nextIdentity()
	w.id, w.sent, w.at = id, now, now
	w.timer.Reset(w.timeout)
	return id, true
}

// nextIdentity hands out identity numbers round robin.
func (r *run) nextIdentity() int {
	return int((r.rr.Add(1) - 1) % int64(r.opts.Identities))
}

// workerState is one worker's: its sender, histogram and request
// context. The context is the caller's, canceled by a timer when a request
// outlives the timeout; it is kept from request to request, and the timer
// rearmed, so that a request costs no context or timer of its own.
type workerState struct {
	w       worker
	h       *Histogram
	timeout time.Duration
	parent  context.Context

	at   time.Time // when the request in flight was due
	sent time.Time // when it was sent
	id   int       // its identity

	// backoff is the pause before the next request after a transport
	// error; 0 after an answer.
	backoff   time.Duration
	onBackOff func(time.Duration) // Options.onBackOff

	ctx    context.Context // nil until the first request and after a timeout
	cancel context.CancelFunc
	timer  *time.Timer // cancels ctx when it fires
}

// begin arms the timeout and returns the request's context.
func (w *workerState) begin() context.Context {
	if w.ctx == nil {
		w.ctx, w.cancel = context.WithCancel(w.parent)
		w.timer = time.AfterFunc(w.timeout, w.cancel)
		return w.ctx
	}
	w.timer.Reset(w.timeout)
	return w.ctx
}

// end disarms the timeout; it reports whether it fired, in which case the
// context is dropped and the next request gets a new one.
func (w *workerState) end() (timedOut bool) {
	if w.timer.Stop() {
		return false
	}
	w.cancel()
	w.ctx = nil
	return w.parent.Err() == nil // canceled by the caller is not a timeout
}

// backOff waits w.backoff, or until stop ends.
func (w *workerState) backOff(stop context.Context) {
	if w.backoff == 0 {
		return
	}
	if w.onBackOff != nil {
		w.onBackOff(w.backoff)
	}
	t := time.NewTimer(w.backoff)
	defer t.Stop()
	select {
	case <-stop.Done():
	case <-t.C:
	}
}

// stop releases the worker, the context and its timer.
func (w *workerState) stop() {
	w.w.close()
	if w.ctx != nil {
		w.timer.Stop()
		w.cancel()
	}
}

// sample keeps a count of up to 20 distinct error messages.
func (r *run) sample(err error) {
	msg := err.Error()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.errorSamples == nil {
		r.errorSamples = map[string]int64{}
	}
	if _, ok := r.errorSamples[msg]; ok || len(r.errorSamples) < 20 {
		r.errorSamples[msg]++
	}
}

// startProgress writes the live line once per second until the returned
// function is called with the run's elapsed time and whether it was
// interrupted, which writes the line at the end.
func (r *run) startProgress(w io.Writer, start time.Time) func(elapsed time.Duration, interrupted bool) {
	if w == nil {
		return func(time.Duration, bool) {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				r.writeLine(w, time.Since(start))
			}
		}
	})
	return func(elapsed time.Duration, interrupted bool) {
		close(done)
		wg.Wait()
		r.writeEndLine(w, elapsed, interrupted)
		if !r.opts.ProgressLines {
			fmt.Fprintln(w)
		}
	}
}

// writeLine writes a progress line at elapsed (since the start), its
// rate the requests done per second since the last line's (or the start):
// the current rate, not the average (a run doing 13,509 requests in its
// first second and 11,040 in its second used to show 12,274.5 req/s).
func (r *run) writeLine(w io.Writer, elapsed time.Duration) {
	done := r.allowed.Load() + r.denied.Load() + r.errs.Load()
	since := elapsed - r.lineAt
	rate := float64(done-r.lineDone) / max(since.Seconds(), 1e-9)
	r.lineAt, r.lineDone = elapsed, done
	r.line(w, elapsed, rate, fmt.Sprintf("(last %.1fs)", since.Seconds()))
}

// writeEndLine writes the progress line at the end of the run, at
// elapsed: its rate the report's achieved rate, the requests done over
// the report's RateSpan (the schedule's span for an open-loop run whose
// last answer came earlier), not over the time since the last line,
// which may be a moment; so a run shows one rate (--rate 0.5 --duration
// 3s read 1.0 req/s here and 0.667 in the report).
func (r *run) writeEndLine(w io.Writer, elapsed time.Duration, interrupted bool) {
	done := r.allowed.Load() + r.denied.Load() + r.errs.Load()
	span := rateSpan(r.opts, elapsed, interrupted)
	label := "(average)  "
	if span != elapsed {
		label = fmt.Sprintf("(average over the schedule's %.1fs)", span.Seconds())
	}
	r.line(w, elapsed, float64(done)/max(span.Seconds(), 1e-9), label)
}

// line writes the progress line with the rate given (as the report
// writes rates) and its label: after
// a carriage return and with spaces to cover a longer last one, or, with
// ProgressLines, ended by a newline.
func (r *run) line(w io.Writer, elapsed time.Duration, rate float64, label string) {
	a, d, e := r.allowed.Load(), r.denied.Load(), r.errs.Load()
	start, end := "\r", "   "
	if r.opts.ProgressLines {
		start, end = "", "\n"
	}
	fmt.Fprintf(w, "%s%6.1fs  %8d done  %9s req/s %s  allowed %8d  denied %8d (%5.1f%%)  degraded %d  errors %d  dropped %d%s",
		start, elapsed.Seconds(), a+d+e, formatRate(rate), label, a, d, 100*ratio(d, a+d), r.degraded.Load(), e, r.dropped.Load(), end)
}

func ratio(part, whole int64) float64 {
	if whole == 0 {
		return 0
	}
	return float64(part) / float64(whole)
}

// rateSpan returns the time a run's rates are over (see Report.RateSpan):
// elapsed, or for an open-loop run not interrupted the time its schedule
// spans when longer.
func rateSpan(o Options, elapsed time.Duration, interrupted bool) time.Duration {
	if o.Rate <= 0 || interrupted {
		return elapsed
	}
	span := o.Duration.Seconds()
	if o.MaxRequests > 0 {
		span = min(span, float64(o.MaxRequests)/o.Rate)
	}
	return max(elapsed, time.Duration(span*float64(time.Second)))
}

func (r *run) report(elapsed time.Duration, interrupted bool, h *Histogram) Report {
	rep := Report{
		Target:      r.opts.Target,
		Mode:        r.opts.Mode,
		GRPCClient:  r.opts.GRPCClient,
		TargetRate:  r.opts.Rate,
		Concurrency: r.opts.Concurrency,
		Identities:  r.opts.Identities,
		Elapsed:     elapsed,
		RateSpan:    rateSpan(r.opts, elapsed, interrupted),
		Interrupted: interrupted,
		Allowed:     r.allowed.Load(),
		Denied:      r.denied.Load(),
		Degraded:    r.degraded.Load(),
		Errors:      r.errs.Load(),
		Dropped:     r.dropped.Load(),
		Latency: Latencies{
			Min: h.Min(), P50: h.Quantile(0.50), P90: h.Quantile(0.90), P99: h.Quantile(0.99),
			P999: h.Quantile(0.999), Max: h.Max(), Mean: h.Mean(),
		},
	}
	rep.Sent = rep.Allowed + rep.Denied + rep.Errors
	rep.AchievedRate = float64(rep.Sent) / max(rep.RateSpan.Seconds(), 1e-9)
	rep.AnsweredRate = float64(rep.Allowed+rep.Denied) / max(rep.RateSpan.Seconds(), 1e-9)
	rep.Duration = r.opts.Duration
	rep.DenyRatio = ratio(rep.Denied, rep.Allowed+rep.Denied)
	switch {
	case r.model != nil:
		rep.ExpectedDenyRatio, rep.HasExpected = r.model.denyRatio(), true
	case r.opts.HasExpectedDenyRatio:
		rep.ExpectedDenyRatio, rep.HasExpected = r.opts.ExpectedDenyRatio, true
	}
	r.mu.Lock()
	for msg, n := range r.errorSamples {
		rep.ErrorSamples = append(rep.ErrorSamples, ErrorCount{Message: msg, Count: n})
	}
	r.mu.Unlock()
	sort.Slice(rep.ErrorSamples, func(i, j int) bool {
		a, b := rep.ErrorSamples[i], rep.ErrorSamples[j]
		return a.Count > b.Count || a.Count == b.Count && a.Message < b.Message
	})
	return rep
}

// model replays the answered requests through algo.Step, each at the
// time it was sent, to know how many an exact limiter applying Expect
// would have allowed of them. It is safe for
// concurrent use; a nil *model records nothing.
type model struct {
	p       floodgate.Policy
	mu      sync.Mutex
	states  map[int]algo.State
	allowed int64
	total   int64
}

func newModel(p floodgate.Policy) *model {
	if p == (floodgate.Policy{}) {
		return nil
	}
	return &model{p: p, states: map[int]algo.State{}}
}

// observe replays a request of identity id sent at at.
func (m *model) observe(id int, at time.Time, cost int64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o := algo.Step(m.p, m.states[id], at.UnixMicro(), cost)
	if o.Commit {
		m.states[id] = o.State
	}
	m.total++
	if o.Result.Allowed {
		m.allowed++
	}
}

func (m *model) denyRatio() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return ratio(m.total-m.allowed, m.total)
}

// transportError reports whether err is a failure to get any answer from
// the service: the connection refused, reset or closed, TLS failed, the
// service does not speak HTTP/2 (gRPC), grpc-go's UNAVAILABLE for a
// connection that failed. An answer the load generator could not take
// (an HTTP status, a gRPC status the service sent, a malformed body) and a
// timeout are not.
func transportError(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	var se *statusError
	if errors.As(err, &se) {
		return false
	}
	if st, ok := status.FromError(err); ok {
		return st.Code() == codes.Unavailable && strings.Contains(st.Message(), "connection error")
	}
	var (
		op      *net.OpError
		ue      *url.Error
		rh      tls.RecordHeaderError
		cv      *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		alert   tls.AlertError
	)
	return errors.As(err, &op) || errors.As(err, &ue) || errors.As(err, &rh) || errors.As(err, &cv) ||
		errors.As(err, &unknown) || errors.As(err, &alert) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, errNothingRead) || errors.Is(err, errClosedUnsent) || errors.Is(err, errNotHTTP2) || errors.Is(err, errConnClosed) || errors.Is(err, errConnGone)
}
