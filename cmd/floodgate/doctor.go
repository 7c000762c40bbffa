package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
)

func newDoctorCmd() *cobra.Command {
	var (
		opts           doctor.Options
		rs             config.Redis
		sec            securityFlags // only its Redis password and TLS flags
		asJSON         bool
		colour         string
		timeout        time.Duration
		verifyKeyFiles []string
		clientTLS      clientTLSFlags // for https instances and Prometheus
	)
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Audit a live deployment against the production checklist (read-only)",
		Long: `Audit a running deployment, read-only: Redis (version, maxmemory and
eviction policy, persistence when quotas are configured, replication,
Sentinel or Cluster health and slot coverage, script latency, memory), the
keys under the prefix (a paced SCAN capped in keys and time: keys without
TTL, TTLs longer than their policy, the largest sliding logs, keys and
memory per policy, keys of no known policy), clocks, the service instances
(--instance), the configuration (--config, or the one in Redis) and the
monitoring (--prometheus).

Every check prints pass, warn or fail with its evidence, the fix and what
it read. Doctor only reads: its Redis client refuses any command that is
not a read. With Redis unreachable it still reports: the Redis check fails
with the reason and the fix, the checks that read Redis say they were
skipped (behind Sentinel, the sentinels are still judged when they
answer and the primary they name does not), and the instances, a --config file and Prometheus are checked as
usual. Exit status 1 when any check fails (Redis unreachable included), 0
otherwise; 1 too, with no report, when it cannot audit (a bad flag).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !rs.Enabled() {
				return fmt.Errorf("give the deployment's Redis: --redis URL, --redis-sentinel with --redis-master, or --redis-cluster")
			}
			if err := checkDoctorFlags(opts, timeout); err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			if err := sec.redisClientSettings(&rs, log); err != nil {
				return err
			}
			if len(verifyKeyFiles) > 0 {
				if opts.ConfigFile != "" {
					return errors.New("--config-verify-key-file checks the configuration in Redis: not with --config")
				}
				keys, err := readVerifyKeys(verifyKeyFiles, log)
				if err != nil {
					return err
				}
				opts.VerifyKeys = keys
			}
			// go-redis's own lines (a failed dial per retry, a sentinel
			// selected) are dropped: the report, or the error, says what
			// went wrong, and a re-walk saw a "redis client ... failed to
			// dial" line printed before the report of a Redis down.
			redis.SetLogger(newRedisLogger(slog.New(slog.DiscardHandler), time.Minute))
			opts.Redis = rs
			tc, err := clientTLS.config()
			if err != nil {
				return err
			}
			if tc != nil {
				tr := http.DefaultTransport.(*http.Transport).Clone()
				tr.TLSClientConfig = tc
				opts.HTTPClient = &http.Client{Timeout: 5 * time.Second, Transport: tr}
			}
			useColour, err := wantColour(colour, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			rep, err := doctor.Run(ctx, opts)
			if err != nil {
				return err
			}
			if asJSON {
				err = rep.WriteJSON(cmd.OutOrStdout())
			} else {
				err = rep.WriteText(cmd.OutOrStdout(), useColour)
			}
			if err != nil {
				return err
			}
			if rep.Worst() == doctor.Fail {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&rs.URL, "redis", "", "Redis URL: redis://host:port/db, rediss://..., redis-sentinel://h1:p,h2:p/db?master=NAME or redis-cluster://h1:p,h2:p")
	fl.StringSliceVar(&rs.SentinelAddrs, "redis-sentinel", nil, "Redis Sentinel addresses (host:port,...), with --redis-master")
	fl.StringVar(&rs.SentinelMaster, "redis-master", "", "name of the primary the sentinels monitor")
	fl.StringSliceVar(&rs.ClusterAddrs, "redis-cluster", nil, "Redis Cluster seed addresses (host:port,...)")
	addRedisSecurityFlags(fl, &sec)
	fl.StringVar(&opts.Prefix, "prefix", "fg", "the deployment's key prefix (serve --prefix)")
	fl.StringVar(&opts.LoginPrefix, "login-prefix", "login", "the login guard's key prefix (serve --login-prefix)")
	fl.StringVar(&opts.ConfigFile, "config", "", "the configuration file the instances run (default: the one in Redis under <prefix>:config)")
	clientTLS.add(fl)
	fl.StringArrayVar(&verifyKeyFiles, "config-verify-key-file", nil, "the key the instances verify the configuration in Redis with (serve --config-verify-key-file): a stored document not signed under it fails, as the instances refuse it; repeatable, as serve's: a document signed under any of the keys passes")
	fl.StringArrayVar(&opts.EnvoyConfig, "envoy-config", nil, "the Envoy descriptor configuration the instances run (serve --envoy-config): a file, or a directory whose .yaml and .yml files directly inside are read; repeatable. Its descriptors' keys, and those of limit overrides in its domains, are then known, not keys of no known policy")
	fl.StringArrayVar(&opts.Instances, "instance", nil, "base URL of a running instance, e.g. http://10.0.0.5:8080; repeatable (for an instance run with --metrics-admin-only, give its admin address too: /metrics is read there)")
	fl.DurationVar(&opts.RateWindow, "rate-window", 2*time.Second, "time between the two scrapes of each instance's /metrics that give the current fallback and denial rates (negative: one scrape)")
	fl.StringVar(&opts.PrometheusURL, "prometheus", "", "base URL of the Prometheus scraping the instances, e.g. http://prometheus:9090")
	fl.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fl.StringVar(&colour, "color", "auto", "colour the report: auto (on a terminal), always or never")
	fl.IntVar(&opts.Scan.MaxKeys, "scan-max-keys", 10_000, "most keys the scan examines (1..10000000)")
	fl.DurationVar(&opts.Scan.MaxTime, "scan-max-time", 10*time.Second, "longest the scan runs")
	fl.IntVar(&opts.Scan.Count, "scan-count", 200, "COUNT hint of each SCAN call (1..10000)")
	fl.DurationVar(&opts.Scan.Pause, "scan-pause", 2*time.Millisecond, "pause between SCAN batches (negative: none)")
	fl.IntVar(&opts.Scan.MemorySamples, "memory-samples", 300, "most keys whose MEMORY USAGE is read (1..100000)")
	fl.IntVar(&opts.LatencySamples, "latency-samples", 50, "timed calls of the latency probe script, 50ms apart (less when they would take over 2.5s), within 3s (1..1000)")
	fl.DurationVar(&timeout, "timeout", 2*time.Minute, "bound on the whole run")
	return cmd
}

// checkDoctorFlags refuses, naming the flag, values doctor.Options would
// take for its defaults (0) or refuse without the flag's name, and a
// timeout that would pass for Redis being unreachable.
func checkDoctorFlags(opts doctor.Options, timeout time.Duration) error {
	if timeout <= 0 {
		return fmt.Errorf("--timeout %v: want a positive duration (the bound on the whole run)", timeout)
	}
	if err := floodgate.ValidatePrefix(opts.Prefix); err != nil {
		return fmt.Errorf("--prefix: %w", err)
	}
	// 0 would be the library's default, so the range given is 1..max.
	for _, c := range []struct {
		flag   string
		n, max int
	}{
		{"--scan-max-keys", opts.Scan.MaxKeys, doctor.MaxScanKeys}, {"--scan-count", opts.Scan.Count, doctor.MaxScanCount},
		{"--memory-samples", opts.Scan.MemorySamples, doctor.MaxMemorySamples}, {"--latency-samples", opts.LatencySamples, doctor.MaxLatencySamples},
	} {
		if c.n < 1 || c.n > c.max {
			return fmt.Errorf("%s %d: want 1..%d", c.flag, c.n, c.max)
		}
	}
	if opts.Scan.MaxTime <= 0 {
		return fmt.Errorf("--scan-max-time %v: want a positive duration", opts.Scan.MaxTime)
	}
	return nil
}

// wantColour decides whether to colour output written to w.
func wantColour(mode string, w io.Writer) (bool, error) {
	switch mode {
	case "always":
		return true, nil
	case "never":
		return false, nil
	case "auto":
		return os.Getenv("NO_COLOR") == "" && isTerminal(w), nil
	}
	return false, fmt.Errorf("--color %q: want auto, always or never", mode)
}

// isTerminal reports whether w is a terminal (a character device: a
// terminal, or /dev/null); not a file, a pipe or a buffer.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
