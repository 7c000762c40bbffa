package redisstore

import (
	"context"
	"errors"
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
