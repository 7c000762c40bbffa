package server_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/server"
)

// TestPeekReportsTheShapingDelay: /v1/peek on a GCRA layer with max_delay
// answers the delay_ms a check of cost 1 would get now, on the memory and
// the Redis store. With one unit per 400ms, bursts of 5 and up to 1s of
// shaping, a peek after the burst answered allowed, remaining 0 and
// delay_ms 0 while the next check answered delay_ms 400.
func TestPeekReportsTheShapingDelay(t *testing.T) {
	const yaml = `
policies:
  - name: shaped
    layers:
      - {name: smooth, algorithm: gcra, limit: 5, window: 2s, burst: 5, max_delay: 1s, dimension: user}
`
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) floodgate.Store
	}{
		{"memory", func(t *testing.T) floodgate.Store { return memStore(t) }},
		{"redis", func(t *testing.T) floodgate.Store { st, _ := redisStore(t); return st }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			holder, err := config.NewHolder(parse(t, yaml))
			if err != nil {
				t.Fatal(err)
			}
			lim, err := floodgate.New(tc.store(t), floodgate.Options{Prefix: uniquePrefix(t), Clock: func() time.Time { return at }})
			if err != nil {
				t.Fatal(err)
			}
			srv, err := server.New(lim, holder, server.Options{DecisionTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			hs := httptest.NewServer(srv)
			t.Cleanup(hs.Close)
			e := &env{t: t, url: hs.URL, holder: holder, srv: srv, lim: lim}
			u := id("user", "u")

			if r := e.check("shaped", u, 5); !r.Allowed || r.DelayMS != 0 {
				t.Fatalf("burst: %+v", r)
			}
			for i, want := range []int64{400, 800} {
				p := e.peek("shaped", u)
				if !p.Allowed || p.Remaining != 0 || p.DelayMS != want || p.Layers[0].DelayMS != want {
					t.Fatalf("peek %d: allowed %v remaining %d delay_ms %d (layer %d), want allowed, 0, %d",
						i, p.Allowed, p.Remaining, p.DelayMS, p.Layers[0].DelayMS, want)
				}
				if r := e.check("shaped", u, 1); !r.Allowed || r.DelayMS != want {
					t.Fatalf("check %d after the peek: allowed %v delay_ms %d, want allowed, %d", i, r.Allowed, r.DelayMS, want)
				}
			}
			// 2s ahead: a third unit would need 1.2s of delay, more than
			// max_delay. The peek says so, as the check does.
			p := e.peek("shaped", u)
			if p.Allowed || p.DelayMS != 0 || p.RetryAfterMS != 200 || p.Reason != "limited" {
				t.Fatalf("peek beyond max_delay: %+v", p)
			}
			if r := e.check("shaped", u, 1); r.Allowed || r.RetryAfterMS != 200 {
				t.Fatalf("check beyond max_delay: %+v", r)
			}
		})
	}
}
