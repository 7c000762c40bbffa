// Package servicebench measures rate limit services side by side:
// envoyproxy/ratelimit, `floodgate serve --redis` and `floodgate
// envoy-compat`, each process on its own fresh redis-server, driven by the
// same load generator (package loadgen) over gRPC and HTTP, in rounds that
// interleave the services. For each cell it reports decisions per second,
// latency percentiles, errors and denials, and the CPU time each process
// used over the measured window (service, redis-server, load generator,
// the rest of the machine), so CPU per decision can be compared when the
// load generator shares the cores.
package servicebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/bench/internal/redisproc"
	"github.com/floodgate-rl/floodgate/loadgen"
)

// Config configures Run. Binaries, Duration and Concurrency are required.
type Config struct {
	// Binaries are the services' executables.
	Binaries Binaries
	// Services are measured in this order in each round (rotated by one
	// each round); default Services.
	Services []Service
	// Transports are measured for each service; default Transports.
	Transports []Transport
	// Concurrency lists the load generator's caller counts.
	Concurrency []int
	// Rounds is how many times every cell is measured. Default 1.
	Rounds int
	// Duration is the measured time of a cell; Warmup the unmeasured load
	// before it (default 1s).
	Duration, Warmup time.Duration
	// Identities is the number of distinct identities. Default 10,000.
	Identities int
	// Connections is the load generator's gRPC connections (0: its
	// default).
	Connections int
	// RedisServer is the redis-server executable; default from PATH.
	RedisServer string
	// Progress, when not nil, receives a line per cell.
	Progress io.Writer
}

// Cell is one measurement: one service, transport and caller count, in
// one round.
type Cell struct {
	Service   Service
	Transport Transport
	Callers   int
	Round     int
	// Elapsed is the measured window's wall time.
	Elapsed time.Duration
	// Decisions counts answered checks (allowed + denied).
	Decisions, Denied, Errors int64
	// P50 and P99 are latency percentiles.
	P50, P99 time.Duration
	// CPU is what each process used over the window.
	CPU CPU
	// RedisCommands is the number of commands Redis processed over the
	// window; ScriptCalls and KeyedCommands split it (commandCounts).
	RedisCommands, ScriptCalls, KeyedCommands int64
	// NotByRedis counts the decisions the service reports having taken
	// without Redis over the warm-up and the window (its fallback; see
	// notByRedis). A cell where it is not 0 is invalid: it is measured
	// again, and kept (and flagged) only when every try had some.
	NotByRedis int64
}

// Invalid tells whether some of the cell's decisions were not taken by
// Redis.
func (c Cell) Invalid() bool { return c.NotByRedis > 0 }

// Rate returns decisions per second.
func (c Cell) Rate() float64 { return float64(c.Decisions) / max(c.Elapsed.Seconds(), 1e-9) }

// CPUPerDecision returns the service's and Redis's CPU time per decision.
func (c Cell) CPUPerDecision() time.Duration {
	if c.Decisions == 0 {
		return 0
	}
	return (c.CPU.Service + c.CPU.Redis) / time.Duration(c.Decisions)
}

// Result is a run's cells and what the report says about the run.
type Result struct {
	Config Config
	Cells  []Cell
	// Start and Elapsed are when the run began and how long it took.
	Start   time.Time
	Elapsed time.Duration
	// LoadBefore and LoadAfter are /proc/loadavg's first three fields.
	LoadBefore, LoadAfter string
	// RedisVersion is the redis-server version.
	RedisVersion string
	// Command is how the run was started, for the report.
	Command string
}

func (c *Config) withDefaults() error {
	if len(c.Services) == 0 {
		c.Services = Services
	}
	if c.Binaries.Floodgate == "" || c.Binaries.Theirs == "" {
		return errors.New("servicebench: both binaries are required")
	}
	if c.Binaries.Floor == "" && slices.ContainsFunc(c.Services, Service.floor) {
		return errors.New("servicebench: the floor service needs its binary (bench/cmd/nullservice)")
	}
	// The services run in their own directories: a relative path would
	// no longer name the binary there.
	for _, b := range []*string{&c.Binaries.Floodgate, &c.Binaries.Theirs, &c.Binaries.Floor} {
		if *b == "" || !strings.ContainsRune(*b, filepath.Separator) {
			continue // a name looked up in PATH
		}
		abs, err := filepath.Abs(*b)
		if err != nil {
			return fmt.Errorf("servicebench: %w", err)
		}
		*b = abs
	}
	if len(c.Transports) == 0 {
		c.Transports = Transports
	}
	if len(c.Concurrency) == 0 {
		return errors.New("servicebench: no concurrency given")
	}
	for _, n := range c.Concurrency {
		if n < 1 || n > loadgen.MaxConcurrency {
			return fmt.Errorf("servicebench: concurrency %d out of range 1..%d", n, loadgen.MaxConcurrency)
		}
	}
	if c.Rounds == 0 {
		c.Rounds = 1
	}
	if c.Rounds < 1 {
		return fmt.Errorf("servicebench: rounds %d", c.Rounds)
	}
	if c.Duration < 100*time.Millisecond {
		return fmt.Errorf("servicebench: duration %v: want 100ms or more", c.Duration)
	}
	if c.Warmup == 0 {
		c.Warmup = time.Second
	}
	if c.Warmup < 0 {
		return fmt.Errorf("servicebench: warm-up %v", c.Warmup)
	}
	if c.Identities == 0 {
		c.Identities = 10_000
	}
	return nil
}

// Run measures every cell, round after round: in a round, for each caller
// count and transport, each service in turn, each on its own fresh
// redis-server and freshly started. It stops at the first cell that fails
// three times in a row, but for a cell in which the service took some
// decisions without Redis three times: that one is kept, flagged.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	res := &Result{Config: cfg, Start: time.Now(), LoadBefore: loadAvg()}
	cells := 0
	for _, t := range cfg.Transports {
		for _, s := range cfg.Services {
			if s.serves(t) {
				cells++
			}
		}
	}
	total := cfg.Rounds * len(cfg.Concurrency) * cells
	for round := range cfg.Rounds {
		for _, callers := range cfg.Concurrency {
			for _, t := range cfg.Transports {
				for i := range cfg.Services {
					s := cfg.Services[(i+round)%len(cfg.Services)]
					if !s.serves(t) {
						continue
					}
					cell, err := runCell(ctx, cfg, s, t, callers, res)
					// A cell can fail for reasons of the moment (a free port
					// taken by another process before the service bound it):
					// it is tried up to three times.
					for attempt := 2; err != nil && attempt <= 3 && ctx.Err() == nil; attempt++ {
						if cfg.Progress != nil {
							fmt.Fprintf(cfg.Progress, "%v %v, %d callers, round %d failed, trying again: %v\n", s, t, callers, round+1, err)
						}
						cell, err = runCell(ctx, cfg, s, t, callers, res)
					}
					if errors.Is(err, errNotByRedis) {
						if cfg.Progress != nil {
							fmt.Fprintf(cfg.Progress, "WARNING: %v %v, %d callers, round %d: %v on every try; the cell is kept and flagged invalid\n", s, t, callers, round+1, err)
						}
						err = nil
					}
					if err != nil {
						return res, fmt.Errorf("%v %v, %d callers, round %d: %w", s, t, callers, round+1, err)
					}
					cell.Round = round + 1
					res.Cells = append(res.Cells, cell)
					if cfg.Progress != nil {
						fmt.Fprintf(cfg.Progress, "[%d/%d] round %d, %-22v %-4v %3d callers: %8.0f decisions/s, p99 %v, service+redis %.1f µs/decision, loadgen %.1f µs/decision, errors %d, not by Redis %d, Redis keyed commands %.2f and script calls %.2f per decision\n",
							len(res.Cells), total, round+1, s, t, callers, cell.Rate(), cell.P99.Round(10*time.Microsecond),
							micros(cell.CPUPerDecision()), micros(perDecision(cell.CPU.Loadgen, cell.Decisions)), cell.Errors,
							cell.NotByRedis, perDecisionCount(cell.KeyedCommands, cell.Decisions), perDecisionCount(cell.ScriptCalls, cell.Decisions))
					}
				}
			}
		}
	}
	res.Elapsed = time.Since(res.Start)
	res.LoadAfter = loadAvg()
	return res, nil
}

// runCell starts a redis-server and the service, waits until the service
// answers, warms up, and measures. A cell with decisions not taken by
// Redis is returned with an error wrapping errNotByRedis.
func runCell(ctx context.Context, cfg Config, s Service, t Transport, callers int, res *Result) (Cell, error) {
	cell := Cell{Service: s, Transport: t, Callers: callers}
	dir, err := os.MkdirTemp("", "floodgate-servicebench-")
	if err != nil {
		return cell, err
	}
	defer os.RemoveAll(dir)
	if err := layout(dir); err != nil {
		return cell, err
	}
	rs, err := redisproc.Start(ctx, redisproc.Options{Bin: cfg.RedisServer})
	if err != nil {
		return cell, err
	}
	defer rs.Stop()
	rc := rs.Client(1)
	defer rc.Close()
	if res.RedisVersion == "" {
		info, err := rc.Info(ctx, "server").Result()
		if err != nil {
			return cell, err
		}
		res.RedisVersion = redisproc.InfoField(info, "redis_version")
	}
	p, o, metricsURL, err := launch(cfg.Binaries, s, t, dir, rs.Addr)
	if err != nil {
		return cell, err
	}
	defer p.stop()
	o.Identities, o.Connections, o.Concurrency = cfg.Identities, cfg.Connections, callers
	if err := waitReady(ctx, p, o); err != nil {
		return cell, err
	}
	// The fallback counters are read from before the warm-up: a decision
	// of the warm-up taken without Redis (the breaker open, say) may weigh
	// on the window too.
	fbBefore, err := fallbackCount(ctx, s, metricsURL)
	if err != nil {
		return cell, err
	}
	if cfg.Warmup > 0 {
		w := o
		w.Duration = cfg.Warmup
		if _, err := loadgen.Run(ctx, w, nil); err != nil {
			return cell, err
		}
	}
	cmdsBefore, byKindBefore, err := redisCommands(ctx, rc)
	if err != nil {
		return cell, err
	}
	o.Duration = cfg.Duration
	before, err := sampleCPU(p.pid(), rs.Pid())
	if err != nil {
		return cell, err
	}
	rep, err := loadgen.Run(ctx, o, nil)
	if err != nil {
		return cell, err
	}
	after, err := sampleCPU(p.pid(), rs.Pid())
	if err != nil {
		return cell, err
	}
	cmdsAfter, byKindAfter, err := redisCommands(ctx, rc)
	if err != nil {
		return cell, err
	}
	fbAfter, err := fallbackCount(ctx, s, metricsURL)
	if err != nil {
		return cell, err
	}
	if p.exited() {
		return cell, fmt.Errorf("the service exited during the run:\n%s", p.logTail())
	}
	cell.Elapsed = rep.Elapsed
	cell.Decisions, cell.Denied, cell.Errors = rep.Allowed+rep.Denied, rep.Denied, rep.Errors
	cell.P50, cell.P99 = rep.Latency.P50, rep.Latency.P99
	cell.CPU = cpuBetween(before, after)
	cell.RedisCommands = cmdsAfter - cmdsBefore - 1 // less the INFO of the first reading
	cell.ScriptCalls = byKindAfter.Scripts - byKindBefore.Scripts
	cell.KeyedCommands = byKindAfter.Keyed - byKindBefore.Keyed
	cell.NotByRedis = int64(fbAfter - fbBefore)
	if cell.Decisions > 0 && cell.RedisCommands <= 0 && !s.floor() {
		return cell, fmt.Errorf("no Redis command was processed for %d decisions: the service did not count them", cell.Decisions)
	}
	if cell.Invalid() {
		return cell, fmt.Errorf("%w: %d of them (the service's fallback)", errNotByRedis, cell.NotByRedis)
	}
	return cell, nil
}

// waitReady sends single checks until one is allowed, for up to 30 s.
func waitReady(ctx context.Context, p *process, o loadgen.Options) error {
	o.Concurrency, o.Connections, o.MaxRequests, o.Duration, o.Timeout = 1, 1, 1, time.Second, time.Second
	o.IdentityPrefix = "ready-"
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		if p.exited() {
			return fmt.Errorf("the service exited during start-up:\n%s", p.logTail())
		}
		rep, err := loadgen.Run(ctx, o, nil)
		if err != nil {
			return err
		}
		if rep.Allowed == 1 {
			return nil
		}
		if len(rep.ErrorSamples) > 0 {
			last = rep.ErrorSamples[0].Message
		} else if rep.Denied > 0 {
			last = "the check was denied"
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("no allowed answer from %s within 30s (last: %s); its output:\n%s", o.Target, last, p.logTail())
}

// redisCommands returns INFO stats' total_commands_processed and the
// counts of INFO commandstats, read with one command.
func redisCommands(ctx context.Context, rc *redis.Client) (int64, commandCounts, error) {
	info, err := rc.Info(ctx, "stats", "commandstats").Result()
	if err != nil {
		return 0, commandCounts{}, err
	}
	total, err := strconv.ParseInt(redisproc.InfoField(info, "total_commands_processed"), 10, 64)
	if err != nil {
		return 0, commandCounts{}, fmt.Errorf("servicebench: total_commands_processed: %w", err)
	}
	byKind, err := parseCommandStats(info)
	return total, byKind, err
}

// loadAvg returns the three load averages of /proc/loadavg, or "unknown".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return f[0] + " " + f[1] + " " + f[2]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// perDecisionCount divides a count by a number of decisions.
func perDecisionCount(n, decisions int64) float64 { return float64(n) / max(float64(decisions), 1) }

// perDecision divides a CPU time by a number of decisions.
func perDecision(d time.Duration, n int64) time.Duration {
	if n == 0 {
		return 0
	}
	return d / time.Duration(n)
}
