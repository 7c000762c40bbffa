package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/memstore"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/vectors"
	"github.com/redis/go-redis/v9"
)

// TestAutoPipeliner runs the vectors and the concurrency proof through
// go-redis's automatic pipeliner (blocking and deferred faces), which the
// Store accepts as a Client.
func TestAutoPipeliner(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	for name, get := range map[string]func() (*redis.AutoPipeliner, error){
		"blocking": c.AutoPipeline,
		"deferred": c.AsyncAutoPipeline,
	} {
		t.Run(name, func(t *testing.T) {
			ap, err := get()
			if err != nil {
				t.Fatal(err)
			}
			e := newEnvOn(t, ap, []*redis.Client{c}, Options{})
			vectors.Run(t, "ap-"+e.prefix, e.decider())
			testConcurrent(t, e, 2)
		})
	}
}

// TestAutoPipelinerDeadline stalls Redis (CLIENT PAUSE, which answers once
// the pause is in effect) and decides through AutoPipeliners with a
// context whose deadline ends long before the pause: each call must fail
// with its context's error, as indeterminate, rather than wait for Redis
// (go-redis's AutoPipeliner ignores a queued command's context; found
// reproducing "AutoPipeliner ignores caller deadline"), and a
// fallback.Store over one must answer from its local store.
func TestAutoPipelinerDeadline(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	admin := srv.Client(t)
	blocking, err := c.AutoPipeline()
	if err != nil {
		t.Fatal(err)
	}
	deferred, err := c.AsyncAutoPipeline()
	if err != nil {
		t.Fatal(err)
	}
	p, err := floodgate.NewSlidingWindow("apdeadline", 1000, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	type setup struct {
		name     string
		lim      *floodgate.Limiter
		fallback bool
	}
	var setups []setup
	for _, ap := range []struct {
		name string
		c    *redis.AutoPipeliner
	}{{"blocking", blocking}, {"deferred", deferred}} {
		for _, co := range []struct {
			name string
			o    Coalesce
		}{{"coalesce-on", CoalesceOn}, {"coalesce-off", CoalesceOff}} {
			for _, fb := range []bool{false, true} {
				st, err := New(ap.c, Options{Coalesce: co.o})
				if err != nil {
					t.Fatal(err)
				}
				var store floodgate.Store = st
				if fb {
					local, err := memstore.New(memstore.Options{})
					if err != nil {
						t.Fatal(err)
					}
					f, err := fallback.New(st, local, fallback.Options{DefaultMode: fallback.ModeLocal, Budget: 100 * time.Millisecond})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(f.Close)
					store = f
				}
				lim, err := floodgate.New(store, floodgate.Options{Prefix: "apdl"})
				if err != nil {
					t.Fatal(err)
				}
				name := ap.name + "/" + co.name
				if fb {
					name += "/fallback"
				}
				// Load the scripts before Redis stalls.
				if _, err := lim.Allow(context.Background(), p, name); err != nil {
					t.Fatal(err)
				}
				setups = append(setups, setup{name, lim, fb})
			}
		}
	}
	if err := admin.Do(context.Background(), "CLIENT", "PAUSE", "3000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	for _, s := range setups {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		ctx, o := fallback.NewOutcomeContext(ctx)
		r, err := s.lim.Allow(ctx, p, s.name)
		cancel()
		if s.fallback {
			if err != nil || !o.Degraded || o.Mode != fallback.ModeLocal || !r.Allowed {
				t.Errorf("%s: got %+v, %v, outcome %+v; want the local store's admission", s.name, r, err, *o)
			}
			continue
		}
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, floodgate.ErrIndeterminate) || errors.Is(err, floodgate.ErrStoreUnavailable) {
			t.Errorf("%s: got %+v, %v; want an indeterminate error wrapping context.DeadlineExceeded", s.name, r, err)
		}
	}
}

// TestAutoPipelinerOrphansBounded: on a stalled Redis, callers that retry
// at once after their deadline left one command and one goroutine each
// in the AutoPipeliner, without bound, every one run and charged when
// Redis woke (review15: 49,000 goroutines after 15 s, 44,000 failed calls
// all run). At most maxOrphans are left: the calls past them fail at
// once, unsent, as store unavailable, and no more than maxOrphans
// decisions (and the one before the stall) are charged.
func TestAutoPipelinerOrphansBounded(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	admin := srv.Client(t)
	for name, get := range map[string]func() (*redis.AutoPipeliner, error){
		"blocking": c.AutoPipeline,
		"deferred": c.AsyncAutoPipeline,
	} {
		t.Run(name, func(t *testing.T) {
			ap, err := get()
			if err != nil {
				t.Fatal(err)
			}
			st, err := New(ap, Options{Coalesce: CoalesceOff})
			if err != nil {
				t.Fatal(err)
			}
			lim, err := floodgate.New(st, floodgate.Options{Prefix: "aporphans-" + name})
			if err != nil {
				t.Fatal(err)
			}
			const limit = 100_000
			p, err := floodgate.NewFixedWindow("aporphans", limit, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := lim.Allow(ctx, p, "id"); err != nil { // loads the script
				t.Fatal(err)
			}
			if err := admin.Do(ctx, "CLIENT", "PAUSE", "60000", "WRITE").Err(); err != nil {
				t.Fatal(err)
			}
			const callers, each = 8, 3 * maxOrphans / 8
			var indeterminate, unavailable, other atomic.Int64
			var wg sync.WaitGroup
			for range callers {
				wg.Go(func() {
					for range each {
						cctx, cancel := context.WithTimeout(ctx, 2*time.Millisecond)
						_, err := lim.Allow(cctx, p, "id")
						cancel()
						switch {
						case errors.Is(err, floodgate.ErrIndeterminate):
							indeterminate.Add(1)
						case errors.Is(err, floodgate.ErrStoreUnavailable):
							unavailable.Add(1)
						default:
							other.Add(1)
						}
					}
				})
			}
			wg.Wait()
			orphans := st.client.(apClient).orphans
			// The bound is checked before a command is sent: callers
			// checking at once may pass it by one each.
			const most = maxOrphans + callers - 1
			if n := orphans.Load(); n > most {
				t.Errorf("%d commands left unanswered, want at most %d", n, most)
			}
			if err := admin.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
				t.Fatal(err)
			}
			for orphans.Load() != 0 {
				time.Sleep(time.Millisecond)
			}
			if indeterminate.Load() > most || unavailable.Load() == 0 || other.Load() != 0 {
				t.Errorf("over %d calls on a stalled Redis: %d indeterminate, %d store unavailable, %d other; want at most %d indeterminate, the rest store unavailable",
					callers*each, indeterminate.Load(), unavailable.Load(), other.Load(), most)
			}
			r, err := lim.Peek(ctx, p, "id")
			if err != nil {
				t.Fatal(err)
			}
			if charged := limit - r.Remaining; charged > most+1 {
				t.Errorf("%d decisions charged after the stall, want at most %d (the orphans and the one before)", charged, most+1)
			}
		})
	}
}

// TestAutoPipelinerEarlyCancelOpensBreaker: on an AutoPipeliner (which
// does not coalesce unless asked), callers that cancel early, one at a
// time, on a stalled Redis open a fallback's breaker, as on a plain
// client, for a sliding log decision and for a decision split by slot.
// The context that ends a call waiting for a pool connection when its
// caller goes (deadline.Bind) made the wrapper return the caller's
// cancellation at once, which the breaker does not count, while the
// command queued ran all the same: the breaker stayed closed over 20
// calls, and all 20 were charged when Redis woke (review16, 3 of 3).
func TestAutoPipelinerEarlyCancelOpensBreaker(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	admin := srv.Client(t)
	log, err := floodgate.NewSlidingLog("apcancel", 1000, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	user, err := floodgate.NewFixedWindow("apcancel-user", 1000, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	global, err := floodgate.NewFixedWindow("apcancel-global", 100_000, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, get := range map[string]func() (*redis.AutoPipeliner, error){
		"blocking": c.AutoPipeline,
		"deferred": c.AsyncAutoPipeline,
	} {
		for _, kind := range []string{"sliding log", "split"} {
			t.Run(name+"/"+kind, func(t *testing.T) {
				ap, err := get()
				if err != nil {
					t.Fatal(err)
				}
				st, err := New(ap, Options{SlotCheck: SlotCheckOn})
				if err != nil {
					t.Fatal(err)
				}
				local, err := memstore.New(memstore.Options{})
				if err != nil {
					t.Fatal(err)
				}
				const threshold = 3
				f, err := fallback.New(st, local, fallback.Options{Breaker: fallback.BreakerOptions{FailureThreshold: threshold}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(f.Close)
				prefix := uniquePrefix(t)
				decide := func(ctx context.Context, id string) error {
					layers := []floodgate.Layer{{Policy: log, Key: floodgate.Key(prefix, log, id), Cost: 1}}
					if kind == "split" {
						layers = []floodgate.Layer{
							{Policy: user, Key: floodgate.Key(prefix, user, id), Cost: 1},
							{Policy: global, Key: floodgate.Key(prefix, global, "all"), Cost: 1},
						}
						if Slot(layers[0].Key) == Slot(layers[1].Key) {
							layers[0].Key = floodgate.Key(prefix, user, id+"-x") // another slot
						}
					}
					return f.Decide(ctx, time.Now().UnixMicro(), layers, make([]floodgate.Result, len(layers)))
				}
				ctx := context.Background()
				if err := decide(ctx, "warm"); err != nil { // loads the script
					t.Fatal(err)
				}
				if err := admin.Do(ctx, "CLIENT", "PAUSE", "60000", "WRITE").Err(); err != nil {
					t.Fatal(err)
				}
				defer admin.Do(ctx, "CLIENT", "UNPAUSE")
				const most = 20
				n := 0
				for ; n < most && f.BreakerState() != fallback.BreakerOpen; n++ {
					cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
					early := time.AfterFunc(10*time.Millisecond, cancel)
					_ = decide(cctx, fmt.Sprint("caller-", n))
					early.Stop()
					cancel()
				}
				if f.BreakerState() != fallback.BreakerOpen {
					t.Fatalf("the breaker still %v after %d callers cancelling early on a stalled Redis (threshold %d)", f.BreakerState(), n, threshold)
				}
			})
		}
	}
}
