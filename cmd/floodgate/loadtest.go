package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
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
		tolerance             float64
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
compare. --timeout is measured here and not sent; --grpc-deadline sends
each gRPC request with a deadline, as Envoy sends its filter's timeout
(20ms by default), for the service to end its decision in time.
--tls-ca-file, --tls-cert-file and --tls-key-file set the TLS of
https:// and grpcs:// targets (a service run with --tls-client-ca-file
needs the certificate). A flag the target does not use is refused when
set: --policy but for the HTTP API, --domain for it, --grpc-client,
--grpc-deadline and --connections but for gRPC, --tls-* but for
https:// and grpcs://.

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

With --expect-*, the expected share is computed over the answered
requests (allowed or denied), each at the time it was sent, as the
observed share is: failed requests are in neither. With an expectation,
a share denied more than --tolerance percentage points (default 5) from
the expected one fails the run, the report printed all the same: the
service did not apply the limit expected (an over-admitting limiter, or
an expectation that does not describe it).

With --rate, arrivals wait for a free worker in a queue of --concurrency
arrivals; one that finds every worker busy and the queue full (at any
time of the run), or still queued when --duration ends, or due before
it but not yet queued then (a generator on a loaded machine falling
behind), is dropped: never sent nor timed, and counted on the report's
dropped line, so that the requests and the arrivals dropped add up to
the arrivals scheduled. Latencies are
of the answered requests, from each one's scheduled time; when more than
1% of the arrivals were dropped, the report warns that the service could
not keep up (or the generator lacked workers) and that the percentiles
understate the queueing.

A worker whose request got no answer for a reason of transport (the
connection refused, reset or closed, TLS failed) waits before its next:
10ms, doubling after each such failure in a row up to 1s, until an
answer. The report gives the rate achieved over the requests sent and
over those answered, per second from the start to the last answer; with
--rate, of the time the schedule spans when that is longer (--duration,
or --requests/--rate when shorter; not when interrupted): 2 requests at
--rate 0.5 for --duration 3s are 0.667 req/s, "over the 3s of the
schedule", not 1 req/s over the 2s to the last answer.

Before the run, one request is sent (for identity PREFIXpreflight-N, N
a random number below 10^9, which no run's requests use, this one's or
another's of the same --identity-prefix; it is not counted in the report
or in --requests, and is sent apart from --rate's schedule). When it fails in a way every request of the run
would (nothing listens at --target; the connection reset or closed
unanswered, or TLS failed, as for a --target of the wrong scheme or port
or an untrusted certificate; an HTTP 4xx other than 429, such as an
unknown --policy; gRPC INVALID_ARGUMENT, such as an unknown --domain), the
run is not started: loadtest exits 1 saying why. An answer allowed or
denied, or another failure (a timeout, a 503 while the service's Redis is
down), starts the run. An Envoy JSON API (--mode envoy-json) answers 400
to a failure of its Redis too, so that one does not: the message says so.

Ctrl-C (SIGINT) or SIGTERM during the run stops it: no request is sent
after it, those in flight are given up to 1s (at most --timeout) to be
answered, and the report of what ran is printed, marked "interrupted
after ... of ...".

Progress goes to stderr once a second (--quiet: none): one line rewritten
in place on a terminal, a line of its own each time otherwise (a log);
its req/s is the rate since the line before ("(last 1.0s)"), the line at
the end's the report's achieved rate ("(average)"; "(average over the
schedule's 3.0s)" for an open-loop run whose last answer came earlier).

Exit status 1 when the run could not start (a bad flag, or the request
before it refused: no report), when any request failed (the report's
errors), or when an expectation was given and some answers were
degraded or the share denied is more than --tolerance points from the
expected one (in these three, the report is printed all the same); 130 when
interrupted by SIGINT, 143 by SIGTERM (128 plus the signal's number, as
shells report it), after the report.

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
			o.HasExpectedDenyRatio = fl.Changed("expected-deny-ratio")
			if fl.Changed("expect-algorithm") || fl.Changed("expect-limit") || fl.Changed("expect-window") || fl.Changed("expect-burst") {
				for _, name := range []string{"expect-algorithm", "expect-limit", "expect-window"} {
					if !fl.Changed(name) {
						return fmt.Errorf("--%s is missing: --expect-algorithm, --expect-limit and --expect-window describe the limit together", name)
					}
				}
				if expectLimit < 1 {
					return fmt.Errorf("--expect-limit %d: out of range 1..%d", expectLimit, int64(floodgate.MaxLimit))
				}
				if o.HasExpectedDenyRatio {
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
			if fl.Changed("tolerance") && !o.HasExpectedDenyRatio && o.Expect == (floodgate.Policy{}) {
				return errors.New("--tolerance applies with an expectation only: give --expect-* or --expected-deny-ratio")
			}
			stopGC, err := startGC(gcFloor)
			if err != nil {
				return err
			}
			defer stopGC()
			ctx, caught, stop := notifyInterrupt(cmd.Context())
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
				if ctx.Err() != nil && cmd.Context().Err() == nil {
					return interrupted(caught(), "before the run started: nothing was sent")
				}
				return err
			}
			rep, err := loadgen.Run(ctx, o, progress)
			if err != nil && !rep.Interrupted {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), rep)
			if rep.Interrupted {
				return interrupted(caught(), fmt.Sprintf("after %.1fs of %v (the report covers what ran)", rep.Elapsed.Seconds(), o.Duration))
			}
			if rep.Sent > 0 && rep.Errors == rep.Sent {
				// Nothing was measured: say so in the exit status, for
				// scripts and CI, as well as in the report.
				return fmt.Errorf("every one of the %d requests failed (see the report's errors)", rep.Sent)
			}
			if rep.Errors > 0 {
				// The answers measured are not all that was asked: a
				// service restarting mid-run, say, is no clean run.
				return fmt.Errorf("%d of the %d requests failed (see the report's errors): not a clean run", rep.Errors, rep.Sent)
			}
			if rep.HasExpected && rep.Degraded > 0 {
				// The deny ratio then mixes the fallback's decisions with
				// the shared limiter's: comparing it with an exact
				// limiter's would pass or fail for the wrong reason.
				return fmt.Errorf("%d of the %d answers were degraded (taken by the fallback, not the shared count): the deny ratio does not measure the limit expected", rep.Degraded, rep.Allowed+rep.Denied)
			}
			if gap := 100 * (rep.DenyRatio - rep.ExpectedDenyRatio); rep.HasExpected && math.Abs(gap) > tolerance {
				return fmt.Errorf("the share denied, %.2f%%, is %.2f points from the expected %.2f%%, beyond --tolerance %v points: the service did not apply the limit expected", 100*rep.DenyRatio, math.Abs(gap), 100*rep.ExpectedDenyRatio, tolerance)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	addGCFlag(fl, &gcFloor)
	fl.StringVar(&o.Target, "target", "http://127.0.0.1:8080", "service URL: http://host:port or grpc://host:port (https, grpcs: over TLS, see --tls-*)")
	clientTLS.add(fl)
	fl.StringVar(&mode, "mode", "", "API: http (POST /v1/check), grpc (ShouldRateLimit) or envoy-json (POST /json); default from the --target scheme")
	fl.Float64Var(&o.Rate, "rate", 0, fmt.Sprintf("arrival rate in requests per second, at most %d (0: closed loop, as fast as the workers go)", loadgen.MaxRate))
	fl.IntVar(&o.Concurrency, "concurrency", 10, "workers (requests in flight at most); with --rate also the length of the queue of arrivals waiting for a worker (an arrival finding it full is dropped)")
	fl.DurationVar(&o.Duration, "duration", 10*time.Second, fmt.Sprintf("how long to send requests, 1ms..%v (none is sent after it: with --rate, arrivals still queued then count as dropped); the requests in flight then are waited for, so elapsed may exceed it by up to --timeout", loadgen.MaxDuration))
	fl.Int64Var(&o.MaxRequests, "requests", 0, "stop after this many requests (0: no limit)")
	fl.IntVar(&o.Identities, "identities", 1, "distinct identities, used round robin, named PREFIX0, PREFIX1... (see --identity-prefix)")
	fl.StringVar(&o.IdentityPrefix, "identity-prefix", "", "start of every identity's name (default: lg, 8 random hex digits and -, so that each run starts on fresh counters); give the same to several runs, or to one loadtest per instance of a fleet, to have them share identities (the request sent before each run is for PREFIXpreflight-N, which none of them uses)")
	fl.StringVar(&o.IdentityKey, "identity-key", "user", "identity dimension (http) or descriptor key (grpc, envoy-json)")
	fl.StringVar(&o.Policy, "policy", "api", "policy name (HTTP)")
	fl.StringVar(&o.Domain, "domain", "api", "domain (grpc and envoy-json)")
	fl.Int64Var(&o.Cost, "cost", 1, fmt.Sprintf("cost of each request: 1..%d over HTTP, 1..%d over Envoy's APIs (hits_addend is a uint32)", loadgen.MaxCost(loadgen.HTTP), loadgen.MaxCost(loadgen.GRPC)))
	fl.IntVar(&o.Connections, "connections", 0, fmt.Sprintf("gRPC connections the workers share (0: one per %d workers)", loadgen.WorkersPerConnection))
	fl.StringVar(&grpcClient, "grpc-client", "raw", "gRPC client: raw (the load generator's own HTTP/2 client, cheapest) or grpc-go")
	fl.DurationVar(&o.Timeout, "timeout", 5*time.Second, "how long a request may wait for its answer before it counts as an error (measured here; the service is not told: see --grpc-deadline)")
	fl.DurationVar(&o.GRPCDeadline, "grpc-deadline", 0, "send each gRPC request with this deadline (grpc-timeout), as Envoy sends its filter's timeout (20ms by default), so that the service ends its decision in time (0: none)")
	fl.StringVar(&expectAlg, "expect-algorithm", "", "algorithm of the limit each identity has, for the expected deny ratio (not quota: see --expected-deny-ratio)")
	fl.Int64Var(&expectLimit, "expect-limit", 0, "limit each identity has (at least 1)")
	fl.StringVar(&expectWin, "expect-window", "", "window of that limit (e.g. 1m)")
	fl.Int64Var(&expBurst, "expect-burst", 0, "burst of that limit (token_bucket, gcra; 0: the limit, the service's default too)")
	fl.Float64Var(&o.ExpectedDenyRatio, "expected-deny-ratio", 0, "expected share of denials (0..1), instead of --expect-*")
	fl.Float64Var(&tolerance, "tolerance", 5, "with an expectation, the percentage points the share denied may differ from the expected one before the run fails (exit 1), 0..100")
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
		{"grpc-deadline", mode == loadgen.GRPC, "gRPC targets only (grpc:// or grpcs://)"},
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
	if math.IsNaN(o.Rate) || o.Rate < 0 || o.Rate > loadgen.MaxRate {
		return fmt.Errorf("--rate %v: out of range 0..%d (0: closed loop)", o.Rate, loadgen.MaxRate)
	}
	if o.Duration < time.Millisecond || o.Duration > loadgen.MaxDuration {
		return fmt.Errorf("--duration %v: out of range 1ms..%v", o.Duration, loadgen.MaxDuration)
	}
	if o.MaxRequests < 0 {
		return fmt.Errorf("--requests %d: want 0 (no limit) or more", o.MaxRequests)
	}
	if t, err := cmd.Flags().GetFloat64("tolerance"); err == nil && (math.IsNaN(t) || t < 0 || t > 100) {
		return fmt.Errorf("--tolerance %v: out of range 0..100 (percentage points)", t)
	}
	if f := cmd.Flags().Lookup("expected-deny-ratio"); f.Changed && (math.IsNaN(o.ExpectedDenyRatio) || o.ExpectedDenyRatio < 0 || o.ExpectedDenyRatio > 1) {
		return fmt.Errorf("--expected-deny-ratio %v: out of range 0..1", o.ExpectedDenyRatio)
	}
	return nil
}

// notifyInterrupt returns a context canceled at the first SIGINT or
// SIGTERM, a function returning the signal caught (nil when none), and
// one to stop listening.
func notifyInterrupt(parent context.Context) (context.Context, func() os.Signal, func()) {
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	var (
		mu     sync.Mutex
		caught os.Signal
	)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-sigs:
			mu.Lock()
			caught = sig
			mu.Unlock()
			cancel()
		case <-done:
		}
	}()
	return ctx, func() os.Signal {
			mu.Lock()
			defer mu.Unlock()
			return caught
		}, func() {
			signal.Stop(sigs)
			close(done)
			cancel()
		}
}

// interrupted is the error of a run interrupted by sig (nil: its
// context ended otherwise): exit status 128 plus the signal's number, as
// a shell reports a process the signal ended, else 1.
func interrupted(sig os.Signal, what string) error {
	err := fmt.Errorf("interrupted %s", what)
	if s, ok := sig.(syscall.Signal); ok {
		return &exitError{code: 128 + int(s), err: fmt.Errorf("interrupted by %s %s", signalName(s), what)}
	}
	return err
}

// signalName names the signals loadtest catches as shells and kill(1)
// do, SIGINT and SIGTERM (Go's String says "interrupt" and "terminated",
// which read "interrupted by interrupt"); another by its number.
func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return fmt.Sprintf("signal %d", int(s))
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
	case e.Transport:
		return fmt.Sprintf("no answer from --target %s: %v; %s", e.Target, e.Err, transportHint("--target", e.Target, e.Err, o.TLS != nil && (len(o.TLS.Certificates) > 0 || o.TLS.GetClientCertificate != nil)))
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
	case e.HTTPStatus == http.StatusBadRequest && strings.HasPrefix(e.Target, "http://") && strings.Contains(e.Detail, "HTTP request to an HTTPS server"):
		// Go's net/http server answers plain HTTP on a TLS port so.
		return fmt.Sprintf("HTTP 400: %s: the service serves HTTPS at this address; use https://%s (with --tls-ca-file for a private authority)", e.Detail, strings.TrimPrefix(e.Target, "http://"))
	case e.HTTPStatus == http.StatusBadRequest && e.Mode == loadgen.EnvoyJSON:
		// envoy-compat, like envoyproxy/ratelimit, answers 400 to any
		// failure on /json, its Redis's included.
		return fmt.Sprintf("HTTP 400: %s; an Envoy JSON API answers 400 to any failure of its own, such as its Redis being down or refusing it, as to a request it cannot read: its log says which", e.Detail)
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

// transportHint says what likely made a request to target, given by
// flag (loadtest's --target, check's --addr), get no answer but err, and
// the flag or scheme that fixes it; certGiven is whether a client
// certificate was given (--tls-cert-file). loadtest and check share it.
func transportHint(flag, target string, err error, certGiven bool) string {
	scheme, host := "", ""
	if u, perr := url.Parse(target); perr == nil {
		scheme, host = u.Scheme, u.Host
	}
	tlsScheme := scheme == "https" || scheme == "grpcs"
	plain := map[string]string{"https": "http", "grpcs": "grpc"}[scheme]
	secure := map[string]string{"http": "https", "grpc": "grpcs"}[scheme]
	var (
		unknown x509.UnknownAuthorityError
		cv      *tls.CertificateVerificationError
		rh      tls.RecordHeaderError
	)
	msg := err.Error()
	switch {
	case errors.As(err, &unknown) || strings.Contains(msg, "certificate signed by unknown authority"):
		return "the service's certificate is signed by an authority this machine does not trust: give its CA with --tls-ca-file"
	case errors.As(err, &cv):
		return "the service's certificate does not verify: check " + flag + "'s host name and --tls-ca-file"
	case certGiven && (strings.Contains(msg, "certificate required") || strings.Contains(msg, "bad certificate")):
		return "the service refused the client certificate given (--tls-cert-file): give one that its --tls-client-ca-file trusts, for client authentication, and within its dates"
	case strings.Contains(msg, "certificate required") || strings.Contains(msg, "bad certificate"):
		return "the service requires a client certificate (its --tls-client-ca-file): give --tls-cert-file and --tls-key-file"
	case tlsScheme && (errors.As(err, &rh) || strings.Contains(msg, "server gave HTTP response to HTTPS client") || strings.Contains(msg, "first record does not look like a TLS handshake")):
		return fmt.Sprintf("the service does not speak TLS at this address: use %s://", plain)
	case scheme == "grpc" && errors.Is(err, io.EOF):
		return "the connection was closed before an answer: a TLS listener (use grpcs://), or a service shutting down or restarting (try again)"
	case scheme == "http":
		hint := "the connection was closed without an answer, as a TLS listener does to plain HTTP (serve --tls-cert-file with --http-server fasthttp): if it serves TLS, use " + secure + "://" + host + " (with --tls-ca-file for a private authority); else is " + flag + " the service's HTTP address (serve's --addr)?"
		if flag == "--target" {
			hint += " A gRPC one (--grpc-addr) wants grpc://"
		}
		return hint
	case tlsScheme:
		return "TLS with the service failed: check the scheme, the port and --tls-*"
	}
	return "is " + flag + " the service's gRPC address (serve's --grpc-addr), and plaintext? A TLS one wants grpcs://"
}
