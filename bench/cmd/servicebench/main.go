// Command servicebench compares rate limit services side by side:
// envoyproxy/ratelimit (built from its Go module, bench/cmd/envoyratelimit),
// `floodgate serve --redis` and `floodgate envoy-compat` (built from this
// checkout), each on its own fresh redis-server, under the same load
// generator over gRPC and HTTP, in interleaved rounds. It prints Markdown
// (or, with -out, writes it between the servicebench markers of that file)
// with decisions/s, latency and CPU time per process.
//
//	cd bench && go run ./cmd/servicebench                       # 3 rounds of 5s cells, about 6 minutes
//	cd bench && go run ./cmd/servicebench -out ../docs/benchmarks.md -duration 10s
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/floodgate-rl/floodgate/bench/internal/closedloop"
	"github.com/floodgate-rl/floodgate/bench/internal/servicebench"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "servicebench:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg := servicebench.Config{Progress: os.Stderr}
	var out, concurrency, services, transports, repo string
	flag.StringVar(&out, "out", "", "Markdown file to write the report into, between the servicebench markers (appended with them when absent); empty prints it")
	flag.DurationVar(&cfg.Duration, "duration", 5*time.Second, "measured time per cell")
	flag.DurationVar(&cfg.Warmup, "warmup", time.Second, "unmeasured load per cell before it")
	flag.StringVar(&concurrency, "concurrency", "64,256", "comma-separated caller counts")
	flag.IntVar(&cfg.Rounds, "rounds", 3, "rounds; in each, every cell once, the services interleaved")
	flag.IntVar(&cfg.Identities, "identities", 10_000, "distinct identities")
	flag.IntVar(&cfg.Connections, "connections", 0, "the load generator's gRPC connections (0: its default, one per 16 callers)")
	flag.StringVar(&services, "services", "theirs,serve,serve-fasthttp,compat,floor,floor-fasthttp", "comma-separated services: theirs (envoyproxy/ratelimit), serve, serve-fasthttp (serve --http-server fasthttp; HTTP only), compat (envoy-compat), floor (a no-op handler on net/http and grpc-go, no Redis: what the libraries cost), floor-fasthttp (the no-op handler on fasthttp; HTTP only)")
	flag.StringVar(&transports, "transports", "grpc,http", "comma-separated transports: grpc, http")
	flag.StringVar(&cfg.Binaries.Floodgate, "floodgate", "", "floodgate binary (default: built from -repo)")
	flag.StringVar(&cfg.Binaries.Theirs, "envoyratelimit", "", "envoyproxy/ratelimit binary (default: built from ./cmd/envoyratelimit)")
	flag.StringVar(&repo, "repo", "..", "the Floodgate checkout to build floodgate from")
	flag.StringVar(&cfg.RedisServer, "redis-server", "redis-server", "redis-server executable")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	var err error
	if cfg.Concurrency, err = closedloop.ParseCounts(concurrency); err != nil {
		return fmt.Errorf("-concurrency: %w", err)
	}
	if cfg.Services, err = parseServices(services); err != nil {
		return fmt.Errorf("-services: %w", err)
	}
	if cfg.Transports, err = parseTransports(transports); err != nil {
		return fmt.Errorf("-transports: %w", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tmp, err := os.MkdirTemp("", "floodgate-servicebench-bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if cfg.Binaries.Floodgate == "" {
		cfg.Binaries.Floodgate = filepath.Join(tmp, "floodgate")
		if err := build(ctx, repo, "./cmd/floodgate", cfg.Binaries.Floodgate); err != nil {
			return err
		}
	}
	if cfg.Binaries.Theirs == "" {
		cfg.Binaries.Theirs = filepath.Join(tmp, "envoyratelimit")
		if err := build(ctx, ".", "./cmd/envoyratelimit", cfg.Binaries.Theirs); err != nil {
			return err
		}
	}
	if slices.Contains(cfg.Services, servicebench.Floor) || slices.Contains(cfg.Services, servicebench.FloorFast) {
		cfg.Binaries.Floor = filepath.Join(tmp, "nullservice")
		if err := build(ctx, ".", "./cmd/nullservice", cfg.Binaries.Floor); err != nil {
			return err
		}
	}
	res, err := servicebench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	res.Command = "cd bench && go run ./cmd/servicebench " + strings.Join(os.Args[1:], " ")
	md := servicebench.Markdown(res)
	if out == "" {
		fmt.Print(md)
		return nil
	}
	old, err := os.ReadFile(out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	doc, err := servicebench.Splice(string(old), md)
	if err != nil {
		return fmt.Errorf("%s: %w", out, err)
	}
	if err := os.WriteFile(out, []byte(doc), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s\n", out)
	return nil
}

// build runs go build -o bin pkg in dir.
func build(ctx context.Context, dir, pkg, bin string) error {
	fmt.Fprintf(os.Stderr, "building %s in %s\n", pkg, dir)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s in %s: %w", pkg, dir, err)
	}
	return nil
}

func parseServices(s string) ([]servicebench.Service, error) {
	names := map[string]servicebench.Service{"theirs": servicebench.Theirs, "serve": servicebench.Serve, "serve-fasthttp": servicebench.ServeFast, "compat": servicebench.Compat, "floor": servicebench.Floor, "floor-fasthttp": servicebench.FloorFast}
	var out []servicebench.Service
	for f := range strings.SplitSeq(s, ",") {
		v, ok := names[strings.TrimSpace(f)]
		if !ok {
			return nil, fmt.Errorf("unknown service %q (want theirs, serve, serve-fasthttp, compat, floor or floor-fasthttp)", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func parseTransports(s string) ([]servicebench.Transport, error) {
	var out []servicebench.Transport
	for f := range strings.SplitSeq(s, ",") {
		switch strings.TrimSpace(f) {
		case "grpc":
			out = append(out, servicebench.GRPC)
		case "http":
			out = append(out, servicebench.HTTP)
		default:
			return nil, fmt.Errorf("unknown transport %q (want grpc or http)", f)
		}
	}
	return out, nil
}
