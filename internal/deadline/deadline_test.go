package deadline

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync"
	"testing"
	"time"
)

type key struct{}

func TestSharedDeadline(t *testing.T) {
	ticks := New()
	parent := context.WithValue(context.Background(), key{}, "v")
	now := time.Now()
	d := 50 * time.Millisecond
	ctx, cancel := ticks.WithTimeout(parent, now, d)
	defer cancel()
	got, ok := ctx.Deadline()
	if !ok {
		t.Fatal("no deadline")
	}
	if want := now.Add(d); got.After(want) || !got.After(want.Add(-Tick)) {
		t.Errorf("deadline %v after now, want in (%v, %v]", got.Sub(now), d-Tick, d)
	}
	if v := ctx.Value(key{}); v != "v" {
		t.Errorf("Value = %v, want the parent's", v)
	}
	if ctx.Err() != nil {
		t.Errorf("Err before the deadline = %v", ctx.Err())
	}
	// Another context of the same tick shares the channel.
	ctx2, cancel2 := ticks.WithTimeout(context.Background(), now, d)
	defer cancel2()
	if ctx.Done() != ctx2.Done() {
		t.Error("two contexts of one tick have different Done channels")
	}
	// One of another tick does not.
	ctx3, cancel3 := ticks.WithTimeout(context.Background(), now.Add(5*Tick), d)
	defer cancel3()
	if ctx.Done() == ctx3.Done() {
		t.Error("contexts of different ticks share a Done channel")
	}
	<-ctx.Done()
	if end := time.Now(); end.Before(got) {
		t.Errorf("Done closed %v before the deadline", got.Sub(end))
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("Err = %v, want DeadlineExceeded", ctx.Err())
	}
	if !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		t.Errorf("Cause = %v, want DeadlineExceeded", context.Cause(ctx))
	}
}

func TestParentEndsFirst(t *testing.T) {
	ticks := New()
	now := time.Now()
	early, cancel := context.WithDeadline(context.Background(), now.Add(20*time.Millisecond))
	defer cancel()
	if ctx, _ := ticks.WithTimeout(early, now, time.Second); ctx != early {
		t.Errorf("parent with an earlier deadline: got %v, want the parent", ctx)
	}
	ended, end := context.WithCancel(context.Background())
	end()
	if ctx, _ := ticks.WithTimeout(ended, now, time.Second); ctx != ended {
		t.Errorf("ended parent: got %v, want the parent", ctx)
	}
	late, cancel := context.WithDeadline(context.Background(), now.Add(time.Hour))
	defer cancel()
	ctx, _ := ticks.WithTimeout(late, now, time.Second)
	if d, _ := ctx.Deadline(); !d.Before(now.Add(time.Second + Tick)) {
		t.Errorf("parent with a later deadline: deadline %v, want about 1s", d.Sub(now))
	}
}

// TestCoarseDeadline: a duration beyond the fine horizon (REDIS_TIMEOUT's
// default 10 s, say) is shared on a CoarseTick: up to 64 ms early, never
// late, one Done channel for every context of the coarse tick; the fine
// horizon itself stays fine.
func TestCoarseDeadline(t *testing.T) {
	ticks := New()
	now := time.Now()
	for _, tc := range []struct {
		d    time.Duration
		unit time.Duration
	}{
		{(ringSize - 1) * Tick, Tick},
		{ringSize * Tick, CoarseTick},
		{10 * time.Second, CoarseTick},
		{(ringSize - 1) * CoarseTick, CoarseTick},
	} {
		ctx, cancel := ticks.WithTimeout(context.Background(), now, tc.d)
		got, _ := ctx.Deadline()
		if want := now.Add(tc.d); got.After(want) || !got.After(want.Add(-tc.unit)) {
			t.Errorf("%v: deadline %v after now, want in (%v, %v]", tc.d, got.Sub(now), tc.d-tc.unit, tc.d)
		}
		if _, own := ctx.(*shared); !own {
			t.Errorf("%v: a context of its own, want a shared one", tc.d)
		}
		cancel()
		if ctx.Err() != nil {
			t.Errorf("%v: cancel ended a shared context: %v", tc.d, ctx.Err())
		}
	}
	a, _ := ticks.WithTimeout(context.Background(), now, 10*time.Second)
	b, _ := ticks.WithTimeout(context.Background(), now.Add(time.Millisecond), 10*time.Second)
	c, _ := ticks.WithTimeout(context.Background(), now.Add(CoarseTick), 10*time.Second)
	da, _ := a.Deadline()
	db, _ := b.Deadline()
	if da.Equal(db) != (a.Done() == b.Done()) {
		t.Error("two contexts of one coarse tick have different Done channels, or of two ticks the same")
	}
	if a.Done() == c.Done() {
		t.Error("contexts a coarse tick apart share a Done channel")
	}
}

// TestOwnTimer covers the durations that get context.WithDeadline: too
// short to round, beyond the horizon, a time before the Ticks.
func TestOwnTimer(t *testing.T) {
	ticks := New()
	now := time.Now()
	for _, tc := range []struct {
		name string
		now  time.Time
		d    time.Duration
	}{
		{"short", now, MinShared*Tick - 1},
		{"beyond the coarse horizon", now, ringSize*CoarseTick + 1},
		{"before New", ticks.base.Add(-Tick), time.Second},
		// Durations whose tick would overflow int64 once the Ticks has
		// run a while (serve --decision-timeout 2562047h, after 47
		// minutes): the old code computed a negative tick and indexed
		// its ring with it (a panic).
		{"the longest duration", ticks.base.Add(time.Hour), math.MaxInt64},
		{"overflowing after 47 minutes", ticks.base.Add(47 * time.Minute), 2562047 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := ticks.WithTimeout(context.Background(), tc.now, tc.d)
			if d, _ := ctx.Deadline(); !d.Equal(tc.now.Add(tc.d)) {
				t.Errorf("deadline %v, want exactly %v", d, tc.now.Add(tc.d))
			}
			cancel()
			if !errors.Is(ctx.Err(), context.Canceled) {
				t.Errorf("after cancel: Err = %v, want Canceled (its own context)", ctx.Err())
			}
		})
	}
}

// TestParentCancelNotPassedOn documents the trade: the shared context ends
// at its deadline, not with its parent's cancellation.
func TestParentCancelNotPassedOn(t *testing.T) {
	ticks := New()
	parent, cancel := context.WithCancel(context.Background())
	ctx, _ := ticks.WithTimeout(parent, time.Now(), 30*time.Millisecond)
	cancel()
	if ctx.Err() != nil {
		t.Errorf("Err after the parent's cancellation = %v, want nil until the deadline", ctx.Err())
	}
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("Err = %v, want DeadlineExceeded", ctx.Err())
	}
}

// TestDerived: contexts derived from a shared one end with it, registered
// with the tick's context rather than watched by a goroutine per child, and
// keep their own cancellation.
func TestDerived(t *testing.T) {
	ticks := New()
	// The goroutine count and the child's own cancellation are checked
	// under a shared context far from its end (a 20 ms one could end
	// during the 1000 WithCancel calls on a loaded machine under the race
	// detector, and a child then starts with its parent's Err).
	long, _ := ticks.WithTimeout(context.Background(), time.Now(), 4*time.Second) // shared: within the horizon
	before := runtime.NumGoroutine()
	var many []context.CancelFunc
	for range 1000 {
		_, cancel := context.WithCancel(long)
		many = append(many, cancel)
	}
	if n := runtime.NumGoroutine() - before; n > 100 {
		t.Errorf("1000 derived contexts started %d goroutines, want none", n)
	}
	for _, cancel := range many {
		cancel()
	}
	other, cancelOther := context.WithCancel(long)
	cancelOther()
	if !errors.Is(other.Err(), context.Canceled) {
		t.Errorf("cancelled child: Err = %v", other.Err())
	}
	ctx, _ := ticks.WithTimeout(context.Background(), time.Now(), 20*time.Millisecond)
	child, cancelChild := context.WithCancel(ctx)
	defer cancelChild()
	ran := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { close(ran) })
	defer stop()
	<-child.Done()
	if !errors.Is(child.Err(), context.DeadlineExceeded) {
		t.Errorf("child: Err = %v, want DeadlineExceeded (its parent's)", child.Err())
	}
	<-ran
	if ctx.Err() == nil {
		t.Error("the shared context has not ended")
	}
}

// TestConcurrent has many goroutines take deadlines across ticks at once
// (run with -race): each gets a deadline in its window and every one ends.
func TestConcurrent(t *testing.T) {
	ticks := New()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 64 {
		wg.Go(func() {
			for i := range 200 {
				now := time.Now()
				d := time.Duration(16+(g*7+i)%40) * Tick
				ctx, cancel := ticks.WithTimeout(context.Background(), now, d)
				got, _ := ctx.Deadline()
				if got.After(now.Add(d)) || !got.After(now.Add(d-Tick)) {
					errs <- errors.New("deadline " + got.Sub(now).String() + " for " + d.String())
					cancel()
					return
				}
				if i%50 == 0 {
					<-ctx.Done()
				}
				cancel()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func BenchmarkWithTimeout(b *testing.B) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.Run("shared", func(b *testing.B) {
		ticks := New()
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := ticks.WithTimeout(parent, time.Now(), 50*time.Millisecond)
			_ = ctx.Err()
			cancel()
		}
	})
	b.Run("context.WithTimeout", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := context.WithTimeout(parent, 50*time.Millisecond)
			_ = ctx.Err()
			cancel()
		}
	})
}

// TestGoneSeesTheParent: a shared context does not end with its parent,
// but Gone reports the parent's cancellation, through a context derived
// from the shared one and through two shared levels (a request's deadline,
// then a store's budget), and nil while nothing has ended.
func TestGoneSeesTheParent(t *testing.T) {
	ticks := New()
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	now := time.Now()
	outer, _ := ticks.WithTimeout(parent, now, time.Second)
	inner, _ := ticks.WithTimeout(context.WithValue(outer, key{}, "w"), now, 500*time.Millisecond)
	if _, ok := inner.(*shared); !ok {
		t.Fatalf("inner is a %T, want a shared context", inner)
	}
	for _, ctx := range []context.Context{parent, outer, inner} {
		if err := Gone(ctx); err != nil {
			t.Fatalf("Gone before the cancellation = %v, want nil", err)
		}
	}
	if err := Gone(context.Background()); err != nil {
		t.Fatalf("Gone(Background) = %v, want nil", err)
	}
	cancel()
	if inner.Err() != nil || outer.Err() != nil {
		t.Fatalf("shared contexts ended with their parent: %v, %v", outer.Err(), inner.Err())
	}
	for _, ctx := range []context.Context{outer, inner} {
		if err := Gone(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("Gone after the parent's cancellation = %v, want context.Canceled", err)
		}
	}
	if v := inner.Value(key{}); v != "w" {
		t.Errorf("Value = %v, want the nearest parent's", v)
	}
}

// TestBind: Bind's context ends when a shared deadline's parent ends (the
// client goes), keeps the deadline, and comes back as it is when nothing
// in its chain can end that way; a caller already gone gets its error.
func TestBind(t *testing.T) {
	ticks := New()
	req, hangUp := context.WithCancel(context.Background())
	ctx, stop := ticks.WithTimeout(req, time.Now(), time.Minute)
	defer stop()
	bound, release, err := Bind(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	want, _ := ctx.Deadline()
	if d, ok := bound.Deadline(); !ok || !d.Equal(want) {
		t.Errorf("bound deadline %v %v, want ctx's, %v", d, ok, want)
	}
	if bound.Err() != nil {
		t.Fatalf("bound ended before its caller went: %v", bound.Err())
	}
	hangUp()
	<-bound.Done()
	if !errors.Is(bound.Err(), context.Canceled) {
		t.Errorf("bound ended with %v, want context.Canceled", bound.Err())
	}
	if ctx.Err() != nil {
		t.Errorf("the shared deadline ended with its parent: %v", ctx.Err())
	}
	if _, _, err := Bind(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Bind of a gone caller's context: %v, want context.Canceled", err)
	}

	plain, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if b, rel, err := Bind(plain); err != nil || b != plain {
		t.Errorf("Bind of a context without a shared deadline: %v, %v, want it as it is", b, err)
	} else {
		rel()
	}
	detached, stop2 := ticks.WithTimeout(context.Background(), time.Now(), time.Minute)
	defer stop2()
	if b, rel, err := Bind(detached); err != nil || b != detached {
		t.Errorf("Bind of a shared deadline whose parent cannot end: %v, %v, want it as it is", b, err)
	} else {
		rel()
	}
}

// TestCallTimeoutNotCancelled: WithCallTimeout's contexts end at their
// deadline, not with their parent's cancellation, whatever the duration:
// shared ones as WithTimeout's, and the ones with a timer of their own
// (too short to round, beyond the horizon), which WithTimeout makes from
// the parent. Gone sees the parent's end through each, its values pass
// through, and its CancelFunc ends it.
func TestCallTimeoutNotCancelled(t *testing.T) {
	ticks := New()
	for _, tc := range []struct {
		name string
		d    time.Duration
		own  bool // a timer of its own
	}{
		{"short", MinShared*Tick - 1, true},
		{"shared", time.Second, false},
		{"beyond the coarse horizon", ringSize*CoarseTick + 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
			now := time.Now()
			ctx, stop := ticks.WithCallTimeout(parent, now, tc.d)
			cancel()
			if err := ctx.Err(); err != nil {
				t.Errorf("Err after the parent's cancellation = %v, want nil until the deadline", err)
			}
			if err := Gone(ctx); !errors.Is(err, context.Canceled) {
				t.Errorf("Gone after the parent's cancellation = %v, want context.Canceled", err)
			}
			if d, _ := ctx.Deadline(); d.After(now.Add(tc.d)) {
				t.Errorf("deadline %v, after %v", d, now.Add(tc.d))
			}
			if v := ctx.Value(key{}); v != "v" {
				t.Errorf("Value = %v, want the parent's", v)
			}
			if tc.own {
				stop()
				if !errors.Is(ctx.Err(), context.Canceled) {
					t.Errorf("after its CancelFunc: Err = %v, want Canceled (a timer of its own)", ctx.Err())
				}
			}
			stop()
		})
	}
	short, stop := ticks.WithCallTimeout(context.Background(), time.Now(), time.Millisecond)
	defer stop()
	<-short.Done()
	if err := short.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Err at the deadline = %v, want DeadlineExceeded", err)
	}
	if err := context.Cause(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Cause at the deadline = %v, want DeadlineExceeded", err)
	}
}
