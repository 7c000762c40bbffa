package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/luascript"
	"github.com/floodgate-rl/floodgate/internal/vectors"
)

// path is one way a single-layer decision can reach Redis.
type path int

const (
	viaFast    path = iota // Store.Decide: the algorithm's single-layer script
	viaGeneral             // the general script, decide mode
	viaReserve             // the general script, reserve mode (adds the buckets' bookkeeping)
	numPaths
)

func (p path) String() string { return [...]string{"fast", "general", "reserve"}[p] }

// decideVia decides one layer through path p and records its TTL bound.
func (e *env) decideVia(ctx context.Context, p path, now int64, l floodgate.Layer) (floodgate.Result, error) {
	if p == viaFast {
		return e.one(ctx, now, l.Policy, l.Key, l.Cost)
	}
	layers := []floodgate.Layer{l}
	out := make([]floodgate.Result, 1)
	if err := e.store.check(now, layers, out); err != nil {
		return floodgate.Result{}, err
	}
	e.mu.Lock()
	e.bound[l.Key] = ttlBound(l.Policy)
	e.mu.Unlock()
	f := new(frame)
	f.build(now, layers, false)
	if p == viaReserve {
		f.args = append(f.args, argReserve)
	}
	val, err := script.RunCommand(ctx, e.store.client, f.args)
	if err != nil {
		return floodgate.Result{}, err
	}
	if p == viaReserve {
		err = decodeResults(val, layers, out, make([][undoWidth]int64, 1))
	} else {
		err = decodeReply(val, layers, out)
	}
	return out[0], err
}

// quotaPolicy returns a quota of limit per calendar unit, in UTC.
func quotaPolicy(t *testing.T, limit int64, unit floodgate.PeriodUnit) floodgate.Policy {
	t.Helper()
	p, err := floodgate.NewQuota("q", limit, floodgate.Calendar{Unit: unit, Location: time.UTC})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFastPathUsed checks that a single-layer decision runs its
// algorithm's single-layer script (the sliding log, and layered calls, the
// general one), by the scripts a fresh server has cached.
func TestFastPathUsed(t *testing.T) {
	ctx := context.Background()
	for _, p := range append(allAlgorithms(t, 10, time.Minute), quotaPolicy(t, 10, floodgate.PeriodDay)) {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			e, _ := newEnv(t)
			now := vectors.T0.UnixMicro()
			if _, err := e.one(ctx, now, p, algo.KeyAt(e.prefix, p, "u", now), 1); err != nil {
				t.Fatal(err)
			}
			want := script.SHA()
			if fs := fastScripts[p.Algorithm]; p.Algorithm != floodgate.SlidingLog {
				want = fs.SHA()
			} else if fs != nil {
				t.Fatal("the sliding log has a single-layer script")
			}
			got, err := e.nodes[0].ScriptExists(ctx, script.SHA(), want).Result()
			if err != nil {
				t.Fatal(err)
			}
			if !got[1] || (want != script.SHA() && got[0]) {
				t.Fatalf("cached scripts after one decision: general %v, wanted one %v", got[0], got[1])
			}
		})
	}
}

// TestFastPathAlternate runs the shared vectors and the differential test
// with every decision sent through a different path than the previous one
// on the same keys: state written by the single-layer scripts must be read
// correctly by the general script, in both modes, and the other way round,
// and both must agree with algo.Step.
func TestFastPathAlternate(t *testing.T) {
	cases := append(vectors.All(), vectors.Calendar()...)
	for start := range numPaths {
		t.Run("vectors from "+start.String(), func(t *testing.T) {
			e, _ := newEnv(t)
			n := int(start)
			decide := func(ctx context.Context, now time.Time, p floodgate.Policy, id string, cost int64) (floodgate.Result, error) {
				at := now.UnixMicro()
				via := path(n % int(numPaths))
				n++
				return e.decideVia(ctx, via, at, floodgate.Layer{Policy: p, Key: algo.KeyAt(e.prefix, p, id, at), Cost: cost})
			}
			vectors.RunCases(t, cases, "alt", decide)
		})
	}
	t.Run("differential", func(t *testing.T) {
		e, _ := newEnv(t)
		seed := uint64(time.Now().UnixNano())
		t.Logf("seed %d", seed)
		ctx := context.Background()
		for a := floodgate.FixedWindow; a <= floodgate.GCRA; a++ {
			t.Run(a.String(), func(t *testing.T) {
				r := rand.New(rand.NewPCG(seed, uint64(a)))
				m := newModel()
				for i := range 4 {
					p := randPolicy(t, r, a, i)
					key := e.key(p, fmt.Sprintf("alt%d", i))
					now := vectors.T0.UnixMicro() + r.Int64N(p.Window.Microseconds())
					// Mostly alternate fast and general decisions; now
					// and then a reservation switches a bucket's state to
					// its long form, which both paths must keep.
					for n := range 150 {
						now = max(nextTime(r, p, now), m.earliest(key))
						via := path(n % 2)
						if r.IntN(10) == 0 {
							via = viaReserve
						}
						l := floodgate.Layer{Policy: p, Key: key, Cost: randCost(r, p)}
						want := m.decide(now, []floodgate.Layer{l})
						got, err := e.decideVia(ctx, via, now, l)
						if err != nil {
							t.Fatalf("seed %d, %v, request %d via %v: %v", seed, p, n, via, err)
						}
						if !sameResults([]floodgate.Result{got}, want) {
							t.Fatalf("seed %d, %v, request %d via %v at %d cost %d:\n got %+v\nwant %+v", seed, p, n, via, now, l.Cost, got, want[0])
						}
					}
				}
			})
		}
	})
}

// TestFastPathSameState checks that the single-layer scripts write exactly
// the value the general script writes, short and long (bookkeeping) forms
// alike, with the same TTL, except that a quota state written over a state
// of the same period keeps the key's TTL (SET KEEPTTL), which on a real
// clock ends at the same moment; the requests here are seconds to minutes
// apart on their clock and microseconds on Redis's, so the kept TTL is the
// one set by the period's first write.
func TestFastPathSameState(t *testing.T) {
	e, _ := newEnv(t)
	ctx := context.Background()
	now := vectors.T0.UnixMicro()
	ps := append(allAlgorithms(t, 7, 90*time.Second), quotaPolicy(t, 7, floodgate.PeriodMonth))
	for _, p := range ps {
		if fastScripts[p.Algorithm] == nil {
			continue
		}
		keeps := p.Algorithm == floodgate.Quota
		for _, long := range []bool{false, true} {
			var prevT string
			var prevTTL time.Duration
			kf := algo.KeyAt(e.prefix, p, fmt.Sprintf("f%v", long), now)
			kg := algo.KeyAt(e.prefix, p, fmt.Sprintf("g%v", long), now)
			first := viaGeneral
			if long {
				first = viaReserve
			}
			for i, at := range []int64{now, now + 1, now + 2_500_000, now + 41_000_000, now + 600_000_000, now + 600_000_001} {
				for _, k := range []string{kf, kg} {
					via := first
					if i > 0 {
						via = viaGeneral
						if k == kf {
							via = viaFast
						}
					}
					if _, err := e.decideVia(ctx, via, at, floodgate.Layer{Policy: p, Key: k, Cost: 2}); err != nil {
						t.Fatal(err)
					}
				}
				vf, vg := e.rd.Get(ctx, kf).Val(), e.rd.Get(ctx, kg).Val()
				if vf != vg || vf == "" {
					t.Fatalf("%s long=%v step %d: fast path wrote %q, general %q", p.Algorithm, long, i, vf, vg)
				}
				tf, tg := e.rd.PTTL(ctx, kf).Val(), e.rd.PTTL(ctx, kg).Val()
				st, _, _ := strings.Cut(vf, " ")
				if keeps && i > 0 && st == prevT {
					// Kept: the previous step's TTL, less the real time since.
					if d := tf - prevTTL; d < -time.Second || d > time.Millisecond || tf < tg-time.Second {
						t.Fatalf("%s long=%v step %d: TTL %v by the fast path, want the kept %v (general %v)", p.Algorithm, long, i, tf, prevTTL, tg)
					}
				} else if d := tf - tg; d < -time.Second || d > time.Second || tf <= 0 {
					t.Fatalf("%s long=%v step %d: TTL %v by the fast path, %v by the general one", p.Algorithm, long, i, tf, tg)
				}
				prevT, prevTTL = st, tf
			}
		}
	}
}

// TestFastScriptGuards sends the single-layer scripts malformed arguments
// directly: each must answer with an error reply and write nothing.
func TestFastScriptGuards(t *testing.T) {
	e, _ := newEnv(t)
	c := e.nodes[0]
	ctx := context.Background()
	now := vectors.T0.UnixMicro()
	start := now - now%86_400_000_000
	for a, src := range fastSources {
		if src == "" {
			continue
		}
		alg := floodgate.Algorithm(a)
		t.Run(alg.String(), func(t *testing.T) {
			key := []string{e.prefix + ":guard:" + alg.String()}
			good := []any{now, a, 10, 60_000_000, 0, 0, 1}
			if alg == floodgate.Quota {
				good = []any{now, a, 10, start, start + 86_400_000_000, 0, 1}
			}
			with := func(i int, v any) []any {
				args := append([]any(nil), good...)
				args[i] = v
				return args
			}
			if err := c.Eval(ctx, src, key, good...).Err(); err != nil {
				t.Fatalf("good call: %v", err)
			}
			if err := c.Del(ctx, key[0]).Err(); err != nil {
				t.Fatal(err)
			}
			bad := map[string][]any{
				"too few":         good[:6],
				"too many":        append(append([]any(nil), good...), "reserve"),
				"other algorithm": with(1, a%6+1),
				"now not number":  with(0, "now"),
				"now fraction":    with(0, float64(now)+0.5),
				"now negative":    with(0, -1),
				"now too late":    with(0, int64(maxNow)+1),
				"limit zero":      with(2, 0),
				"limit too big":   with(2, int64(floodgate.MaxLimit)+1),
				"limit nan":       with(2, "nan"),
				"limit inf":       with(2, "inf"),
				"cost negative":   with(6, -1),
				"cost fraction":   with(6, 1.5),
				"cost too big":    with(6, int64(floodgate.MaxLimit)+1),
			}
			switch alg {
			case floodgate.Quota:
				bad["period not begun"] = with(3, now+1)
				bad["period over"] = with(4, now)
				bad["period end fraction"] = with(4, float64(now)+1e6+0.5)
			default:
				bad["window too short"] = with(3, 999)
				bad["window too long"] = with(3, floodgate.MaxWindow.Microseconds()+1)
				bad["window not number"] = with(3, "w")
			}
			if alg == floodgate.TokenBucket || alg == floodgate.GCRA {
				bad["rate too fine"] = with(2, 10_000)
				bad["rate too fine"][3] = 1000
				bad["burst negative"] = with(4, -1)
				bad["burst span"] = with(4, int64(floodgate.MaxLimit))
			}
			if alg == floodgate.GCRA {
				bad["max delay negative"] = with(5, -1)
				bad["max delay too long"] = with(5, int64(1)<<50+1)
			}
			for name, args := range bad {
				err := c.Eval(ctx, src, key, args...).Err()
				if err == nil || !strings.Contains(err.Error(), "floodgate: bad") {
					t.Errorf("%s: got %v, want a floodgate argument error", name, err)
				}
			}
			if err := c.Eval(ctx, src, []string{key[0], key[0] + "2"}, good...).Err(); err == nil || !strings.Contains(err.Error(), "floodgate: bad") {
				t.Errorf("two keys: got %v, want a floodgate argument error", err)
			}
			if n := c.Exists(ctx, key[0]).Val(); n != 0 {
				t.Fatal("a rejected call wrote its key")
			}
			// A value floodgate did not write is refused and left alone.
			if err := c.Set(ctx, key[0], "1 2 3 4 5 6", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			err := c.Eval(ctx, src, key, good...).Err()
			if err == nil || !strings.Contains(err.Error(), "did not write") {
				t.Errorf("foreign value: got %v", err)
			}
			if v := c.Get(ctx, key[0]).Val(); v != "1 2 3 4 5 6" {
				t.Errorf("foreign value changed to %q", v)
			}
			c.Del(ctx, key[0])
		})
	}
}

// TestFastScriptConstants checks that the bounds each single-layer script
// spells out are floodgate's (the general script's are checked by
// TestScriptConstants).
func TestFastScriptConstants(t *testing.T) {
	want := map[string]int64{
		"MAX_NOW":     maxNow,
		"MAX_LIMIT":   floodgate.MaxLimit,
		"MAX_SPAN":    1 << 50,
		"MIN_TTL":     1000,
		"TTL_SLACK":   algo.TTLSlack.Microseconds(),
		"QUOTA_GRACE": algo.QuotaGrace.Microseconds(),
		"MAX_LAYERS":  floodgate.MaxLayers,
	}
	sources := map[string]string{"layers": layersSource(BinaryState)}
	for a, src := range fastSources {
		if src != "" {
			sources[floodgate.Algorithm(a).String()] = src
		}
	}
	for name, src := range sources {
		for _, c := range []string{"MAX_NOW", "MAX_LIMIT", "MIN_TTL", "TTL_SLACK"} {
			if !strings.Contains(src, "local "+c+" = ") {
				t.Errorf("%s: %s not defined", name, c)
			}
		}
		for _, m := range regexp.MustCompile(`local ([A-Z_]+) = (\d+)`).FindAllStringSubmatch(src, -1) {
			w, ok := want[m[1]]
			if got, _ := strconv.ParseInt(m[2], 10, 64); !ok || got != w {
				t.Errorf("%s: %s = %s, want %d (known %v)", name, m[1], m[2], w, ok)
			}
		}
		if m := regexp.MustCompile(`local MIN_WINDOW, MAX_WINDOW = (\d+), (\d+)`).FindStringSubmatch(src); m != nil &&
			(m[1] != strconv.FormatInt(floodgate.MinWindow.Microseconds(), 10) || m[2] != strconv.FormatInt(floodgate.MaxWindow.Microseconds(), 10)) {
			t.Errorf("%s: window bounds %v, want %v..%v", name, m[1:], floodgate.MinWindow, floodgate.MaxWindow)
		}
		want := layersScript
		if a, ok := algorithmNamed(name); ok {
			want = fastScripts[a]
		}
		if want == nil || want.Source() != src || want.SHA() == script.SHA() {
			t.Errorf("%s: script not built from its source", name)
		}
		if regexp.MustCompile(`\bfunction\b`).MatchString(regexp.MustCompile(`--.*`).ReplaceAllString(src, "")) {
			t.Errorf("%s: the script defines a function", name)
		}
	}
	fw := floodgate.Layer{Policy: floodgate.Policy{Algorithm: floodgate.FixedWindow}}
	for name, tc := range map[string]struct {
		layers []floodgate.Layer
		want   *luascript.Script
	}{
		"one fixed window":                        {[]floodgate.Layer{fw}, fastScripts[floodgate.FixedWindow]},
		"two fixed windows":                       {[]floodgate.Layer{fw, fw}, layersScript},
		"a fixed window and a sliding log":        {[]floodgate.Layer{fw, {Policy: floodgate.Policy{Algorithm: floodgate.SlidingLog}}}, script},
		"a fixed window and an unknown algorithm": {[]floodgate.Layer{fw, {Policy: floodgate.Policy{Algorithm: 200}}}, script},
		"one sliding log":                         {[]floodgate.Layer{{Policy: floodgate.Policy{Algorithm: floodgate.SlidingLog}}}, script},
		"unknown algorithm":                       {[]floodgate.Layer{{Policy: floodgate.Policy{Algorithm: 200}}}, script},
	} {
		if got := scriptFor(tc.layers); got != tc.want || got == nil {
			t.Errorf("%s: scriptFor chose the wrong script", name)
		}
	}
}

// algorithmNamed returns the algorithm whose String is name.
func algorithmNamed(name string) (floodgate.Algorithm, bool) {
	for a := floodgate.FixedWindow; a <= floodgate.Quota; a++ {
		if a.String() == name {
			return a, true
		}
	}
	return 0, false
}

// TestLayersScriptGuards sends the layered script calls of the wrong shape
// or with bad arguments, in both layouts: each must fail as a whole with an
// error reply (one decision) and write nothing; in a call of several, a
// decision with bad arguments fails alone.
func TestLayersScriptGuards(t *testing.T) {
	e, _ := newEnv(t)
	c := e.nodes[0]
	ctx := context.Background()
	now := vectors.T0.UnixMicro()
	src := layersScript.Source()
	keys := []string{e.prefix + ":guard:a", e.prefix + ":guard:b"}
	fw := []any{1, 10, 60_000_000, 0, 0}
	sw := []any{3, 10, 60_000_000, 0, 0}
	one := func(n any, now any, costs ...any) []any {
		args := []any{n, now}
		args = append(args, fw...)
		args = append(args, costs[0])
		args = append(args, sw...)
		return append(args, costs[1])
	}
	for name, tc := range map[string]struct {
		keys []string
		args []any
	}{
		"no arguments":           {keys, nil},
		"n not a number":         {keys, one("x", now, 1, 1)},
		"n too big":              {keys, one(17, now, 1, 1)},
		"n beyond the keys":      {keys[:1], one(2, now, 1, 1)},
		"a key too many":         {append(keys, e.prefix+":guard:c"), one(2, now, 1, 1)},
		"an argument too many":   {keys, append(one(2, now, 1, 1), 1)},
		"sliding log":            {keys, append([]any{2, now, 2, 10, 60_000_000, 0, 0, 1}, append(sw, 1)...)},
		"now not a number":       {keys, one(2, "now", 1, 1)},
		"now negative":           {keys, one(2, -1, 1, 1)},
		"cost fraction":          {keys, one(2, now, 1.5, 1)},
		"cost negative":          {keys, one(2, now, 1, -1)},
		"shared: n zero":         {keys, []any{"s", 0}},
		"shared: keys not n×d":   {keys[:1], append(append([]any{"s", 2}, append(fw, sw...)...), now, 1, 1)},
		"shared: short":          {keys, append(append([]any{"s", 2}, append(fw, sw...)...), now, 1)},
		"shared: sliding log":    {keys, append(append([]any{"s", 2, 2, 10, 60_000_000, 0, 0}, sw...), now, 1, 1)},
		"shared: bad limit":      {keys, append(append([]any{"s", 2, 1, 0, 60_000_000, 0, 0}, sw...), now, 1, 1)},
		"shared: window too low": {keys, append(append([]any{"s", 2, 1, 10, 999, 0, 0}, sw...), now, 1, 1)},
	} {
		err := c.Eval(ctx, src, tc.keys, tc.args...).Err()
		if err == nil || !strings.Contains(err.Error(), "floodgate") {
			t.Errorf("%s: %v, want a floodgate error reply", name, err)
		}
		if n := c.Exists(ctx, keys...).Val(); n != 0 {
			t.Fatalf("%s: wrote %d keys", name, n)
		}
	}
	// Good calls in both layouts, then a call of two decisions whose
	// second has a bad cost: the first is decided and written, the second
	// gets the code -2 and writes nothing.
	if v, err := c.Eval(ctx, src, keys, one(2, now, 1, 1)...).Int64Slice(); err != nil || len(v) != 8 || v[0] != 0 || v[4] != 0 {
		t.Fatalf("good call: %v %v", v, err)
	}
	shared := append(append([]any{"s", 2}, append(fw, sw...)...), now, 1, 1)
	if v, err := c.Eval(ctx, src, keys, shared...).Int64Slice(); err != nil || len(v) != 8 || v[1] != 8 || v[5] != 8 {
		t.Fatalf("good shared call: %v %v", v, err)
	}
	other := []string{e.prefix + ":guard:c", e.prefix + ":guard:d"}
	two := append(append([]any{"s", 2}, append(fw, sw...)...), now, 1, 1, now, -1, 1)
	v, err := c.Eval(ctx, src, append(append([]string(nil), keys...), other...), two...).Int64Slice()
	if err != nil || len(v) != 16 || v[0] != 0 || v[1] != 7 || v[8] != -2 || v[12] != -2 {
		t.Fatalf("two decisions, the second bad: %v %v", v, err)
	}
	if n := c.Exists(ctx, other...).Val(); n != 0 {
		t.Fatalf("the bad decision wrote %d keys", n)
	}
	for _, k := range keys {
		e.bound[k] = time.Hour
	}
	// Shared calls of three decisions on fresh keys, one of them bad: the
	// others are decided with the call's policies whether or not a good
	// decision came before (the script parses the shared policy arguments
	// at the first good decision and reuses them after).
	for bad := range 3 {
		var ks []string
		args := append([]any{"s", 2}, append(fw, sw...)...)
		for d := range 3 {
			ks = append(ks, fmt.Sprintf("%s:guard3:%d:%d:a", e.prefix, bad, d), fmt.Sprintf("%s:guard3:%d:%d:b", e.prefix, bad, d))
			cost := d + 1 // costs differ between decisions
			if d == bad {
				cost = -1
			}
			args = append(args, now, cost, 1)
		}
		v, err := c.Eval(ctx, src, ks, args...).Int64Slice()
		if err != nil || len(v) != 24 {
			t.Fatalf("bad decision %d of 3: %v %v", bad, v, err)
		}
		for d := range 3 {
			want := []int64{0, int64(9 - d), 0, 9}
			if d == bad {
				want = []int64{-2, 0, -2, 0}
			}
			if got := []int64{v[8*d], v[8*d+1], v[8*d+4], v[8*d+5]}; !slices.Equal(got, want) {
				t.Errorf("bad decision %d of 3: decision %d got (reason, remaining) per layer %v, want %v", bad, d, got, want)
			}
			for _, k := range ks[2*d : 2*d+2] {
				if exists := c.Exists(ctx, k).Val() == 1; exists == (d == bad) {
					t.Errorf("bad decision %d of 3: key %s exists %v", bad, k, exists)
				}
				e.bound[k] = time.Hour
			}
		}
	}
}
