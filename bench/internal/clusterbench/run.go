package clusterbench

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/bench/internal/closedloop"
	"github.com/floodgate-rl/floodgate/bench/internal/contender"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/redis/go-redis/v9"
)

// Config configures Run.
type Config struct {
	// RedisServer and RedisCLI are the executables.
	RedisServer, RedisCLI string
	// Duration is measured per cell, after Warmup.
	Duration, Warmup time.Duration
	// Concurrency lists the caller counts.
	Concurrency []int
	// Rounds is how many interleaved rounds to run (≥ 1).
	Rounds int
	// Keys is the number of distinct identities.
	Keys int
	// PoolSize is the cluster client's pool size per node (0: go-redis's
	// default).
	PoolSize int
	// Command is printed as the command that ran.
	Command string
	// Progress receives one line per cell; nil discards.
	Progress io.Writer
}

// Cell is one measurement.
type Cell struct {
	ID      string
	Workers int
	Round   int
	// PerSecond is decisions per second; P99 the callers' 99th percentile.
	PerSecond float64
	P99       time.Duration
	// ClientUs and RedisUs are the harness process's and the three
	// redis-servers' CPU time per decision, in µs.
	ClientUs, RedisUs float64
	Errors            uint64
	FirstError        string
	// Uptime is /proc/loadavg's first three fields after the cell.
	Uptime string
}

// contenders, in the order each round runs them.
var contenders = []struct {
	id, name string
	build    func(cc *redis.ClusterClient, prefix string) (closedloop.Op, error)
}{
	{"redis_rate", "go-redis/redis_rate v10 (GCRA), ClusterClient", func(cc *redis.ClusterClient, _ string) (closedloop.Op, error) {
		return contender.RedisRate(cc)
	}},
	{"fg_sw", "Floodgate sliding window (per-primary coalescing, default)", func(cc *redis.ClusterClient, prefix string) (closedloop.Op, error) {
		return single(cc, prefix, redisstore.Options{})
	}},
	{"fg_sw_off", "Floodgate sliding window, Coalesce: CoalesceOff", func(cc *redis.ClusterClient, prefix string) (closedloop.Op, error) {
		return single(cc, prefix, redisstore.Options{Coalesce: redisstore.CoalesceOff})
	}},
	{"fg_3l", "Floodgate 3 layers (per-primary coalescing, default)", func(cc *redis.ClusterClient, prefix string) (closedloop.Op, error) {
		return layered(cc, prefix, redisstore.Options{})
	}},
	{"fg_3l_off", "Floodgate 3 layers, Coalesce: CoalesceOff", func(cc *redis.ClusterClient, prefix string) (closedloop.Op, error) {
		return layered(cc, prefix, redisstore.Options{Coalesce: redisstore.CoalesceOff})
	}},
}

func limiter(cc *redis.ClusterClient, prefix string, opts redisstore.Options) (*floodgate.Limiter, error) {
	st, err := redisstore.New(cc, opts)
	if err != nil {
		return nil, err
	}
	return floodgate.New(st, floodgate.Options{Prefix: prefix})
}

func single(cc *redis.ClusterClient, prefix string, opts redisstore.Options) (closedloop.Op, error) {
	l, err := limiter(cc, prefix, opts)
	if err != nil {
		return nil, err
	}
	p, err := contender.OpenPolicy("bench", floodgate.SlidingWindow)
	if err != nil {
		return nil, err
	}
	return contender.Floodgate(l, p)
}

func layered(cc *redis.ClusterClient, prefix string, opts redisstore.Options) (closedloop.Op, error) {
	l, err := limiter(cc, prefix, opts)
	if err != nil {
		return nil, err
	}
	return contender.Layered(l, floodgate.SlidingWindow)
}

// Run starts a cluster, runs every contender at every concurrency in
// cfg.Rounds interleaved rounds (round by round, concurrency by
// concurrency, contender after contender), stops the cluster and returns
// the cells.
func Run(ctx context.Context, cfg Config) ([]Cell, error) {
	if cfg.Rounds < 1 || cfg.Keys < 1 || cfg.Duration <= 0 || len(cfg.Concurrency) == 0 {
		return nil, fmt.Errorf("clusterbench: bad config: rounds %d, keys %d, duration %v, concurrency %v", cfg.Rounds, cfg.Keys, cfg.Duration, cfg.Concurrency)
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	cl, err := StartCluster(ctx, cfg.RedisServer, cfg.RedisCLI)
	if err != nil {
		return nil, err
	}
	defer cl.Stop()
	var cells []Cell
	n := 0
	for round := 1; round <= cfg.Rounds; round++ {
		for _, w := range cfg.Concurrency {
			for _, ct := range contenders {
				n++
				c, err := measure(ctx, cl, cfg, ct.build, fmt.Sprintf("c%d", n), w)
				if err != nil {
					if ctx.Err() != nil {
						return cells, err
					}
					fmt.Fprintf(cfg.Progress, "%s at %d callers, round %d: %v\n", ct.id, w, round, err)
					continue
				}
				c.ID, c.Round = ct.id, round
				cells = append(cells, c)
				fmt.Fprintf(cfg.Progress, "round %d %-10s %4d callers %9.0f/s p99 %8v client %6.1fµs redis %6.1fµs errors %d load %s %s\n",
					round, c.ID, w, c.PerSecond, c.P99.Round(10*time.Microsecond), c.ClientUs, c.RedisUs, c.Errors, c.Uptime, c.FirstError)
			}
		}
	}
	return cells, nil
}

// measure runs one contender at workers callers on a fresh client.
func measure(ctx context.Context, cl *Cluster, cfg Config, build func(*redis.ClusterClient, string) (closedloop.Op, error), prefix string, workers int) (Cell, error) {
	cc := cl.Client(cfg.PoolSize)
	defer cc.Close()
	op, err := build(cc, prefix)
	if err != nil {
		return Cell{}, err
	}
	if _, err := op(ctx, prefix+".probe"); err != nil {
		return Cell{}, fmt.Errorf("first call: %w", err)
	}
	ks := make([]string, cfg.Keys)
	for i := range ks {
		ks[i] = fmt.Sprintf("%s.u%d", prefix, i)
	}
	var selfBefore, selfAfter float64
	var redisBefore, redisAfter float64
	var infoErr error
	st, err := closedloop.Run(ctx, closedloop.Config{
		Workers:  workers,
		Duration: cfg.Duration,
		Warmup:   cfg.Warmup,
		Keys:     ks,
		Seed:     uint64(workers),
		MeasureStart: func() {
			selfBefore = selfCPU()
			var e error
			if redisBefore, e = cl.CPUSeconds(ctx); e != nil && infoErr == nil {
				infoErr = e
			}
		},
		MeasureEnd: func() {
			selfAfter = selfCPU()
			var e error
			if redisAfter, e = cl.CPUSeconds(ctx); e != nil && infoErr == nil {
				infoErr = e
			}
		},
	}, op)
	if err != nil {
		return Cell{}, err
	}
	if infoErr != nil {
		return Cell{}, infoErr
	}
	d := float64(st.Decisions())
	c := Cell{Workers: workers, PerSecond: st.PerSecond(), P99: st.Latency.Quantile(0.99), Errors: st.Errors, Uptime: loadavg()}
	if d > 0 {
		c.ClientUs = (selfAfter - selfBefore) * 1e6 / d
		c.RedisUs = (redisAfter - redisBefore) * 1e6 / d
	}
	if st.FirstError != nil {
		c.FirstError = st.FirstError.Error()
	}
	return c, nil
}

// selfCPU is this process's user+sys CPU time in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// loadavg returns the first three fields of /proc/loadavg, or "?".
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// Markdown renders cells: one table per round with ratios to redis_rate at
// the same concurrency in the same round, then the range over rounds.
func Markdown(cfg Config, cells []Cell) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Command: `%s`\n\n", cfg.Command)
	fmt.Fprintf(&b, "3-primary Redis Cluster (redis-server processes on this machine), %d identities, %v per cell after %v warm-up, %d interleaved rounds. CPU per decision: the harness process (client and load generator) and the three redis-servers (INFO cpu), user+sys.\n\n", cfg.Keys, cfg.Duration, cfg.Warmup, cfg.Rounds)
	base := map[[2]int]Cell{}
	for _, c := range cells {
		if c.ID == "redis_rate" {
			base[[2]int{c.Round, c.Workers}] = c
		}
	}
	b.WriteString("| round | callers | contender | decisions/s | × redis_rate | p99 | client µs/decision | redis µs/decision | errors | load avg |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range cells {
		ratio := "–"
		if r, ok := base[[2]int{c.Round, c.Workers}]; ok && r.PerSecond > 0 {
			ratio = fmt.Sprintf("%.2f×", c.PerSecond/r.PerSecond)
		}
		fmt.Fprintf(&b, "| %d | %d | %s | %.0f | %s | %v | %.1f | %.1f | %d | %s |\n", c.Round, c.Workers, c.ID, c.PerSecond, ratio, c.P99.Round(10*time.Microsecond), c.ClientUs, c.RedisUs, c.Errors, c.Uptime)
	}
	b.WriteString("\nRanges over rounds (ratio to redis_rate's single layer in the same round):\n\n| callers | contender | decisions/s | × redis_rate | client µs/decision | redis µs/decision |\n|---|---|---|---|---|---|\n")
	for _, w := range cfg.Concurrency {
		for _, ct := range contenders {
			var ps, rs, cu, ru []float64
			for _, c := range cells {
				if c.ID != ct.id || c.Workers != w {
					continue
				}
				ps, cu, ru = append(ps, c.PerSecond), append(cu, c.ClientUs), append(ru, c.RedisUs)
				if r, ok := base[[2]int{c.Round, c.Workers}]; ok && r.PerSecond > 0 {
					rs = append(rs, c.PerSecond/r.PerSecond)
				}
			}
			if len(ps) == 0 {
				continue
			}
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s |\n", w, ct.id, span(ps, "%.0f"), span(rs, "%.2f×"), span(cu, "%.1f"), span(ru, "%.1f"))
		}
	}
	return b.String()
}

// span formats the range of xs.
func span(xs []float64, f string) string {
	if len(xs) == 0 {
		return "–"
	}
	lo, hi := slices.Min(xs), slices.Max(xs)
	if fmt.Sprintf(f, lo) == fmt.Sprintf(f, hi) {
		return fmt.Sprintf(f, lo)
	}
	return fmt.Sprintf(f, lo) + "–" + fmt.Sprintf(f, hi)
}
