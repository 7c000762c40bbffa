package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/envoycompat"
	"github.com/floodgate-rl/floodgate/internal/clusterslots"
	"github.com/floodgate-rl/floodgate/internal/connlimit"
	"github.com/floodgate-rl/floodgate/internal/connsetup"
	"github.com/floodgate-rl/floodgate/internal/ratelog"
	"github.com/floodgate-rl/floodgate/internal/redisnil"
	"github.com/floodgate-rl/floodgate/internal/regularfile"
	"github.com/floodgate-rl/floodgate/internal/rlswire"
	"github.com/floodgate-rl/floodgate/internal/servelog"
	"github.com/floodgate-rl/floodgate/metrics"
	"github.com/floodgate-rl/floodgate/sentinelfollow"
)

// envoy-compat's listeners bound slow and idle clients, which their
// settings leave open (a /json body sent a byte at a time, or a gRPC
// connection that never sends its preface, held a connection for ever or
// for gRPC's default 120 s): a request, or a gRPC connection's setup, must
// arrive within compatReadTimeout, and an idle HTTP keep-alive connection
// is closed after compatIdleTimeout.
const (
	compatReadTimeout = 10 * time.Second
	compatIdleTimeout = 2 * time.Minute
)

func newEnvoyCompatCmd() *cobra.Command {
	var (
		reload  time.Duration
		gcFloor int
	)
	cmd := &cobra.Command{
		Use:   "envoy-compat",
		Short: "Run as a drop-in for envoyproxy/ratelimit (its environment, ports, config and answers)",
		Long: `Run as a drop-in replacement for envoyproxy/ratelimit: the same
environment variables (REDIS_URL, RUNTIME_ROOT, PORT, GRPC_PORT, ...), the
same ports (HTTP 8080 with /json and /healthcheck, gRPC 8081 with
ShouldRateLimit and gRPC health, debug 6070 with /rlconfig and /metrics),
the same configuration directory layout and format, and the same answers
and Redis counters, so a Deployment of theirs can switch images without
other changes. See docs/envoy.md for every setting.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			stopGC, err := startGC(gcFloor)
			if err != nil {
				return err
			}
			defer stopGC()
			return envoyCompat(cmd.Context(), cmd, os.LookupEnv, reload)
		},
	}
	cmd.Flags().DurationVar(&reload, "reload-interval", defaultReloadInterval, "how often the runtime directory is checked for changes, at least 10ms (0: the default; SIGHUP checks at once)")
	addGCFlag(cmd.Flags(), &gcFloor)
	return cmd
}

func envoyCompat(ctx context.Context, cmd *cobra.Command, lookup func(string) (string, bool), reload time.Duration) error {
	// As serve's --reload-interval: 0 is the default, and the same floor.
	switch {
	case reload < 0:
		return fmt.Errorf("--reload-interval %v: must not be negative", reload)
	case reload == 0:
		reload = defaultReloadInterval
	case reload < minReloadInterval:
		return fmt.Errorf("--reload-interval %v: want at least %v (0: the default, %v); each poll reads the runtime directory, and a shorter one only burns CPU", reload, minReloadInterval, defaultReloadInterval)
	}
	s, err := envoycompat.FromEnv(lookup)
	if err != nil {
		return err
	}
	level := strings.ToLower(s.LogLevel)
	if level == "warning" {
		level = "warn"
	}
	if level == "trace" {
		level = "debug"
	}
	if level == "fatal" || level == "panic" {
		level = "error"
	}
	log, err := newLogger(cmd.ErrOrStderr(), s.LogFormat, level)
	if err != nil {
		return fmt.Errorf("LOG_LEVEL/LOG_FORMAT: %w", err)
	}
	for name, why := range envoycompat.Ignored {
		if v, ok := lookup(name); ok && v != "" {
			log.Warn("setting ignored", "name", name, "why", why)
		}
	}
	for _, a := range s.Adjusted {
		log.Warn("setting taken as envoyproxy/ratelimit takes it", "detail", a)
	}
	// As theirs, a runtime directory that cannot be watched stops the
	// start: a mistyped RUNTIME_SUBDIRECTORY or a missing mount would
	// otherwise answer every request OK without a limit.
	if err := s.RuntimeOf().Check(); err != nil {
		return err
	}
	// The first SIGINT or SIGTERM starts the shutdown; a second one ends
	// the process at once, logged and by that signal, and the same signal
	// delivered twice at once is one request to stop, as in serve.
	ctx, release := notifyStop(ctx, log, "abandoning the drain")
	defer release()

	reg := prometheus.NewRegistry()
	if err := registerRuntime(reg); err != nil {
		return err
	}
	m, err := envoycompat.NewMetrics(reg)
	if err != nil {
		return err
	}
	gh := health.NewServer()
	h := envoycompat.NewHealth(gh, s.HealthyWithAtLeastOneConfigLoaded)

	// go-redis's own lines (a failed dial, a pool's trouble) go to the
	// service's log, in its format, at most one a kind per 10 s.
	redis.SetLogger(newRedisLogger(log, 10*time.Second))
	store, closeStore, err := compatStore(ctx, s, reg, log)
	if err != nil {
		return err
	}
	defer closeStore()
	opts := s.Options()
	opts.Store, opts.Metrics, opts.Log = store, m, log
	svc, err := envoycompat.NewService(opts)
	if err != nil {
		return err
	}
	// SIGHUP loads the runtime directory at once; it never stops the
	// process (the signal's default action).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	now := make(chan struct{})
	rl := &envoycompat.Reloader{Runtime: s.RuntimeOf(), Merge: s.MergeDomainConfig, Service: svc, Metrics: m,
		Health: h, HealthyWithConfig: s.HealthyWithAtLeastOneConfigLoaded, Log: log, Now: now}
	_ = rl.Load() // as theirs: a bad configuration is logged and the service starts without one

	httpAddr, debugAddr, grpcAddr := s.Addresses()
	gs := grpc.NewServer(append(rlswire.ServerOptions(s.MaxDescriptors), // as serve's
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionAge: s.GrpcMaxConnectionAge, MaxConnectionAgeGrace: s.GrpcMaxConnectionAgeGrace,
		}), grpc.NumStreamWorkers(grpcMaxStreams), // as serve's --grpc-stream-workers: no stack growth per request
		grpc.ConnectionTimeout(compatReadTimeout))..., // not gRPC's 120 s for a connection that never sends its preface
	)
	svc.Register(gs)
	healthpb.RegisterHealthServer(gs, gh)
	if s.GrpcReflection {
		// Off by default, as theirs (which never registers it) and serve
		// (--grpc-reflection): it lists every service to anyone who can
		// reach the port.
		reflection.Register(gs)
	}

	network := "tcp"
	if s.GrpcUDS != "" {
		network = "unix"
	}
	// Like theirs, the TCP listeners let another instance listen on the
	// same ports (SO_REUSEPORT, on Linux), sharing new connections.
	lc := net.ListenConfig{Control: reusePort}
	glc := lc
	if network == "unix" {
		glc = net.ListenConfig{}
	}
	gln, err := glc.Listen(ctx, network, grpcAddr)
	if err != nil {
		return fmt.Errorf("gRPC listener %s: %w", grpcAddr, err)
	}
	hln, err := lc.Listen(ctx, "tcp", httpAddr)
	if err != nil {
		gln.Close()
		return fmt.Errorf("HTTP listener %s: %w", httpAddr, err)
	}
	dln, err := lc.Listen(ctx, "tcp", debugAddr)
	if err != nil {
		gln.Close()
		hln.Close()
		return fmt.Errorf("debug listener %s: %w", debugAddr, err)
	}
	// The HTTP and gRPC listeners share a budget of connections, as
	// serve's --addr and --grpc-addr (theirs has none): a flood of idle
	// connections used every descriptor, and every listener, the
	// runtime directory's reads and the Redis dials failed with it.
	conns, err := connBudget(s.MaxConnections, "FLOODGATE_MAX_CONNECTIONS", reg, log)
	if err != nil {
		gln.Close()
		hln.Close()
		dln.Close()
		return fmt.Errorf("FLOODGATE_MAX_CONNECTIONS: %w", err)
	}
	var track func(net.Conn, http.ConnState)
	if conns != nil {
		track = conns.Track
		hln = conns.Listener(hln, "http", 0)
		gln = conns.Listener(gln, "grpc", max(conns.Max()/2, 1)) // gRPC's are never closed for room (see startGRPC)
	}
	// The debug (and Prometheus) listeners each hold a budget of their
	// own out of the reserve, as serve's admin and probes' listeners: a
	// flood of them used every descriptor the budget above leaves.
	sides, err := compatSides(s, conns, reg)
	if err != nil {
		gln.Close()
		hln.Close()
		dln.Close()
		return err
	}
	dln = sides.debug.Listener(dln, "debug", 0)
	// Accept failures (out of descriptors) and net/http's other lines go
	// to the service's log, in its format, at most one a kind per 10 s.
	warn := ratelog.New(log, 10*time.Second)
	gln = servelog.Listener(gln, warn)
	errorLog := servelog.ErrorLog(log, warn)
	servers := []*http.Server{
		compatHTTPServer(svc.HTTPHandler(h), errorLog, track),
		compatHTTPServer(svc.DebugHandler(reg), errorLog, sides.debug.Track),
	}
	listeners := []net.Listener{hln, dln}
	if s.UsePrometheus {
		pln, err := net.Listen("tcp", s.PrometheusAddr)
		if err != nil {
			gln.Close()
			hln.Close()
			dln.Close()
			return fmt.Errorf("PROMETHEUS_ADDR %s: %w", s.PrometheusAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle(s.PrometheusPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		servers = append(servers, compatHTTPServer(mux, errorLog, sides.prometheus.Track))
		listeners = append(listeners, sides.prometheus.Listener(pln, "prometheus", 0))
	}

	// The watchers are waited for at most watchWait once the drains are
	// over, as serve's: a read of the runtime directory that never
	// returns (a hung network mount) is abandoned and logged rather than
	// keeping the process from exiting.
	var wg sync.WaitGroup
	var watchers watchGroup
	wctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		wg.Wait()
		if stuck := watchers.Wait(watchWait); stuck != nil {
			log.Warn("shutting down: abandoning reads that have not returned (a hung network mount?)", "waited", watchWait.String(), "watchers", stuck)
		}
	}()
	watchers.Go("runtime directory "+filepath.Join(s.RuntimeRoot, s.RuntimeSubdirectory), func() { rl.Watch(wctx, reload) })
	wg.Go(func() {
		for {
			select {
			case <-wctx.Done():
				return
			case <-hup:
			}
			log.Info("SIGHUP: loading the runtime directory now", "root", s.RuntimeRoot, "subdirectory", s.RuntimeSubdirectory)
			select {
			case now <- struct{}{}:
			case <-wctx.Done():
				return
			}
		}
	})
	wg.Go(func() { watchStore(wctx, store, h, s.RedisHealthCheckActiveConnection, log) })
	errc := make(chan error, len(servers)+1)
	wg.Go(func() { errc <- gs.Serve(gln) })
	for i := range servers {
		wg.Go(func() {
			if err := servers[i].Serve(listeners[i]); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		})
	}
	log.Info("floodgate envoy-compat listening", append(append([]any{"http", hln.Addr().String(), "grpc", gln.Addr().String(),
		"debug", dln.Addr().String()}, buildAttrs(build)...),
		"backend", s.BackendType, "runtime", s.RuntimeOf(), "max_connections", conns.Max())...)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	h.Set(envoycompat.ComponentSigterm, false)
	log.Info("floodgate envoy-compat stopping")
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	// Every listener closes at once and the drains run side by side: the
	// gRPC listener took new connections (and answered their calls)
	// while an HTTP request drained, for up to the 10 s. Answers written
	// from here on carry Connection: close (net/http does after
	// Shutdown), and GracefulStop sends GOAWAY on the gRPC connections.
	var drains sync.WaitGroup
	for _, srv := range servers {
		drains.Go(func() { _ = srv.Shutdown(sctx) })
	}
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-sctx.Done():
		gs.Stop()
	}
	drains.Wait()
	return runErr
}

// compatHTTPServer returns an http.Server of envoy-compat serving h,
// bounding slow and idle clients (compatReadTimeout, compatIdleTimeout),
// its lines written to errorLog, and its connections' states told to
// track (nil: not told).
func compatHTTPServer(h http.Handler, errorLog *stdlog.Logger, track func(net.Conn, http.ConnState)) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: compatReadTimeout, IdleTimeout: compatIdleTimeout,
		ErrorLog: errorLog, ConnState: track}
}

// watchStore marks the redis health component healthy once the store
// answers a probe (envoycompat.RedisStore.Probe: on a Redis Cluster, once
// at least one primary answers), checking every second until then and
// logging each distinct error once. With active
// (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION) it goes on probing every second
// after that, and the component follows each probe: unhealthy while the
// store does not answer, healthy again at its first answer. Cluster
// primaries failing a probe that another one answered are logged by
// address when the set of them changes, and again every
// downPrimariesRelog while it lasts.
func watchStore(ctx context.Context, store envoycompat.Store, h *envoycompat.Health, active bool, log *slog.Logger) {
	var w storeWatch
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		down, err := probeStore(pctx, store)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if changed, up := w.observe(log, down, err, time.Now()); changed {
			h.Set(envoycompat.ComponentRedis, up)
			if up && !active {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// storeWatch is what watchStore logs from one probe to the next. Its zero
// value is a store not answered yet.
type storeWatch struct {
	last   string // the error logged last, "" when none since the last answer
	up     bool   // the last probe was answered
	everUp bool   // a probe was answered once
	downs  downPrimaries
}

// observe logs the outcome of one probe at now (down and err as
// probeStore returns them) and reports whether the store's health
// changed, and to what.
// outageText is what tells one store error from another for storeWatch:
// its text, with the errors go-redis joins when every sentinel failed
// sorted, as go-redis lists them in the order their answers came (a walk:
// with the three sentinels refusing connections, 12 lines in 12 s, each
// naming them in another order).
func outageText(err error) string {
	s := err.Error()
	const joined = "are unreachable: "
	i := strings.Index(s, joined)
	if i < 0 {
		return s
	}
	i += len(joined)
	parts := strings.Split(s[i:], "\n")
	slices.Sort(parts)
	return s[:i] + strings.Join(parts, "\n")
}

func (w *storeWatch) observe(log *slog.Logger, down []*envoycompat.NodeError, err error, now time.Time) (changed, up bool) {
	if err != nil {
		// No primary answered: the error names them all. The ones still
		// down once some answer again are logged afresh.
		w.downs.forget()
	} else {
		w.downs.log(log, down, now)
	}
	switch {
	case err == nil && !w.up:
		w.up, w.everUp = true, true
		if w.last != "" {
			log.Warn("backend reachable")
		}
		w.last = ""
		return true, true
	case err != nil && w.up:
		w.up = false
		w.last = outageText(err)
		log.Warn("backend not reachable; /healthcheck answers 500 until it is (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION)", "error", err)
		return true, false
	case err != nil && outageText(err) != w.last:
		w.last = outageText(err)
		if w.everUp {
			log.Warn("backend still not reachable; /healthcheck answers 500 until it is", "error", err)
		} else {
			log.Warn("backend not reachable yet; /healthcheck answers 500 until it is", "error", err)
		}
	}
	return false, w.up
}

// probeStore is the health probe of store: RedisStore's Probe, a read of
// every server's counters for any other store.
func probeStore(ctx context.Context, store envoycompat.Store) ([]*envoycompat.NodeError, error) {
	if rs, ok := store.(*envoycompat.RedisStore); ok {
		return rs.Probe(ctx)
	}
	// Both servers, with REDIS_PERSECOND: per-second limits are
	// decided on the second.
	_, err := store.Get(ctx, []*envoycompat.Op{{Key: envoycompat.ProbeKey},
		{Key: envoycompat.ProbeKey, PerSecond: true}})
	return nil, err
}

// downPrimariesRelog is how often a set of Cluster primaries failing the
// health probe is logged again while it does not change.
const downPrimariesRelog = time.Minute

// downPrimaries logs the Cluster primaries failing the health probe
// while the service is healthy (another primary answered).
type downPrimaries struct {
	addrs  string // the set logged last, addresses sorted, comma-separated
	logged time.Time
}

// log logs down when its set of primaries differs from the one logged
// last, or downPrimariesRelog after it; and once when none is down again.
func (d *downPrimaries) log(log *slog.Logger, down []*envoycompat.NodeError, now time.Time) {
	addrs := make([]string, len(down))
	errs := make([]string, len(down))
	slices.SortFunc(down, func(a, b *envoycompat.NodeError) int { return strings.Compare(a.Addr, b.Addr) })
	for i, n := range down {
		addrs[i], errs[i] = n.Addr, n.Error()
	}
	set := strings.Join(addrs, ",")
	switch {
	case set == "" && d.addrs != "":
		log.Warn("every redis cluster primary answers again", "were_down", d.addrs)
	case set != "" && (set != d.addrs || now.Sub(d.logged) >= downPrimariesRelog):
		log.Warn("redis cluster primaries not answering: the decisions on their slots fail, the other primaries' are made; health stays good while one primary answers",
			"down", set, "down_count", len(down), "errors", strings.Join(errs, "; "))
		d.logged = now
	}
	d.addrs = set
}

// forget forgets the set logged last, without a word: while no primary
// answers (the outage logged by its own error), so that the ones still
// down once others answer again are logged at once, not at the next
// downPrimariesRelog.
func (d *downPrimaries) forget() { d.addrs, d.logged = "", time.Time{} }

// compatStore builds the counter store the settings name. A client of a
// Sentinel deployment follows the primary most sentinels name
// (sentinelfollow) until the returned function closes the clients, and
// the sentinels' gauges (metrics.RegisterSentinels, labelled client
// "redis" or "redis_persecond") are registered on reg, unless it is nil.
func compatStore(ctx context.Context, s envoycompat.Settings, reg prometheus.Registerer, log *slog.Logger) (envoycompat.Store, func(), error) {
	if strings.EqualFold(s.BackendType, "memory") {
		return &envoycompat.MemoryStore{}, func() {}, nil
	}
	// The followers outlive the shutdown signal: requests drain after it,
	// and stop only when the clients are closed.
	fctx, stopFollow := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	var clients []redis.UniversalClient
	closeAll := func() {
		stopFollow()
		wg.Wait()
		for _, c := range clients {
			_ = c.Close()
		}
	}
	open := func(r envoycompat.RedisSettings, prefix string) (redis.UniversalClient, error) {
		c, follow, err := compatRedis(r, prefix)
		if err != nil {
			return nil, err
		}
		// A connection refused at Redis's maxclients fails as not sent.
		connsetup.Attach(c)
		clients = append(clients, c)
		if follow != nil {
			if reg != nil {
				if err := metrics.RegisterSentinels(reg, strings.ToLower(prefix), follow.Status); err != nil {
					return nil, err
				}
			}
			wg.Go(func() { follow.Run(fctx, log) })
			// So that the sentinel gauges tell what the sentinels
			// said from the first scrape.
			follow.WaitAsked(fctx)
		}
		return c, nil
	}
	main, err := open(s.Redis, "REDIS")
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	st := &envoycompat.RedisStore{Client: main, Timeout: s.Redis.Timeout, PerSecondTimeout: s.PerSecond.Timeout}
	if s.RedisPerSecond {
		if st.PerSecond, err = open(s.PerSecond, "REDIS_PERSECOND"); err != nil {
			closeAll()
			return nil, nil, err
		}
	}
	return st, closeAll, nil
}

// compatRedis builds a go-redis client from their REDIS_* settings.
func compatRedis(r envoycompat.RedisSettings, prefix string) (redis.UniversalClient, *sentinelfollow.Follower, error) {
	user, pass := splitAuth(r.Auth)
	var tlsCfg *tls.Config
	// A rediss:// URL connects over TLS too: with the REDIS_TLS_* files,
	// not go-redis's defaults (which ignored REDIS_TLS_CACERT).
	if r.TLS || strings.HasPrefix(strings.ToLower(r.URL), "rediss://") {
		var err error
		if tlsCfg, err = compatTLS(r); err != nil {
			return nil, nil, fmt.Errorf("%s_TLS: %w", prefix, err)
		}
	}
	if r.PoolSize <= 0 {
		// 0 was made radix's default by FromEnv; theirs panics on a
		// negative size.
		return nil, nil, fmt.Errorf("%s_POOL_SIZE=%d: want at least 1 (0: %d connections)", prefix, r.PoolSize, envoycompat.DefaultZeroPoolSize)
	}
	urls := strings.Split(r.URL, ",")
	switch strings.ToLower(r.Type) {
	case "single":
		if strings.HasPrefix(r.URL, "redis://") || strings.HasPrefix(r.URL, "rediss://") || strings.HasPrefix(r.URL, "unix://") {
			o, err := redis.ParseURL(r.URL)
			if err != nil {
				// The parser's error quotes the URL, password and all.
				var ue *url.Error
				if errors.As(err, &ue) {
					err = ue.Err
				}
				return nil, nil, fmt.Errorf("%s_URL %s: %w", prefix, config.Redis{URL: r.URL}, err)
			}
			o.PoolSize, o.ContextTimeoutEnabled, o.DialerRetries = r.PoolSize, true, config.DialAttempts
			o.DialTimeout, o.ReadTimeout, o.WriteTimeout = r.Timeout, r.Timeout, r.Timeout
			if tlsCfg != nil {
				o.TLSConfig = tlsCfg
			}
			if r.Auth != "" {
				o.Username, o.Password = user, pass
			}
			return redis.NewClient(o), nil, nil
		}
		network := strings.ToLower(r.SocketType)
		if network != "tcp" && network != "unix" {
			return nil, nil, fmt.Errorf("%s_SOCKET_TYPE=%s: want tcp or unix", prefix, r.SocketType)
		}
		if network == "tcp" {
			// Checked now, as a sentinel or cluster list is: "::1:6379"
			// was dialled, failed ("too many colons in address") and
			// kept /healthcheck at 500 for ever.
			if _, port, err := net.SplitHostPort(r.URL); err != nil || port == "" || strings.ContainsAny(r.URL, "@/") {
				return nil, nil, fmt.Errorf("%s_URL: not host:port%s (or a redis://, rediss:// or unix:// URL; credentials go in %s_AUTH)", prefix, bracketed(r.URL), prefix)
			}
		}
		return redis.NewClient(&redis.Options{Network: network, Addr: r.URL, Username: user, Password: pass,
			TLSConfig: tlsCfg, PoolSize: r.PoolSize, DialTimeout: r.Timeout, ReadTimeout: r.Timeout,
			WriteTimeout: r.Timeout, ContextTimeoutEnabled: true, DialerRetries: config.DialAttempts}), nil, nil
	case "sentinel":
		if len(urls) < 2 {
			return nil, nil, fmt.Errorf("%s_URL: want <master name>,<sentinel1>,...,<sentinelN>", prefix)
		}
		if err := hostPorts(urls[1:], prefix); err != nil {
			return nil, nil, err
		}
		suser, spass := splitAuth(r.SentinelAuth)
		o := &redis.FailoverOptions{MasterName: urls[0], SentinelAddrs: urls[1:],
			SentinelUsername: suser, SentinelPassword: spass, Username: user, Password: pass, TLSConfig: tlsCfg,
			PoolSize: r.PoolSize, DialTimeout: r.Timeout, ReadTimeout: r.Timeout, WriteTimeout: r.Timeout,
			ContextTimeoutEnabled: true, DialerRetries: config.DialAttempts}
		c, follow := sentinelfollow.NewClient(o)
		c.AddHook(redisnil.MasterHook(o.MasterName))
		return c, follow, nil
	case "cluster":
		if err := hostPorts(urls, prefix); err != nil {
			return nil, nil, err
		}
		return clusterslots.NewClusterClient(&redis.ClusterOptions{Addrs: urls, Username: user, Password: pass,
			TLSConfig: tlsCfg, PoolSize: r.PoolSize, DialTimeout: r.Timeout, ReadTimeout: r.Timeout,
			WriteTimeout: r.Timeout, ContextTimeoutEnabled: true, DialerRetries: config.DialAttempts}), nil, nil
	}
	return nil, nil, fmt.Errorf("%s_TYPE=%s: want single, sentinel or cluster", prefix, r.Type)
}

// hostPorts checks that every address of a sentinel or cluster REDIS_URL
// is host:port, as theirs takes them: a URL there (redis://user:pass@...)
// was dialled as an address, and go-redis logged it, password and all, on
// every retry. The error names the address's position, not its text.
func hostPorts(addrs []string, prefix string) error {
	for i, a := range addrs {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" || strings.ContainsAny(a, "@/") {
			return fmt.Errorf("%s_URL: address %d of the list is not host:port%s (credentials go in %s_AUTH)", prefix, i+1, bracketed(a), prefix)
		}
	}
	return nil
}

// bracketed returns, for an IPv6 address and port without brackets
// ("::1:6379"), a note saying how to write them ("; an IPv6 address goes
// in brackets: [::1]:6379"), and "" for anything else (whose text, which
// may hold a password, is not quoted).
func bracketed(a string) string {
	if hp, ok := config.UnbracketedIPv6(a); ok {
		return "; an IPv6 address goes in brackets: " + hp
	}
	return ""
}

// splitAuth reads "user:password" or "password".
func splitAuth(auth string) (user, pass string) {
	if u, p, ok := strings.Cut(auth, ":"); ok {
		return u, p
	}
	return "", auth
}

// compatTLS builds the client TLS configuration of REDIS_TLS_*.
func compatTLS(r envoycompat.RedisSettings) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if r.TLSClientCert != "" || r.TLSClientKey != "" {
		if r.TLSClientCert == "" || r.TLSClientKey == "" {
			return nil, errors.New("client certificate: REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY go together (one is set, the other not)")
		}
		cert, err := regularfile.LoadX509KeyPair(r.TLSClientCert, r.TLSClientKey)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if r.TLSCACert != "" {
		pem, err := regularfile.ReadFile(r.TLSCACert)
		if err != nil {
			return nil, fmt.Errorf("CA certificate: %w", err)
		}
		// Added to the system roots, as theirs does: REDIS_TLS_CACERT adds
		// a trusted CA, it does not make it the only one.
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA certificate %s: no PEM certificate", r.TLSCACert)
		}
		cfg.RootCAs = pool
	}
	if r.TLSSkipHostnameVerification {
		// verify the chain, not the name
		roots := cfg.RootCAs
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no server certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		}
	}
	return cfg, nil
}

// compatSideConns are the budgets of envoy-compat's listeners beside the
// HTTP and gRPC ones: the debug listener's, and the Prometheus
// listener's when USE_PROMETHEUS is set (nil otherwise).
type compatSideConns struct{ debug, prometheus *connlimit.Limit }

// compatSides makes the budgets of envoy-compat's debug and Prometheus
// listeners, as sideLimits does serve's admin and probes' ones:
// connlimit.Side of the reserve the public budget conns leaves, or
// connlimit.SideMax where the file limit is not known.
func compatSides(s envoycompat.Settings, conns *connlimit.Limit, reg prometheus.Registerer) (compatSideConns, error) {
	b, err := sideBudgets(conns, reg, map[string]bool{"debug": true, "prometheus": s.UsePrometheus})
	return compatSideConns{debug: b["debug"], prometheus: b["prometheus"]}, err
}
