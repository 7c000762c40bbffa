package server_test

import (
	"strconv"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/server"
)

// twoWaits has policies whose layers deny the same request for different
// times: fast-first puts the shorter wait first, costly has a layer whose
// limit is below a cost of 3 after one whose wait is an hour.
const twoWaits = `
version: "1"
policies:
  - name: fast-first
    layers:
      - {name: fast, algorithm: fixed_window, limit: 2, window: 1m, dimension: user}
      - {name: slow, algorithm: sliding_log, limit: 2, window: 1h, dimension: user}
  - name: costly
    layers:
      - {name: slow, algorithm: sliding_log, limit: 3, window: 1h, dimension: user}
      - {name: fast, algorithm: fixed_window, limit: 2, window: 1m, dimension: user}
`

// TestDeniedAnswerTellsTheLongestWait: when several layers deny, the
// answer (binding, retry_after_ms, Retry-After) is the layer whose denial
// lasts longest, so that a client that waits as told is admitted; a layer
// whose limit is below the cost wins, with no Retry-After, as waiting will
// not help (a retry-after walk, 4 of 4: Retry-After 2 from the first layer
// while the second needed 6 s, and Retry-After 7 for a cost that could
// never pass), on the memory store and on Redis.
func TestDeniedAnswerTellsTheLongestWait(t *testing.T) {
	stores := map[string]func(t *testing.T) floodgate.Store{
		"memory": func(t *testing.T) floodgate.Store { return memStore(t) },
		"redis": func(t *testing.T) floodgate.Store {
			st, _ := redisStore(t)
			return st
		},
	}
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			e := start(t, twoWaits, store(t), nil)
			u := id("user", "u1")
			for i := range 2 {
				if r := e.check("fast-first", u, 0); !r.Allowed {
					t.Fatalf("check %d denied: %+v", i+1, r)
				}
			}
			r := e.check("fast-first", u, 0)
			if r.Allowed || r.Layers[0].Reason != "limited" || r.Layers[1].Reason != "limited" {
				t.Fatalf("third check: want both layers to deny: %+v", r)
			}
			fast, slow := r.Layers[0].RetryAfterMS, r.Layers[1].RetryAfterMS
			if slow <= fast {
				t.Fatalf("slow's wait %d ms is not longer than fast's %d ms: the test needs it to be", slow, fast)
			}
			if r.Binding != "slow" || r.RetryAfterMS != slow || r.Limit != 2 || r.Reset != r.Layers[1].Reset {
				t.Errorf("binding %q, retry_after_ms %d, reset %d, want slow's (%d ms, reset %d) and not fast's (%d ms)", r.Binding, r.RetryAfterMS, r.Reset, slow, r.Layers[1].Reset, fast)
			}
			rep := e.post("/v1/check?enforce=1", server.CheckRequest{Policy: "fast-first", Identity: u})
			if want := (slow + 999) / 1000; rep.status != 429 || rep.header.Get("Retry-After") != strconv.FormatInt(want, 10) {
				t.Errorf("enforced: status %d, Retry-After %q, want 429 and %d", rep.status, rep.header.Get("Retry-After"), want)
			}

			v := id("user", "u2")
			if r := e.check("costly", v, 0); !r.Allowed {
				t.Fatalf("costly, cost 1: %+v", r)
			}
			r = e.check("costly", v, 3)
			if r.Allowed || r.Layers[0].Reason != "limited" || r.Layers[1].Reason != "cost_exceeds_limit" {
				t.Fatalf("cost 3: want slow limited and fast cost_exceeds_limit: %+v", r)
			}
			if r.Binding != "fast" || r.Reason != "cost_exceeds_limit" || r.RetryAfterMS != 0 {
				t.Errorf("cost 3: binding %q, reason %s, retry_after_ms %d, want fast, cost_exceeds_limit, 0", r.Binding, r.Reason, r.RetryAfterMS)
			}
			three := int64(3)
			rep = e.post("/v1/check?enforce=1", server.CheckRequest{Policy: "costly", Identity: v, Cost: &three})
			if rep.status != 429 || rep.header.Get("Retry-After") != "" {
				t.Errorf("cost 3 enforced: status %d, Retry-After %q, want 429 and none", rep.status, rep.header.Get("Retry-After"))
			}
		})
	}
}
