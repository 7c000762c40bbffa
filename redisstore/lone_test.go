package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/vectors"
	"github.com/redis/go-redis/v9"
)

// packLone packs a lone request's argument as frame.buildLone does, from
// the seven numbers of a request (now, algorithm, limit, window, burst,
// max delay, cost) given as doubles, so that a test can send what Go
// never would: fractions, NaN, infinities.
func packLone(a floodgate.Algorithm, tag byte, v [7]float64) []byte {
	b := []byte{tag}
	for _, p := range lonePlaces[a] {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v[p]))
	}
	return b
}

// badRecords are requests of alg with one bad number each (good with one
// number changed, or another algorithm's byte), packed as a lone request's
// argument and a packed batch's record: the script must refuse each.
func badRecords(alg floodgate.Algorithm, good [7]float64) map[string][]byte {
	a := byte(alg)
	with := func(i int, x float64) []byte {
		v := good
		v[i] = x
		return packLone(alg, a, v)
	}
	now := good[0]
	bad := map[string][]byte{
		"other algorithm": packLone(alg, a%6+1, good),
		"now fraction":    with(0, now+0.5),
		"now negative":    with(0, -1),
		"now too late":    with(0, float64(maxNow)+1),
		"now nan":         with(0, math.NaN()),
		"now inf":         with(0, math.Inf(1)),
		"limit zero":      with(2, 0),
		"limit too big":   with(2, floodgate.MaxLimit+1),
		"limit nan":       with(2, math.NaN()),
		"cost negative":   with(6, -1),
		"cost fraction":   with(6, 1.5),
		"cost too big":    with(6, floodgate.MaxLimit+1),
		"cost inf":        with(6, math.Inf(1)),
	}
	switch alg {
	case floodgate.Quota:
		bad["period not begun"] = with(3, now+1)
		bad["period over"] = with(4, now)
		bad["period end fraction"] = with(4, now+1e6+0.5)
	default:
		bad["window too short"] = with(3, 999)
		bad["window too long"] = with(3, float64(floodgate.MaxWindow.Microseconds()+1))
		bad["window nan"] = with(3, math.NaN())
	}
	if alg == floodgate.TokenBucket || alg == floodgate.GCRA {
		v := good
		v[2], v[3] = 10_000, 1000
		bad["rate too fine"] = packLone(alg, a, v)
		bad["burst negative"] = with(4, -1)
		bad["burst span"] = with(4, floodgate.MaxLimit)
	}
	if alg == floodgate.GCRA {
		bad["max delay negative"] = with(5, -1)
		bad["max delay too long"] = with(5, 1<<50+1)
	}
	return bad
}

// TestLoneArgument checks that buildLone packs what the single-layer
// scripts read: each algorithm's numbers, named by its args block, in
// order, after the algorithm's byte.
func TestLoneArgument(t *testing.T) {
	now := vectors.T0.UnixMicro()
	for _, p := range append(allAlgorithms(t, 10, time.Minute), quotaPolicy(t, 10, floodgate.PeriodDay)) {
		if !hasFastScript(p.Algorithm) {
			continue
		}
		l := floodgate.Layer{Policy: p, Key: "k", Cost: 3}
		f := newFrame(nil)
		f.buildLone(now, &l)
		got, ok := f.args[4].([]byte)
		if len(f.args) != 5 || !ok || f.args[3] != &l.Key || f.args[2] != argNumKeys[1] {
			t.Fatalf("%s: command line %v", p.Algorithm, f.args)
		}
		var v [7]int64
		v[0] = now
		(*periods)(nil).putLayer(v[1:], now, &l)
		var fv [7]float64
		for i := range v {
			fv[i] = float64(v[i])
		}
		if want := packLone(p.Algorithm, byte(p.Algorithm), fv); string(got) != string(want) {
			t.Errorf("%s: packed %x, want %x", p.Algorithm, got, want)
		}
		if len(lonePlaces[p.Algorithm]) < 4 || lonePlaces[p.Algorithm][0] != 0 || lonePlaces[p.Algorithm][len(lonePlaces[p.Algorithm])-1] != 6 {
			t.Errorf("%s: the lone layout %v does not start with now and end with the cost", p.Algorithm, lonePlaces[p.Algorithm])
		}
	}
}

// TestLoneScriptGuards sends the single-layer scripts lone requests with
// malformed packed arguments directly: each must answer with an error
// reply and write nothing, and a key holding a value floodgate did not
// write must be refused and left alone.
func TestLoneScriptGuards(t *testing.T) {
	e, _ := newEnv(t)
	c := e.nodes[0]
	ctx := context.Background()
	for a, src := range fastSources {
		if src == "" {
			continue
		}
		alg := floodgate.Algorithm(a)
		t.Run(alg.String(), func(t *testing.T) {
			key := []string{e.prefix + ":lone:" + alg.String()}
			good := goodLoneNumbers(alg)
			got, err := c.Eval(ctx, src, key, packLone(alg, byte(a), good)).Text()
			if err != nil {
				t.Fatalf("good call: %v", err)
			}
			p := floodgate.Policy{Algorithm: alg, Limit: 10, Window: time.Minute}
			var out [1]floodgate.Result
			if err := decodeLone(got, []floodgate.Layer{{Policy: p}}, out[:]); err != nil || !out[0].Allowed || out[0].Remaining != 9 {
				t.Fatalf("good call: reply %q: %+v, %v; want admitted, 9 remaining", got, out[0], err)
			}
			if err := c.Del(ctx, key[0]).Err(); err != nil {
				t.Fatal(err)
			}
			goodArg := packLone(alg, byte(a), good)
			bad := map[string][]any{
				"short": {goodArg[:len(goodArg)-1]},
				"long":  {append(append([]byte(nil), goodArg...), 0)},
				"empty": {""},
				"text":  {"1"},
			}
			for name, rec := range badRecords(alg, good) {
				bad[name] = []any{rec}
			}
			for name, args := range bad {
				err := c.Eval(ctx, src, key, args...).Err()
				if err == nil || !strings.Contains(err.Error(), "floodgate: bad") {
					t.Errorf("%s: got %v, want a floodgate argument error", name, err)
				}
			}
			if err := c.Eval(ctx, src, []string{key[0], key[0] + "2"}, goodArg).Err(); err == nil || !strings.Contains(err.Error(), "floodgate: bad") {
				t.Errorf("two keys: got %v, want a floodgate argument error", err)
			}
			if n := c.Exists(ctx, key[0]).Val(); n != 0 {
				t.Fatal("a rejected call wrote its key")
			}
			for _, foreign := range []string{"1 2 3 4 5 6", "\x00abc"} {
				if err := c.Set(ctx, key[0], foreign, time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
				err := c.Eval(ctx, src, key, goodArg).Err()
				if err == nil || !strings.Contains(err.Error(), "did not write") {
					t.Errorf("foreign value %q: got %v", foreign, err)
				}
				if v := c.Get(ctx, key[0]).Val(); v != foreign {
					t.Errorf("foreign value changed to %q", v)
				}
			}
			if err := c.Del(ctx, key[0]).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.LPush(ctx, key[0], "x").Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.Eval(ctx, src, key, goodArg).Err(); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Errorf("a list: got %v, want WRONGTYPE", err)
			}
			c.Del(ctx, key[0])
		})
	}
}

// TestLoneKeepTTLOtherLength checks the kept TTL's write when the new
// state's length is not the old one's: a quota state of the same period
// in the other format. The value is replaced whole (SET KEEPTTL, not
// overwritten in place), its TTL kept, and the next decision reads it.
func TestLoneKeepTTLOtherLength(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	p := quotaPolicy(t, 100, floodgate.PeriodDay)
	now := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, 3).Add(time.Hour).UnixMicro() // a period ahead
	start, end := p.Calendar.BoundsMicros(now)
	bin := string(spackQuota(start, 7, end))
	for _, tc := range []struct {
		format   StateFormat
		old, new string
	}{
		{BinaryState, fmt.Sprintf("%d 7 %d", start, end), string(spackQuota(start, 8, end))},
		{TextState, bin, fmt.Sprintf("%d 8 %d", start, end)},
	} {
		e := newEnvOn(t, c, []*redis.Client{c}, Options{StateFormat: tc.format})
		k := algo.KeyAt(e.prefix, p, "other-length", now)
		e.bound[k] = ttlBound(p)
		if err := c.Set(ctx, k, tc.old, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		out := make([]floodgate.Result, 1)
		for i, want := range []int64{92, 91} {
			if err := e.store.Decide(ctx, now, []floodgate.Layer{{Policy: p, Key: k, Cost: 1}}, out); err != nil || out[0].Remaining != want {
				t.Fatalf("%v, decision %d: %+v %v, want %d remaining", tc.format, i, out[0], err, want)
			}
			if i == 0 {
				if v := c.Get(ctx, k).Val(); v != tc.new {
					t.Errorf("%v: wrote %q over %q, want %q", tc.format, v, tc.old, tc.new)
				}
			}
		}
		if got := c.PTTL(ctx, k).Val(); got > time.Hour || got < time.Hour-time.Minute {
			t.Errorf("%v: TTL %v, want the hour kept", tc.format, got)
		}
	}
}

// spackState is a binary state of the layout tagged tag holding nums, as
// struct.pack writes it.
func spackState(tag byte, nums ...int64) []byte {
	b := []byte{tag}
	for _, x := range nums {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(x)))
	}
	return b
}

// spackQuota is a quota state in binary (the layout qt).
func spackQuota(start, n, end int64) []byte {
	return spackState(byte(floodgate.Quota), start, n, end)
}

// goodLoneNumbers returns the numbers of a valid lone request of alg at
// vectors.T0 (now, algorithm, limit 10, then its policy's numbers, cost
// 1), as packLone takes them: a window of a minute, or the quota's day.
func goodLoneNumbers(alg floodgate.Algorithm) [7]float64 {
	now := float64(vectors.T0.UnixMicro())
	if alg == floodgate.Quota {
		start := float64(vectors.T0.UnixMicro() - vectors.T0.UnixMicro()%86_400_000_000)
		return [7]float64{now, float64(alg), 10, start, start + 86_400_000_000, 0, 1}
	}
	return [7]float64{now, float64(alg), 10, 60_000_000, 0, 0, 1}
}
