package faulttest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/metrics"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

const (
	// budget is the primary call budget of the load policies.
	budget = 50 * time.Millisecond
	// margin is what a decision may take beyond its budget: a correctness
	// bound (the call returned, on its deadline rather than on a client
	// timeout of seconds or never), not a performance assertion. It is
	// generous because -race on 2 cores shared with other test binaries
	// has been seen to stall a goroutine for 300ms.
	margin = 750 * time.Millisecond
	// exactBudget is the budget of the policies used to check exact
	// central counting after recovery, large enough that a scheduling
	// hiccup cannot turn a healthy call into a fallback.
	exactBudget = 2 * time.Second
	// recoveryTimeout bounds the wait for central counting to come back.
	recoveryTimeout = 20 * time.Second
)

// leakCheck fails t if goroutines started during the test are still
// running after all of its cleanups (clients closed, servers stopped).
// Call it first, so that its cleanup runs last; goleak retries while
// goroutines settle.
func leakCheck(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// newClient returns a go-redis client on addr with the options a
// production deployment should use, closed at cleanup.
func newClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// watcher is the rig's fallback.Observer: it feeds the metrics and keeps
// the history of breaker states.
type watcher struct {
	*metrics.Metrics
	mu     sync.Mutex
	states map[string][]fallback.BreakerState
}

func (w *watcher) ObserveBreaker(partition string, s fallback.BreakerState) {
	w.Metrics.ObserveBreaker(partition, s)
	w.mu.Lock()
	w.states[partition] = append(w.states[partition], s)
	w.mu.Unlock()
}

// history returns the breaker states seen, by partition.
func (w *watcher) history() map[string][]fallback.BreakerState {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string][]fallback.BreakerState{}
	for k, v := range w.states {
		out[k] = append([]fallback.BreakerState(nil), v...)
	}
	return out
}

// opened reports whether the breaker of partition has been open.
func (w *watcher) opened(partition string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.states[partition] {
		if s == fallback.BreakerOpen {
			return true
		}
	}
	return false
}

// rig is a limiter as a production service would build it: redisstore
// under fallback (local memstore, metrics, a hook), on one client.
type rig struct {
	t      *testing.T
	store  *fallback.Store
	lim    *floodgate.Limiter
	reg    *prometheus.Registry
	watch  *watcher
	hooked sync.Map // fallback.Reason → *atomic.Int64
	late   atomic.Int64
	seq    atomic.Int64
	probes atomic.Int64 // degraded decisions made by waitCentral
}

// probesDegraded returns how many of waitCentral's decisions were degraded.
func (r *rig) probesDegraded() int64 { return r.probes.Load() }

func newRig(t *testing.T, client redisstore.Client, opts fallback.Options) *rig {
	t.Helper()
	return newRigWith(t, client, redisstore.Options{}, opts)
}

// newRigWith is newRig with the Redis store's options.
func newRigWith(t *testing.T, client redisstore.Client, so redisstore.Options, opts fallback.Options) *rig {
	t.Helper()
	primary, err := redisstore.New(client, so)
	if err != nil {
		t.Fatal(err)
	}
	local, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, reg: prometheus.NewRegistry()}
	m, err := metrics.New(r.reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.watch = &watcher{Metrics: m, states: map[string][]fallback.BreakerState{}}
	opts.Observer = r.watch
	opts.OnFallback = func(reason fallback.Reason, err error) {
		n, _ := r.hooked.LoadOrStore(reason, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	if opts.Budget == 0 {
		opts.Budget = budget
	}
	if opts.Budgets == nil {
		opts.Budgets = map[string]time.Duration{"exact": exactBudget}
	}
	if opts.Breaker.OpenFor == 0 {
		opts.Breaker.OpenFor = 200 * time.Millisecond
	}
	if opts.Breaker.MaxOpenFor == 0 {
		opts.Breaker.MaxOpenFor = time.Second
	}
	if r.store, err = fallback.New(primary, local, opts); err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("ft.%x", time.Now().UnixNano()&0xffffffffff)
	if r.lim, err = floodgate.New(r.store, floodgate.Options{Prefix: prefix}); err != nil {
		t.Fatal(err)
	}
	return r
}

// policy returns a token bucket of limit per hour (no meaningful refill
// during a test, no window edge to cross) whose budget is the store's.
func policy(t *testing.T, name string, limit int64) floodgate.Policy {
	t.Helper()
	p, err := floodgate.NewTokenBucket(name, limit, time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// decide makes one decision and checks that it returned within its
// budget plus the margin.
func (r *rig) decide(ctx context.Context, p floodgate.Policy, id string) (floodgate.Result, fallback.Outcome, error) {
	var o fallback.Outcome
	start := time.Now()
	res, err := r.lim.Allow(fallback.NewContext(ctx, &o), p, id)
	if took, bound := time.Since(start), r.store.Budget(p.Name)+margin; took > bound {
		r.late.Add(1)
		r.t.Errorf("decision for %s took %v, beyond its budget %v + margin", p.Name, took, r.store.Budget(p.Name))
	}
	return res, o, err
}

// fallbacks returns rate_limit_fallback_total summed over modes, by reason.
func (r *rig) fallbacks() map[string]float64 {
	r.t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "rate_limit_fallback_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "reason" && m.GetCounter().GetValue() > 0 {
					out[lp.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// checkCounted checks that every degraded decision was counted in the
// metric and reported to the hook, and that some were.
func (r *rig) checkCounted(degraded int64) {
	r.t.Helper()
	var metric, hook float64
	for reason, n := range r.fallbacks() {
		metric += n
		if h, ok := r.hooked.Load(reasonByName(reason)); ok {
			hook += float64(h.(*atomic.Int64).Load())
		}
	}
	if degraded == 0 || metric != float64(degraded) || hook != float64(degraded) {
		r.t.Fatalf("%d degraded decisions; rate_limit_fallback_total %v (by reason %v), hook %v: want all equal and > 0",
			degraded, metric, r.fallbacks(), hook)
	}
}

func reasonByName(name string) fallback.Reason {
	for _, r := range fallback.Reasons() {
		if r.String() == name {
			return r
		}
	}
	return fallback.ReasonNone
}

// waitCentral polls with fresh identities until a decision is taken by the
// primary again and every breaker is closed, and returns how long it took.
func (r *rig) waitCentral(p floodgate.Policy) time.Duration {
	r.t.Helper()
	start := time.Now()
	for {
		_, o, err := r.decide(context.Background(), p, fmt.Sprint("probe-", r.seq.Add(1)))
		if o.Degraded {
			r.probes.Add(1)
		}
		if err == nil && !o.Degraded && r.store.BreakerState() == fallback.BreakerClosed {
			return time.Since(start)
		}
		if time.Since(start) > recoveryTimeout {
			r.t.Fatalf("no central decision within %v (last outcome %+v, error %v, breakers %v)",
				recoveryTimeout, o, err, r.store.BreakerStates())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkExact checks central counting: a fresh identity under a limit of n
// gets exactly n of n+5 requests, every one decided by the primary.
func (r *rig) checkExact() {
	r.t.Helper()
	r.waitCentral(policy(r.t, "exact", 20))
	p := policy(r.t, "exact", 20)
	id := fmt.Sprint("exact-", r.seq.Add(1))
	admitted := 0
	for i := range 25 {
		res, o, err := r.decide(context.Background(), p, id)
		if err != nil || o.Degraded {
			r.t.Fatalf("exactness check, request %d: error %v, outcome %+v; want a central decision (breaker history %v, fallbacks %v)", i, err, o, r.watch.history(), r.fallbacks())
		}
		if res.Allowed {
			admitted++
		}
	}
	if admitted != 20 {
		r.t.Fatalf("exactness check: %d of 25 admitted under a limit of 20", admitted)
	}
}

// load runs workers that decide continuously for ids (round robin) until
// stop is called, recording what happened.
type load struct {
	r        *rig
	p        floodgate.Policy
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	calls    atomic.Int64
	degraded atomic.Int64
	errs     atomic.Int64
	mu       sync.Mutex
	admitted map[string]int // by identity
	central  map[string]int // admitted by the primary, by identity
	byReason map[fallback.Reason]int
	firstErr error
	lastDeg  error // the primary's error behind the last degraded decision
	stopped  sync.Once
}

func (r *rig) startLoad(p floodgate.Policy, workers int, ids []string) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{r: r, p: p, cancel: cancel, admitted: map[string]int{}, central: map[string]int{}, byReason: map[fallback.Reason]int{}}
	r.t.Cleanup(l.halt) // a test that fails early leaves no worker behind
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := w; ctx.Err() == nil; i += workers {
				id := ids[i%len(ids)]
				res, o, err := r.decide(context.Background(), p, id)
				l.record(id, res, o, err)
				time.Sleep(time.Millisecond)
			}
		}()
	}
	return l
}

func (l *load) record(id string, res floodgate.Result, o fallback.Outcome, err error) {
	l.calls.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.errs.Add(1)
		if l.firstErr == nil {
			l.firstErr = err
		}
		return
	}
	if o.Degraded {
		l.degraded.Add(1)
		l.byReason[o.Reason]++
		l.lastDeg = fmt.Errorf("at %s: %w", time.Now().Format("15:04:05.000"), o.Err)
	}
	if res.Allowed {
		l.admitted[id]++
		if !o.Degraded {
			l.central[id]++
		}
	}
}

// halt ends the load and waits for its workers.
func (l *load) halt() {
	l.stopped.Do(func() {
		l.cancel()
		l.wg.Wait()
	})
}

// stop ends the load and checks that no decision failed outright.
func (l *load) stop() {
	l.r.t.Helper()
	l.halt()
	if n := l.errs.Load(); n > 0 {
		l.r.t.Fatalf("%d decisions returned an error (first: %v); the failure mode should have decided them", n, l.firstErr)
	}
}

// report logs the over-admission per identity against limit and returns
// the largest admitted count.
func (l *load) report(what string, limit int64) int {
	l.r.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	worst := 0
	for _, n := range l.admitted {
		worst = max(worst, n)
	}
	var reasons []string
	for r, n := range l.byReason {
		reasons = append(reasons, fmt.Sprintf("%v=%d", r, n))
	}
	l.r.t.Logf("MEASURE %s: %d decisions, %d degraded (%s); admitted per identity at most %d for a limit of %d (%.0f%% of the limit)",
		what, l.calls.Load(), l.degraded.Load(), strings.Join(reasons, " "), worst, limit, 100*float64(worst)/float64(limit))
	return worst
}

// ids returns n identities named after prefix.
func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(prefix, i)
	}
	return out
}
