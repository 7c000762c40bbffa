package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestKeepTTL checks the scripts' SET KEEPTTL: a quota state written over
// a state of the same period keeps the key's TTL (which ends at the
// period's end plus the grace whoever wrote it), alone, in a hot
// single-layer call (the key repeated, written once at the end, with the
// PX of the call's first write) and in a layered call. The requests' clock
// runs hours apart here and Redis's microseconds, so a kept TTL and a
// fresh one differ by hours.
func TestKeepTTL(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	e := newEnvOn(t, c, []*redis.Client{c}, Options{})
	ctx := context.Background()
	p := quotaPolicy(t, 1000, floodgate.PeriodDay)
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, 10).UnixMicro() // a period ahead
	_, stop, _ := algo.QuotaPeriod(p, day)
	ttl := func(at int64) time.Duration { // the TTL a write at at gives
		return time.Duration(stop-at)*time.Microsecond + time.Hour + algo.TTLSlack
	}
	check := func(key, what string, want time.Duration) {
		t.Helper()
		got := c.PTTL(ctx, key).Val()
		if got > want+time.Millisecond || got < want-time.Second {
			t.Fatalf("%s: TTL %v, want about %v", what, got, want)
		}
	}
	t1, t2, t3 := day+time.Hour.Microseconds(), day+5*time.Hour.Microseconds(), day+9*time.Hour.Microseconds()
	key := func(id string) string {
		k := algo.KeyAt(e.prefix, p, id, day)
		e.bound[k] = ttlBound(p)
		return k
	}

	k := key("lone")
	for _, at := range []int64{t1, t2, t3} {
		var out [1]floodgate.Result
		if err := e.store.Decide(ctx, at, []floodgate.Layer{{Policy: p, Key: k, Cost: 1}}, out[:]); err != nil || !out[0].Allowed {
			t.Fatalf("lone at %d: %+v %v", at, out[0], err)
		}
		check(k, fmt.Sprint("lone, after the write at ", at), ttl(t1))
	}

	k = key("hot")
	var calls []*call
	for _, at := range []int64{t1, t2, t3} {
		calls = append(calls, getCall(ctx, at, fastScripts[floodgate.Quota], []floodgate.Layer{{Policy: p, Key: k, Cost: 1}}))
	}
	e.store.batch.run(calls)
	for i, cl := range calls {
		<-cl.done
		if cl.err != nil || !cl.res[0].Allowed {
			t.Fatalf("hot request %d: %+v %v", i, cl.res[0], cl.err)
		}
	}
	check(k, "hot: a new key, then kept twice", ttl(t1))

	user := mustPolicy(t, floodgate.Policy{Name: "kuser", Algorithm: floodgate.SlidingWindow, Limit: 1000, Window: time.Minute})
	k = key("layered")
	calls = nil
	for i, at := range []int64{t1, t2} {
		uk := e.key(user, fmt.Sprint("u", i))
		e.bound[uk] = ttlBound(user)
		calls = append(calls, getCall(ctx, at, layersScript, []floodgate.Layer{{Policy: user, Key: uk, Cost: 1}, {Policy: p, Key: k, Cost: 1}}))
	}
	e.store.batch.run(calls)
	for i, cl := range calls {
		<-cl.done
		if cl.err != nil || !cl.res[0].Allowed || !cl.res[1].Allowed {
			t.Fatalf("layered decision %d: %+v %v", i, cl.res, cl.err)
		}
	}
	check(k, "layered: a new key, then kept", ttl(t1))
}

// TestWindowGrowthWritesTTL checks that a window state always gets its
// own TTL: when a policy's window grows under the same name, the first
// request under the new window can find a state of the old one whose
// window starts where its own does (here the old minute and the new hour
// both start on the hour), and keeping that key's TTL, set for the old
// window, would expire the new window's counts early.
func TestWindowGrowthWritesTTL(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	e := newEnvOn(t, c, []*redis.Client{c}, Options{})
	ctx := context.Background()
	hour := time.Now().Truncate(time.Hour).Add(10 * time.Hour).UnixMicro() // an hour ahead, on the hour
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow} {
		for _, layered := range []bool{false, true} {
			old := mustPolicy(t, floodgate.Policy{Name: "grow", Algorithm: alg, Limit: 1000, Window: time.Minute})
			grown := old
			grown.Window = time.Hour
			other := mustPolicy(t, floodgate.Policy{Name: "gother", Algorithm: floodgate.GCRA, Limit: 1000, Window: time.Minute})
			id := fmt.Sprint("id-", layered)
			k, ok := e.key(old, id), e.key(other, id)
			e.bound[k], e.bound[ok] = ttlBound(grown), ttlBound(other)
			for _, step := range []struct {
				p  floodgate.Policy
				at int64
			}{{old, hour + 1_000_000}, {grown, hour + 2_000_000}} {
				layers := []floodgate.Layer{{Policy: step.p, Key: k, Cost: 1}}
				if layered {
					layers = append(layers, floodgate.Layer{Policy: other, Key: ok, Cost: 1})
				}
				out := make([]floodgate.Result, len(layers))
				if err := e.store.Decide(ctx, step.at, layers, out); err != nil || !out[0].Allowed {
					t.Fatalf("%s layered=%v at %d: %+v %v", alg, layered, step.at, out, err)
				}
			}
			end := hour + time.Hour.Microseconds()
			if alg == floodgate.SlidingWindow {
				end += time.Hour.Microseconds()
			}
			want := time.Duration(end-hour-2_000_000)*time.Microsecond + algo.TTLSlack
			if got := c.PTTL(ctx, k).Val(); got > want+time.Millisecond || got < want-time.Second {
				t.Errorf("%s layered=%v: TTL %v after the window grew to an hour, want about %v", alg, layered, got, want)
			}
		}
	}
}

// TestWindowKeepTTL: a binary window state written over one of the same
// window start and length keeps the key's TTL (SET KEEPTTL), alone and in
// a layered call; over a text state, which does not record its window's
// length, and with a Store writing text, the TTL is written each time.
// The requests' clock runs hours apart inside one day-long window, so a
// kept TTL and a fresh one differ by hours.
func TestWindowKeepTTL(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, 10).UnixMicro() // a window ahead
	t1, t2, t3 := day+time.Hour.Microseconds(), day+5*time.Hour.Microseconds(), day+9*time.Hour.Microseconds()
	for _, format := range []StateFormat{BinaryState, TextState} {
		e := newEnvOn(t, c, []*redis.Client{c}, Options{StateFormat: format})
		for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow} {
			for _, layered := range []bool{false, true} {
				p := mustPolicy(t, floodgate.Policy{Name: "keep", Algorithm: alg, Limit: 1000, Window: 24 * time.Hour})
				other := mustPolicy(t, floodgate.Policy{Name: "kother", Algorithm: floodgate.GCRA, Limit: 1000, Window: time.Minute})
				id := fmt.Sprint("id-", format, "-", layered)
				k, ok := e.key(p, id), e.key(other, id)
				e.bound[k], e.bound[ok] = ttlBound(p), ttlBound(other)
				end := day + 24*time.Hour.Microseconds()
				if alg == floodgate.SlidingWindow {
					end += 24 * time.Hour.Microseconds()
				}
				ttl := func(at int64) time.Duration { return time.Duration(end-at)*time.Microsecond + algo.TTLSlack }
				for _, at := range []int64{t1, t2, t3} {
					layers := []floodgate.Layer{{Policy: p, Key: k, Cost: 1}}
					if layered {
						layers = append(layers, floodgate.Layer{Policy: other, Key: ok, Cost: 1})
					}
					out := make([]floodgate.Result, len(layers))
					if err := e.store.Decide(ctx, at, layers, out); err != nil || !out[0].Allowed {
						t.Fatalf("%v %s layered=%v at %d: %+v %v", format, alg, layered, at, out, err)
					}
				}
				want := ttl(t1) // kept since the first write
				if format == TextState {
					want = ttl(t3)
				}
				if got := c.PTTL(ctx, k).Val(); got > want+time.Millisecond || got < want-time.Second {
					t.Errorf("%v %s layered=%v: TTL %v after three writes, want about %v", format, alg, layered, got, want)
				}
			}
		}
	}
	// A text state of the same window, then a binary Store: the TTL is
	// written (the text does not say the window's length).
	e := newEnvOn(t, c, []*redis.Client{c}, Options{})
	p := mustPolicy(t, floodgate.Policy{Name: "keep", Algorithm: floodgate.FixedWindow, Limit: 1000, Window: 24 * time.Hour})
	k := e.key(p, "from-text")
	e.bound[k] = ttlBound(p)
	if err := c.Set(ctx, k, fmt.Sprintf("%d 1", day), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	out := make([]floodgate.Result, 1)
	if err := e.store.Decide(ctx, t2, []floodgate.Layer{{Policy: p, Key: k, Cost: 1}}, out); err != nil || !out[0].Allowed || out[0].Remaining != 998 {
		t.Fatalf("over a text state: %+v %v", out[0], err)
	}
	want := time.Duration(day+24*time.Hour.Microseconds()-t2)*time.Microsecond + algo.TTLSlack
	if got := c.PTTL(ctx, k).Val(); got > want+time.Millisecond || got < want-time.Second {
		t.Errorf("over a text state: TTL %v, want about %v (written, not the hour kept)", got, want)
	}
}
