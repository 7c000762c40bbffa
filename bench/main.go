// Command bench compares Floodgate with other Go rate limiters, side by
// side in one run on this machine: it starts a private redis-server on a
// free loopback port, measures every contender with a closed-loop load, and
// prints Markdown tables (or, with -out, updates benchmarks.md and writes
// benchmarks.svg in that directory).
//
//	go run . -out ../docs                      # the full run, about 4½ minutes
//	go run . -duration 1s -concurrency 1,64    # a shorter one
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/floodgate-rl/floodgate/bench/internal/closedloop"
	"github.com/floodgate-rl/floodgate/bench/internal/clusterbench"
	"github.com/floodgate-rl/floodgate/bench/internal/report"
	"github.com/floodgate-rl/floodgate/bench/internal/suite"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg := suite.Config{Parts: suite.AllParts, Progress: os.Stderr}
	var out, concurrency, only, skip string
	var cluster bool
	var redisCLI string
	var clusterRounds int
	flag.StringVar(&out, "out", "", "directory to write benchmarks.md (generated part only) and benchmarks.svg into; empty prints Markdown to stdout")
	flag.DurationVar(&cfg.Duration, "duration", 3*time.Second, "measured time per cell")
	flag.DurationVar(&cfg.Warmup, "warmup", 300*time.Millisecond, "unmeasured warm-up per cell")
	flag.StringVar(&concurrency, "concurrency", "1,16,64,256", "comma-separated caller counts of the main matrix")
	flag.IntVar(&cfg.Rounds, "rounds", 1, "measure the main matrix and the in-process limiters this many times and keep each cell's median")
	flag.IntVar(&cfg.Keys, "keys", 10_000, "distinct identities")
	flag.IntVar(&cfg.PoolSize, "pool", 0, "go-redis pool size of the plain clients (0: go-redis default)")
	flag.IntVar(&cfg.AlgoWorkers, "algo-workers", 64, "callers of the per-algorithm cells")
	flag.IntVar(&cfg.FloodWorkers, "flood-workers", 64, "callers of the flood cells")
	flag.IntVar(&cfg.MemParallelism, "mem-parallelism", 1, "in-memory benchmarks' goroutines per GOMAXPROCS")
	flag.IntVar(&cfg.BenchRequests, "bench-requests", 500_000, "redis-benchmark -n")
	flag.StringVar(&only, "only", "", "comma-separated series IDs of the main matrix to run (default all): "+strings.Join(suite.SeriesIDs(), ","))
	flag.StringVar(&skip, "skip", "", "comma-separated parts to skip: "+strings.Join(suite.PartNames(), ","))
	flag.StringVar(&cfg.RedisServer, "redis-server", "redis-server", "redis-server executable")
	flag.StringVar(&cfg.RedisBenchmark, "redis-benchmark", "redis-benchmark", "redis-benchmark executable")
	flag.BoolVar(&cluster, "cluster", false, "instead of the suite, start a private 3-primary Redis Cluster and compare redis_rate (ClusterClient) with Floodgate's sliding window and 3 layers, coalesced per primary and not, in -cluster-rounds interleaved rounds at -concurrency (Markdown on stdout)")
	flag.IntVar(&clusterRounds, "cluster-rounds", 3, "interleaved rounds of -cluster")
	flag.StringVar(&redisCLI, "redis-cli", "redis-cli", "redis-cli executable (joins the -cluster nodes)")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	var err error
	if cfg.Concurrency, err = closedloop.ParseCounts(concurrency); err != nil {
		return fmt.Errorf("-concurrency: %w", err)
	}
	if only != "" {
		cfg.Only = strings.Split(only, ",")
	}
	if skip != "" {
		if cfg.Parts, err = suite.SkipParts(cfg.Parts, strings.Split(skip, ",")); err != nil {
			return fmt.Errorf("-skip: %w", err)
		}
	}
	cfg.Command = "go run . " + strings.Join(os.Args[1:], " ")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cluster {
		cc := clusterbench.Config{RedisServer: cfg.RedisServer, RedisCLI: redisCLI, Duration: cfg.Duration, Warmup: cfg.Warmup,
			Concurrency: cfg.Concurrency, Rounds: clusterRounds, Keys: cfg.Keys, PoolSize: cfg.PoolSize, Command: cfg.Command, Progress: os.Stderr}
		cells, err := clusterbench.Run(ctx, cc)
		if err != nil {
			return err
		}
		fmt.Print(clusterbench.Markdown(cc, cells))
		return nil
	}
	res, err := suite.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if out == "" {
		fmt.Print(report.Markdown(res, ""))
		return nil
	}
	if err := report.Write(out, res); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s/%s and %s/%s\n", out, report.MarkdownFile, out, report.ChartFile)
	return nil
}
