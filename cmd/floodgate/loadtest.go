package main

import (
	"errors"
	"fmt"
	"net/http"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/loadgen"
)

func newLoadtestCmd() *cobra.Command {
	var (
		o                     loadgen.Options
		expectAlg, expectWin  string
		expectLimit, expBurst int64
		quiet                 bool
		mode, grpcClient      string
		clientTLS             clientTLSFlags
		gcFloor               int
	)
	cmd := &cobra.Command{
		Use:   "loadtest",
		Short: "Drive a running service with checks and report rate, denials and latency",
		Long: `Send rate-limit checks to a running service, over HTTP/JSON
(--target http://host:port, or https://), Envoy's gRPC API (--target
grpc://host:port, or grpcs:// over TLS) or
Envoy's JSON API of envoyproxy/ratelimit and envoy-compat (--mode envoy-json
--target http://host:port, POST /json),
at a fixed arrival rate (--rate) or as fast as --concurrency workers allow,
and report the rate achieved, allowed and denied counts, errors and latency
percentiles. Over gRPC it calls with its own small HTTP/2 client
(h2c, or h2 over TLS for grpcs://), which costs it a fraction of
grpc-go's; --grpc-client grpc-go calls with grpc-go's client instead, to
compare. --tls-ca-file, --tls-cert-file and --tls-key-file set the TLS of
https:// and grpcs:// targets (a service run with --tls-client-ca-file
needs the certificate). A flag the target does not use is refused when
set: --policy but for the HTTP API, --domain for it, --grpc-client and
--connections but for gRPC, --tls-* but for https:// and grpcs://.

With --expect-algorithm, --expect-limit and --expect-window describing the
limit each identity has, the report also gives the share an exact limiter
would have denied, to compare with the share the service denied.

Answers the service marks degraded, taken by its fallback while Redis
fails rather than by the shared count ("degraded": true or the
X-Floodgate-Degraded header over HTTP; an X-Floodgate-Degraded entry in
response_headers_to_add over gRPC and Envoy's JSON API), are counted on the
report's degraded line. They do not measure the shared limit: with an
expectation (--expect-* or --expected-deny-ratio) a run with any of them
fails, the report saying why.

Before the run, one request is sent (for an identity the run does not
use; it is not counted in the report or in --requests, and is sent apart
from --rate's schedule). When it fails in a way every request of the run
would (nothing listens at --target; an HTTP 4xx other than 429, such as an
unknown --policy; gRPC INVALID_ARGUMENT, such as an unknown --domain), the
run is not started: loadtest exits 1 saying why. An answer allowed or
denied, or another failure (a timeout, a 503 while the service's Redis is
down), starts the run.

Progress goes to stderr once a second (--quiet: none): one line rewritten
in place on a terminal, a line of its own each time otherwise (a log).

Exit status 1 when the run could not start (a bad flag, or the request
before it refused: no report), when every request failed (nothing
measured), or when an expectation was given and some answers were
degraded (in these two, the report is printed all the same).

  floodgate loadtest --target http://127.0.0.1:8080 --policy api \
    --rate 2000 --duration 30s --identities 100 \
    --expect-algorithm sliding_window --expect-limit 100 --expect-window 1m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Mode, err = loadgen.ParseMode(mode); err != nil {
				return fmt.Errorf("--mode: %w", err)
			}
			if o.GRPCClient, err = loadgen.ParseGRPCClient(grpcClient); err != nil {
				return fmt.Errorf("--grpc-client: %w", err)
			}
			if err := checkLoadtestFlags(cmd, o); err != nil {
				return err
			}
			if err := clientTLS.refuseUnlessTLS(cmd.Flags(), o.Target, "https", "grpcs"); err != nil {
				return err
			}
			if o.TLS, err = clientTLS.config(); err != nil {
				return err
			}
			fl := cmd.Flags()
			if fl.Changed("expect-algorithm") || fl.Changed("expect-limit") || fl.Changed("expect-window") || fl.Changed("expect-burst") {
				for _, name := range []string{"expect-algorithm", "expect-limit", "expect-window"} {
					if !fl.Changed(name) {
						return fmt.Errorf("--%s is missing: --expect-algorithm, --expect-limit and --expect-window describe the limit together", name)
					}
				}
				if expectLimit < 1 {
					return fmt.Errorf("--expect-limit %d: out of range 1..%d", expectLimit, int64(floodgate.MaxLimit))
				}
				if o.ExpectedDenyRatio != 0 {
					return errors.New("--expected-deny-ratio and --expect-* exclude each other: give one")
				}
				alg, err := floodgate.ParseAlgorithm(expectAlg)
				if err != nil {
					return fmt.Errorf("--expect-algorithm: %w", err)
				}
				if alg == floodgate.Quota {
					return errors.New("--expect-algorithm quota: a quota counts per calendar period (day, week, month), not per window, and cannot be described here: give --expected-deny-ratio instead")
				}
				win, err := config.ParseDuration(expectWin)
				if err != nil {
					return fmt.Errorf("--expect-window: %w", err)
				}
				o.Expect = floodgate.Policy{Name: "expect", Algorithm: alg, Limit: expectLimit, Window: win, Burst: expBurst}
				if err := o.Expect.Validate(); err != nil {
					return fmt.Errorf("--expect-*: %w", err)
				}
			}
			stopGC, err := startGC(gcFloor)
			if err != nil {
				return err
			}
			defer stopGC()
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			progress := cmd.ErrOrStderr()
			if quiet {
				progress = nil
			}
			o.ProgressLines = !isTerminal(progress)
			if err := loadgen.Preflight(ctx, o); err != nil {
				var pe *loadgen.PreflightError
				if errors.As(err, &pe) {
					return fmt.Errorf("%s (the one request sent before the run; the run was not started)", explainPreflight(pe, o))
				}
				return err
			}
			rep, err := loadgen.Run(ctx, o, progress)
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), rep)
			if rep.Sent > 0 && rep.Errors == rep.Sent {
				// Nothing was measured: say so in the exit status, for
				// scripts and CI, as well as in the report.
				return fmt.Errorf("every one of the %d requests failed (see the report's errors)", rep.Sent)
			}
			if rep.HasExpected && rep.Degraded > 0 {
				// The deny ratio then mixes the fallback's decisions with
				// the shared limiter's: comparing it with an exact
				// limiter's would pass or fail for the wrong reason.
				return fmt.Errorf("%d of the %d answers were degraded (taken by the fallback, not the shared count): the deny ratio does not measure the limit expected", rep.Degraded, rep.Allowed+rep.Denied)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	addGCFlag(fl, &gcFloor)
	fl.StringVar(&o.Target, "target", "http://127.0.0.1:8080", "service URL: http://host:port or grpc://host:port (https, grpcs: over TLS, see --tls-*)")
	clientTLS.add(fl)
	fl.StringVar(&mode, "mode", "", "API: http (POST /v1/check), grpc (ShouldRateLimit) or envoy-json (POST /json); default from the --target scheme")
	fl.Float64Var(&o.Rate, "rate", 0, "arrival rate in requests per second (0: closed loop, as fast as the workers go)")
	fl.IntVar(&o.Concurrency, "concurrency", 10, "workers (requests in flight at most)")
	fl.DurationVar(&o.Duration, "duration", 10*time.Second, "how long to send requests (none is sent after it: with --rate, arrivals still queued then count as dropped)")
	fl.Int64Var(&o.MaxRequests, "requests", 0, "stop after this many requests (0: no limit)")
	fl.IntVar(&o.Identities, "identities", 1, "distinct identities, used round robin, named PREFIX0, PREFIX1... (see --identity-prefix)")
	fl.StringVar(&o.IdentityPrefix, "identity-prefix", "", "start of every identity's name (default: lg, 8 random hex digits and -, so that each run starts on fresh counters); give the same to several runs, or to one loadtest per instance of a fleet, to have them share identities")
	fl.StringVar(&o.IdentityKey, "identity-key", "user", "identity dimension (http) or descriptor key (grpc, envoy-json)")
	fl.StringVar(&o.Policy, "policy", "api", "policy name (HTTP)")
	fl.StringVar(&o.Domain, "domain", "api", "domain (grpc and envoy-json)")
	fl.Int64Var(&o.Cost, "cost", 1, fmt.Sprintf("cost of each request: 1..%d over HTTP, 1..%d over Envoy's APIs (hits_addend is a uint32)", loadgen.MaxCost(loadgen.HTTP), loadgen.MaxCost(loadgen.GRPC)))
	fl.IntVar(&o.Connections, "connections", 0, fmt.Sprintf("gRPC connections the workers share (0: one per %d workers)", loadgen.WorkersPerConnection))
	fl.StringVar(&grpcClient, "grpc-client", "raw", "gRPC client: raw (the load generator's own HTTP/2 client, cheapest) or grpc-go")
	fl.DurationVar(&o.Timeout, "timeout", 5*time.Second, "how long a request may wait for its answer before it counts as an error")
	fl.StringVar(&expectAlg, "expect-algorithm", "", "algorithm of the limit each identity has, for the expected deny ratio (not quota: see --expected-deny-ratio)")
	fl.Int64Var(&expectLimit, "expect-limit", 0, "limit each identity has (at least 1)")
	fl.StringVar(&expectWin, "expect-window", "", "window of that limit (e.g. 1m)")
	fl.Int64Var(&expBurst, "expect-burst", 0, "burst of that limit (bucket algorithms)")
	fl.Float64Var(&o.ExpectedDenyRatio, "expected-deny-ratio", 0, "expected share of denials (0..1), instead of --expect-*")
	fl.BoolVar(&quiet, "quiet", false, "no progress lines")
	return cmd
}

// checkLoadtestFlags refuses, naming the flag, values loadgen would
// otherwise take for its defaults (0) or refuse without the flag's name,
// and flags set explicitly that the target's API does not use.
func checkLoadtestFlags(cmd *cobra.Command, o loadgen.Options) error {
	// An empty string is loadgen's "default": given explicitly, it would
	// send the default's name instead of the empty one asked for.
	for _, name := range []string{"identity-key", "policy", "domain", "mode", "grpc-client"} {
		if f := cmd.Flags().Lookup(name); f.Changed && f.Value.String() == "" {
			return fmt.Errorf("--%s \"\": want a value (leave the flag out for its default: %s)", name, emptyDefault(f.DefValue))
		}
	}
	mode, err := loadgen.ModeOf(o.Target, o.Mode)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name    string
		applies bool
		why     string
	}{
		{"connections", mode == loadgen.GRPC, "gRPC targets only (HTTP workers each keep their own connection)"},
		{"grpc-client", mode == loadgen.GRPC, "gRPC targets only (grpc:// or grpcs://)"},
		{"domain", mode != loadgen.HTTP, "gRPC and envoy-json targets only (the HTTP API takes --policy)"},
		{"policy", mode == loadgen.HTTP, "the HTTP API only (gRPC and envoy-json take --domain)"},
	} {
		if cmd.Flags().Changed(f.name) && !f.applies {
			return fmt.Errorf("--%s applies to %s", f.name, f.why)
		}
	}
	for _, c := range []struct {
		flag string
		n    int64
	}{{"--concurrency", int64(o.Concurrency)}, {"--identities", int64(o.Identities)}, {"--cost", o.Cost}} {
		if c.n < 1 {
			return fmt.Errorf("%s %d: want at least 1", c.flag, c.n)
		}
	}
	if o.Cost > loadgen.MaxCost(mode) {
		if mode == loadgen.HTTP {
			return fmt.Errorf("--cost %d: out of range 1..%d (the HTTP API's largest cost)", o.Cost, loadgen.MaxCost(mode))
		}
		return fmt.Errorf("--cost %d: out of range 1..%d over Envoy's APIs (the cost is sent as hits_addend, a uint32; the HTTP API takes up to %d)", o.Cost, loadgen.MaxCost(mode), loadgen.MaxCost(loadgen.HTTP))
	}
	if o.Connections < 0 {
		return fmt.Errorf("--connections %d: want 0 (one per %d workers) or 1 up to --concurrency", o.Connections, loadgen.WorkersPerConnection)
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout %v: want a positive duration", o.Timeout)
	}
	return nil
}

// emptyDefault describes a flag's default value for a message.
func emptyDefault(def string) string {
	if def == "" {
		return "from the --target scheme"
	}
	return def
}

// explainPreflight says why the request sent before a run failed, as a
// new user needs it: what is wrong and the flag that sets it.
func explainPreflight(e *loadgen.PreflightError, o loadgen.Options) string {
	switch {
	case e.Unreachable:
		return fmt.Sprintf("nothing answers at --target %s: %v; is the service running, and is this its address?", e.Target, e.Err)
	case e.NotHTTP2:
		return fmt.Sprintf("%s does not speak HTTP/2, as a gRPC service does (%v); is --target the service's gRPC address (serve's --grpc-addr), or an HTTP one (http://)?", e.Target, e.Err)
	case e.GRPCCode == codes.InvalidArgument && strings.Contains(e.Detail, "unknown domain"):
		return fmt.Sprintf("unknown domain %q: the service's Envoy configuration has none by that name; set --domain", domainOf(o))
	case e.GRPCCode == codes.InvalidArgument:
		return fmt.Sprintf("the service refused the request as invalid: %s; check --domain, --identity-key and --cost", e.Detail)
	case e.GRPCCode == codes.Unimplemented:
		return fmt.Sprintf("%s does not serve Envoy's rate limit gRPC API (ShouldRateLimit: %s); is --target the service's gRPC address (serve's --grpc-addr)?", e.Target, e.Detail)
	case e.GRPCCode != codes.OK:
		return fmt.Sprintf("the service refused the call: %v: %s", e.GRPCCode, e.Detail)
	case strings.HasSuffix(e.ProblemType, ":unknown-policy"):
		return fmt.Sprintf("HTTP %d: %s; set --policy", e.HTTPStatus, e.Detail)
	case e.HTTPStatus == http.StatusNotFound && e.Mode == loadgen.EnvoyJSON:
		return fmt.Sprintf("HTTP 404 for POST /json: %s is not an Envoy JSON API (envoy-compat's or envoyproxy/ratelimit's HTTP address); floodgate serve's HTTP API is --mode http", e.Target)
	case e.HTTPStatus == http.StatusNotFound:
		return fmt.Sprintf("HTTP 404 for POST /v1/check: %s is not floodgate serve's HTTP API (its --addr); for envoy-compat's or envoyproxy/ratelimit's, give --mode envoy-json", e.Target)
	}
	return fmt.Sprintf("the service refused the request: HTTP %d: %s", e.HTTPStatus, e.Detail)
}

// domainOf returns the domain a run of o sends.
func domainOf(o loadgen.Options) string {
	if o.Domain == "" {
		return "api"
	}
	return o.Domain
}
