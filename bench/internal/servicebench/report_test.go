package servicebench

import (
	"strings"
	"testing"
	"time"
)

// cell is a measurement of 10 s with the given rate, p99 and CPU time of
// the service and Redis.
func cell(s Service, tr Transport, callers, round int, rate float64, p99 time.Duration, svc, redis time.Duration) Cell {
	return Cell{
		Service: s, Transport: tr, Callers: callers, Round: round,
		Elapsed: 10 * time.Second, Decisions: int64(rate * 10), P50: p99 / 4, P99: p99,
		CPU:           CPU{Service: svc, Redis: redis, Loadgen: 2 * time.Second, Other: time.Second},
		RedisCommands: int64(rate * 21), KeyedCommands: int64(rate * 20), ScriptCalls: int64(rate),
	}
}

func TestMarkdown(t *testing.T) {
	ms := time.Millisecond
	res := &Result{
		Config: Config{Transports: []Transport{GRPC}, Duration: 10 * time.Second, Warmup: time.Second, Identities: 10_000, Rounds: 2},
		Start:  time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC), Elapsed: 90 * time.Second,
		LoadBefore: "1.00 0.50 0.20", LoadAfter: "2.00 1.00 0.40", RedisVersion: "7.0.15", Command: "cd bench && go run ./cmd/servicebench",
		Cells: []Cell{
			cell(Theirs, GRPC, 64, 1, 6000, 20*ms, 6*time.Second, time.Second),
			cell(Serve, GRPC, 64, 1, 18000, 8*ms, 6*time.Second, time.Second),
			// Round 2: theirs slower, ours the same: the ratio is per round.
			cell(Serve, GRPC, 64, 2, 18000, 8*ms, 6*time.Second, time.Second),
			cell(Theirs, GRPC, 64, 2, 4000, 40*ms, 6*time.Second, time.Second),
		},
	}
	md := Markdown(res)
	for _, want := range []string{
		"Run of 2026-12-02 03:00 UTC, 1m30s in all.",
		"| Redis | 7.0.15,",
		"1.00 0.50 0.20 / 2.00 1.00 0.40",
		"| 0.10 cores, median of the cells (range) |",
		"Command: `cd bench && go run ./cmd/servicebench`.",
		"10000 identities",
		"The load generator calls with its raw gRPC client (`floodgate loadtest --grpc-client raw`).",
		// theirs: median of 6000 and 4000; 60,000 and 40,000 decisions for
		// 7 s of CPU: 116.7 and 175 µs, median 145.8.
		"| 64 | envoyproxy/ratelimit | 5.0k (4.0k–6.0k) | 7.50 (5.00–10.0) / 30.0 (20.0–40.0) | 0 / 0 | 125.0 (100.0–150.0) + 20.8 (16.7–25.0) = 145.8 (116.7–175.0) | — (no fallback) | 2.00 + 0.10 (2.10) | 0.60 / 0.10 / 0.20 / 0.10 | 41.7 (33.3–50.0) | — |",
		// ours: 18,000/s both rounds; ratios 3× and 4.5×, p99 0.4× and
		// 0.2×, CPU per decision 1/3 and 2/9.
		"| 64 | floodgate serve | 18.0k | 2.00 / 8.00 | 0 / 0 | 33.3 + 5.6 = 38.9 | 0 | 2.00 + 0.10 (2.10) | 0.60 / 0.10 / 0.20 / 0.10 | 11.1 | 3.75× (3.00×–4.50×) · 0.30× (0.20×–0.40×) · 0.28× (0.22×–0.33×) |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks\n%s\n---\n%s", want, md)
		}
	}
	if strings.Contains(md, "#### HTTP") {
		t.Error("report has an HTTP table for a gRPC-only run")
	}
	if strings.Contains(md, "| ⚠") || strings.Contains(md, "\n⚠") {
		t.Errorf("valid cells flagged:\n%s", md)
	}
}

// A cell with decisions taken without Redis, or with too few keyed
// commands, is flagged in its row and in a warning under the table.
func TestMarkdownFlags(t *testing.T) {
	ms := time.Millisecond
	fellBack := cell(Serve, HTTP, 256, 2, 20000, 8*ms, 6*time.Second, time.Second)
	fellBack.NotByRedis, fellBack.KeyedCommands = 90_000, 178_000 // 0.89 per decision
	res := &Result{
		Config: Config{Transports: []Transport{HTTP}, Duration: 10 * time.Second, Warmup: time.Second, Identities: 10_000, Rounds: 2},
		Cells: []Cell{
			cell(Theirs, HTTP, 256, 1, 6000, 20*ms, 6*time.Second, time.Second),
			cell(Serve, HTTP, 256, 1, 18000, 8*ms, 6*time.Second, time.Second),
			cell(Theirs, HTTP, 256, 2, 6000, 20*ms, 6*time.Second, time.Second),
			fellBack,
		},
	}
	md := Markdown(res)
	for _, want := range []string{
		"| 256 | floodgate serve (POST /v1/check) | 19.0k (18.0k–20.0k) |",
		"| ⚠ 90000 | ⚠ 1.45 (0.89–2.00) + 0.10 (2.10) |",
		"⚠ **Invalid:** floodgate serve (POST /v1/check), 256 callers: decisions taken without Redis (round 2: 90000 of 200000)",
		"⚠ floodgate serve (POST /v1/check), 256 callers: fewer keyed Redis commands per decision than the 2 each decision needs (round 2: 0.89)",
		"`--fallback-budget 1s`",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks\n%s\n---\n%s", want, md)
		}
	}
	if strings.Contains(md, "envoyproxy/ratelimit (POST /json), 256 callers") {
		t.Errorf("theirs flagged:\n%s", md)
	}
}

func TestStatOf(t *testing.T) {
	tests := []struct {
		in   []float64
		want stat
	}{
		{nil, stat{}},
		{[]float64{3}, stat{3, 3, 3}},
		{[]float64{5, 1, 3}, stat{3, 1, 5}},
		{[]float64{4, 1, 2, 8}, stat{3, 1, 8}},
	}
	for _, tt := range tests {
		if got := statOf(tt.in); got != tt.want {
			t.Errorf("statOf(%v) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestSplice(t *testing.T) {
	doc := "# Title\n\nprose\n" + BeginMarker + "\nold\n" + EndMarker + "\nafter\n"
	got, err := Splice(doc, "new\n")
	if err != nil || got != "# Title\n\nprose\n"+BeginMarker+"\nnew\n"+EndMarker+"\nafter\n" {
		t.Errorf("replace: %q, %v", got, err)
	}
	got, err = Splice("text", "new")
	if err != nil || got != "text\n\n"+BeginMarker+"\nnew\n"+EndMarker+"\n" {
		t.Errorf("append: %q, %v", got, err)
	}
	if _, err := Splice(BeginMarker+"\nno end", "x"); err == nil {
		t.Error("begin without end: no error")
	}
	if _, err := Splice("x\n"+EndMarker, "x"); err == nil {
		t.Error("end without begin: no error")
	}
}
