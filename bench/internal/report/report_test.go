package report

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sample builds a run with round numbers whose verdicts are known.
func sample() *Run {
	cell := func(w int, rate float64, p99 time.Duration) Cell {
		return Cell{Workers: w, PerSecond: rate, P50: p99 / 2, P99: p99, Allowed: uint64(rate)}
	}
	series := func(id, name string, rates ...float64) Series {
		s := Series{ID: id, Name: name}
		for i, w := range []int{1, 64, 256} {
			s.Cells = append(s.Cells, cell(w, rates[i], time.Duration(w)*20*time.Microsecond))
		}
		return s
	}
	return &Run{
		Machine:  Machine{CPUs: 2, GOMAXPROCS: 2, CPUModel: "Test CPU | 1", GoVersion: "go1.26", RedisVersion: "7.0.15", LoadBefore: 0.1, LoadAfter: 0.2},
		Settings: Settings{Command: "go run .", Duration: time.Second, Concurrency: []int{1, 64, 256}, Keys: 10000, AlgoWorkers: 64, FloodWorkers: 64},
		Started:  time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
		Redis: []Series{
			series(RedisRate, "redis_rate", 20_000, 60_000, 60_000),
			series(Tiny, "bare", 20_000, 90_000, 80_000),
			series(SlidingWindow, "fg sw plain", 18_000, 80_000, 75_000),
			series(GCRA, "fg gcra plain", 16_000, 80_000, 75_000),
			series(Layers, "fg layers plain", 15_000, 70_000, 70_000),
			series(SlidingWinAP, "fg sw ap", 15_000, 150_000, 200_000),
			series(GCRAAP, "fg gcra ap", 15_000, 150_000, 170_000),
			series(LayersAP, "fg layers ap", 12_000, 100_000, 170_000),
		},
		RedisBenchmark: []BenchLine{
			{ID: BenchSW, Name: "sw", PerSecond: 300_000},
			{ID: BenchGCRA, Name: "gcra", PerSecond: 400_000},
		},
		Algorithms: []Cell{{Name: "gcra", Workers: 64, PerSecond: 1000, CPUPerOp: 3.5}},
		Memory: []MemoryLine{
			{Algorithm: "gcra", Entries: 1, Keys: 1, Bytes: 72},
			{Algorithm: "sliding_log", Entries: 1, Keys: 1, Bytes: 136},
			{Algorithm: "sliding_log", Entries: 101, Keys: 1, Bytes: 5136},
		},
		InMemory: []InMemLine{
			{ID: MemSW, Name: "mem sw", NsPerOp: 40},
			{ID: MemGCRA, Name: "mem gcra", NsPerOp: 90},
			{ID: MemLimiterSW, Name: "mem limiter", NsPerOp: 70, AllocsPerOp: 2, BytesPerOp: 64, Rounds: []float64{65, 70, 90}},
			{ID: MemSethvargo, Name: "sethvargo", NsPerOp: 80},
		},
		HotKey: []Cell{{Name: "throttled", Workers: 64, PerSecond: 900, Errors: 5000, FirstError: "store: CAS failed"}},
		Flood:  []Cell{{ID: FloodRedis, Name: "redis", Workers: 64, PerSecond: 100_000, Denied: 300_000}},
	}
}

func TestTargets(t *testing.T) {
	got := map[string]Status{}
	for _, tg := range Targets(sample()) {
		got[tg.Name] = tg.Status
	}
	want := map[string]Status{
		"fg sw plain ≥ 3× redis_rate at 256 callers":                                         Missed, // 75k vs 60k
		"fg sw plain at 256 callers ≥ 50% of redis-benchmark -P 16 of the same script":       Missed, // 75k vs 300k
		"fg sw ap ≥ 3× redis_rate at 256 callers":                                            Met,    // 200k vs 60k
		"fg gcra ap ≥ 3× redis_rate at 256 callers":                                          Missed, // 170k vs 60k
		"fg sw ap at 256 callers ≥ 50% of redis-benchmark -P 16 of the same script":          Met,    // 200k vs 300k
		"fg gcra ap at 256 callers ≥ 50% of redis-benchmark -P 16 of the same script":        Missed, // 170k vs 400k
		"fg sw plain at 1 caller within 15% of a bare EVALSHA round trip":                    Met,    // 0.90
		"fg gcra plain at 1 caller within 15% of a bare EVALSHA round trip":                  Missed, // 0.80
		"fg layers ap ≥ 80% of fg sw ap, at every concurrency":                               Missed, // 64: 67%
		"fg layers plain ≥ 80% of fg sw plain, at every concurrency":                         Met,
		"p99 at 64 callers ≤ 1 ms: fg sw ap":                                                 Missed, // 1.28 ms
		"Redis CPU per decision, per algorithm":                                              Reported,
		"Redis memory per identity, per algorithm":                                           Reported,
		"mem sw ns/op ≤ sethvargo/go-limiter's":                                              Met,
		"mem gcra ns/op ≤ sethvargo/go-limiter's":                                            Missed,
		"0 allocations per decision on an existing key: mem sw":                              Met,
		"0 allocations per decision on an existing key: mem limiter":                         Missed,
		"flood on a denied identity: deny cache ≥ 10× going to Redis, zero extra admissions": NotMeasured,
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("no target %q", name)
			continue
		}
		if g != w {
			t.Errorf("%q: %v, want %v", name, g, w)
		}
	}
}

func TestTargetsNotMeasured(t *testing.T) {
	for _, tg := range Targets(&Run{}) {
		if tg.Status != NotMeasured {
			t.Errorf("empty run: %q is %v", tg.Name, tg.Status)
		}
	}
}

func TestMarkdown(t *testing.T) {
	r := sample()
	md := Markdown(r, ChartFile)
	for _, want := range []string{
		"| fg sw ap | 15k (0.75×) | 150k (2.50×) | 200k (3.33×) |", // ratios to redis_rate
		"| redis_rate | 20k | 60k | 60k |",                         // no ratio for the baseline itself
		"Test CPU \\| 1",                                           // escaped pipe
		"![decisions/s and p99 latency against concurrency](benchmarks.svg)",
		"about 50 bytes per request", // sliding log slope: (5136-136)/100
		"| mem limiter | 70 | 65–90 (3) | 64 | 2 | 0 |",
		"**not met**",
		"| throttled | 900 | ", // hot key table
		"| 5000 | store: CAS failed |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q", want)
		}
	}
	if strings.Contains(md, "Warning") {
		t.Error("quiet machine flagged as busy")
	}
	// The load after a run counts the run itself: it flags nothing alone.
	r.Machine.LoadAfter = 2.5
	if strings.Contains(Markdown(r, ""), "Warning") {
		t.Error("the run's own load flagged as other work")
	}
	r.Machine.CPUShares, r.Machine.OtherCPU, r.Machine.StealCPU = true, 0.01, 0.02
	if md := Markdown(r, ""); strings.Contains(md, "Warning") || !strings.Contains(md, "| 1.0 % / 2.0 % |") {
		t.Error("quiet CPU shares flagged, or not shown")
	}
	r.Machine.LoadBefore = 3 // the previous minute's: measured shares take precedence
	if strings.Contains(Markdown(r, ""), "Warning") {
		t.Error("the load before the run flagged a run whose CPU shares were quiet")
	}
	for _, busy := range []struct {
		shares             bool
		load, other, steal float64
		want               string
	}{
		{false, 3, 0, 0, "load average 3.0 on 2 CPUs when it started"},
		{true, 0.1, 0.2, 0, "20 % of the CPU time went to other processes"},
		{true, 0.1, 0, 0.3, "the hypervisor gave 30 % of the CPU time to other virtual machines"},
	} {
		r.Machine.CPUShares = busy.shares
		r.Machine.LoadBefore, r.Machine.OtherCPU, r.Machine.StealCPU = busy.load, busy.other, busy.steal
		if md := Markdown(r, ""); !strings.Contains(md, "Warning: this run competed with other work ("+busy.want) {
			t.Errorf("busy machine (%+v) not flagged with %q", busy, busy.want)
		}
	}
	r.Machine.CPUShares, r.Machine.LoadBefore, r.Machine.OtherCPU, r.Machine.StealCPU = false, 0.1, 0, 0
	// A run without the baseline still renders.
	r.Redis = r.Redis[1:]
	if md := Markdown(r, ""); !strings.Contains(md, "| bare | 20k | 90k | 80k |") {
		t.Error("table without baseline missing rows")
	}
}

func TestMarkdownAnomalies(t *testing.T) {
	r := sample()
	r.Redis[0].Cells[1].Errors = 7
	r.Redis[0].Cells[1].FirstError = "CAS failed"
	md := Markdown(r, "")
	if !strings.Contains(md, "redis_rate at 64 callers: 0 denied and 7 errors") || !strings.Contains(md, "CAS failed") {
		t.Errorf("anomaly not reported:\n%s", md)
	}
}

func TestSVGIsWellFormed(t *testing.T) {
	svg := SVG(sample())
	dec := xml.NewDecoder(strings.NewReader(svg))
	lines, texts := 0, 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			switch se.Name.Local {
			case "polyline":
				lines++
			case "text":
				texts++
			}
		}
	}
	// Two panels, one line per series in each.
	if want := 2 * len(sample().Redis); lines != want {
		t.Errorf("%d polylines, want %d", lines, want)
	}
	if texts == 0 {
		t.Error("no labels")
	}
	if !strings.Contains(svg, "fg sw ap") {
		t.Error("legend lacks a series name")
	}
}

func TestNiceCeil(t *testing.T) {
	for _, tc := range []struct{ in, want float64 }{{0, 1}, {1, 1}, {1.5, 2}, {2.1, 2.5}, {3, 5}, {7, 10}, {180_000, 200_000}, {210_000, 250_000}} {
		if got := niceCeil(tc.in); got != tc.want {
			t.Errorf("niceCeil(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestSplice(t *testing.T) {
	doc, err := Splice("# Title\n\nProse before.", "numbers v1")
	if err != nil {
		t.Fatal(err)
	}
	want := "# Title\n\nProse before.\n\n" + BeginMarker + "\nnumbers v1\n" + EndMarker + "\n"
	if doc != want {
		t.Fatalf("first splice:\n%q\nwant\n%q", doc, want)
	}
	doc += "\nProse after.\n"
	doc, err = Splice(doc, "numbers v2\n")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(doc, "v1") || !strings.Contains(doc, "numbers v2") || !strings.Contains(doc, "Prose before.") || !strings.Contains(doc, "Prose after.") {
		t.Errorf("second splice lost or kept the wrong text:\n%s", doc)
	}
	if strings.Count(doc, BeginMarker) != 1 || strings.Count(doc, EndMarker) != 1 {
		t.Errorf("markers duplicated:\n%s", doc)
	}
	if _, err := Splice("x "+BeginMarker+" y", "z"); err == nil {
		t.Error("unterminated block: no error")
	}
	if _, err := Splice("x "+EndMarker, "z"); err == nil {
		t.Error("end marker alone: no error")
	}
	if doc, _ := Splice("", "n"); doc != BeginMarker+"\nn\n"+EndMarker+"\n" {
		t.Errorf("empty doc: %q", doc)
	}
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	md := filepath.Join(dir, MarkdownFile)
	if err := os.WriteFile(md, []byte("# Benchmarks\n\nHand-written analysis.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := Write(dir, sample()); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "# Benchmarks\n\nHand-written analysis.\n") || strings.Count(string(b), BeginMarker) != 1 {
		t.Errorf("benchmarks.md:\n%s", b)
	}
	if _, err := os.Stat(filepath.Join(dir, ChartFile)); err != nil {
		t.Error(err)
	}
}
