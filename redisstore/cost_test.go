package redisstore

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/redis/go-redis/v9"
)

// TestScriptInstructions measures the Redis instructions each kind of
// decision costs, with callgrind, for docs/benchmarks.md. It runs only
// when FLOODGATE_COST_ADDR and FLOODGATE_COST_PID name a redis-server run
// under valgrind --tool=callgrind (see docs/benchmarks.md): for each
// shape it zeroes the counters, makes the calls, dumps the counters and
// prints the instructions per decision, the command's parsing, dispatch
// and reply included. FLOODGATE_COST_FORMAT=text measures a TextState
// Store (default binary); FLOODGATE_COST_ONLY, a regular expression,
// measures only the shapes whose names it matches.
func TestScriptInstructions(t *testing.T) {
	addr, pid := os.Getenv("FLOODGATE_COST_ADDR"), os.Getenv("FLOODGATE_COST_PID")
	if addr == "" || pid == "" {
		t.Skip("set FLOODGATE_COST_ADDR and FLOODGATE_COST_PID to a redis-server under callgrind")
	}
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { _ = c.Close() })
	format := BinaryState
	if f := os.Getenv("FLOODGATE_COST_FORMAT"); f != "" {
		var err error
		if format, err = ParseStateFormat(f); err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(c, Options{Coalesce: CoalesceOff, StateFormat: format})
	if err != nil {
		t.Fatal(err)
	}
	only := regexp.MustCompile(os.Getenv("FLOODGATE_COST_ONLY"))
	prefix := uniquePrefix(t)
	edge := mustPolicy(t, floodgate.Policy{Name: "edge", Algorithm: floodgate.FixedWindow, Limit: 1 << 30, Window: time.Minute})
	sw := mustPolicy(t, floodgate.Policy{Name: "api", Algorithm: floodgate.SlidingWindow, Limit: 1 << 30, Window: time.Minute})
	gc := mustPolicy(t, floodgate.Policy{Name: "gc", Algorithm: floodgate.GCRA, Limit: 1 << 20, Window: time.Hour})
	tb := mustPolicy(t, floodgate.Policy{Name: "tb", Algorithm: floodgate.TokenBucket, Limit: 1 << 20, Window: time.Hour})
	fw := mustPolicy(t, floodgate.Policy{Name: "fw", Algorithm: floodgate.FixedWindow, Limit: 1 << 30, Window: time.Minute})
	qt := quotaPolicy(t, 1<<30, floodgate.PeriodMonth)
	const ids = 500
	base := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC).UnixMicro()
	layersFor := func(i int, now int64, ps ...floodgate.Policy) []floodgate.Layer {
		ls := make([]floodgate.Layer, len(ps))
		for j, p := range ps {
			id := fmt.Sprint("user", i%ids)
			if p.Name == "edge" {
				id = "global"
			}
			ls[j] = floodgate.Layer{Policy: p, Key: algo.KeyAt(prefix, p, id, now), Cost: 1}
		}
		return ls
	}
	for _, shape := range []struct {
		name  string
		ps    []floodgate.Policy
		batch int
	}{
		{"lone sliding window", []floodgate.Policy{sw}, 1},
		{"lone GCRA", []floodgate.Policy{gc}, 1},
		{"lone token bucket", []floodgate.Policy{tb}, 1},
		{"lone fixed window", []floodgate.Policy{fw}, 1},
		{"lone quota", []floodgate.Policy{qt}, 1},
		{"lone 2 layers", []floodgate.Policy{edge, sw}, 1},
		{"lone 3 layers", []floodgate.Policy{edge, sw, qt}, 1},
		{"coalesced sliding window (64 per call)", []floodgate.Policy{sw}, 64},
		{"coalesced GCRA (64 per call)", []floodgate.Policy{gc}, 64},
		{"coalesced token bucket (64 per call)", []floodgate.Policy{tb}, 64},
		{"coalesced fixed window (64 per call)", []floodgate.Policy{fw}, 64},
		{"coalesced quota (64 per call)", []floodgate.Policy{qt}, 64},
		{"coalesced 3 layers (64 per call)", []floodgate.Policy{edge, sw, qt}, 64},
	} {
		if !only.MatchString(shape.name) {
			continue
		}
		const calls = 400
		b := newBatcher(s, 64, 1)
		run := func(calls int, count bool) {
			for k := range calls {
				now := base + int64(k)*10
				if shape.batch == 1 {
					ls := layersFor(k, now, shape.ps...)
					if err := s.decideOnce(ctx, now, ls, make([]floodgate.Result, len(ls))); err != nil {
						t.Fatal(err)
					}
					continue
				}
				cs := make([]*call, shape.batch)
				for d := range cs {
					ls := layersFor(k*shape.batch+d, now, shape.ps...)
					cs[d] = getCall(ctx, now, s.scripts.scriptFor(ls), ls)
				}
				b.run(cs)
				for _, c := range cs {
					if c.err != nil {
						t.Fatal(c.err)
					}
				}
			}
		}
		run(ids/shape.batch+1, false) // every identity has a state, the script is loaded
		ctl(t, "-z", pid)
		run(calls, true)
		ir := dumpInstructions(t, pid)
		t.Logf("%-42s %8.0f instructions per decision", shape.name, float64(ir)/float64(calls*shape.batch))
	}
}

func ctl(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("callgrind_control", args...).CombinedOutput(); err != nil {
		t.Fatalf("callgrind_control %v: %v: %s", args, err, out)
	}
}

// dumpInstructions dumps the counters of the callgrind process pid and
// returns the instructions counted since they were last zeroed.
func dumpInstructions(t *testing.T, pid string) int64 {
	t.Helper()
	dir := os.Getenv("FLOODGATE_COST_DIR")
	before, _ := filepath.Glob(filepath.Join(dir, "callgrind.out."+pid+".*"))
	ctl(t, "-d", pid)
	after, _ := filepath.Glob(filepath.Join(dir, "callgrind.out."+pid+".*"))
	if len(after) != len(before)+1 {
		t.Fatalf("no new dump in %q", dir)
	}
	seen := map[string]bool{}
	for _, f := range before {
		seen[f] = true
	}
	for _, f := range after {
		if !seen[f] {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			m := regexp.MustCompile(`(?m)^summary: (\d+)`).FindSubmatch(b)
			if m == nil {
				t.Fatalf("%s: no summary line", f)
			}
			n, _ := strconv.ParseInt(string(m[1]), 10, 64)
			return n
		}
	}
	return 0
}
