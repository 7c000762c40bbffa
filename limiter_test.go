package floodgate_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/memstore"
)

func newMem(t *testing.T) *floodgate.Limiter {
	t.Helper()
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(st, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestBadInputChangesNothing(t *testing.T) {
	l := newMem(t)
	ctx := context.Background()
	p, _ := floodgate.NewFixedWindow("bad", 5, time.Minute)
	for _, cost := range []int64{-1, floodgate.MaxCost + 1} {
		if _, err := l.AllowN(ctx, p, "u", cost); !errors.Is(err, floodgate.ErrInvalidCost) {
			t.Errorf("cost %d: err = %v", cost, err)
		}
	}
	if _, err := l.Allow(ctx, floodgate.Policy{Name: "x"}, "u"); !errors.Is(err, floodgate.ErrInvalidPolicy) {
		t.Errorf("zero policy: err = %v", err)
	}
	if _, err := l.AllowLayers(ctx, 1); !errors.Is(err, floodgate.ErrInvalidLayers) {
		t.Errorf("no layers: err = %v", err)
	}
	if _, err := l.AllowLayers(ctx, 1, floodgate.LayerSpec{Policy: p, Identity: "u"}, floodgate.LayerSpec{Policy: p, Identity: "u"}); !errors.Is(err, floodgate.ErrInvalidLayers) {
		t.Errorf("duplicate layers: err = %v", err)
	}
	many := make([]floodgate.LayerSpec, floodgate.MaxLayers+1) // more than a pooled frame holds
	for i := range many {
		many[i] = floodgate.LayerSpec{Policy: p, Identity: fmt.Sprint("u", i)}
	}
	if _, err := l.AllowLayers(ctx, 1, many...); !errors.Is(err, floodgate.ErrInvalidLayers) {
		t.Errorf("%d layers: err = %v", len(many), err)
	}
	if _, err := l.AllowLayers(ctx, 1, floodgate.LayerSpec{Policy: p, Identity: "u", Cost: -5}); !errors.Is(err, floodgate.ErrInvalidCost) {
		t.Errorf("negative layer cost: err = %v", err)
	}
	//lint:ignore SA1012 a nil context is the bad input under test
	if _, err := l.Allow(nil, p, "u"); !errors.Is(err, floodgate.ErrNilContext) {
		t.Errorf("nil context: err = %v", err)
	}
	//lint:ignore SA1012 a nil context is the bad input under test
	if _, err := l.AllowLayers(nil, 1, floodgate.LayerSpec{Policy: p, Identity: "u"}); !errors.Is(err, floodgate.ErrNilContext) {
		t.Errorf("nil context, layers: err = %v", err)
	}
	r, err := l.Peek(ctx, p, "u")
	if err != nil || r.Remaining != 5 {
		t.Fatalf("after bad input: %+v %v", r, err)
	}
	if _, err := floodgate.New(nil, floodgate.Options{}); err == nil {
		t.Error("New(nil) succeeded")
	}
	st, _ := memstore.New(memstore.Options{})
	if _, err := floodgate.New(st, floodgate.Options{Prefix: "{bad}"}); !errors.Is(err, floodgate.ErrInvalidKey) {
		t.Errorf("bad prefix: %v", err)
	}
}

// TestStepNeverOverAdmits drives every algorithm with random traffic and
// checks each one's stated bound over every window-length interval.
func TestStepNeverOverAdmits(t *testing.T) {
	const limit, window = 20, int64(1_000_000)
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingLog, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			p := floodgate.Policy{Name: "prop", Algorithm: alg, Limit: limit, Window: time.Duration(window) * time.Microsecond}
			rng := rand.New(rand.NewPCG(1, uint64(alg)))
			var st algo.State
			now := int64(1_800_000_000_000_000)
			type adm struct{ at, cost int64 }
			var admitted []adm
			for range 5000 {
				now += rng.Int64N(window / 10)
				cost := rng.Int64N(4)
				o := algo.Step(p, st, now, cost)
				if o.Result.Remaining < 0 || o.Result.Remaining > p.Capacity() {
					t.Fatalf("remaining %d out of range", o.Result.Remaining)
				}
				if !o.Result.Allowed && o.Result.Reason == floodgate.ReasonLimited && o.Result.RetryAfter <= 0 {
					t.Fatalf("denied with retry %v", o.Result.RetryAfter)
				}
				if o.Commit {
					st = o.State
					admitted = append(admitted, adm{now, cost})
				}
			}
			// Bound over any interval [t, t+window): Limit for sliding log,
			// 2×Limit for fixed window and sliding window counter,
			// Burst+Limit for the buckets.
			bound := int64(limit)
			switch alg {
			case floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA:
				bound = 2 * limit
			}
			j := 0
			var sum int64
			for i := range admitted {
				sum += admitted[i].cost
				for admitted[i].at-admitted[j].at >= window {
					sum -= admitted[j].cost
					j++
				}
				if sum > bound {
					t.Fatalf("%d admitted within one window, bound %d", sum, bound)
				}
			}
			if len(admitted) == 0 {
				t.Fatal("nothing admitted")
			}
		})
	}
}

func TestNewNilStore(t *testing.T) {
	_, err := floodgate.New(nil, floodgate.Options{})
	if !errors.Is(err, floodgate.ErrNilStore) || errors.Is(err, floodgate.ErrInvalidPolicy) {
		t.Errorf("New(nil) = %v, want ErrNilStore (and not ErrInvalidPolicy)", err)
	}
	// A nil pointer in the interface used to be accepted, and every
	// decision then panicked.
	var st *memstore.Store
	if _, err := floodgate.New(st, floodgate.Options{}); !errors.Is(err, floodgate.ErrNilStore) || !strings.Contains(err.Error(), "*memstore.Store") {
		t.Errorf("New((*memstore.Store)(nil)) = %v, want ErrNilStore naming the type", err)
	}
}

// TestDecisionResultOutOfRange: a Decision not built by NewDecision, its
// Binding past its layers, gives the zero Result instead of panicking.
func TestDecisionResultOutOfRange(t *testing.T) {
	for _, d := range []floodgate.Decision{{Binding: 5, Layers: []floodgate.Result{{}}}, {Binding: -1, Layers: []floodgate.Result{{}}}, {}} {
		if r := d.Result(); r != (floodgate.Result{}) {
			t.Errorf("%+v.Result() = %+v, want the zero Result", d, r)
		}
	}
}

// TestDecisionBindsTheLongestDenial: a decision several layers deny
// reports the layer whose denial lasts longest, so that waiting its
// RetryAfter is enough for every layer: a cost above a layer's capacity
// (never passes) first, then the longest RetryAfter, the first on ties (a
// retry-after walk: Retry-After 2 s from the first layer while the second
// needed 6 s).
func TestDecisionBindsTheLongestDenial(t *testing.T) {
	limited := func(ra time.Duration) floodgate.Result {
		return floodgate.Result{Reason: floodgate.ReasonLimited, RetryAfter: ra, Limit: int64(ra / time.Second)}
	}
	admits := floodgate.Result{Allowed: true, Limit: 9, Remaining: 1}
	tooCostly := floodgate.Result{Reason: floodgate.ReasonCostExceedsLimit, Limit: 2}
	for _, c := range []struct {
		name   string
		layers []floodgate.Result
		want   int
	}{
		{"longer second", []floodgate.Result{limited(2 * time.Second), limited(6 * time.Second)}, 1},
		{"longer first", []floodgate.Result{limited(6 * time.Second), limited(2 * time.Second)}, 0},
		{"tie", []floodgate.Result{admits, limited(3 * time.Second), limited(3 * time.Second)}, 1},
		{"cost above a capacity", []floodgate.Result{limited(7 * time.Second), tooCostly, limited(9 * time.Second)}, 1},
		{"one denies", []floodgate.Result{admits, limited(time.Second), admits}, 1},
	} {
		d := floodgate.NewDecision(append([]floodgate.Result(nil), c.layers...))
		if d.Allowed || d.Binding != c.want {
			t.Errorf("%s: Allowed %v, Binding %d, want denied by layer %d", c.name, d.Allowed, d.Binding, c.want)
			continue
		}
		if r := d.Result(); r.RetryAfter != c.layers[c.want].RetryAfter || r.Reason != c.layers[c.want].Reason {
			t.Errorf("%s: Result %+v, want layer %d's", c.name, r, c.want)
		}
	}
}

// TestCalendarErrorSaysItOnce: a quota with no calendar unit is reported
// with one prefix and the units to choose from.
func TestCalendarErrorSaysItOnce(t *testing.T) {
	_, err := floodgate.NewQuota("a", 10, floodgate.Calendar{})
	want := `floodgate: invalid policy: policy "a": quota calendar: unknown unit 0 (want day, week, month or anchored_month)`
	if !errors.Is(err, floodgate.ErrInvalidPolicy) || err.Error() != want {
		t.Errorf("NewQuota with Calendar{}: %v, want %s", err, want)
	}
}

// TestWaitSleepsThroughTheDelay: Wait returns a shaped GCRA request only
// after its Delay, returns a denial at once, and reports a context that
// ends during the sleep.
func TestWaitSleepsThroughTheDelay(t *testing.T) {
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC) // decisions at one instant; Wait sleeps real time
	lim, err := floodgate.New(store, floodgate.Options{Clock: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	// 10 per second, no burst beyond one, up to 150ms of shaping: the
	// second request at once is admitted 100ms late, the third denied.
	p := floodgate.Must(floodgate.NewGCRA("shape", 10, time.Second, 1))
	p.MaxDelay = 150 * time.Millisecond
	ctx := context.Background()
	if r, err := lim.Wait(ctx, p, "u", 1); err != nil || !r.Allowed || r.Delay != 0 {
		t.Fatalf("first: %+v %v", r, err)
	}
	start := time.Now()
	r, err := lim.Wait(ctx, p, "u", 1)
	if err != nil || !r.Allowed || r.Delay <= 0 {
		t.Fatalf("second: %+v %v", r, err)
	}
	if slept := time.Since(start); slept < r.Delay {
		t.Errorf("Wait returned after %v, before the delay %v", slept, r.Delay)
	}
	// The next one would need more than 150ms of shaping: denied, not waited for.
	if r, err := lim.Wait(ctx, p, "u", 1); err != nil || r.Allowed || r.RetryAfter <= 0 {
		t.Fatalf("third: %+v %v", r, err)
	}
	// A context that ends during the sleep.
	q := floodgate.Must(floodgate.NewGCRA("shape2", 1, time.Hour, 1))
	q.MaxDelay = 2 * time.Hour
	if _, err := lim.Wait(ctx, q, "v", 1); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	r, err = lim.Wait(cctx, q, "v", 1)
	if !errors.Is(err, context.DeadlineExceeded) || !r.Allowed || r.Delay < time.Hour/2 {
		t.Fatalf("cancelled: %+v %v", r, err)
	}
}

// TestPeekReportsTheShapingDelay: a peek under a GCRA policy with
// MaxDelay reports the Delay a request of cost 1 would get now (it
// reported 0 while the next check waited), and Wait does not sleep
// through a peek's Delay: nothing was consumed.
func TestPeekReportsTheShapingDelay(t *testing.T) {
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	lim, err := floodgate.New(store, floodgate.Options{Clock: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	// One unit per 400ms, bursts of 5, up to 1s of shaping.
	p := floodgate.Must(floodgate.NewGCRA("peekdelay", 5, 2*time.Second, 5))
	p.MaxDelay = time.Second
	ctx := context.Background()
	if r, err := lim.AllowN(ctx, p, "u", 5); err != nil || !r.Allowed || r.Delay != 0 {
		t.Fatalf("burst: %+v %v", r, err)
	}
	peek, err := lim.Peek(ctx, p, "u")
	if err != nil || !peek.Allowed || peek.Remaining != 0 {
		t.Fatalf("peek: %+v %v", peek, err)
	}
	r, err := lim.AllowN(ctx, p, "u", 1)
	if err != nil || !r.Allowed {
		t.Fatalf("check: %+v %v", r, err)
	}
	if got, want := peek.Delay, 400*time.Millisecond; got != want || r.Delay != want {
		t.Errorf("peek's Delay %v, the next check's %v; want both %v", got, r.Delay, want)
	}
	// Wait on a peek returns at once: with one unit an hour shaped up to
	// 2h, a peek after the first unit reports an hour's Delay, which a
	// sleeping Wait would end by the context's deadline.
	q := floodgate.Must(floodgate.NewGCRA("peekwait", 1, time.Hour, 1))
	q.MaxDelay = 2 * time.Hour
	if _, err := lim.AllowN(ctx, q, "v", 1); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	waited, err := lim.Wait(wctx, q, "v", 0)
	if err != nil || !waited.Allowed || waited.Delay != time.Hour {
		t.Fatalf("Wait(cost 0): %+v %v, want admitted with Delay 1h, at once", waited, err)
	}
}
