package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/vectors"
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

// bucketPaths are the scripts a bucket layer is decided by, in
// decideBucket: the single-layer script (alone), the layered script, the
// general script and its reserve mode (which gives the state its long
// form).
var bucketPaths = []string{"lone", "layered", "general", "reserve"}

// decideBucket decides one layer through path (see bucketPaths).
func (e *env) decideBucket(ctx context.Context, path string, now int64, l floodgate.Layer) (floodgate.Result, error) {
	var out []floodgate.Result
	var err error
	switch path {
	case "lone":
		out, err = e.decide(ctx, now, []floodgate.Layer{l})
	case "layered":
		out, err = e.decideLayered(ctx, now, []floodgate.Layer{l})
	default:
		out, err = e.decideGeneral(ctx, now, []floodgate.Layer{l}, path == "reserve")
	}
	if err != nil {
		return floodgate.Result{}, err
	}
	return out[0], nil
}

// TestBucketKeepTTL: a token bucket's or GCRA's binary state records
// where its key's TTL ends, and a write whose state needs no longer keeps
// that TTL; a write that needs longer writes twice the life it needs, at
// most the window more. Through every script, and in a hot single-layer
// call (the key written once, at the end). A Store writing text writes
// the TTL its state needs each time. The old scripts wrote it on every
// admitted request: after the second request below the key's TTL would
// be 354.6 s, not the 722 s kept.
func TestBucketKeepTTL(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	t0 := vectors.T0.UnixMicro()
	s := time.Second.Microseconds()
	check := func(key, what string, want time.Duration) {
		t.Helper()
		if got := c.PTTL(ctx, key).Val(); got > want+time.Millisecond || got < want-time.Second {
			t.Errorf("%s: TTL %v, want about %v", what, got, want)
		}
	}
	for _, format := range stateFormats {
		e := newEnvOn(t, c, []*redis.Client{c}, Options{StateFormat: format})
		for _, alg := range []floodgate.Algorithm{floodgate.TokenBucket, floodgate.GCRA} {
			// 1000 an hour: a token every 3.6 s. 100 at t0 leave the
			// bucket full again at t0 + 360 s: a life of 361 s with the
			// slack, written as 722 s (to t0 + 722 s). One more at
			// t0 + 10 s: full again at t0 + 363.6 s, inside it. 100 more
			// at t0 + 20 s: full again at t0 + 723.6 s, past it: the TTL
			// is written, 2 × 704.6 s.
			p := mustPolicy(t, floodgate.Policy{Name: "kb", Algorithm: alg, Limit: 1000, Window: time.Hour})
			steps := []struct {
				at, cost  int64
				bin, text time.Duration // the TTL after the step
			}{
				{t0, 100, 722 * time.Second, 361 * time.Second},
				{t0 + 10*s, 1, 722 * time.Second, 354600 * time.Millisecond},
				{t0 + 20*s, 100, 1409200 * time.Millisecond, 704600 * time.Millisecond},
			}
			for _, path := range bucketPaths {
				k := e.key(p, fmt.Sprint("keep-", path))
				for i, st := range steps {
					if r, err := e.decideBucket(ctx, path, st.at, floodgate.Layer{Policy: p, Key: k, Cost: st.cost}); err != nil || !r.Allowed {
						t.Fatalf("%v %s %s, step %d: %+v %v", format, alg, path, i, r, err)
					}
					want := st.bin
					if format == TextState {
						want = st.text
					}
					check(k, fmt.Sprintf("%v %s %s, after step %d", format, alg, path, i), want)
				}
			}
			// The first two steps in one hot call: the key is written once,
			// with the first step's PX (the second keeps it).
			k := e.key(p, "keep-hot")
			e.bound[k] = ttlBound(p)
			var calls []*call
			for _, st := range steps[:2] {
				calls = append(calls, getCall(ctx, st.at, e.store.scripts.fast[alg], []floodgate.Layer{{Policy: p, Key: k, Cost: st.cost}}))
			}
			e.store.batch.run(calls)
			for i, cl := range calls {
				<-cl.done
				if cl.err != nil || !cl.res[0].Allowed {
					t.Fatalf("%v %s hot request %d: %+v %v", format, alg, i, cl.res[0], cl.err)
				}
			}
			want := steps[1].bin
			if format == TextState {
				want = steps[1].text
			}
			check(k, fmt.Sprintf("%v %s, a hot call", format, alg), want)

			// A written TTL outlives the life needed by at most the
			// window: 10 in 10 s, all taken at once, need 11 s; the key
			// gets 21 s.
			short := mustPolicy(t, floodgate.Policy{Name: "kbs", Algorithm: alg, Limit: 10, Window: 10 * time.Second})
			k = e.key(short, "keep-short")
			if r, err := e.one(ctx, t0, short, k, 10); err != nil || !r.Allowed {
				t.Fatalf("%v %s short: %+v %v", format, alg, r, err)
			}
			want = 21 * time.Second
			if format == TextState {
				want = 11 * time.Second
			}
			check(k, fmt.Sprintf("%v %s, a short window", format, alg), want)
		}
	}
}

// TestBucketOlderStates puts a token bucket's and a GCRA's state, in
// each form older builds wrote (text, and the binary layouts without the
// TTL's end), on keys with an hour's TTL and decides them with a binary
// Store through every script: each is decided as its text form is, and
// rewritten in the current layout, byte for byte what its text form
// becomes, with the TTL written (the life the state needs twice), not the
// hour kept.
func TestBucketOlderStates(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	e := newEnvOn(t, c, []*redis.Client{c}, Options{})
	ctx := context.Background()
	now := vectors.T0.Add(90 * time.Second).UnixMicro()
	tb := mustPolicy(t, floodgate.Policy{Name: "otb", Algorithm: floodgate.TokenBucket, Limit: 60, Window: time.Minute})
	gc := mustPolicy(t, floodgate.Policy{Name: "ogc", Algorithm: floodgate.GCRA, Limit: 60, Window: time.Minute})
	tag := func(name string) byte {
		for _, l := range stateLayouts {
			if l.name == name {
				return l.tag
			}
		}
		t.Fatalf("no layout %s", name)
		return 0
	}
	T, H, A := now-2_500_000, now-1_000_000, now-9_000_000
	for _, tc := range []struct {
		name  string
		p     floodgate.Policy
		nums  []int64 // the state's numbers, as its text form holds them
		older string  // the binary layout of older builds
		state algo.State
	}{
		{"token bucket", tb, []int64{T, 40}, "tb0", algo.State{T: T, N: 40}},
		{"token bucket, long", tb, []int64{T, 40, H, A, 0}, "tbr0", algo.State{T: T, N: 40}},
		{"gcra", gc, []int64{now + 5_000_000, H}, "gc0", algo.State{T: now + 5_000_000, N: H}},
		{"gcra, long", gc, []int64{now + 5_000_000, H, A, 0}, "gcr0", algo.State{T: now + 5_000_000, N: H}},
	} {
		text := strings.Trim(fmt.Sprint(tc.nums), "[]")
		bin := string(spackState(tag(tc.older), tc.nums...))
		// The life the new state needs, written twice (less than the
		// window here), as algo.Step gives it.
		o := algo.Step(tc.p, tc.state, now, 2)
		want := time.Duration(o.TTL) * time.Microsecond
		for _, path := range bucketPaths {
			var vals [2]string
			var res [2]floodgate.Result
			for i, v := range []string{text, bin} {
				k := e.key(tc.p, fmt.Sprint(tc.name, path, i))
				if err := c.Set(ctx, k, v, time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
				var err error
				if res[i], err = e.decideBucket(ctx, path, now, floodgate.Layer{Policy: tc.p, Key: k, Cost: 2}); err != nil || !res[i].Allowed {
					t.Fatalf("%s %s over %q: %+v %v", tc.name, path, v, res[i], err)
				}
				vals[i] = c.Get(ctx, k).Val()
				if got := c.PTTL(ctx, k).Val(); got > want+time.Millisecond || got < want-time.Second {
					t.Errorf("%s %s over %q: TTL %v, want about %v (written, not the hour kept)", tc.name, path, v, got, want)
				}
			}
			if res[0] != res[1] {
				t.Errorf("%s %s: over the older binary state %+v, over its text %+v", tc.name, path, res[1], res[0])
			}
			if vals[0] != vals[1] || !isBinary(vals[0]) || vals[0][0]&0x40 == 0 {
				t.Errorf("%s %s: left %q over the older binary state, %q over its text, want the same state with its TTL's end", tc.name, path, vals[1], vals[0])
			}
			if !o.Result.Allowed || res[0].Remaining != o.Result.Remaining || !res[0].ResetAt.Equal(o.Result.ResetAt) {
				t.Errorf("%s %s: %+v, want algo.Step's %+v", tc.name, path, res[0], o.Result)
			}
		}
	}
}

// TestBucketExpiryIsAbsence checks that a bucket's key never expires
// while its state still matters, whichever TTL it was given (written
// generously, or kept from an earlier write): for random requests through
// every script, in both state formats, after each admitted one the key's
// state is copied to a spare key and decided at the latest time an
// instance could read it before it expires (its expiry, from PEXPIRETIME,
// less the slack a lagging clock is allowed), beside a decision on no key
// at all: the two must be the same. The requests are stamped with the
// wall clock, which Redis's expiry counts in, so that a key's expiry and
// its state's times are on one clock (the request's stamp is taken before
// its write, so the comparison errs towards an earlier expiry).
func TestBucketExpiryIsAbsence(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	forEachFormat(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		r := rand.New(rand.NewPCG(seed, uint64(e.opts.StateFormat)))
		// A thousand a second, a burst of 300, in windows of a second and
		// of a millisecond: a written TTL outlives the life needed by as
		// much again, or by a millisecond only.
		for _, p := range []floodgate.Policy{
			mustPolicy(t, floodgate.Policy{Name: "xtb", Algorithm: floodgate.TokenBucket, Limit: 1000, Window: time.Second, Burst: 300}),
			mustPolicy(t, floodgate.Policy{Name: "xgc", Algorithm: floodgate.GCRA, Limit: 1000, Window: time.Second, Burst: 300, MaxDelay: 200 * time.Millisecond}),
			mustPolicy(t, floodgate.Policy{Name: "xtbm", Algorithm: floodgate.TokenBucket, Limit: 1, Window: time.Millisecond, Burst: 300}),
			mustPolicy(t, floodgate.Policy{Name: "xgcm", Algorithm: floodgate.GCRA, Limit: 1, Window: time.Millisecond, Burst: 300, MaxDelay: 200 * time.Millisecond}),
		} {
			for _, path := range bucketPaths {
				k := e.key(p, "x-"+path)
				present, absent := e.key(p, "x-present-"+path), e.key(p, "x-absent-"+path)
				checked := 0
				for n := range 60 {
					cost := r.Int64N(120)
					now := time.Now().UnixMicro()
					res, err := e.decideBucket(ctx, path, now, floodgate.Layer{Policy: p, Key: k, Cost: cost})
					if err != nil {
						t.Fatal(err)
					}
					if !res.Allowed || cost == 0 {
						continue
					}
					var v *redis.StringCmd
					var exp *redis.DurationCmd
					if _, err := e.rd.TxPipelined(ctx, func(pp redis.Pipeliner) error {
						v, exp = pp.Get(ctx, k), pp.PExpireTime(ctx, k)
						return nil
					}); err != nil {
						t.Fatalf("%s %s, request %d: the state and its expiry: %v", p.Name, path, n, err)
					}
					// The latest time an instance lagging by the slack reads
					// it: Redis's expiry is in whole milliseconds, counted
					// from the millisecond the write began in.
					at := exp.Val().Microseconds() + 999 - algo.TTLSlack.Microseconds()
					if err := e.rd.Set(ctx, present, v.Val(), time.Minute).Err(); err != nil {
						t.Fatal(err)
					}
					spare := floodgate.Layer{Policy: p, Key: present, Cost: r.Int64N(120)}
					got, err := e.decideBucket(ctx, path, at, spare)
					if err != nil {
						t.Fatal(err)
					}
					spare.Key = absent
					want, err := e.decideBucket(ctx, path, at, spare)
					if err != nil {
						t.Fatal(err)
					}
					e.rd.Del(ctx, present, absent)
					if !sameResults([]floodgate.Result{got}, []floodgate.Result{want}) {
						t.Fatalf("seed %d, %s %s, request %d at %d: the state %q, expiring at %v, decides %+v at %d, where no key decides %+v",
							seed, p.Name, path, n, now, asText(v.Val()), exp.Val(), got, at, want)
					}
					checked++
				}
				if checked == 0 {
					t.Errorf("%s %s: no admitted request to check", p.Name, path)
				}
			}
		}
	})
}
