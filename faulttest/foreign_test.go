package faulttest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// TestForeignValueDoesNotOpenTheBreaker: one identity whose key holds a
// value floodgate did not write (a string, or a key of another type) is
// decided locally, every time, but its failures do not count against
// Redis: the shared breaker stays closed and every other identity's
// decisions stay central and exact. An outside walk saw ten requests of
// one client open the breaker and a healthy client admitted twice its
// limit (100 by the fallback, then 100 by Redis, in one window). Its
// reason is foreign_value, not unavailable: another walk's operator,
// sent to Redis's health by "unavailable", could not find the key, which
// the error now names (Redis's WRONGTYPE does not).
func TestForeignValueDoesNotOpenTheBreaker(t *testing.T) {
	leakCheck(t)
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	for name, coalesce := range map[string]redisstore.Coalesce{"coalesced": redisstore.CoalesceOn, "alone": redisstore.CoalesceOff} {
		t.Run(name, func(t *testing.T) {
			r := newRigWith(t, client, redisstore.Options{Coalesce: coalesce}, fallback.Options{
				DefaultMode: fallback.ModeLocal,
				Breaker:     fallback.BreakerOptions{FailureThreshold: 3},
				// Far above what a healthy Redis takes: this test is about
				// foreign values, and a loaded test machine once had a
				// decision miss the 50 ms default (indeterminate).
				Budget: 5 * time.Second,
			})
			p := policy(t, "api", 50)
			ctx := context.Background()
			if err := client.Set(ctx, r.lim.Key(p, "bad-string"), "garbage", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := client.HSet(ctx, r.lim.Key(p, "bad-hash"), "f", "v").Err(); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			admitted, degraded := map[string]int{}, map[string]int{}
			for _, id := range []string{"bad-string", "bad-hash", "good-1", "good-2"} {
				for range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range 30 {
							res, o, err := r.decide(ctx, p, id)
							if err != nil {
								t.Errorf("%s: %v", id, err)
								return
							}
							mu.Lock()
							if res.Allowed {
								admitted[id]++
							}
							if o.Degraded {
								degraded[id]++
								if !errors.Is(o.Err, floodgate.ErrForeignValue) || o.Reason != fallback.ReasonForeignValue || !strings.Contains(o.Err.Error(), r.lim.Key(p, id)) {
									t.Errorf("%s degraded with %v (%v), want foreign_value (ErrForeignValue) naming the key", id, o.Reason, o.Err)
								}
							}
							mu.Unlock()
						}
					}()
				}
			}
			wg.Wait()
			if r.watch.opened(fallback.DefaultPartition) {
				t.Fatalf("the breaker opened: %v", r.watch.history())
			}
			for _, id := range []string{"good-1", "good-2"} {
				if degraded[id] != 0 || admitted[id] != 50 {
					t.Errorf("%s: %d admitted, %d degraded; want 50 admitted of 120 by Redis, none degraded", id, admitted[id], degraded[id])
				}
			}
			for _, id := range []string{"bad-string", "bad-hash"} {
				if degraded[id] != 120 || admitted[id] != 50 {
					t.Errorf("%s: %d admitted, %d degraded; want all 120 decided locally, 50 admitted", id, admitted[id], degraded[id])
				}
			}
		})
	}
}
