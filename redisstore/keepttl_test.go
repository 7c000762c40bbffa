package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestKeepTTL checks the scripts' SET KEEPTTL: a fixed or sliding window
// state written over a state of the same window keeps the key's TTL, and
// one written over an older window's state (or no state) gets its own,
// alone, in a hot single-layer call (a key repeated, written once at the
// end) and in a layered call, whichever order the two kinds of write come
// in. The requests' clock runs far ahead of Redis's here, so a kept TTL
// and a fresh one differ by seconds.
func TestKeepTTL(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	e := newEnvOn(t, c, []*redis.Client{c}, Options{})
	ctx := context.Background()
	w := time.Minute
	wu := w.Microseconds()
	start := time.Now().UnixMicro()
	start -= start%wu - 10*wu // a window start, ten windows ahead
	for _, algo := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow} {
		p := mustPolicy(t, floodgate.Policy{Name: "keep", Algorithm: algo, Limit: 1000, Window: w})
		// ttl is the TTL a request at now gives a state of the window
		// starting at ws: to the window's end (the next one's, for a
		// sliding window) plus the slack.
		ttl := func(ws, now int64) time.Duration {
			end := ws + wu
			if algo == floodgate.SlidingWindow {
				end += wu
			}
			return time.Duration(end-now)*time.Microsecond + floodgate.TTLSlack
		}
		check := func(key, what string, want time.Duration) {
			t.Helper()
			got := c.PTTL(ctx, key).Val()
			if got > want+time.Millisecond || got < want-time.Second {
				t.Fatalf("%s: %s: TTL %v, want about %v", algo, what, got, want)
			}
		}
		t.Run(algo.String(), func(t *testing.T) {
			sc := fastScripts[algo]
			lone := func(key string, now int64) {
				t.Helper()
				var out [1]floodgate.Result
				if err := e.store.Decide(ctx, now, []floodgate.Layer{{Policy: p, Key: key, Cost: 1}}, out[:]); err != nil || !out[0].Allowed {
					t.Fatalf("%s at %d: %+v %v", key, now, out[0], err)
				}
			}
			hot := func(key string, nows ...int64) {
				t.Helper()
				var calls []*call
				for _, now := range nows {
					calls = append(calls, getCall(ctx, now, sc, []floodgate.Layer{{Policy: p, Key: key, Cost: 1}}))
				}
				e.store.batch.run(calls)
				for i, cl := range calls {
					<-cl.done
					if cl.err != nil || !cl.res[0].Allowed {
						t.Fatalf("%s request %d: %+v %v", key, i, cl.res[0], cl.err)
					}
				}
			}

			// Alone: a new key, then the same window (kept), then the next
			// window (its own).
			k := e.key(p, "lone")
			e.bound[k] = ttlBound(p)
			lone(k, start+1_000_000)
			check(k, "first write", ttl(start, start+1_000_000))
			lone(k, start+20_000_000)
			check(k, "same window", ttl(start, start+1_000_000))
			lone(k, start+wu+5_000_000)
			check(k, "next window", ttl(start+wu, start+wu+5_000_000))

			// Hot, a new window's write first: the call's later writes in
			// that window keep the PX it decided, not the key's old TTL.
			k = e.key(p, "hot-new-first")
			e.bound[k] = ttlBound(p)
			lone(k, start+wu-500_000) // the end of the window before
			hot(k, start+wu+1_000_000, start+wu+2_000_000, start+wu+3_000_000)
			check(k, "hot, new window then kept", ttl(start+wu, start+wu+1_000_000))

			// Hot, a kept write first, then a new window's: the new PX wins.
			k = e.key(p, "hot-kept-first")
			e.bound[k] = ttlBound(p)
			lone(k, start+50_000_000)
			hot(k, start+55_000_000, start+wu+1_000_000)
			check(k, "hot, kept then new window", ttl(start+wu, start+wu+1_000_000))
		})
	}

	// Layered: a shared edge key, kept then renewed within one call, and
	// renewed then kept.
	edge := mustPolicy(t, floodgate.Policy{Name: "kedge", Algorithm: floodgate.FixedWindow, Limit: 1000, Window: w})
	user := mustPolicy(t, floodgate.Policy{Name: "kuser", Algorithm: floodgate.SlidingWindow, Limit: 1000, Window: w})
	for i, tc := range []struct {
		before int64   // the edge key's write before the call
		nows   []int64 // the call's decisions
		ws     int64   // the window start and time of the write whose TTL must stand
		at     int64
	}{
		{start + 50_000_000, []int64{start + 55_000_000, start + wu + 1_000_000}, start + wu, start + wu + 1_000_000},
		{start + wu - 500_000, []int64{start + wu + 1_000_000, start + wu + 2_000_000}, start + wu, start + wu + 1_000_000},
	} {
		ek := e.key(edge, fmt.Sprint("edge", i))
		e.bound[ek] = ttlBound(edge)
		var out [2]floodgate.Result
		uk := e.key(user, fmt.Sprint("before", i))
		e.bound[uk] = ttlBound(user)
		if err := e.store.Decide(ctx, tc.before, []floodgate.Layer{{Policy: edge, Key: ek, Cost: 1}, {Policy: user, Key: uk, Cost: 1}}, out[:]); err != nil {
			t.Fatal(err)
		}
		var calls []*call
		for j, now := range tc.nows {
			uk := e.key(user, fmt.Sprint("u", i, j))
			e.bound[uk] = ttlBound(user)
			calls = append(calls, getCall(ctx, now, layersScript, []floodgate.Layer{{Policy: edge, Key: ek, Cost: 1}, {Policy: user, Key: uk, Cost: 1}}))
		}
		e.store.batch.run(calls)
		for j, cl := range calls {
			<-cl.done
			if cl.err != nil || !cl.res[0].Allowed || !cl.res[1].Allowed {
				t.Fatalf("layered case %d decision %d: %+v %v", i, j, cl.res, cl.err)
			}
		}
		want := time.Duration(tc.ws+wu-tc.at)*time.Microsecond + floodgate.TTLSlack
		if got := c.PTTL(ctx, ek).Val(); got > want+time.Millisecond || got < want-time.Second {
			t.Fatalf("layered case %d: edge TTL %v, want about %v", i, got, want)
		}
	}
}
