package redisstore

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/vectors"
)

// TestAssembledScripts checks the assembly: every slot is filled, and each
// algorithm's blocks are in every script that decides it, so that the Lua
// of an algorithm has one source.
func TestAssembledScripts(t *testing.T) {
	for _, format := range []StateFormat{BinaryState, TextState} {
		ss := scriptSets[format]
		scripts := map[string]string{"general": ss.general.Source(), "layered": ss.layers.Source()}
		if scripts["layered"] != layersSource(format) {
			t.Errorf("%s: the layered script is not layersSource's", format)
		}
		for _, f := range fragments {
			scripts[f.algo.String()] = ss.fast[f.algo].Source()
		}
		for name, src := range scripts {
			for _, slot := range []string{"@BAD@", "@RESERVING@", "@TTL END@", "@STEPS@", "@RELEASES@", "--@ ", "@IS ", "@UNPACK ", "@PACK "} {
				if strings.Contains(src, slot) {
					t.Errorf("%s, %s: %q left in the script", format, name, slot)
				}
			}
		}
		// A line of a block that only that algorithm has: its state's
		// encoding, in the format the scripts write.
		fill := strings.NewReplacer(slotFiller(format)...)
		want := "spack('<B"
		if format == TextState {
			want = "sfmt('%d "
		}
		for _, f := range fragments {
			var mark string
			for line := range strings.Lines(f.blocks["step"]) {
				if strings.Contains(line, "@PACK ") {
					mark = strings.TrimSpace(fill.Replace(line))
					break
				}
			}
			if !strings.Contains(mark, want) {
				t.Fatalf("%s, %s: no state encoding %q in the step block: %q", format, f.algo, want, mark)
			}
			for _, name := range []string{"general", "layered", f.algo.String()} {
				if !strings.Contains(scripts[name], mark) {
					t.Errorf("%s, %s: the %s script lacks %q", format, f.algo, name, mark)
				}
			}
			if !strings.Contains(scripts["general"], "local function "+f.name+"_release(") {
				t.Errorf("%s, %s: the general script lacks its release", format, f.algo)
			}
		}
	}
}

// TestStateLayouts checks the binary layouts: tags that are no ASCII
// digit (every text state starts with one), distinct tags and names.
func TestStateLayouts(t *testing.T) {
	tags, names := map[byte]bool{}, map[string]bool{}
	for _, l := range stateLayouts {
		if l.tag >= '0' && l.tag <= '9' {
			t.Errorf("%s: tag %q is a digit", l.name, l.tag)
		}
		if tags[l.tag] || names[l.name] {
			t.Errorf("%s: tag %#x or name used twice", l.name, l.tag)
		}
		tags[l.tag], names[l.name] = true, true
	}
}

// TestEveryScriptDifferential runs one random sequence of requests per
// algorithm through every script that can decide it, each on its own key:
// the algorithm's single-layer script (Store.Decide), the general script
// in its decide and reserve modes, and the layered script with one layer.
// Every result must be algo.Step's, and the single-layer, general and
// layered scripts must leave byte-for-byte the same state. It runs with a
// Store of each state format.
func TestEveryScriptDifferential(t *testing.T) {
	forEachFormat(t, testEveryScriptDifferential)
}

func testEveryScriptDifferential(t *testing.T, e *env) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	ctx := context.Background()
	for a := floodgate.FixedWindow; a <= floodgate.Quota; a++ {
		t.Run(a.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, uint64(a)))
			var p floodgate.Policy
			if a == floodgate.Quota {
				var err error
				p, err = floodgate.NewQuota("eq", 1+r.Int64N(30), floodgate.Calendar{Unit: floodgate.PeriodDay, Location: time.UTC})
				if err != nil {
					t.Fatal(err)
				}
			} else {
				p = randPolicy(t, r, a, 0)
			}
			paths := []string{"fast", "general", "reserve", "layered"}
			if a == floodgate.SlidingLog { // decided by the general script only
				paths = []string{"general", "reserve"}
			}
			models := make([]*model, len(paths))
			for i := range models {
				models[i] = newModel()
			}
			now := vectors.T0.UnixMicro()
			for n := range 200 {
				if a == floodgate.Quota {
					now += r.Int64N(4 * int64(time.Hour/time.Microsecond))
				} else {
					now = nextTime(r, p, now)
				}
				cost := randCost(r, p)
				for i, path := range paths {
					now = max(now, models[i].earliest(algo.KeyAt(e.prefix, p, path, now)))
				}
				vals := map[string]string{}
				for i, path := range paths {
					l := []floodgate.Layer{{Policy: p, Key: algo.KeyAt(e.prefix, p, path, now), Cost: cost}}
					var got []floodgate.Result
					var err error
					switch path {
					case "fast":
						got, err = e.decide(ctx, now, l)
					case "general":
						got, err = e.decideGeneral(ctx, now, l, false)
					case "reserve":
						got, err = e.decideGeneral(ctx, now, l, true)
					case "layered":
						got, err = e.decideLayered(ctx, now, l)
					}
					if err != nil {
						t.Fatalf("seed %d, request %d through the %s script: %v", seed, n, path, err)
					}
					want := models[i].decide(now, l)
					if !sameResults(got, want) {
						t.Fatalf("seed %d, %v, request %d at %d cost %d through the %s script:\n got %+v\nwant %+v", seed, p, n, now, cost, path, got[0], want[0])
					}
					if path != "reserve" {
						vals[path], _ = e.rd.Get(ctx, l[0].Key).Result()
					}
				}
				for _, path := range paths {
					if path != "reserve" && a != floodgate.SlidingLog && vals[path] != vals["general"] {
						t.Fatalf("seed %d, request %d: the %s script left %q, the general one %q", seed, n, path, vals[path], vals["general"])
					}
				}
			}
		})
	}
}

// decideLayered decides layers with the layered script, as one decision
// of a call (the per-decision layout), whatever their number.
func (e *env) decideLayered(ctx context.Context, now int64, layers []floodgate.Layer) ([]floodgate.Result, error) {
	out := make([]floodgate.Result, len(layers))
	if err := e.store.check(now, layers, out); err != nil {
		return nil, err
	}
	e.mu.Lock()
	for _, l := range layers {
		e.bound[l.Key] = ttlBound(l.Policy)
	}
	e.mu.Unlock()
	c := getCall(ctx, now, e.store.scripts.layers, layers)
	f := new(batchFrame)
	f.buildLayered([]*call{c})
	vals, err := f.send(ctx, e.store.scripts.layers, e.store.client)
	if err != nil {
		return nil, err
	}
	if err := decodeBatch(vals, []*call{c}, false); err != nil {
		return nil, err
	}
	if c.err != nil {
		return nil, c.err
	}
	copy(out, c.res)
	return out, nil
}
