package redisstore

import (
	"context"
	"errors"
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

// formatPair returns two envs on one private Redis that share their keys
// (one prefix, one record of TTL bounds): one whose Store writes
// BinaryState, one TextState.
func formatPair(t *testing.T, opts Options) (eb, et *env, c *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	c = srv.Client(t)
	opts.StateFormat = BinaryState
	eb = newEnvOn(t, c, []*redis.Client{c}, opts)
	opts.StateFormat = TextState
	et = newEnvOn(t, c, []*redis.Client{c}, opts)
	et.prefix, et.bound = eb.prefix, eb.bound // used one after the other, never at once
	return eb, et, c
}

// isBinary reports whether v is a binary state (of any layout), and
// isText whether it is a text one (it starts with a digit).
func isBinary(v string) bool { return v != "" && asText(v) != v }
func isText(v string) bool   { return v != "" && v[0] >= '0' && v[0] <= '9' }

// wroteFormat checks that key holds a state in the format e writes.
func wroteFormat(t *testing.T, e *env, key string) {
	t.Helper()
	v, _ := e.rd.Get(context.Background(), key).Result()
	if e.opts.StateFormat == BinaryState && !isBinary(v) || e.opts.StateFormat == TextState && !isText(v) {
		t.Fatalf("a %s Store left %q at %s", e.opts.StateFormat, v, key)
	}
}

// TestStateFormatsInterop runs random requests on shared keys through two
// Stores, one writing each state format, picking the Store at random for
// every request: the single-layer scripts, the layered script and the
// general script in its reserve mode (which gives buckets the long form of
// their state). Every result must be the model's, whichever format the
// state was last written in, and every write is in its Store's format.
func TestStateFormatsInterop(t *testing.T) {
	eb, et, _ := formatPair(t, Options{})
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(seed, 3))
	var ps []floodgate.Policy
	for i, a := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA} {
		ps = append(ps, randPolicy(t, r, a, 60+i))
	}
	q, err := floodgate.NewQuota("iq", 1+r.Int64N(40), floodgate.Calendar{Unit: floodgate.PeriodDay, Location: time.UTC})
	if err != nil {
		t.Fatal(err)
	}
	ps = append(ps, q)
	m := newModel()
	now := vectors.T0.UnixMicro()
	paths := map[string]int{}
	for n := range 600 {
		k := 1 + r.IntN(3)
		idx := pickLayers(r, ps, k)
		now = nextTime(r, ps[idx[0]], now)
		layers := make([]floodgate.Layer, k)
		for j, pi := range idx {
			layers[j] = floodgate.Layer{Policy: ps[pi], Key: algo.KeyAt(eb.prefix, ps[pi], "id", now), Cost: randCost(r, ps[pi])}
			now = max(now, m.earliest(layers[j].Key))
		}
		e := eb
		if r.IntN(2) == 0 {
			e = et
		}
		path := "decide"
		if r.IntN(6) == 0 {
			path = "reserve"
		}
		paths[fmt.Sprint(e.opts.StateFormat, " ", path, " ", k)]++
		var got []floodgate.Result
		var err error
		if path == "reserve" {
			got, err = e.decideGeneral(ctx, now, layers, true)
		} else {
			got, err = e.decide(ctx, now, layers)
		}
		if err != nil {
			t.Fatalf("seed %d, decision %d (%s, %s): %v", seed, n, e.opts.StateFormat, path, err)
		}
		want := m.decide(now, layers)
		if !sameResults(got, want) {
			t.Fatalf("seed %d, decision %d (%s, %s) at %d, layers %+v:\n got %+v\nwant %+v", seed, n, e.opts.StateFormat, path, now, layers, got, want)
		}
		if floodgate.NewDecision(got).Allowed {
			for _, l := range layers {
				if l.Cost > 0 {
					wroteFormat(t, e, l.Key)
				}
			}
		}
	}
	t.Logf("decisions by format, path and layers: %v", paths)
}

// TestStateFormatsHandWritten puts each text layout of every algorithm's
// state, as an older build wrote it, on two keys, and decides them with a
// BinaryState Store and a TextState Store through every script (single
// layer, layered, general, reserve): the results must be the same, and
// the binary state the BinaryState Store leaves must say what the text
// one says.
func TestStateFormatsHandWritten(t *testing.T) {
	eb, et, c := formatPair(t, Options{})
	ctx := context.Background()
	now := vectors.T0.Add(90 * time.Second).UnixMicro()
	start := now - now%time.Minute.Microseconds()
	q, err := floodgate.NewQuota("hq", 50, floodgate.Calendar{Unit: floodgate.PeriodDay, Location: time.UTC})
	if err != nil {
		t.Fatal(err)
	}
	day := time.UnixMicro(now).UTC().Truncate(24 * time.Hour)
	qs, qe := day.UnixMicro(), day.Add(24*time.Hour).UnixMicro()
	bucket := func(a floodgate.Algorithm) floodgate.Policy {
		return mustPolicy(t, floodgate.Policy{Name: "h" + a.String(), Algorithm: a, Limit: 60, Window: time.Minute})
	}
	fw := mustPolicy(t, floodgate.Policy{Name: "hfw", Algorithm: floodgate.FixedWindow, Limit: 50, Window: time.Minute})
	sw := mustPolicy(t, floodgate.Policy{Name: "hsw", Algorithm: floodgate.SlidingWindow, Limit: 50, Window: time.Minute})
	tb, gc := bucket(floodgate.TokenBucket), bucket(floodgate.GCRA)
	for _, tc := range []struct {
		name string
		p    floodgate.Policy
		text string
	}{
		{"fixed window", fw, fmt.Sprintf("%d 7", start)},
		{"sliding window", sw, fmt.Sprintf("%d 7 20", start)},
		{"sliding window, previous window", sw, fmt.Sprintf("%d 9 3", start-time.Minute.Microseconds())},
		{"token bucket", tb, fmt.Sprintf("%d 40", now-2_500_000)},
		{"token bucket, long", tb, fmt.Sprintf("%d 40 %d %d 0", now-2_500_000, now-2_500_000, now-9_000_000)},
		{"gcra, one number", gc, fmt.Sprint(now + 5_000_000)},
		{"gcra", gc, fmt.Sprintf("%d %d", now+5_000_000, now-1_000_000)},
		{"gcra, long", gc, fmt.Sprintf("%d %d %d 0", now+5_000_000, now-1_000_000, now-9_000_000)},
		{"quota", q, fmt.Sprintf("%d 12 %d", qs, qe)},
	} {
		for _, path := range []string{"fast", "layered", "general", "reserve"} {
			t.Run(tc.name+" "+path, func(t *testing.T) {
				var got [2][]floodgate.Result
				var vals [2]string
				for i, e := range []*env{eb, et} {
					key := algo.KeyAt(eb.prefix, tc.p, fmt.Sprintf("%s-%s-%s", tc.name, path, e.opts.StateFormat), now)
					if err := c.Set(ctx, key, tc.text, time.Hour).Err(); err != nil {
						t.Fatal(err)
					}
					e.bound[key] = time.Hour
					l := []floodgate.Layer{{Policy: tc.p, Key: key, Cost: 2}}
					var err error
					switch path {
					case "fast":
						got[i], err = e.decide(ctx, now, l)
					case "layered":
						got[i], err = e.decideLayered(ctx, now, l)
					case "general":
						got[i], err = e.decideGeneral(ctx, now, l, false)
					case "reserve":
						got[i], err = e.decideGeneral(ctx, now, l, true)
					}
					if err != nil {
						t.Fatalf("%s: %v", e.opts.StateFormat, err)
					}
					if !got[i][0].Allowed {
						t.Fatalf("%s: %+v, want admitted", e.opts.StateFormat, got[i][0])
					}
					wroteFormat(t, e, key)
					vals[i], _ = c.Get(ctx, key).Result()
				}
				if !sameResults(got[0], got[1]) {
					t.Fatalf("binary Store %+v, text Store %+v", got[0][0], got[1][0])
				}
				if asText(vals[0]) != vals[1] {
					t.Fatalf("binary Store left %q (%q), text Store %q", vals[0], asText(vals[0]), vals[1])
				}
			})
		}
	}
}

// TestStateFormatsRelease reserves with a Store of one format and releases
// with a Store of the other (and of the same), for every algorithm but the
// sliding log: the release reads the reservation's state in its format,
// gives back all of it, writes in its own format, and the layer stands as
// before the reservation.
func TestStateFormatsRelease(t *testing.T) {
	eb, et, _ := formatPair(t, Options{SlotCheck: SlotCheckOn})
	now := vectors.T0.Add(3 * time.Hour).UnixMicro()
	id := uint64(0)
	for _, a := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA, floodgate.Quota} {
		for _, pair := range [][2]*env{{eb, et}, {et, eb}, {eb, eb}, {et, et}} {
			res, rel := pair[0], pair[1]
			t.Run(fmt.Sprintf("%s reserved %s released %s", a, res.opts.StateFormat, rel.opts.StateFormat), func(t *testing.T) {
				p := layered(t, "fr", a, 10)
				l := res.layerAt(p, fmt.Sprint("fr-", res.opts.StateFormat, "-", rel.opts.StateFormat), now, 3)
				fresh := res.peek(t, now, l)
				// A first request, so that the reservation is not the
				// key's first write, then the reservation.
				if _, err := res.one(context.Background(), now, p, l.Key, 1); err != nil {
					t.Fatal(err)
				}
				wroteFormat(t, res, l.Key)
				before := res.peek(t, now, l)
				part := res.reserveOne(t, now, l)
				if !part.held || part.out[0].Remaining != before.Remaining-3 {
					t.Fatalf("reserve: held %v, %+v", part.held, part.out[0])
				}
				wroteFormat(t, res, l.Key)
				want := int64(3)
				if a == floodgate.GCRA {
					want = 3 * (p.Window.Microseconds() / p.Limit) // µs of TAT
				}
				id++
				applied, back := rel.releaseOne(t, now, part, id)
				if !applied || back[0].back != want || back[0].rem != before.Remaining {
					t.Fatalf("release: applied %v, %+v; want %d back and %d remaining", applied, back, want, before.Remaining)
				}
				wroteFormat(t, rel, l.Key)
				if got := rel.peek(t, now, l); !sameResults([]floodgate.Result{got}, []floodgate.Result{before}) {
					t.Fatalf("after the release: %+v, want the standing before the reservation %+v", got, before)
				}
				if fresh.Remaining != before.Remaining+1 {
					t.Fatalf("fresh %+v, after one request %+v", fresh, before)
				}
			})
		}
	}
}

// foreignValues are values floodgate did not write for a key of algorithm
// a, each with why it is foreign.
func foreignValues(a floodgate.Algorithm) map[string]string {
	pad := func(n int) string { return strings.Repeat("\x00", n) }
	vals := map[string]string{
		"random bytes": "\xff\xfe\x01\x80garbage\x00\x13",
		"a word":       "not ours",
	}
	var own []stateLayout // the algorithm's layouts, those of older builds included
	for _, l := range stateLayouts {
		if l.tag&0x0f != byte(a) { // another algorithm's binary state
			vals["a binary "+l.name+" state"] = string(l.tag) + pad(l.size()-1)
		} else {
			own = append(own, l)
		}
	}
	for _, l := range own {
		vals["a wrong tag of the "+l.name+" length"] = "\x7f" + pad(l.size()-1)
		vals["the "+l.name+" tag, one byte short"] = string(l.tag) + pad(l.size()-2)
		vals["the "+l.name+" tag, one byte long"] = string(l.tag) + pad(l.size())
		vals["the "+l.name+" tag alone"] = string(l.tag)
		for _, o := range own {
			if o.size() != l.size() { // a layout's tag at another one's length
				vals["the "+l.name+" tag at the "+o.name+" length"] = string(l.tag) + pad(o.size()-1)
			}
		}
	}
	if a != floodgate.SlidingWindow && a != floodgate.Quota {
		vals["three numbers of text"] = "1 2 3"
	} else {
		vals["two numbers of text"] = "1 2"
	}
	return vals
}

// TestStateFormatsForeignValues puts values floodgate did not write
// (foreignValues) on keys of every algorithm, and decides them with a
// Store of each format, alone (one layer, and a layered decision on
// either layer), in a coalesced batch of single-layer requests and in a
// coalesced batch of layered decisions: each such
// request fails alone, with the error of any foreign value (wrapping
// ErrStoreUnavailable, "did not write"), the value is left as it was, and
// the other requests of the batch are decided.
func TestStateFormatsForeignValues(t *testing.T) {
	eb, et, c := formatPair(t, Options{})
	ctx := context.Background()
	now := vectors.T0.Add(time.Hour).UnixMicro()
	edge := mustPolicy(t, floodgate.Policy{Name: "fedge", Algorithm: floodgate.FixedWindow, Limit: 1000, Window: time.Minute})
	for _, e := range []*env{eb, et} {
		for _, p := range allAlgorithms(t, 5, time.Minute) {
			if !hasFastScript(p.Algorithm) {
				continue
			}
			for why, v := range foreignValues(p.Algorithm) {
				t.Run(fmt.Sprintf("%s %s %s", e.opts.StateFormat, p.Algorithm, why), func(t *testing.T) {
					k := func(id string) string { return algo.KeyAt(eb.prefix, p, fmt.Sprint(e.opts.StateFormat, why, id), now) }
					foreign := k("foreign")
					if err := c.Set(ctx, foreign, v, time.Minute).Err(); err != nil {
						t.Fatal(err)
					}
					e.bound[foreign] = time.Minute
					isForeign := func(what string, err error) {
						t.Helper()
						if !errors.Is(err, floodgate.ErrStoreUnavailable) || !strings.Contains(err.Error(), "did not write") {
							t.Errorf("%s: err %v, want a value floodgate did not write", what, err)
						}
					}
					_, err := e.one(ctx, now, p, foreign, 1)
					isForeign("alone", err)
					_, err = e.decideGeneral(ctx, now, []floodgate.Layer{{Policy: p, Key: foreign, Cost: 1}}, false)
					isForeign("general script", err)

					calls := batchOf(p, now, k("a"), foreign, k("b"))
					for _, cl := range calls {
						cl.script = e.store.scripts.fast[p.Algorithm]
						e.bound[cl.layers[0].Key] = ttlBound(p)
					}
					e.store.batch.run(calls)
					for i, cl := range calls {
						<-cl.done
						if i == 1 {
							isForeign("in a batch", cl.err)
						} else if cl.err != nil || !cl.res[0].Allowed || cl.res[0].Remaining != 4 {
							t.Errorf("batch request %d: %+v %v, want allowed with 4 left", i, cl.res[0], cl.err)
						}
					}

					layers := func(id string) []floodgate.Layer {
						return []floodgate.Layer{
							{Policy: edge, Key: algo.KeyAt(eb.prefix, edge, fmt.Sprint(e.opts.StateFormat, why, "edge"), now), Cost: 1},
							{Policy: p, Key: id, Cost: 1},
						}
					}
					// A lone layered decision (sent packed), the foreign
					// value on either layer: it fails, and the other
					// layer's key is not written.
					fresh := algo.KeyAt(eb.prefix, edge, fmt.Sprint(e.opts.StateFormat, why, "lone edge"), now)
					for _, ls := range [][]floodgate.Layer{
						{{Policy: edge, Key: fresh, Cost: 1}, {Policy: p, Key: foreign, Cost: 1}},
						{{Policy: p, Key: foreign, Cost: 1}, {Policy: edge, Key: fresh, Cost: 1}},
					} {
						_, err = e.decide(ctx, now, ls)
						isForeign("layered, alone", err)
						if n := c.Exists(ctx, fresh).Val(); n != 0 {
							t.Errorf("layered, alone: the other layer's key was written")
						}
					}

					lc := []*call{getCall(ctx, now, e.store.scripts.layers, layers(k("la"))), getCall(ctx, now, e.store.scripts.layers, layers(foreign)), getCall(ctx, now, e.store.scripts.layers, layers(k("lb")))}
					for _, cl := range lc {
						for _, l := range cl.layers {
							if l.Key != foreign {
								e.bound[l.Key] = ttlBound(l.Policy)
							}
						}
					}
					e.store.batch.run(lc)
					for i, cl := range lc {
						<-cl.done
						if i == 1 {
							isForeign("in a layered batch", cl.err)
						} else if cl.err != nil || !cl.res[1].Allowed || cl.res[1].Remaining != 4 {
							t.Errorf("layered batch decision %d: %+v %v, want allowed with 4 left", i, cl.res, cl.err)
						}
					}
					if got := c.Get(ctx, foreign).Val(); got != v {
						t.Errorf("the foreign value changed to %q", got)
					}
				})
			}
		}
	}
}
