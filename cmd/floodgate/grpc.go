package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/envoyrls"
	"github.com/floodgate-rl/floodgate/internal/connlimit"
	"github.com/floodgate-rl/floodgate/internal/ratelog"
	"github.com/floodgate-rl/floodgate/internal/rlswire"
	"github.com/floodgate-rl/floodgate/internal/servelog"
	"github.com/floodgate-rl/floodgate/metrics"
	"github.com/floodgate-rl/floodgate/server"
)

// gRPCTuning names the flags that tune the gRPC listener only: without
// --grpc-addr they would change nothing, so serve refuses them, as it
// does the gRPC API's flags.
var gRPCTuning = []string{"grpc-stream-workers", "grpc-max-connection-age", "grpc-max-connection-age-grace"}

// envoyReloader loads the --envoy-config files and directories, or
// returns nil when none are given.
func envoyReloader(f serveFlags, log *slog.Logger, reg prometheus.Registerer) (*config.EnvoyReloader, error) {
	switch {
	case f.grpcAddr == "" && len(f.envoyConfig) > 0:
		return nil, errors.New("--envoy-config needs --grpc-addr")
	case f.grpcAddr != "" && len(f.envoyConfig) == 0:
		return nil, errors.New("--grpc-addr needs --envoy-config (descriptors in envoyproxy/ratelimit's YAML format)")
	case f.grpcAddr == "":
		// The flags that only shape the gRPC API are refused without it,
		// rather than silently ignored.
		for _, g := range []struct {
			name string
			set  bool
		}{{"--grpc-reflection", f.sec.grpcReflection}, {"--envoy-response-headers", f.envoyHeaders}, {"--envoy-count-each-descriptor", f.envoyEach}} {
			if g.set {
				return nil, fmt.Errorf("%s needs --grpc-addr (and --envoy-config)", g.name)
			}
		}
		if len(f.grpcTuned) > 0 {
			return nil, fmt.Errorf("%s needs --grpc-addr (and --envoy-config): it tunes the gRPC listener", f.grpcTuned[0])
		}
		return nil, nil
	}
	er, err := config.NewEnvoyReloader(f.envoyConfig, config.ReloaderOptions{Logger: log, Registerer: reg})
	if l := located(err); l != err {
		return nil, l // file:line:column: ..., as --config's errors
	}
	if err != nil {
		return nil, fmt.Errorf("--envoy-config: %w", err)
	}
	return er, nil
}

// startGRPC serves Envoy's rate limit API on --grpc-addr when it is set,
// under the descriptors envoy holds (reloaded live), each request's store
// calls bounded by --decision-timeout as an HTTP check's. It returns
// close, which starts a graceful stop (health NOT_SERVING, the listener
// closed at once, GOAWAY sent on every connection, the calls in flight
// left to finish) and returns without waiting, and stop, which closes
// first if nothing has, then waits for the calls in flight for up to
// --drain-timeout from its own call and cuts what is left. serve closes
// it when its HTTP listener stops accepting, at the end of
// --shutdown-delay, and stops it after the HTTP drain.
// Decisions are stamped with the limiter's clock (disciplined to Redis's
// with --clock-sync). The HTTP API's server srv counts the answers a
// failure mode took (floodgate_degraded_responses_total), counts and
// logs the decisions that failed (floodgate_decision_errors_total, the
// "decision failed" log line), as it does its own, and counts the calls
// refused (floodgate_grpc_rejected_total); decided counts the
// decisions (see countGRPCDecision). Its connections take places in
// conns, the budget --addr's share (nil: none), half of it at most.
func startGRPC(f serveFlags, lim *floodgate.Limiter, srv *server.Server, decided *metrics.Metrics, envoy *config.EnvoyReloader, conns *connlimit.Limit, log *slog.Logger) (closeGRPC, stop func(), err error) {
	if envoy == nil {
		return func() {}, func() {}, nil
	}
	svc, err := envoyrls.NewService(lim, envoy.Load, envoyrls.Options{ResponseHeaders: f.envoyHeaders, CountEachDescriptor: f.envoyEach,
		OnDegraded: srv.CountDegraded, OnError: srv.DecisionFailed, OnRejected: srv.CountGRPCRejected, Timeout: f.decisionTimeout,
		Observe: func(o envoyrls.Observation) { countGRPCDecision(decided, o) }})
	if err != nil {
		return nil, nil, err
	}
	gopts, err := f.sec.grpcServerOptions()
	if err != nil {
		return nil, nil, err
	}
	// A connection must finish its TLS and HTTP/2 handshakes within
	// --read-timeout, as an HTTP request must arrive whole (gRPC's
	// default is 120 s: idle sockets held that long run the process out
	// of file descriptors).
	setup := f.readTimeout
	if setup == 0 {
		setup = 5 * time.Second // server.Options.ReadTimeout's default
	}
	gopts = append(gopts, grpc.ConnectionTimeout(setup))
	gopts = append(gopts, rlswire.ServerOptions(envoyrls.MaxRequestDescriptors)...)
	ln, err := listenTCP(f.grpcAddr, "--grpc-addr")
	if err != nil {
		return nil, nil, err
	}
	if conns != nil {
		// gRPC tells no idle connections (its own close after 5 idle
		// minutes, grpcServerOptions): they are never closed to make
		// room, so they hold half the budget at most, and a client
		// holding connections open (300 that sent the HTTP/2 preface
		// and nothing more held all 256 places) leaves --addr the other
		// half. Wrapped, the connection is no *net.TCPConn, and grpc-go
		// sets no TCP_USER_TIMEOUT on it (keepalive pings still find a
		// dead peer).
		ln = conns.Listener(ln, "grpc", max(conns.Max()/2, 1))
	}
	// grpc-go retries a failed accept without a word: out of file
	// descriptors, the log now says so, once per 10 s.
	ln = servelog.Listener(ln, ratelog.New(log, 10*time.Second))
	gs := grpc.NewServer(gopts...)
	svc.Register(gs)
	gh := health.NewServer()
	watchers := make(chan struct{}) // closed at shutdown: ends the Watch streams
	healthpb.RegisterHealthServer(gs, healthService{gh, watchers})
	if f.sec.grpcReflection {
		reflection.Register(gs) // so grpcurl and friends can list and call the service
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := gs.Serve(ln); err != nil {
			log.Error("gRPC server stopped", "error", err)
		}
	}()
	stopHealth := followServing(gh, srv)
	log.Info("floodgate gRPC (Envoy rate limit service) listening", "addr", ln.Addr().String(),
		"envoy_config", envoy.Files(), "domains", envoy.Load().Domains())
	stopped := make(chan struct{})
	var closeOnce sync.Once
	closeGRPC = func() {
		closeOnce.Do(func() {
			stopHealth()
			gh.Shutdown() // NOT_SERVING for every service while the calls drain
			close(watchers)
			// GracefulStop closes the listener at once and sends GOAWAY,
			// then waits for the calls in flight.
			go func() { gs.GracefulStop(); close(stopped) }()
		})
	}
	return closeGRPC, func() {
		closeGRPC()
		select {
		case <-stopped:
		case <-time.After(f.drainTimeout):
			gs.Stop()
		}
		<-done
	}, nil
}

// healthService is grpc-go's health server whose Watch streams end at
// shutdown (once they have said NOT_SERVING): GracefulStop waits for every
// stream, and a client watching health (grpc-go's client-side health
// checking does) held the shutdown for the whole --drain-timeout.
type healthService struct {
	*health.Server
	shutdown <-chan struct{}
}

// Watch is health.Server's Watch under a context that also ends at
// shutdown.
func (h healthService) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	go func() {
		select {
		case <-h.shutdown:
			cancel()
		case <-ctx.Done():
		}
	}()
	return h.Server.Watch(req, watchStream{stream, ctx})
}

// watchStream is a Watch stream with another context.
type watchStream struct {
	healthpb.Health_WatchServer
	ctx context.Context
}

func (w watchStream) Context() context.Context { return w.ctx }

// healthServices are the names serve's gRPC health service answers for,
// besides "" (the whole server): envoyproxy/ratelimit's ("ratelimit"),
// so that its probes keep working after a switch, and the rate limit
// service's full name.
var healthServices = []string{"", "ratelimit", rlspb.RateLimitService_ServiceDesc.ServiceName}

// healthEvery is how often serve's gRPC health status is brought in line
// with its readiness.
const healthEvery = time.Second

// followServing sets gh's status for healthServices from srv.Serving (what
// GET /readyz?degraded=ok answers) now and every healthEvery, until the
// returned function is called: SERVING while serve takes and decides
// requests, degraded ones included; NOT_SERVING while it drains or cannot
// decide (--fallback off with Redis down).
func followServing(gh *health.Server, srv *server.Server) (stop func()) {
	set := func() {
		ctx, cancel := context.WithTimeout(context.Background(), healthEvery)
		defer cancel()
		st := healthpb.HealthCheckResponse_SERVING
		if srv.Serving(ctx) != nil {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		for _, name := range healthServices {
			gh.SetServingStatus(name, st)
		}
	}
	set()
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(healthEvery)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				set()
			}
		}
	}()
	return func() { close(quit); <-done }
}

// grpcRoute is the route label of the decisions of the gRPC API: its
// method, as the HTTP API's route is its endpoint.
const grpcRoute = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// countGRPCDecision counts one descriptor of a gRPC answer in
// rate_limit_allowed_total or rate_limit_denied_total, under the
// descriptor's policy, route grpcRoute and no tier: denied when its own
// limit refused it (not in shadow mode), allowed when the request was
// admitted. A descriptor within its limit whose request another descriptor
// refused is not counted (the request was not admitted, and not by it).
// A denied one's identity goes to the top-K as "<policy>:<identity>".
func countGRPCDecision(m *metrics.Metrics, o envoyrls.Observation) {
	switch {
	case o.Code == rlspb.RateLimitResponse_OVER_LIMIT && !o.Shadow:
		m.Decision(metrics.Labels{Policy: o.Policy, Route: grpcRoute}, o.Policy+":"+o.Identity, false)
	case o.Overall == rlspb.RateLimitResponse_OK:
		m.Decision(metrics.Labels{Policy: o.Policy, Route: grpcRoute}, "", true)
	}
}
