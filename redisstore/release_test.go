package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/vectors"
)

// reserveOne reserves layers (which share a slot) as one part of a split
// decision, and returns the part.
func (e *env) reserveOne(t *testing.T, now int64, layers ...floodgate.Layer) *part {
	t.Helper()
	p := &part{slot: Slot(layers[0].Key), layers: layers}
	e.store.reserve(context.Background(), now, p)
	e.mu.Lock()
	for _, l := range layers {
		e.bound[l.Key] = ttlBound(l.Policy)
	}
	e.mu.Unlock()
	if p.err != nil {
		t.Fatalf("reserve: %v", p.err)
	}
	return p
}

// releaseOne releases p under marker id and returns whether it gave back,
// and what.
func (e *env) releaseOne(t *testing.T, now int64, p *part, id uint64) (bool, []released) {
	t.Helper()
	applied, rel := e.store.release(context.Background(), now, p, id)
	if p.relErr != nil {
		t.Fatalf("release: %v", p.relErr)
	}
	return applied, rel
}

// testRelease runs the release tests on e.
func testRelease(t *testing.T, e *env) {
	t.Run("idempotent", func(t *testing.T) { testReleaseIdempotent(t, e) })
	t.Run("window ended", func(t *testing.T) { testReleaseWindowEnded(t, e) })
	t.Run("sliding log", func(t *testing.T) { testReleaseSlidingLog(t, e) })
	t.Run("token bucket to the microsecond", func(t *testing.T) { testReleaseTokenBucketExact(t, e) })
	t.Run("crossed", func(t *testing.T) {
		for _, a := range []floodgate.Algorithm{floodgate.TokenBucket, floodgate.GCRA} {
			t.Run(a.String(), func(t *testing.T) { testReleaseCrossed(t, e, a) })
			t.Run(a.String()+" random", func(t *testing.T) { testReleaseCrossedRandom(t, e, a, uint64(time.Now().UnixNano())) })
		}
	})
	t.Run("buckets never over-admit", func(t *testing.T) {
		for _, a := range []floodgate.Algorithm{floodgate.TokenBucket, floodgate.GCRA} {
			t.Run(a.String(), func(t *testing.T) { testReleaseBuckets(t, e, a, uint64(time.Now().UnixNano())) })
		}
	})
}

// testReleaseIdempotent reserves 3 on a fresh layer of every algorithm and
// releases it twice under the same marker: the first gives the 3 back (the
// layer stands as before the reservation), the second changes nothing.
func testReleaseIdempotent(t *testing.T, e *env) {
	now := vectors.T0.Add(3 * time.Hour).UnixMicro()
	for a := floodgate.FixedWindow; a <= floodgate.Quota; a++ {
		t.Run(a.String(), func(t *testing.T) {
			p := layered(t, "idem", a, 10)
			l := e.layerAt(p, "idem", now, 3)
			fresh := e.peek(t, now, l)
			res := e.reserveOne(t, now, l)
			if !res.held || res.out[0].Remaining != 7 {
				t.Fatalf("reserve: held %v, %+v", res.held, res.out[0])
			}
			want := int64(3)
			if a == floodgate.GCRA {
				want = 3 * (p.Window.Microseconds() / p.Limit) // µs of TAT
			}
			applied, rel := e.releaseOne(t, now, res, 42)
			if !applied || rel[0].back != want || rel[0].rem != 10 {
				t.Fatalf("release: applied %v, %+v; want %d back and 10 remaining", applied, rel, want)
			}
			if got := e.peek(t, now, l); !sameResults([]floodgate.Result{got}, []floodgate.Result{fresh}) {
				t.Fatalf("after the release: %+v, want the fresh standing %+v", got, fresh)
			}
			applied, rel = e.releaseOne(t, now, res, 42)
			if applied || rel[0].back != 0 || rel[0].rem != 10 {
				t.Fatalf("second release: applied %v, %+v; want nothing given back", applied, rel)
			}
			if got := e.peek(t, now, l); !sameResults([]floodgate.Result{got}, []floodgate.Result{fresh}) {
				t.Fatalf("after the second release: %+v, want %+v", got, fresh)
			}
		})
	}
}

// testReleaseWindowEnded releases reservations after their window, period
// or bucket backlog has moved on: nothing that is no longer the
// reservation's is given back, nothing goes negative, and the layer stands
// exactly as if the reservation had never been made.
func testReleaseWindowEnded(t *testing.T, e *env) {
	t0 := vectors.T0.Add(5*time.Hour + 10*time.Second).UnixMicro()
	minute := time.Minute.Microseconds()
	for _, tc := range []struct {
		name  string
		p     floodgate.Policy
		later int64 // when the next request comes, after t0
		back  int64 // what the release may still give back
	}{
		{"fixed window, next window", mustPolicy(t, floodgate.Policy{Name: "fw-end", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Minute}), minute, 0},
		{"sliding window, next window", mustPolicy(t, floodgate.Policy{Name: "sw-next", Algorithm: floodgate.SlidingWindow, Limit: 10, Window: time.Minute}), minute, 3},
		{"sliding window, two windows on", mustPolicy(t, floodgate.Policy{Name: "sw-end", Algorithm: floodgate.SlidingWindow, Limit: 10, Window: time.Minute}), 2 * minute, 0},
		{"quota, next day (a key per day: the old one is given back)", layered(t, "qt-end", floodgate.Quota, 10), 24 * time.Hour.Microseconds(), 3},
		{"token bucket, refilled", mustPolicy(t, floodgate.Policy{Name: "tb-end", Algorithm: floodgate.TokenBucket, Limit: 10, Window: time.Minute}), minute, 0},
		{"gcra, drained", mustPolicy(t, floodgate.Policy{Name: "gc-end", Algorithm: floodgate.GCRA, Limit: 10, Window: time.Minute}), minute, 0},
		{"sliding log, expired", mustPolicy(t, floodgate.Policy{Name: "sl-end", Algorithm: floodgate.SlidingLog, Limit: 10, Window: time.Minute}), minute, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMirror(t, e)
			t1 := t0 + tc.later
			res := e.reserveOne(t, t0, e.layerAt(tc.p, "end", t0, 3))
			if !res.held {
				t.Fatalf("reserve: %+v", res.out)
			}
			// The next request, also made on a memstore that never saw the
			// reservation.
			m.both(t, t1, e.layerAt(tc.p, "end", t1, 1))
			applied, rel := e.releaseOne(t, t0, res, 7)
			if !applied || rel[0].back != tc.back {
				t.Fatalf("release: applied %v, %+v; want %d given back", applied, rel, tc.back)
			}
			// Now Redis must stand exactly where the memstore does.
			for _, at := range []int64{t1, t1 + minute/2, t1 + minute} {
				m.decide(t, at, withCost(e.layerAt(tc.p, "end", at, 0), 0))
			}
		})
	}
}

// testReleaseSlidingLog releases an entry from the middle of a sliding
// log: the entries admitted after it are renamed so that the live sum, the
// retry times and the expiries are exactly those of a log that never held
// it; entries of equal time and cost are interchangeable; and a release
// with more than SL_RELEASE_CAP entries after it gives nothing back.
func testReleaseSlidingLog(t *testing.T, e *env) {
	t0 := vectors.T0.Add(7 * time.Hour).UnixMicro()
	sec := time.Second.Microseconds()
	p := mustPolicy(t, floodgate.Policy{Name: "sl-rel", Algorithm: floodgate.SlidingLog, Limit: 20, Window: time.Minute})
	w := p.Window.Microseconds()

	t.Run("middle", func(t *testing.T) {
		m := newMirror(t, e)
		key := e.layerAt(p, "middle", t0, 0).Key
		l := func(cost int64) floodgate.Layer { return floodgate.Layer{Policy: p, Key: key, Cost: cost} }
		m.decide(t, t0, l(4)) // an entry before the reservation
		res := e.reserveOne(t, t0+sec, l(2))
		for i, c := range []int64{1, 3, 1} { // admitted while it is pending
			m.both(t, t0+int64(2+i)*sec, l(c))
		}
		if applied, rel := e.releaseOne(t, t0+sec, res, 1); !applied || rel[0].back != 2 || rel[0].rem != 20-9 {
			t.Fatalf("release: %v %+v; want 2 back and 11 remaining", applied, rel)
		}
		// Peeks at every edge: each entry's expiry and a microsecond before.
		for _, at := range []int64{t0 + 4*sec, t0 + w - 1, t0 + w, t0 + sec + w, t0 + 2*sec + w - 1, t0 + 2*sec + w, t0 + 3*sec + w, t0 + 4*sec + w} {
			m.decide(t, at, l(0))
		}
		// And requests of every size at one instant: exactly the free room
		// passes.
		for _, c := range []int64{12, 11} {
			m.decide(t, t0+5*sec, l(c))
		}
	})

	t.Run("same time and cost", func(t *testing.T) {
		m := newMirror(t, e)
		key := e.layerAt(p, "same", t0, 0).Key
		l := func(cost int64) floodgate.Layer { return floodgate.Layer{Policy: p, Key: key, Cost: cost} }
		res := e.reserveOne(t, t0, l(1))
		m.both(t, t0, l(1))
		m.both(t, t0, l(2))
		if applied, rel := e.releaseOne(t, t0, res, 1); !applied || rel[0].back != 1 || rel[0].rem != 17 {
			t.Fatalf("release: %v %+v; want 1 back and 17 remaining", applied, rel)
		}
		m.decide(t, t0, l(0))
		m.decide(t, t0+w, l(0))
		m.decide(t, t0+sec, l(17))
	})

	// The reservation is the oldest entry: removing it with the entries
	// after it empties the set, which Redis deletes with its TTL; the
	// renamed entries must come back with the TTL, or the key would live
	// forever once the identity goes idle.
	t.Run("whole set keeps its TTL", func(t *testing.T) {
		m := newMirror(t, e)
		key := e.layerAt(p, "whole", t0, 0).Key
		l := func(cost int64) floodgate.Layer { return floodgate.Layer{Policy: p, Key: key, Cost: cost} }
		res := e.reserveOne(t, t0, l(2))
		ttl0, err := e.rd.PTTL(context.Background(), key).Result()
		if err != nil || ttl0 <= 0 {
			t.Fatalf("PTTL after the reservation: %v, %v", ttl0, err)
		}
		m.both(t, t0, l(1)) // admitted while it is pending, at the same time
		m.both(t, t0, l(3))
		ttl1 := e.rd.PTTL(context.Background(), key).Val()
		if applied, rel := e.releaseOne(t, t0, res, 1); !applied || rel[0].back != 2 || rel[0].rem != 20-4 {
			t.Fatalf("release: %v %+v; want 2 back and 16 remaining", applied, rel)
		}
		ttl, err := e.rd.PTTL(context.Background(), key).Result()
		if err != nil || ttl <= 0 || ttl > ttl1 {
			t.Fatalf("PTTL after the release = %v, %v; want the TTL the key had (%v), never none (-1)", ttl, err, ttl1)
		}
		m.decide(t, t0, l(0))
		m.decide(t, t0+w, l(0))
		m.decide(t, t0+sec, l(16))
		m.decide(t, t0+sec, l(1))
	})

	t.Run("too many after", func(t *testing.T) {
		big := mustPolicy(t, floodgate.Policy{Name: "sl-big", Algorithm: floodgate.SlidingLog, Limit: 1000, Window: time.Minute})
		key := e.layerAt(big, "busy", t0, 0).Key
		res := e.reserveOne(t, t0, floodgate.Layer{Policy: big, Key: key, Cost: 1})
		const after = 300 // more than SL_RELEASE_CAP
		for i := range after {
			if r, err := e.one(context.Background(), t0+int64(i+1), big, key, 1); err != nil || !r.Allowed {
				t.Fatalf("request %d: %+v, %v", i, r, err)
			}
		}
		if applied, rel := e.releaseOne(t, t0, res, 1); !applied || rel[0].back != 0 || rel[0].rem != 1000-after-1 {
			t.Fatalf("release: %v %+v; want nothing back and %d remaining", applied, rel, 1000-after-1)
		}
		if !strings.Contains(source, "local SL_RELEASE_CAP = 256") {
			t.Fatal("SL_RELEASE_CAP changed: adjust this test")
		}
	})
}

// testReleaseTokenBucketExact: a reservation of 3 on a full bucket, a
// request a second later, then the release. Without the reservation the
// bucket would have been full at that second, so the request would have
// left 9 tokens with the refill clock at that second: the release must
// leave exactly that (the next token a full interval after the request),
// where giving back whole tokens rounded down kept one (8 left).
func testReleaseTokenBucketExact(t *testing.T, e *env) {
	t0 := vectors.T0.Add(8 * time.Hour).UnixMicro()
	sec := time.Second.Microseconds()
	p := mustPolicy(t, floodgate.Policy{Name: "tb-exact", Algorithm: floodgate.TokenBucket, Limit: 10, Window: time.Hour})
	iv := p.Window.Microseconds() / p.Limit
	m := newMirror(t, e)
	key := e.layerAt(p, "exact", t0, 0).Key
	l := func(cost int64) floodgate.Layer { return floodgate.Layer{Policy: p, Key: key, Cost: cost} }
	res := e.reserveOne(t, t0, l(3))
	if !res.held {
		t.Fatalf("reserve: %+v", res.out)
	}
	m.both(t, t0+sec, l(1))
	// The mirror never saw the reservation: it is the bucket without it.
	if applied, rel := e.releaseOne(t, t0+sec, res, 1); !applied || rel[0].back != 3 || rel[0].rem != 9 {
		t.Fatalf("release: %v %+v; want 3 tokens back and 9 left", applied, rel)
	}
	for _, at := range []int64{t0 + sec, t0 + sec + iv - 1, t0 + sec + iv, t0 + sec + 2*iv} {
		m.decide(t, at, l(0))
	}
	m.decide(t, t0+sec+iv, l(10))
	m.decide(t, t0+sec+iv, l(9))
}

// testReleaseBuckets interleaves, on one bucket, plain decisions,
// reservations and releases of pending reservations in random order at
// random times (mostly forward, sometimes a little back, as clocks of
// several instances would), and checks after every step that the bucket
// is never fuller than the requests it still counts allow: its full time F
// is at least the F of the admitted requests that were not released,
// replayed in order (F = max(F, t) + cost × interval). That is "a release
// never over-admits". It also checks that releases do give back, and that a
// release that nothing interleaved with gives back everything.
func testReleaseBuckets(t *testing.T, e *env, a floodgate.Algorithm, seed uint64) {
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, uint64(a)))
	p := floodgate.Policy{Name: "bk-" + a.String(), Algorithm: a, Limit: 20, Window: time.Minute, Burst: 8}
	if a == floodgate.GCRA {
		p.MaxDelay = 2 * time.Second
	}
	p = mustPolicy(t, p)
	iv := p.Window.Microseconds() / p.Limit // 3s
	type request struct {
		at, cost int64
		released bool
	}
	for run := range 6 {
		key := e.layerAt(p, fmt.Sprintf("bk%d", run), 0, 0).Key
		var reqs []*request
		type pending struct {
			p   *part
			req *request
			at  int64
		}
		var open []pending
		now := vectors.T0.Add(9 * time.Hour).UnixMicro()
		var gave, full, exact int64 // given back in all; releases that gave back in full; that found their reservation untouched
		for n := range 150 {
			switch r.IntN(10) {
			case 0:
				now -= r.Int64N(iv / 2) // a clock behind
			default:
				now += r.Int64N(iv)
			}
			cost := 1 + r.Int64N(3)
			switch op := r.IntN(3); {
			case op == 0 || op == 1 && len(open) > 8:
				res, err := e.one(context.Background(), now, p, key, cost)
				if err != nil {
					t.Fatal(err)
				}
				if res.Allowed {
					reqs = append(reqs, &request{at: now, cost: cost})
				}
			case op == 1:
				res := e.reserveOne(t, now, floodgate.Layer{Policy: p, Key: key, Cost: cost})
				if res.held {
					q := &request{at: now, cost: cost}
					reqs = append(reqs, q)
					open = append(open, pending{res, q, now})
				}
			case len(open) > 0:
				i := r.IntN(len(open))
				pd := open[i]
				open = append(open[:i], open[i+1:]...)
				bf, ba, br := bucketState(t, e, key, p)
				untouched := [3]int64{bf, ba, br} == pd.p.undo[0]
				applied, rel := e.releaseOne(t, pd.at, pd.p, uint64(n))
				if !applied {
					t.Fatal("a fresh marker was found")
				}
				pd.req.released = true
				gave += rel[0].back
				if rel[0].back == pd.req.cost || a == floodgate.GCRA && rel[0].back == pd.req.cost*iv {
					full++
				}
				if untouched {
					exact++
					if a == floodgate.TokenBucket && rel[0].back != pd.req.cost || a == floodgate.GCRA && rel[0].back != pd.req.cost*iv {
						t.Fatalf("seed %d step %d: a release nothing interleaved with gave back %d of %d", seed, n, rel[0].back, pd.req.cost)
					}
				}
			}
			// The invariant.
			var f int64
			for _, q := range reqs {
				if !q.released {
					f = max(f, q.at) + q.cost*iv
				}
			}
			if got, _, _ := bucketState(t, e, key, p); got < f {
				t.Fatalf("seed %d step %d: the bucket is full again at %d, but the requests it still counts need %d (%dµs over-admitted)", seed, n, got, f, f-got)
			}
		}
		if gave == 0 || full == 0 {
			t.Fatalf("seed %d: releases gave back %d in all (%d fully): the test exercised nothing", seed, gave, full)
		}
		t.Logf("run %d: %d releases gave back in full, %d found their reservation untouched; %d given back in all", run, full, exact, gave)
	}
}

// bucketState reads a bucket key and returns its full time F (the TAT for
// GCRA, T + (burst − N) × interval for a token bucket; 0 when the key does
// not exist) and its bookkeeping A and R (-1, -1 for the short form, which
// has none).
func bucketState(t *testing.T, e *env, key string, p floodgate.Policy) (f, a, r int64) {
	t.Helper()
	v := asText(e.get(t, key))
	if v == "" {
		return 0, -1, -1
	}
	fields := strings.Fields(v)
	nums := make([]int64, len(fields))
	for i := range fields {
		var err error
		if nums[i], err = strconv.ParseInt(fields[i], 10, 64); err != nil {
			t.Fatalf("state %q: %v", v, err)
		}
	}
	iv := p.Window.Microseconds() / p.Limit
	switch {
	case p.Algorithm == floodgate.GCRA && len(nums) == 4:
		return nums[0], nums[2], nums[3]
	case p.Algorithm == floodgate.GCRA && (len(nums) == 1 || len(nums) == 2): // "T", "T L"
		return nums[0], -1, -1
	case p.Algorithm == floodgate.TokenBucket && len(nums) == 5:
		return nums[0] + (p.Capacity()-nums[1])*iv, nums[3], nums[4]
	case p.Algorithm == floodgate.TokenBucket && len(nums) == 2:
		return nums[0] + (p.Capacity()-nums[1])*iv, -1, -1
	}
	t.Fatalf("state %q is not a %v state", v, p.Algorithm)
	return 0, 0, 0
}

// TestReleaseErrorAfterWrite: unlike a decision, a release can fail after
// it wrote. Here the second layer's key (a token bucket's: bucket releases
// read their state with a plain GET, while window releases read through
// the decision's readers, which treat a key of another type as not
// floodgate's and give nothing back) changes type after the reservation,
// so the release writes its marker and gives the first layer back before a
// WRONGTYPE read stops it. Its failure must therefore never
// count as "nothing written": the split decision reports the part as
// ErrIndeterminate, whatever class the error reply itself was given.
func TestReleaseErrorAfterWrite(t *testing.T) {
	e, _ := newEnv(t)
	ctx := context.Background()
	now := vectors.T0.Add(11 * time.Hour).UnixMicro()
	la := e.layerAt(layered(t, "first", floodgate.FixedWindow, 10), "who", now, 3)
	lb := e.layerAt(layered(t, "second", floodgate.TokenBucket, 10), "who", now, 3)
	if Slot(la.Key) != Slot(lb.Key) {
		t.Fatalf("keys %q and %q are in different slots", la.Key, lb.Key)
	}
	res := e.reserveOne(t, now, la, lb)
	if !res.held || res.out[0].Remaining != 7 || res.out[1].Remaining != 7 {
		t.Fatalf("reserve: held %v, %+v", res.held, res.out)
	}
	if err := e.rd.Del(ctx, lb.Key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rd.HSet(ctx, lb.Key, "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rd.Expire(ctx, lb.Key, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	const id = 77
	if applied, _ := e.store.release(ctx, now, res, id); applied {
		t.Fatal("a failed release reports that it gave back")
	}
	if res.relErr == nil || !strings.Contains(res.relErr.Error(), "WRONGTYPE") {
		t.Fatalf("release error %v, want a WRONGTYPE reply", res.relErr)
	}
	t.Logf("the release's own error: %v", res.relErr)
	// What the release wrote before it failed stays.
	marker, err := markerKey(la.Key, id)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := e.rd.Exists(ctx, marker).Result(); err != nil || n != 1 {
		t.Fatalf("marker %q: exists %d, %v; want it written", marker, n, err)
	}
	if r := e.peek(t, now, la); r.Remaining != 10 {
		t.Fatalf("first layer: %+v, want its 3 given back (10 remaining)", r)
	}
	err = splitError([]part{*res})
	if !errors.Is(err, floodgate.ErrIndeterminate) || errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Fatalf("split error %v, want ErrIndeterminate only", err)
	}
}

// testReleaseCrossed reproduces the crossed releases of issue 16 item 3
// with fixed timestamps (interval 1s): a reservation D (kept) leaves a
// backlog of 1s, reservations A (2) then B (3) join it (and, in the second
// case, a plain decision C after them), then B is released before A. B was
// queued after A, so its release does not move A's span; the former rule
// assumed it did and gave A back only 2s − 2µs of its 2s (GCRA: 1999998µs;
// a token bucket gave its 2 tokens but held the refill clock 2µs), leaving
// the bucket 2µs short at every edge after. After both releases the bucket
// must decide exactly as one that only ever saw D and C (the memstore
// mirror), a microsecond before and at each edge.
func testReleaseCrossed(t *testing.T, e *env, a floodgate.Algorithm) {
	t0 := vectors.T0.Add(10 * time.Hour).UnixMicro()
	p := floodgate.Policy{Name: "crossed-" + a.String(), Algorithm: a, Limit: 10, Window: 10 * time.Second}
	p = mustPolicy(t, p)
	iv := p.Window.Microseconds() / p.Limit // 1s
	for _, withC := range []bool{false, true} {
		m := newMirror(t, e)
		key := e.layerAt(p, fmt.Sprintf("crossed-%v", withC), t0, 0).Key
		l := func(cost int64) floodgate.Layer { return floodgate.Layer{Policy: p, Key: key, Cost: cost} }
		if rd := e.reserveOne(t, t0, l(1)); !rd.held {
			t.Fatalf("reserve D: %+v", rd.out)
		}
		if err := m.mem.Decide(context.Background(), t0, []floodgate.Layer{l(1)}, make([]floodgate.Result, 1)); err != nil {
			t.Fatal(err)
		}
		ra := e.reserveOne(t, t0+1, l(2))
		rb := e.reserveOne(t, t0+2, l(3))
		if !ra.held || !rb.held {
			t.Fatalf("reserve: %+v %+v", ra.out, rb.out)
		}
		if withC {
			m.both(t, t0+3, l(1))
		}
		_, relB := e.releaseOne(t, t0+4, rb, 1)
		_, relA := e.releaseOne(t, t0+5, ra, 2)
		want := func(cost int64) int64 {
			if a == floodgate.GCRA {
				return cost * iv
			}
			return cost
		}
		if relB[0].back != want(3) || relA[0].back != want(2) {
			t.Errorf("with C %v: B gave back %d, A %d; want %d and %d", withC, relB[0].back, relA[0].back, want(3), want(2))
		}
		at := t0 + 6
		for _, d := range []int64{0, iv - 4, iv - 3, iv - 2, iv - 1, iv, 2*iv - 4, 2*iv - 3, 2*iv - 2, 2 * iv} {
			m.decide(t, at+d, l(0))
		}
		m.decide(t, at+2*iv, l(10))
		m.decide(t, at+2*iv, l(9))
	}
}

// testReleaseCrossedRandom reserves and decides on one bucket key behind a
// backlog of one unit, microseconds apart, and releases the pending
// reservations in random order between further decisions: every span lies
// after the latest decision time, so after each release the bucket must be
// exactly the bucket of the requests it still counts (its full time F
// equal to their replay), however the releases crossed.
func testReleaseCrossedRandom(t *testing.T, e *env, a floodgate.Algorithm, seed uint64) {
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, uint64(a)+7))
	p := mustPolicy(t, floodgate.Policy{Name: "xr-" + a.String(), Algorithm: a, Limit: 100, Window: 100 * time.Second})
	iv := p.Window.Microseconds() / p.Limit // 1s
	start := vectors.T0.Add(11 * time.Hour).UnixMicro()
	for run := range 4 {
		key := e.layerAt(p, fmt.Sprintf("xr%d", run), 0, 0).Key
		l := func(cost int64) floodgate.Layer { return floodgate.Layer{Policy: p, Key: key, Cost: cost} }
		now := start
		// The backlog: a reservation (so the key keeps the bookkeeping) of
		// 1, kept: every later span starts 1s after the decisions or later.
		if d := e.reserveOne(t, now, l(1)); !d.held {
			t.Fatalf("reserve: %+v", d.out)
		}
		held := int64(1)
		type pending struct {
			p    *part
			cost int64
		}
		var open []pending
		var crossed int
		for n := range 60 {
			now++
			switch op := r.IntN(4); {
			case op == 0:
				if _, err := e.one(context.Background(), now, p, key, 1); err != nil {
					t.Fatal(err)
				}
				held++
			case op == 1 || len(open) == 0:
				c := 1 + r.Int64N(3)
				if res := e.reserveOne(t, now, l(c)); res.held {
					open = append(open, pending{res, c})
					held += c
				}
			default:
				i := r.IntN(len(open))
				if i < len(open)-1 {
					crossed++ // a reservation queued after it is still pending
				}
				pd := open[i]
				open = append(open[:i], open[i+1:]...)
				e.releaseOne(t, now, pd.p, uint64(1000*run+n))
				held -= pd.cost
			}
			if f, _, _ := bucketState(t, e, key, p); f != start+held*iv {
				t.Fatalf("seed %d run %d step %d: full again at %+dµs, want %+dµs (%d units held)", seed, run, n, f-start, held*iv, held)
			}
		}
		t.Logf("run %d: %d releases with a later reservation pending", run, crossed)
	}
}
