package faulttest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestEarlyCancelledCallersOpenBreaker: Envoy calls with its default
// 20 ms deadline and cancels a call early when the downstream request is
// reset. The call's bound is then four fifths of 20 ms, a timer of its
// own that the caller's cancellation ends. With Redis stalled, a decision
// a batch had taken came back as its caller's cancellation, which the
// breaker counts as nobody's fault, while the batch itself timed out on
// the stalled Redis with nobody to count it: the breaker never opened
// (review12: 500 such calls, 3 runs of 3, against an open breaker within
// the first few dozen calls without the early cancellation). The
// decision's caller now waits for the batch's answer until the call's own
// deadline, so a decision sent and failed counts against Redis whatever
// its caller did since.
func TestEarlyCancelledCallersOpenBreaker(t *testing.T) {
	leakCheck(t)
	srv := redistest.Start(t)
	r := newRig(t, newClient(t, srv.Addr), fallback.Options{})
	p := policy(t, "api", 1_000_000)
	r.waitCentral(p)
	resume := stopRedis(t, srv)
	var wg sync.WaitGroup
	for i := 0; i < 500 && !r.watch.opened(fallback.DefaultPartition); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			reset := time.AfterFunc(10*time.Millisecond, cancel)
			defer reset.Stop()
			_, _ = r.lim.Allow(ctx, p, fmt.Sprint("caller-", i))
		}()
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	if !r.watch.opened(fallback.DefaultPartition) {
		t.Errorf("breaker never opened over 500 calls on a stalled Redis, each cancelled at 10 ms of its 20 ms deadline (states %v)", r.watch.history())
	}
	resume()
	r.waitCentral(p)
}

// TestEarlyCancelledLoneCallersOpenBreaker: Envoy's early cancellation as
// in TestEarlyCancelledCallersOpenBreaker, from one caller at a time, so
// that every decision goes alone, sent by its caller rather than in a
// batch. The call's bound, four fifths of 20 ms, is below the 16 ms a
// shared deadline needs, and its timer of its own, made from the
// caller's context, ended with the caller's cancellation: on the stalled
// Redis (after the first call, whose connection its timeout closed, each
// call waited for a new connection's setup) go-redis returned
// context.Canceled, which the breaker does not count, and it never
// opened (lonecancel: 0 of 45 calls at concurrency 1 and 2, each failing
// "store unavailable: redis: context canceled", not degraded; with
// deadlines of 200 ms, whose bound is a shared deadline, it opened
// within ten calls). The call now ends by its own bound whatever its
// caller does, and counts.
func TestEarlyCancelledLoneCallersOpenBreaker(t *testing.T) {
	leakCheck(t)
	srv := redistest.Start(t)
	r := newRig(t, newClient(t, srv.Addr), fallback.Options{})
	p := policy(t, "api", 1_000_000)
	r.waitCentral(p)
	resume := stopRedis(t, srv)
	var errs []error
	for i := 0; i < 100 && !r.watch.opened(fallback.DefaultPartition); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		reset := time.AfterFunc(10*time.Millisecond, cancel)
		if _, err := r.lim.Allow(ctx, p, fmt.Sprint("caller-", i)); err != nil {
			errs = append(errs, err)
		}
		reset.Stop()
		cancel()
	}
	if !r.watch.opened(fallback.DefaultPartition) {
		t.Errorf("breaker never opened over 100 calls one at a time on a stalled Redis, each cancelled at 10 ms of its 20 ms deadline (states %v); %d calls failed, the first with %v", r.watch.history(), len(errs), firstErr(errs))
	}
	resume()
	r.waitCentral(p)
}

// firstErr returns errs' first error, nil if none.
func firstErr(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return errs[0]
}
