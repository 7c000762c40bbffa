package server_test

import (
	"encoding/json"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/server"
)

// TestResetCountsKeysDeleted: the reset's "keys" is how many of the
// layers' keys held state and were deleted, not how many it targeted: a
// full reset after one of the two layers was reset answered 2 where one
// key existed. In memory, and in Redis with serve's in-process fallback
// store reset too (a key counted once).
func TestResetCountsKeysDeleted(t *testing.T) {
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			var store floodgate.Store
			var mutate func(*server.Options)
			if backend == "memory" {
				store = memStore(t)
			} else {
				st, rs := redisStore(t)
				store = st
				local := memStore(t)
				mutate = func(o *server.Options) {
					o.Resetters = []server.Resetter{server.RedisResetter{Client: rs.Client(t)}, server.MemoryResetter{Store: local}}
				}
			}
			e := start(t, layered, store, mutate)
			reset := func(body server.ResetRequest) server.ResetResponse {
				t.Helper()
				r := e.do("POST", "/admin/v1/reset", testToken, body)
				var rr server.ResetResponse
				if err := json.Unmarshal(r.body, &rr); err != nil || r.status != 200 {
					t.Fatalf("reset %+v: %d %s", body, r.status, r.body)
				}
				return rr
			}
			u1 := server.ResetRequest{Policy: "shadowed", Identity: id("user", "u1")}
			if rr := reset(u1); rr.Keys != 0 || len(rr.Reset) != 2 {
				t.Fatalf("reset before any decision: %+v, want keys 0 of both layers", rr)
			}
			e.check("shadowed", id("user", "u1"), 1)
			if rr := reset(u1); rr.Keys != 2 {
				t.Fatalf("reset after a decision: keys %d, want 2", rr.Keys)
			}
			if rr := reset(u1); rr.Keys != 0 {
				t.Fatalf("reset again: keys %d, want 0", rr.Keys)
			}
			e.check("shadowed", id("user", "u1"), 1)
			if rr := reset(server.ResetRequest{Policy: "shadowed", Identity: id("user", "u1"), Layers: []string{"trial"}}); rr.Keys != 1 {
				t.Fatalf("reset of the trial layer: keys %d, want 1", rr.Keys)
			}
			if rr := reset(u1); rr.Keys != 1 || len(rr.Reset) != 2 {
				t.Fatalf("full reset after the trial layer's: %+v, want keys 1 of both layers", rr)
			}
		})
	}
}
