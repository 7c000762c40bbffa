package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/vectors"
)

// Fan-in: 50 users firing concurrent requests at one instant against a
// per-user layer of 30 and a global layer.
const (
	fanUsers     = 50
	fanUserLimit = 30
)

// testFanIn is the concurrency proof of layered decisions whose layers live
// in different slots, for every algorithm:
//
//   - 40 requests per user, global layer 10,000: the per-user layer binds,
//     every user gets exactly 30, 1,500 in all;
//   - 30 requests per user, global layer 1,000: the global layer binds,
//     exactly 1,000 pass, no user above 30;
//   - 40 requests per user, global layer 1,000: both bind; exactly 1,000
//     pass, no user above 30. (When every part was reserved at once, a
//     request the global layer denied while it was full of reservations
//     that the per-user layers were about to release would have passed a
//     moment later: 760 to 800 passed. The global layer's part is now
//     reserved last, only by requests its users' layers admitted.)
//
// In every case the counters every layer holds afterwards are exactly what
// was admitted: denied requests consumed nothing anywhere. It runs for
// the given algorithms (each used for both layers).
func testFanIn(t *testing.T, e *env, algs ...floodgate.Algorithm) {
	for _, a := range algs {
		t.Run(a.String(), func(t *testing.T) {
			t.Run("per-user layer binds", func(t *testing.T) { fanIn(t, e, a, 40, 10_000) })
			t.Run("global layer binds", func(t *testing.T) { fanIn(t, e, a, 30, 1_000) })
			t.Run("both bind", func(t *testing.T) { fanIn(t, e, a, 40, 1_000) })
		})
	}
}

func fanIn(t *testing.T, e *env, a floodgate.Algorithm, perUser int, globalLimit int64) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	user := layered(t, fmt.Sprintf("fan%d-%d-user", perUser, globalLimit), a, fanUserLimit)
	global := layered(t, fmt.Sprintf("fan%d-%d-global", perUser, globalLimit), a, globalLimit)
	now := vectors.T0.Add(11 * time.Hour).UnixMicro()
	gl := e.layerAt(global, "global", now, 1)
	var uls [fanUsers]floodgate.Layer
	split := 0
	for u := range uls {
		uls[u] = e.layerAt(user, fmt.Sprintf("user%02d", u), now, 1)
		if Slot(uls[u].Key) != Slot(gl.Key) {
			split++
		}
	}
	if split == 0 {
		t.Fatal("no user layer is in another slot than the global layer")
	}
	var admitted [fanUsers]atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, fanUsers*perUser)
	for u := range fanUsers {
		for range perUser {
			wg.Go(func() {
				<-start
				out, err := e.decide(ctx, now, []floodgate.Layer{uls[u], gl})
				if err != nil {
					errs <- err
					return
				}
				if floodgate.NewDecision(out).Allowed {
					admitted[u].Add(1)
				}
			})
		}
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	var total, counted int64
	for u := range fanUsers {
		got := admitted[u].Load()
		held := fanUserLimit - e.peek(t, now, uls[u]).Remaining
		if held != got {
			t.Errorf("user %d: %d admitted, but the user layer counts %d", u, got, held)
		}
		if got > fanUserLimit {
			t.Errorf("user %d: %d admitted, above the per-user limit %d", u, got, fanUserLimit)
		}
		if globalLimit >= fanUsers*fanUserLimit && got != fanUserLimit {
			t.Errorf("user %d: %d admitted, want exactly %d", u, got, fanUserLimit)
		}
		total += got
		counted += held
	}
	globalHeld := globalLimit - e.peek(t, now, gl).Remaining
	if globalHeld != total || counted != total {
		t.Fatalf("%d admitted; the global layer counts %d and the user layers %d in all: both must equal what was admitted", total, globalHeld, counted)
	}
	limit := min(globalLimit, int64(fanUsers*min(perUser, fanUserLimit)))
	if total != limit {
		t.Fatalf("%d admitted, want exactly %d", total, limit)
	}
	t.Logf("%d of %d requests admitted (at most %d); %d of %d users' layers in another slot than the global one", total, fanUsers*perUser, limit, split, fanUsers)
}
