package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/vectors"
	"github.com/redis/go-redis/v9"
)

// TestPackedBatchArgument checks that a single-layer batch's command line
// is its keys and one argument, the requests' records packed one after
// another as a lone request's (buildLone), with the "h" when a key
// repeats.
func TestPackedBatchArgument(t *testing.T) {
	ctx := context.Background()
	now := vectors.T0.UnixMicro()
	for _, p := range append(allAlgorithms(t, 10, time.Minute), quotaPolicy(t, 10, floodgate.PeriodDay)) {
		if !hasFastScript(p.Algorithm) {
			continue
		}
		for _, hot := range []bool{false, true} {
			var calls []*call
			var want []byte
			for i := range 3 {
				k := fmt.Sprint("k", i)
				if hot && i == 2 {
					k = "k0"
				}
				l := floodgate.Layer{Policy: p, Key: k, Cost: int64(i)}
				calls = append(calls, getCall(ctx, now+int64(i), fastScripts[p.Algorithm], []floodgate.Layer{l}))
				f := newFrame(nil)
				f.buildLone(now+int64(i), &l)
				want = append(want, f.args[4].([]byte)...)
			}
			f := new(batchFrame)
			f.build(calls)
			n := 3 + 3 + 1
			if hot {
				n++
			}
			if len(f.args) != n || f.args[2] != 3 || f.args[3] != &calls[0].layers[0].Key || f.args[5] != &calls[2].layers[0].Key {
				t.Fatalf("%s hot %v: command line %v", p.Algorithm, hot, f.args)
			}
			if got, ok := f.args[6].([]byte); !ok || string(got) != string(want) {
				t.Errorf("%s hot %v: packed %x, want %x", p.Algorithm, hot, f.args[6], want)
			}
			if hot && f.args[7] != argHot {
				t.Errorf("%s: no h after a repeated key: %v", p.Algorithm, f.args[7])
			}
		}
	}
}

// TestPackedBatchGuards sends the single-layer scripts batches of packed
// records directly: a call whose packed argument is not a whole number of
// records fails as a whole and writes nothing; a request with a bad
// number, or whose key holds a value floodgate did not write (or a key of
// another type), fails alone with its code, writes nothing, and the
// requests around it are decided; the reply is the requests' integers
// packed.
func TestPackedBatchGuards(t *testing.T) {
	e, _ := newEnv(t)
	c := e.nodes[0]
	ctx := context.Background()
	for a, src := range fastSources {
		if src == "" {
			continue
		}
		alg := floodgate.Algorithm(a)
		t.Run(alg.String(), func(t *testing.T) {
			good := goodLoneNumbers(alg)
			rec := packLone(alg, byte(a), good)
			n := 0
			keys := func() []string {
				n++
				ks := []string{fmt.Sprintf("%s:packed:%s:%d:a", e.prefix, alg, n), fmt.Sprintf("%s:packed:%s:%d:b", e.prefix, alg, n), fmt.Sprintf("%s:packed:%s:%d:c", e.prefix, alg, n)}
				for _, k := range ks {
					e.bound[k] = 26 * time.Hour
				}
				return ks
			}
			three := func(mid []byte) []byte {
				return append(append(append([]byte(nil), rec...), mid...), rec...)
			}
			// The call's shape: refused whole.
			ks := keys()
			for name, arg := range map[string][]byte{
				"short":       three(rec)[:3*len(rec)-1],
				"long":        append(three(rec), 0),
				"two records": append(append([]byte(nil), rec...), rec...),
			} {
				if err := c.Eval(ctx, src, ks, arg).Err(); err == nil || !strings.Contains(err.Error(), "floodgate: bad call") {
					t.Errorf("%s: got %v, want a floodgate call error", name, err)
				}
				if n := c.Exists(ctx, ks...).Val(); n != 0 {
					t.Fatalf("%s: wrote %d keys", name, n)
				}
			}
			// decide runs a call of three requests, the middle one mid
			// (nil: good), and checks that the outer two are decided and
			// written, and the middle one answered code (0: decided).
			p := floodgate.Policy{Algorithm: alg, Limit: 10, Window: time.Minute}
			decide := func(name string, ks []string, mid []byte, code int64, extra ...any) {
				t.Helper()
				if mid == nil {
					mid = rec
				}
				reply, err := c.Eval(ctx, src, ks, append([]any{three(mid)}, extra...)...).Text()
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				f := new(batchFrame)
				vals, err := f.decodePacked(reply)
				if err != nil || len(vals) != 3*compactWidth {
					t.Fatalf("%s: reply %x: %v %v", name, reply, vals, err)
				}
				for i, k := range ks {
					var out [1]floodgate.Result
					err := decodeCompact(vals[4*i:4*i+4], []floodgate.Layer{{Policy: p}}, out[:])
					switch {
					case i == 1 && code != 0:
						if vals[4] != code || vals[5] != 0 || vals[6] != 0 || vals[7] != 0 {
							t.Errorf("%s: the middle request got %v, want the code %d", name, vals[4:8], code)
						}
					case err != nil || !out[0].Allowed:
						t.Errorf("%s: request %d got %v (%+v, %v), want admitted", name, i, vals[4*i:4*i+4], out[0], err)
					default:
						if c.Exists(ctx, k).Val() != 1 {
							t.Errorf("%s: request %d admitted, key not written", name, i)
						}
					}
				}
			}
			decide("good", keys(), nil, 0)
			for name, mid := range badRecords(alg, good) {
				ks := keys()
				decide(name, ks, mid, codeBadArgs)
				if c.Exists(ctx, ks[1]).Val() != 0 {
					t.Errorf("%s: the bad request wrote its key", name)
				}
			}
			for _, foreign := range []string{"1 2 3 4 5 6", "\x00abc"} {
				ks := keys()
				if err := c.Set(ctx, ks[1], foreign, time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
				decide(fmt.Sprintf("foreign %q", foreign), ks, nil, codeForeign)
				if v := c.Get(ctx, ks[1]).Val(); v != foreign {
					t.Errorf("foreign value changed to %q", v)
				}
				c.Del(ctx, ks[1])
			}
			ks = keys()
			if err := c.LPush(ctx, ks[1], "x").Err(); err != nil {
				t.Fatal(err)
			}
			decide("a list", ks, nil, codeForeign)
			c.Del(ctx, ks[1])
			// A hot call: the first and last requests share a key, read
			// once and written once, with both requests counted.
			ks = keys()
			ks[2] = ks[0]
			decide("hot", ks, nil, 0, "h")
			peek := good
			peek[6] = 0
			got, err := c.Eval(ctx, src, ks[:1], packLone(alg, byte(a), peek)).Text()
			var out [1]floodgate.Result
			if err == nil {
				err = decodeLone(got, []floodgate.Layer{{Policy: p}}, out[:])
			}
			if err != nil || out[0].Remaining != 8 {
				t.Errorf("hot: the shared key's standing %+v %v, want 8 remaining", out[0], err)
			}
		})
	}
}

// TestDecodePacked checks the packed batch reply's decoding: whole
// doubles that are integers below 2^53, in any number.
func TestDecodePacked(t *testing.T) {
	f := new(batchFrame)
	pack := func(xs ...float64) string {
		var b []byte
		for _, x := range xs {
			b = append(b, packLone(floodgate.FixedWindow, 0, [7]float64{x})[1:9]...)
		}
		return string(b)
	}
	if vals, err := f.decodePacked(pack(0, -1, 1<<53-1, 7)); err != nil || len(vals) != 4 || vals[1] != -1 || vals[2] != 1<<53-1 {
		t.Errorf("good reply: %v %v", vals, err)
	}
	if _, err := f.decodePacked(pack(1, 2)[:15]); err == nil {
		t.Error("ragged: no error")
	}
	for name, reply := range map[string]string{
		"fraction": pack(1, 2.5),
		"nan":      pack(1, math.NaN()),
		"inf":      pack(1, math.Inf(-1)),
		"2^53":     pack(1, 1<<53),
	} {
		if vals, err := f.decodePacked(reply); err != nil || len(vals) != 2 || vals[0] != 1 || vals[1] != badValue {
			t.Errorf("%s: %v %v, want [1 badValue]", name, vals, err)
		}
	}
}

// TestPackedLongReply sends a single-layer script a packed batch whose
// reply holds more numbers than Lua's unpack takes at once (its C
// stack): the script packs it in parts, and every request is answered.
func TestPackedLongReply(t *testing.T) {
	e, _ := newEnv(t)
	c := e.nodes[0]
	ctx := context.Background()
	now := float64(vectors.T0.UnixMicro())
	alg := floodgate.SlidingWindow
	rec := packLone(alg, byte(alg), [7]float64{now, float64(alg), 10, 60_000_000, 0, 0, 1})
	const n = 2100 // 8,400 numbers
	var keys []string
	var arg []byte
	for i := range n {
		k := fmt.Sprintf("%s:long:%d", e.prefix, i)
		e.bound[k] = time.Hour
		keys = append(keys, k)
		arg = append(arg, rec...)
	}
	reply, err := c.Eval(ctx, fastSources[alg], keys, arg).Text()
	if err != nil {
		t.Fatal(err)
	}
	vals, err := new(batchFrame).decodePacked(reply)
	if err != nil || len(vals) != 4*n {
		t.Fatalf("%d values, %v; want %d", len(vals), err, 4*n)
	}
	for i := range n {
		if vals[4*i] != 0 || vals[4*i+1] != 9 {
			t.Fatalf("request %d: %v, want admitted with 9 remaining", i, vals[4*i:4*i+4])
		}
	}
}

// TestLayersPackedGuards sends the layered script calls of its packed
// layout directly: a packed argument of the wrong length fails the call
// as a whole and writes nothing; a decision with a bad now or cost (NaN,
// infinite, a fraction, negative) fails alone with the code -2; the reply
// is packed.
func TestLayersPackedGuards(t *testing.T) {
	e, _ := newEnv(t)
	c := e.nodes[0]
	ctx := context.Background()
	now := float64(vectors.T0.UnixMicro())
	src := layersScript.Source()
	head := []any{"p", 2, 1, 10, 60_000_000, 0, 0, 3, 10, 60_000_000, 0, 0}
	pack := func(xs ...float64) []byte {
		var b []byte
		for _, x := range xs {
			b = append(b, packLone(floodgate.FixedWindow, 0, [7]float64{x})[1:9]...)
		}
		return b
	}
	n := 0
	keys := func(d int) []string {
		var ks []string
		for range 2 * d {
			n++
			k := fmt.Sprintf("%s:lpacked:%d", e.prefix, n)
			e.bound[k] = time.Hour
			ks = append(ks, k)
		}
		return ks
	}
	ks := keys(2)
	for name, arg := range map[string][]byte{
		"short": pack(now, 1, 1, now, 1)[:39],
		"long":  pack(now, 1, 1, now, 1, 1, 0),
		"one":   pack(now, 1, 1),
	} {
		if err := c.Eval(ctx, src, ks, append(head, arg)...).Err(); err == nil || !strings.Contains(err.Error(), "floodgate: bad call") {
			t.Errorf("%s: got %v, want a floodgate call error", name, err)
		}
		if n := c.Exists(ctx, ks...).Val(); n != 0 {
			t.Fatalf("%s: wrote %d keys", name, n)
		}
	}
	for name, bad := range map[string][3]float64{
		"now nan":       {math.NaN(), 1, 1},
		"now inf":       {math.Inf(1), 1, 1},
		"now fraction":  {now + 0.5, 1, 1},
		"now negative":  {-1, 1, 1},
		"cost nan":      {now, math.NaN(), 1},
		"cost inf":      {now, 1, math.Inf(1)},
		"cost fraction": {now, 1.5, 1},
		"cost negative": {now, 1, -1},
	} {
		ks := keys(3)
		reply, err := c.Eval(ctx, src, ks, append(head, pack(now, 1, 2, bad[0], bad[1], bad[2], now, 3, 1))...).Text()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		vals, err := new(batchFrame).decodePacked(reply)
		if err != nil || len(vals) != 24 {
			t.Fatalf("%s: %v %v", name, vals, err)
		}
		want := []int64{0, 9, 0, 8, -2, 0, -2, 0, 0, 7, 0, 9}
		if got := []int64{vals[0], vals[1], vals[4], vals[5], vals[8], vals[9], vals[12], vals[13], vals[16], vals[17], vals[20], vals[21]}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: (reason, remaining) per layer %v, want %v", name, got, want)
		}
		if c.Exists(ctx, ks[2], ks[3]).Val() != 0 || c.Exists(ctx, ks[0], ks[1], ks[4], ks[5]).Val() != 4 {
			t.Errorf("%s: the bad decision wrote, or a good one did not", name)
		}
	}
}

// TestBatchNonsenseStateFailsAlone puts on one key a sliding window
// state floodgate never writes but whose tag and length are right (its
// count in the current window is NaN, or 1e300): the script decides it
// into an answer that is no whole number, and only that request fails,
// with ErrBadReply; the other requests of its batch are decided.
func TestBatchNonsenseStateFailsAlone(t *testing.T) {
	e, _ := newEnv(t)
	c := e.client.(*redis.Client)
	ctx := context.Background()
	p := mustPolicy(t, floodgate.Policy{Name: "nonsense", Algorithm: floodgate.SlidingWindow, Limit: 5, Window: time.Minute})
	now := vectors.T0.Add(time.Hour).UnixMicro()
	w := p.Window.Microseconds()
	start := now - now%w
	for name, n := range map[string]float64{"NaN": math.NaN(), "1e300": 1e300, "-inf": math.Inf(-1)} {
		t.Run(name, func(t *testing.T) {
			k := func(id string) string { return e.key(p, name+id) }
			state := []byte{byte(floodgate.SlidingWindow)}
			for _, x := range []float64{float64(start), n, 0, float64(w)} {
				state = binary.LittleEndian.AppendUint64(state, math.Float64bits(x))
			}
			bad := k("bad")
			if err := c.Set(ctx, bad, state, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			calls := batchOf(p, now, k("a"), bad, k("b"))
			for _, cl := range calls {
				e.bound[cl.layers[0].Key] = time.Minute + ttlBound(p)
			}
			e.store.batch.run(calls)
			for i, cl := range calls {
				<-cl.done
				if i == 1 {
					if !errors.Is(cl.err, floodgate.ErrBadReply) || !strings.Contains(cl.err.Error(), bad) {
						t.Errorf("the nonsense state's request: %+v %v, want ErrBadReply naming its key", cl.res[0], cl.err)
					}
					continue
				}
				if cl.err != nil || !cl.res[0].Allowed || cl.res[0].Remaining != 4 {
					t.Errorf("batch request %d: %+v %v, want allowed with 4 left", i, cl.res[0], cl.err)
				}
			}
		})
	}
}
