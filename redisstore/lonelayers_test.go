package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/vectors"
	"github.com/redis/go-redis/v9"
)

// packLayers packs a lone layered decision's argument as the layered
// script reads it (lua/fast_layers.lua), written out here rather than
// with buildLoneLayers: now, then per layer its algorithm as a byte and
// its limit, window, burst, max delay and cost, each a little-endian
// double.
func packLayers(now float64, layers ...[6]float64) []byte {
	b := binary.LittleEndian.AppendUint64(nil, math.Float64bits(now))
	for _, l := range layers {
		b = append(b, byte(l[0]))
		for _, x := range l[1:] {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
		}
	}
	return b
}

// evalRecorder is a go-redis hook keeping the last EVALSHA's command
// line, as the client sent it.
type evalRecorder struct {
	mu   sync.Mutex
	last []any
}

func (*evalRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *evalRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.EqualFold(cmd.Name(), "evalsha") {
			r.mu.Lock()
			r.last = append([]any(nil), cmd.Args()...)
			r.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (*evalRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestLoneLayersArgument decides lone layered decisions through a Store
// and checks the command line its client sent: EVALSHA, the layered
// script, n, the n keys and one argument, the decision's numbers packed
// as packLayers packs them (the old call sent n, now and 6n decimal
// arguments). Every algorithm of the layered script is in a decision, a
// quota with its period's bounds.
func TestLoneLayersArgument(t *testing.T) {
	c := redistest.Start(t).Client(t)
	rec := new(evalRecorder)
	c.AddHook(rec)
	s, err := New(c, Options{Coalesce: CoalesceOff})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := vectors.T0.UnixMicro()
	prefix := uniquePrefix(t)
	ps := allAlgorithms(t, 10, time.Minute)
	gc := mustPolicy(t, floodgate.Policy{Name: "shaped", Algorithm: floodgate.GCRA, Limit: 10, Window: time.Minute, Burst: 3, MaxDelay: time.Second})
	q := quotaPolicy(t, 100, floodgate.PeriodMonth)
	for _, set := range [][]floodgate.Policy{
		{ps[0], ps[2]},
		{ps[0], ps[2], q},
		{ps[3], gc, ps[4], q},
	} {
		layers := make([]floodgate.Layer, len(set))
		var want [][6]float64
		for i, p := range set {
			layers[i] = floodgate.Layer{Policy: p, Key: algo.KeyAt(prefix, p, "u", now), Cost: int64(i + 1)}
			w, b := float64(p.Window.Microseconds()), float64(p.Burst)
			if p.Algorithm == floodgate.Quota {
				start, end := p.Calendar.BoundsMicros(now)
				w, b = float64(start), float64(end)
			}
			want = append(want, [6]float64{float64(p.Algorithm), float64(p.Limit), w, b, float64(p.MaxDelay.Microseconds()), float64(i + 1)})
		}
		if sc := s.scripts.scriptFor(layers); sc != s.scripts.layers {
			t.Fatal("not the layered script's decision")
		}
		out := make([]floodgate.Result, len(layers))
		if err := s.Decide(ctx, now, layers, out); err != nil {
			t.Fatal(err)
		}
		for i := range out {
			if !out[i].Allowed {
				t.Errorf("%d layers: layer %d denied: %+v", len(set), i, out[i])
			}
		}
		rec.mu.Lock()
		got := rec.last
		rec.mu.Unlock()
		n := len(layers)
		if len(got) != 3+n+1 || fmt.Sprint(got[2]) != fmt.Sprint(n) {
			t.Fatalf("%d layers: command line %q, want EVALSHA sha n, the keys and one argument", n, got)
		}
		for i := range layers {
			if k, ok := got[3+i].(*string); !ok || *k != layers[i].Key { // go-redis writes a *string as the string
				t.Errorf("%d layers: key %d is %v, want %q", n, i, got[3+i], layers[i].Key)
			}
		}
		if a, ok := got[3+n].([]byte); !ok || string(a) != string(packLayers(float64(now), want...)) || len(a) != 8+41*n {
			t.Errorf("%d layers: argument %x, want %x", n, got[3+n], packLayers(float64(now), want...))
		}
	}
}

// TestLoneLayersGuards sends the layered script (of each format) lone
// decisions packed with a wrong length, a bad number in each place, an
// algorithm it does not decide, and a value floodgate did not write on
// any layer: each call fails with a floodgate error reply and writes
// nothing, the keys that held states left as they were. A good call then
// decides and writes every layer.
func TestLoneLayersGuards(t *testing.T) {
	e, _ := newEnv(t)
	c := e.nodes[0]
	ctx := context.Background()
	now := float64(vectors.T0.UnixMicro())
	start, end := floodgate.Calendar{Unit: floodgate.PeriodMonth}.BoundsMicros(int64(now))
	fw := [6]float64{1, 10, 60_000_000, 0, 0, 1}
	tb := [6]float64{4, 10, 60_000_000, 0, 0, 1}
	qt := [6]float64{6, 100, float64(start), float64(end), 0, 1}
	good := [][6]float64{fw, tb, qt}
	set := func(layer, place int, x float64) []byte {
		ls := append([][6]float64(nil), good...)
		ls[layer][place] = x
		return packLayers(now, ls...)
	}
	n := 0
	keys := func() []string {
		var ks []string
		for range 3 {
			n++
			k := fmt.Sprintf("%s:lonelayers:%d", e.prefix, n)
			e.bound[k] = 33 * 24 * time.Hour // a quota's period and grace at most
			ks = append(ks, k)
		}
		return ks
	}
	bad := map[string][]byte{
		"empty":          {},
		"one byte short": packLayers(now, good...)[:8+41*3-1],
		"one byte long":  append(packLayers(now, good...), 0),
		"two layers":     packLayers(now, fw, tb),
		"four layers":    packLayers(now, fw, tb, qt, fw),
		"now nan":        packLayers(math.NaN(), good...),
		"now inf":        packLayers(math.Inf(1), good...),
		"now fraction":   packLayers(now+0.5, good...),
		"now negative":   packLayers(-1, good...),
		"now too late":   packLayers(1<<52+1, good...),
	}
	for layer := range 3 {
		for name, x := range map[string]float64{
			"algorithm 0": 0, "sliding log": 2, "algorithm 7": 7, "algorithm 255": 255,
		} {
			bad[fmt.Sprintf("layer %d %s", layer, name)] = set(layer, 0, x)
		}
		for place, name := range []string{"", "limit", "window", "burst", "max delay", "cost"} {
			if place == 0 {
				continue
			}
			for what, x := range map[string]float64{
				"nan": math.NaN(), "inf": math.Inf(1), "-inf": math.Inf(-1), "fraction": 1.5, "negative": -1, "2^53": 1 << 53,
			} {
				bad[fmt.Sprintf("layer %d %s %s", layer, name, what)] = set(layer, place, x)
			}
		}
	}
	bad["limit zero"] = set(0, 1, 0)
	bad["window too short"] = set(0, 2, 999)
	bad["rate too fine"] = set(1, 1, 60_000_001)
	bad["max delay too long"] = set(1, 4, 1<<50+1)
	bad["quota period ahead"] = set(2, 2, now+1)
	bad["quota period over"] = set(2, 3, now)
	bad["cost beyond 2^40"] = set(2, 5, 1<<40+1)
	for _, sc := range []string{scriptSets[BinaryState].layers.Source(), scriptSets[TextState].layers.Source()} {
		for name, arg := range bad {
			ks := keys()
			err := c.Eval(ctx, sc, ks, arg).Err()
			if err == nil || !strings.Contains(err.Error(), "ERR floodgate: bad") {
				t.Errorf("%s: %v, want a floodgate error reply", name, err)
			}
			if n := c.Exists(ctx, ks...).Val(); n != 0 {
				t.Fatalf("%s: wrote %d keys", name, n)
			}
		}
		if err := c.Eval(ctx, sc, nil, packLayers(now)).Err(); err == nil || !strings.Contains(err.Error(), "floodgate: bad call") {
			t.Errorf("no key: %v, want a floodgate call error", err)
		}
		// A good call, then a value floodgate did not write on one layer:
		// the call fails and the other layers keep their states.
		layers := []floodgate.Layer{
			{Policy: mustPolicy(t, floodgate.Policy{Name: "g1", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Minute})},
			{Policy: mustPolicy(t, floodgate.Policy{Name: "g2", Algorithm: floodgate.TokenBucket, Limit: 10, Window: time.Minute})},
			{Policy: quotaPolicy(t, 100, floodgate.PeriodMonth)},
		}
		for foreign := range 3 {
			ks := keys()
			reply, err := c.Eval(ctx, sc, ks, packLayers(now, good...)).Text()
			if err != nil {
				t.Fatal(err)
			}
			out := make([]floodgate.Result, 3)
			if err := decodeLone(reply, layers, out); err != nil || !out[0].Allowed || out[0].Remaining != 9 || out[1].Remaining != 9 || out[2].Remaining != 99 {
				t.Fatalf("good call: %+v %v", out, err)
			}
			if err := c.Set(ctx, ks[foreign], "not ours", time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			before := make([]snapshot, 3)
			for i, k := range ks {
				before[i] = snap(t, c, k)
			}
			err = c.Eval(ctx, sc, ks, packLayers(now+1, good...)).Err()
			if err == nil || !strings.Contains(err.Error(), "holds a value floodgate did not write") {
				t.Errorf("foreign value on layer %d: %v", foreign, err)
			}
			for i, k := range ks {
				untouched(t, c, k, before[i])
			}
			if err := c.Eval(ctx, sc, ks[foreign:foreign+1], packLayers(now, good[foreign])).Err(); err == nil || !strings.Contains(err.Error(), "did not write") {
				t.Errorf("foreign value in a one-layer lone call: %v", err)
			}
		}
	}
}
