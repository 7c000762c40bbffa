// Package suite runs the whole comparison: it starts a private
// redis-server, measures every contender at every concurrency with the
// closed-loop driver, adds the server's own ceiling (redis-benchmark), the
// per-algorithm costs, memory per identity, the in-process limiters and the
// flood on a denied identity, and returns a report.Run.
package suite

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/bench/internal/redisinfo"
	"github.com/floodgate-rl/floodgate/bench/internal/redisproc"
	"github.com/floodgate-rl/floodgate/bench/internal/report"
	"github.com/redis/go-redis/v9"
)

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("suite: invalid config")

// Parts of the suite that can be switched off.
type Parts struct {
	// Matrix is the main table: every Redis contender at every concurrency.
	Matrix bool
	// Algorithms measures each Floodgate algorithm on Redis.
	Algorithms bool
	// RedisBenchmark runs redis-benchmark on the same scripts.
	RedisBenchmark bool
	// Memory measures Redis memory per identity.
	Memory bool
	// InMemory benchmarks the in-process limiters.
	InMemory bool
	// Flood measures a flood on one denied identity.
	Flood bool
	// HotKey measures some contenders on one identity.
	HotKey bool
}

// AllParts switches every part on.
var AllParts = Parts{Matrix: true, Algorithms: true, RedisBenchmark: true, Memory: true, InMemory: true, Flood: true, HotKey: true}

// Config configures Run. Zero durations and counts are errors, not
// defaults: the command line supplies them.
type Config struct {
	// RedisServer and RedisBenchmark are the executables. Defaults
	// "redis-server" and "redis-benchmark".
	RedisServer, RedisBenchmark string
	// Duration is measured per cell, after Warmup.
	Duration, Warmup time.Duration
	// Concurrency lists the caller counts of the main matrix (each ≥ 1).
	Concurrency []int
	// Rounds is how many times the main matrix and the in-process
	// limiters are measured (≥ 1); each cell reports its median round.
	Rounds int
	// Keys is the number of distinct identities (≥ 1).
	Keys int
	// PoolSize is the plain go-redis clients' pool size; 0 keeps go-redis's
	// default.
	PoolSize int
	// AlgoWorkers and FloodWorkers are the callers of the algorithm and
	// flood cells (≥ 1).
	AlgoWorkers, FloodWorkers int
	// MemParallelism is the in-memory benchmarks' goroutines per GOMAXPROCS
	// (≥ 1).
	MemParallelism int
	// BenchRequests is redis-benchmark's -n (≥ 1).
	BenchRequests int
	// Only, when not empty, restricts the main matrix to these series IDs
	// (see package report).
	Only []string
	// Parts selects what to run.
	Parts Parts
	// Command is recorded in the report as the command that ran.
	Command string
	// Progress receives one line per finished measurement; nil discards.
	Progress io.Writer
}

// Validate reports, wrapped in ErrConfig, the first invalid field.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Duration <= 0:
		return bad("duration %v not positive", c.Duration)
	case c.Warmup < 0:
		return bad("warmup %v negative", c.Warmup)
	case len(c.Concurrency) == 0:
		return bad("no concurrency levels")
	case c.Rounds < 1 || c.Rounds > 100:
		return bad("rounds %d out of range 1..100", c.Rounds)
	case c.Keys < 1:
		return bad("keys %d < 1", c.Keys)
	case c.PoolSize < 0:
		return bad("pool size %d negative", c.PoolSize)
	case c.AlgoWorkers < 1 || c.FloodWorkers < 1:
		return bad("algorithm workers %d and flood workers %d must be ≥ 1", c.AlgoWorkers, c.FloodWorkers)
	case c.MemParallelism < 1:
		return bad("in-memory parallelism %d < 1", c.MemParallelism)
	case c.BenchRequests < 1:
		return bad("redis-benchmark requests %d < 1", c.BenchRequests)
	}
	seen := map[int]bool{}
	for _, n := range c.Concurrency {
		if n < 1 || n > 100_000 {
			return bad("concurrency %d out of range 1..100000", n)
		}
		if seen[n] {
			return bad("concurrency %d listed twice", n)
		}
		seen[n] = true
	}
	known := map[string]bool{}
	for _, s := range matrixSpecs() {
		known[s.id] = true
	}
	for _, id := range c.Only {
		if !known[id] {
			return bad("unknown series %q", id)
		}
	}
	return nil
}

// Run runs the suite. It stops the redis-server it started before
// returning, whatever happens. When ctx ends first, the error wraps ctx's
// (a Redis command cut short by ctx's deadline reports a network
// timeout of its own).
func Run(ctx context.Context, cfg Config) (_ *report.Run, err error) {
	defer func() {
		if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w: %w", ctx.Err(), err)
		}
	}()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.RedisServer == "" {
		cfg.RedisServer = "redis-server"
	}
	if cfg.RedisBenchmark == "" {
		cfg.RedisBenchmark = "redis-benchmark"
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	srv, err := redisproc.Start(ctx, redisproc.Options{Bin: cfg.RedisServer})
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	fmt.Fprintf(cfg.Progress, "redis-server pid %d on %s\n", srv.Pid(), srv.Addr)

	r := &run{cfg: cfg, srv: srv, out: &report.Run{Started: time.Now()}}
	r.out.Settings = report.Settings{
		Command:        cfg.Command,
		Duration:       cfg.Duration,
		Warmup:         cfg.Warmup,
		Concurrency:    cfg.Concurrency,
		Rounds:         cfg.Rounds,
		Keys:           cfg.Keys,
		PoolSize:       cfg.PoolSize,
		AlgoWorkers:    cfg.AlgoWorkers,
		FloodWorkers:   cfg.FloodWorkers,
		MemParallelism: cfg.MemParallelism,
		BenchRequests:  cfg.BenchRequests,
	}
	admin := srv.Client(2)
	defer admin.Close()
	r.admin = admin
	if err := r.machine(ctx); err != nil {
		return nil, err
	}
	cpuBefore, cpuOK := takeCPUSample(srv.Pid())
	// The probe must come first: it captures Floodgate's script from the
	// EVAL the store sends after the fresh server's NOSCRIPT.
	if err := r.captureScript(ctx); err != nil {
		r.note("Floodgate's script could not be captured, so redis-benchmark did not run it: %v", err)
	}
	steps := []struct {
		on bool
		fn func(context.Context) error
	}{
		{cfg.Parts.Matrix, r.matrix},
		{cfg.Parts.Algorithms, r.algorithms},
		{cfg.Parts.RedisBenchmark, r.redisBenchmark},
		{cfg.Parts.Memory, r.memory},
		{cfg.Parts.HotKey, r.hotKey},
		{cfg.Parts.Flood, r.flood},
		{cfg.Parts.InMemory, r.inMemory},
	}
	for _, s := range steps {
		if !s.on {
			continue
		}
		if err := s.fn(ctx); err != nil {
			return nil, err
		}
	}
	if srv.Exited() {
		return nil, fmt.Errorf("suite: redis-server exited during the run")
	}
	r.out.Elapsed = time.Since(r.out.Started)
	r.out.Machine.LoadAfter = loadAverage()
	if cpuAfter, ok := takeCPUSample(srv.Pid()); cpuOK && ok {
		m := &r.out.Machine
		m.OtherCPU, m.StealCPU, m.CPUShares = cpuShares(cpuBefore, cpuAfter)
	}
	return r.out, nil
}

// run is the state of one suite run.
type run struct {
	cfg    Config
	srv    *redisproc.Server
	admin  *redis.Client
	out    *report.Run
	cellNo int
	// scripts are Floodgate's Lua sources as the store sent them, by
	// algorithm (single-layer decisions run one script per algorithm).
	scripts map[floodgate.Algorithm]string
	// benchCmds are captured decisions (numkeys, key, arguments) for
	// redis-benchmark, by algorithm.
	benchCmds map[floodgate.Algorithm][]string
}

func (r *run) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.out.Notes = append(r.out.Notes, msg)
	fmt.Fprintf(r.cfg.Progress, "note: %s\n", msg)
}

// machine fills the report's machine description.
func (r *run) machine(ctx context.Context) error {
	m := &r.out.Machine
	m.CPUs = runtime.NumCPU()
	m.GOMAXPROCS = runtime.GOMAXPROCS(0)
	m.OS, m.Arch = runtime.GOOS, runtime.GOARCH
	m.GoVersion = runtime.Version()
	m.CPUModel = cpuModel()
	m.LoadBefore = loadAverage()
	v, err := redisinfo.ServerVersion(ctx, r.admin)
	if err != nil {
		return err
	}
	m.RedisVersion = v
	out, err := exec.CommandContext(ctx, r.cfg.RedisBenchmark, "--version").Output()
	if err == nil {
		m.RedisBenchmarkVersion = strings.TrimSpace(string(out))
	} else {
		m.RedisBenchmarkVersion = "unavailable: " + err.Error()
	}
	return nil
}

// loadAverage returns the 1-minute load average from /proc/loadavg, or 0.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _, _ := strings.Cut(string(b), " ")
	v, err := strconv.ParseFloat(f, 64)
	if err != nil {
		return 0
	}
	return v
}

// cpuModel returns the first "model name" of /proc/cpuinfo, or "unknown".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// partNames maps the names accepted by SkipParts to the Parts fields.
var partNames = []struct {
	name string
	get  func(*Parts) *bool
}{
	{"matrix", func(p *Parts) *bool { return &p.Matrix }},
	{"algorithms", func(p *Parts) *bool { return &p.Algorithms }},
	{"redis-benchmark", func(p *Parts) *bool { return &p.RedisBenchmark }},
	{"memory", func(p *Parts) *bool { return &p.Memory }},
	{"inmemory", func(p *Parts) *bool { return &p.InMemory }},
	{"flood", func(p *Parts) *bool { return &p.Flood }},
	{"hotkey", func(p *Parts) *bool { return &p.HotKey }},
}

// PartNames returns the names SkipParts accepts.
func PartNames() []string {
	var ns []string
	for _, p := range partNames {
		ns = append(ns, p.name)
	}
	return ns
}

// SkipParts returns p with the named parts switched off.
func SkipParts(p Parts, names []string) (Parts, error) {
	for _, n := range names {
		found := false
		for _, pn := range partNames {
			if pn.name == strings.TrimSpace(n) {
				*pn.get(&p) = false
				found = true
			}
		}
		if !found {
			return p, fmt.Errorf("%w: unknown part %q (want one of %s)", ErrConfig, n, strings.Join(PartNames(), ", "))
		}
	}
	return p, nil
}

// SeriesIDs returns the IDs of the main matrix's series, in table order.
func SeriesIDs() []string {
	var ids []string
	for _, s := range matrixSpecs() {
		ids = append(ids, s.id)
	}
	return ids
}
