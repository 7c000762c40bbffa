// Package report holds the results of one comparison run and turns them
// into what people read: Markdown tables, an SVG chart, and the list of
// performance targets with whether each was met.
package report

import (
	"time"
)

// Series identifiers. The suite tags each measured contender with one, and
// the target checks look results up by them.
const (
	RedisRate     = "redis_rate"
	RedisRateAP   = "redis_rate-ap"
	Ulule         = "ulule"
	Throttled     = "throttled"
	Tiny          = "tiny"
	TinyAP        = "tiny-ap"
	TinyRueidis   = "tiny-rueidis"
	SlidingWindow = "fg-sw"
	GCRA          = "fg-gcra"
	Layers        = "fg-layers"
	SlidingWinAP  = "fg-sw-ap"
	GCRAAP        = "fg-gcra-ap"
	LayersAP      = "fg-layers-ap"
	// SlidingWinRueidis is the store over rueidis, through an adapter.
	SlidingWinRueidis = "fg-sw-rueidis"
	// SlidingWinAPSingle is the store on AutoPipeline with coalescing off
	// (one script call per decision): pipelining alone.
	SlidingWinAPSingle = "fg-sw-ap-single"

	// redis-benchmark lines.
	BenchTiny    = "rb-tiny"
	BenchTinyHot = "rb-tiny-hot"
	BenchSW      = "rb-sw"
	BenchGCRA    = "rb-gcra"

	// Flood cells.
	FloodRedis     = "flood-redis"
	FloodDenyCache = "flood-denycache"

	// In-memory subjects.
	MemSW        = "mem-sw"
	MemGCRA      = "mem-gcra"
	MemLimiterSW = "mem-limiter-sw"
	MemSethvargo = "mem-sethvargo"
)

// Run is everything one comparison run measured.
type Run struct {
	Machine  Machine
	Settings Settings
	// Started and Elapsed time the whole run.
	Started time.Time
	Elapsed time.Duration
	// Redis is the main matrix: each contender at each concurrency.
	Redis []Series
	// Algorithms has one cell per Floodgate algorithm, on the chosen client
	// at Settings.AlgoWorkers callers.
	Algorithms []Cell
	// RedisBenchmark holds redis-benchmark's own results.
	RedisBenchmark []BenchLine
	// Memory is the Redis memory one identity's keys take, per algorithm.
	Memory []MemoryLine
	// InMemory holds the in-process limiters' results.
	InMemory []InMemLine
	// Flood holds the cells of a flood on one already-denied identity.
	Flood []Cell
	// HotKey holds cells where every caller uses one identity.
	HotKey []Cell
	// Notes are remarks the suite made while running (skipped parts,
	// substitutions), printed verbatim.
	Notes []string
}

// Machine describes where the run happened.
type Machine struct {
	CPUs                  int
	GOMAXPROCS            int
	CPUModel              string
	OS, Arch              string
	GoVersion             string
	RedisVersion          string
	RedisBenchmarkVersion string
	// LoadBefore and LoadAfter are the 1-minute load averages when the run
	// started and ended (0 where the OS does not tell): other work on the
	// machine skews every number.
	LoadBefore, LoadAfter float64
	// OtherCPU and StealCPU are the shares (0..1) of the machine's CPU
	// time during the run that went to processes other than the run's
	// own (the harness, its redis-server and redis-benchmark) and to other
	// virtual machines (steal), measured where CPUShares is true (Linux).
	OtherCPU, StealCPU float64
	CPUShares          bool
}

// Settings are the run's parameters.
type Settings struct {
	// Command is the command line that produced the run.
	Command string
	// Duration and Warmup are per cell.
	Duration, Warmup time.Duration
	// Concurrency lists the caller counts of the main matrix.
	Concurrency []int
	// Rounds is how many times the matrix and the in-process limiters
	// were measured; each cell is its median round.
	Rounds int
	// Keys is the number of distinct identities drawn from.
	Keys int
	// PoolSize is the go-redis pool size of the plain clients (0: go-redis's
	// default, 10 per GOMAXPROCS).
	PoolSize int
	// AlgoWorkers and FloodWorkers are the caller counts of the algorithm
	// and flood cells.
	AlgoWorkers, FloodWorkers int
	// MemParallelism is the in-memory benchmarks' goroutines per GOMAXPROCS.
	MemParallelism int
	// BenchRequests is redis-benchmark's -n.
	BenchRequests int
}

// Series is one contender across the concurrencies of the main matrix.
type Series struct {
	// ID is one of the series identifiers above.
	ID string
	// Name labels the series in tables and the chart.
	Name string
	// Cells are in the order of Settings.Concurrency; a cell the suite
	// could not run is missing.
	Cells []Cell
}

// Cell is one closed-loop measurement.
type Cell struct {
	// ID and Name identify what was measured (for Algorithms and Flood).
	ID, Name string
	// Workers is the number of concurrent callers.
	Workers int
	// PerSecond is decisions per second.
	PerSecond float64
	// P50, P99 and Max are the callers' latencies per decision.
	P50, P99, Max time.Duration
	// Allowed, Denied and Errors count the measured operations.
	Allowed, Denied, Errors uint64
	// FirstError is the first error text seen, if any.
	FirstError string
	// CPUPerOp is the redis-server process's CPU time per decision in µs
	// (INFO cpu delta over decisions); 0 when not measured.
	CPUPerOp float64
	// ClientCPUPerOp is the harness process's CPU time (user+sys,
	// getrusage) per decision in µs over the measured period: the
	// callers, the client library and its syscalls, plus the harness's
	// own bookkeeping (about the same for every contender); 0 when not
	// measured.
	ClientCPUPerOp float64
	// ScriptUsec is the server time per script call in µs (INFO
	// commandstats evalsha); 0 when not measured.
	ScriptUsec float64
	// ScriptUsecPerOp is the script time per decision in µs: ScriptUsec
	// divided by the decisions per call (Floodgate coalesces concurrent
	// decisions into one call); 0 when not measured.
	ScriptUsecPerOp float64
	// ScriptCalls is the number of script calls the server counted.
	ScriptCalls int64
}

// PerCall returns the decisions per script call (0 when not measured).
func (c Cell) PerCall() float64 {
	if c.ScriptCalls == 0 {
		return 0
	}
	return float64(c.Allowed+c.Denied) / float64(c.ScriptCalls)
}

// At returns the series' cell at workers callers, if measured.
func (s *Series) At(workers int) (Cell, bool) {
	for _, c := range s.Cells {
		if c.Workers == workers {
			return c, true
		}
	}
	return Cell{}, false
}

// BenchLine is one redis-benchmark result.
type BenchLine struct {
	ID, Name string
	// Command is the command redis-benchmark ran, as given to it.
	Command string
	// Args are redis-benchmark's options.
	Args      []string
	PerSecond float64
	P50, P99  time.Duration
}

// MemoryLine is the Redis memory of one identity under one policy.
type MemoryLine struct {
	// Algorithm is the policy's algorithm.
	Algorithm string
	// Entries is, for sliding log, how many admitted requests the log holds;
	// 1 otherwise.
	Entries int
	// Keys is how many Redis keys the identity has.
	Keys int
	// Bytes is the sum of MEMORY USAGE over those keys.
	Bytes int64
}

// InMemLine is one in-process limiter's result.
type InMemLine struct {
	ID, Name    string
	NsPerOp     float64
	BytesPerOp  int64
	AllocsPerOp int64
	// Callers is the number of goroutines that called in parallel.
	Callers int
	// Rounds are the ns/op of every round, fastest first; NsPerOp and the
	// other numbers are the median round's.
	Rounds []float64
}

// Series returns the series with the given ID.
func (r *Run) Series(id string) (*Series, bool) {
	for i := range r.Redis {
		if r.Redis[i].ID == id {
			return &r.Redis[i], true
		}
	}
	return nil, false
}

// Bench returns the redis-benchmark line with the given ID.
func (r *Run) Bench(id string) (BenchLine, bool) {
	for _, b := range r.RedisBenchmark {
		if b.ID == id {
			return b, true
		}
	}
	return BenchLine{}, false
}

// InMem returns the in-memory line with the given ID.
func (r *Run) InMem(id string) (InMemLine, bool) {
	for _, m := range r.InMemory {
		if m.ID == id {
			return m, true
		}
	}
	return InMemLine{}, false
}

// FloodCell returns the flood cell with the given ID.
func (r *Run) FloodCell(id string) (Cell, bool) {
	for _, c := range r.Flood {
		if c.ID == id {
			return c, true
		}
	}
	return Cell{}, false
}

// MaxWorkers returns the largest concurrency of the main matrix.
func (r *Run) MaxWorkers() int {
	m := 0
	for _, w := range r.Settings.Concurrency {
		m = max(m, w)
	}
	return m
}
