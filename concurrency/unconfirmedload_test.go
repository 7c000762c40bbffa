package concurrency

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/replicawait"
)

// TestUnconfirmedReleasedUnderLoad: 50 concurrent acquirers on one
// identity (limit 5), through a replicawait.Client whose primary's only
// replica is stopped, each with a 1 s deadline. Every acquire the primary
// granted is released again, so that no slot stays taken once they are
// done. The release went through the replicawait.Client within what the
// acquire left of its deadline, queued behind the commands waiting for
// the replica, and failed ("too many commands waiting for replicas"): an
// outside walk saw all 5 slots taken for the lease TTL.
func TestUnconfirmedReleasedUnderLoad(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	c := primary.Client(t)
	ctx := context.Background()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if n, _ := c.Do(ctx, "WAIT", 1, 100).Int(); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica did not connect")
		}
	}
	if err := posix.Kill(replica.Pid, posix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = posix.Kill(replica.Pid, posix.SIGCONT) })
	w, err := replicawait.New(c, replicawait.Options{Replicas: 1, Timeout: 200 * time.Millisecond, MaxConcurrent: 5})
	if err != nil {
		t.Fatal(err)
	}
	st, err := NewRedisStore(w)
	if err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, st, Policy{Name: "load5", Limit: 5, LeaseTTL: time.Minute}, "ul")

	const acquirers = 50
	var wg sync.WaitGroup
	var mu sync.Mutex
	var granted, released int
	var failures, others []error
	// A burst whose acquires all found the places taken (replicawait's
	// ErrBusy) proves nothing: it is sent again, up to 5 times.
	for round := 0; granted == 0 && round < 5; round++ {
		for range acquirers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				actx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				_, err := l.Acquire(actx, "U")
				var ue *UnconfirmedError
				mu.Lock()
				defer mu.Unlock()
				if !errors.As(err, &ue) {
					others = append(others, err)
					return
				}
				granted++
				if ue.Released {
					released++
				} else {
					failures = append(failures, ue.ReleaseErr)
				}
			}()
		}
		wg.Wait()
	}
	// An acquire whose answer was cut off (ErrIndeterminate) may hold a
	// slot until the lease TTL: the caller was told so. No other may.
	indeterminate, busy := 0, 0
	for _, err := range others {
		switch {
		case errors.Is(err, floodgate.ErrIndeterminate):
			indeterminate++
		case errors.Is(err, replicawait.ErrBusy):
			busy++
		}
	}
	t.Logf("%d acquires granted on the primary (%d released again), %d cut off, %d not sent (busy), %d other", granted, released, indeterminate, busy, len(others)-indeterminate-busy)
	if granted == 0 {
		t.Fatalf("no acquire was granted on the primary: the test proves nothing (%v)", others)
	}
	if n := c.ZCard(ctx, l.Key("U")).Val(); released != granted || n > int64(indeterminate) {
		t.Fatalf("after %d acquirers: %d of %d unconfirmed leases released, %d slots held with %d acquires cut off (want all released, at most the cut off held); release errors: %v", acquirers, released, granted, n, indeterminate, failures)
	}
}
