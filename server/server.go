// Package server is Floodgate's HTTP/JSON service: rate-limit decisions
// (POST /v1/check, /v1/check/batch, /v1/peek) for the policies of a live
// configuration, billing quotas (POST /v1/quota/check, /status, /reserve,
// /settle), caps on requests in flight (POST /v1/concurrency/acquire,
// /release, /renew), admin operations behind a bearer token, Prometheus
// metrics, health and readiness probes, and graceful shutdown.
//
// Every decision of a layered policy is one all-or-nothing store call
// (floodgate.Limiter.AllowLayers). A decided request is HTTP 200 whether it
// was allowed or not — the body and the X-RateLimit-* headers say — unless
// the caller asks for ?enforce=1, which turns a denial into 429 with
// Retry-After. Bad input gets a 4xx application/problem+json body that says
// exactly what is wrong, and consumes nothing; so does a request a browser
// sends on behalf of a web page not trusted (403, Options.TrustedOrigins),
// and one addressed to a host name not allowed (421,
// Options.AllowedHosts).
package server

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/concurrency"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/envoyrls"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/crossorigin"
	"github.com/floodgate-rl/floodgate/internal/deadline"
	"github.com/floodgate-rl/floodgate/internal/ratelog"
	"github.com/floodgate-rl/floodgate/internal/servelog"
	"github.com/floodgate-rl/floodgate/loginguard"
	"github.com/floodgate-rl/floodgate/metrics"
	"github.com/floodgate-rl/floodgate/quota"
	"github.com/floodgate-rl/floodgate/sentinelfollow"
)

// Resetter forgets the stored state of keys (an admin resetting an
// identity) and reports, for each of keys in order, whether it held state
// (existed and was deleted): POST /admin/v1/reset answers how many did in
// any Resetter. Implementations: MemoryResetter, RedisResetter. An error
// that is a *ResetError, wrapping floodgate.ErrStoreUnavailable when the
// failing deletion was certainly not applied, lets the reset's 503 say
// what was deleted; any other says some of the keys may have been. With
// an error wrapping replicawait.ErrNotReplicated, existed is that of
// every key, all deleted on the primary.
type Resetter interface {
	ResetKeys(ctx context.Context, keys ...string) (existed []bool, err error)
}

// LoginUnlocker lifts login lockouts (package loginguard's Guard).
type LoginUnlocker interface {
	// Lift forgets, in one step, the failures and lock of account
	// (unless ""), of ip's network (unless the zero Addr) and, with both,
	// of account from that network, and reports which had any.
	Lift(ctx context.Context, account string, ip netip.Addr) (loginguard.Lifted, error)
}

// DefaultDecisionTimeout is Options.DecisionTimeout's default.
const DefaultDecisionTimeout = time.Second

// DefaultWriteTimeout is Options.WriteTimeout's default, and the write
// timeout of the admin and probes' listeners: an answer must be written
// within 30 s. A decision's answer is a few hundred bytes, but GET
// /metrics, on the same listener unless served on the admin one only,
// can be hundreds of KB, and a scraper on a slow link, or one configured
// with a long scrape timeout, must not have it cut.
const DefaultWriteTimeout = 30 * time.Second

// MinIOTimeout is the least nonzero Options.ReadTimeout and
// Options.WriteTimeout New takes: below it, no request could be read or
// no answer written on a loaded machine (a WriteTimeout of 1ns failed
// every answer: the client saw the connection closed, no reply).
const MinIOTimeout = 100 * time.Millisecond

// Options configures a Server. The zero value is ready to use.
type Options struct {
	// Logger receives request errors and admin actions. Default: discard.
	Logger *slog.Logger
	// Registerer receives the server's metrics. Default: a private
	// registry.
	Registerer prometheus.Registerer
	// Metrics records decisions (rate_limit_allowed_total and
	// rate_limit_denied_total by policy and tier) and the top denied
	// identities; share it with the fallback store as its Observer.
	// Default: a new metrics.Metrics on Registerer.
	Metrics *metrics.Metrics
	// Gatherer serves GET /metrics. Default: Registerer when it is also a
	// Gatherer (a *prometheus.Registry); without either, /metrics is 404.
	Gatherer prometheus.Gatherer
	// AdminToken enables the admin endpoints (/admin/v1/...) for requests
	// carrying "Authorization: Bearer <AdminToken>". Empty disables them.
	// New refuses a token ValidateAdminToken refuses (under 32 characters,
	// or fewer than 10 distinct). Failed attempts are throttled per client
	// network (AdminFailureLimit per AdminFailureWindow), and every admin
	// call is logged with the caller's address.
	AdminToken string
	// SeparateAdmin takes the admin endpoints off the public handler: they
	// are served only by AdminHandler (ServeAdmin), on a listener of their
	// own that can be bound to a private address. Default false: the
	// public handler serves them too.
	SeparateAdmin bool
	// MetricsAdminOnly takes GET /metrics off the public handler; the
	// admin handler always serves it. Default false.
	MetricsAdminOnly bool
	// Profiling serves the Go runtime profiles of net/http/pprof under
	// GET /debug/pprof/ on the admin handler only (never on the public
	// one), without the admin token, as /metrics is there; not
	// /debug/pprof/cmdline, as the command line may hold secrets. Profiles
	// reveal the program's internals and a CPU profile costs CPU while it
	// runs: bind the admin listener to a private address. A CPU profile, a
	// trace or a delta profile (heap?seconds=N) lasts at most
	// MaxProfileSeconds (a longer one is refused 400), so that no caller
	// holds the process's one CPU profiler, or a request the shutdown
	// waits for, for hours.
	// Default false.
	Profiling bool
	// Assignments holds per-identity tier assignments. Default: a new
	// in-process config.MemoryAssignments.
	Assignments config.Assignments
	// Resetters forget stored state for POST /admin/v1/reset, all of them
	// in order (e.g. the Redis store and the local fallback store). Empty
	// disables that endpoint.
	Resetters []Resetter
	// LoginGuard, when set, enables POST /admin/v1/login/unlock, lifting
	// lockouts of the login guard that shares its store (same Redis,
	// prefix and secret).
	LoginGuard LoginUnlocker
	// LoginPrefix is that guard's key prefix, named in an unlock that
	// found nothing to lift.
	LoginPrefix string
	// Store names the kind of store decisions are made on, "memory" or
	// "redis", for GET /readyz (floodgate doctor checks that every
	// instance of a Redis deployment uses Redis). Empty: not reported.
	Store string
	// Version names the build of the binary serving, for GET /readyz, so
	// that an operator can tell which instances run which build during a
	// rolling upgrade (floodgate serve reports its version, as "floodgate
	// version" prints it). Empty: not reported.
	Version string
	// HeartbeatID is the id this instance heartbeats into
	// <prefix>:instances under (package fleet), for GET /readyz:
	// floodgate doctor tells by it which instances are in the set it
	// reads. Empty: not reported (an instance without Redis).
	HeartbeatID string
	// Ready reports whether the backing store is usable, for GET /readyz:
	// RedisReady checks every node the service needs. Nil means always
	// ready.
	Ready func(ctx context.Context) error
	// Sentinels, when set, reports what the Redis client's last question
	// to the sentinels found (sentinelfollow.Follower.Status), for GET
	// /readyz: information only, which does not make the service unready
	// (it decides on the primary named last; the probe of Ready says
	// whether that one answers). Nil: not reported (no Sentinel).
	Sentinels func() sentinelfollow.Status
	// SentinelMaster is the master name the sentinels are asked for
	// (sentinelfollow.Follower.Master), which /readyz's warning names
	// when they answer that they do not monitor it. "": not named.
	SentinelMaster string
	// Breakers, when set, reports the circuit breakers' states by
	// partition (fallback.Store.BreakerStates): /readyz is 503 while one
	// is open or half-open, as decisions are then not central.
	Breakers func() map[string]fallback.BreakerState
	// ServesDegraded says that decisions go on while Redis fails (a
	// fallback decides them): GET /readyz?degraded=ok then answers 200
	// with status "degraded" where plain /readyz answers 503, so that a
	// load balancer keeps sending traffic to the fallback rather than
	// to no limiter at all. Draining is 503 either way.
	ServesDegraded bool
	// Clock is the time quotas and concurrency leases are stamped with.
	// Default: the limiter's (floodgate.Limiter.Now), which stamps the
	// checks, so that all three follow one clock (disciplined to Redis by
	// serve).
	Clock func() time.Time
	// DecisionTimeout bounds every store call a request makes: the tier
	// lookup, the decision (all checks of a batch together) or the quota
	// or lease operation. Default (0) DefaultDecisionTimeout.
	DecisionTimeout time.Duration
	// LookupTimeout bounds the tier lookup of a decision, within
	// DecisionTimeout, so that a slow Redis leaves the decision its own
	// time. Quota and lease operations, which have no fallback, bound
	// theirs by DecisionTimeout alone. Default 50ms (the fallback's
	// default budget).
	LookupTimeout time.Duration
	// Breaker, when set, runs quota and lease operations through the
	// circuit breaker of the decisions (the *fallback.Store the limiter
	// decides with); a lease release refused by an open breaker is sent
	// all the same (see guardRelease). Nil: they are only bounded by
	// DecisionTimeout.
	Breaker Breaker
	// WarnEvery is the least time between two log lines of one kind on a
	// failure path met per request (a tier lookup failing, a decision
	// failing for one reason, a quota's state lost); the ones in between
	// are counted in the next one's "suppressed". Default 10s.
	WarnEvery time.Duration
	// ReadTimeout bounds reading one request, body included, so that a
	// client sending its body slowly cannot hold a connection (and
	// shutdown) for long. Default 5s; at least MinIOTimeout.
	ReadTimeout time.Duration
	// WriteTimeout bounds the writing of one answer on Serve's listener
	// (on net/http from the moment its request's headers are read, the
	// handler's time included; on fasthttp from the moment the handler
	// has answered), so that a client that sends requests and stops
	// reading the answers cannot hold a connection (one place of
	// floodgate serve's --max-connections) much longer: the connection is
	// closed instead. On both engines it starts afresh with each request,
	// so a client that pipelines requests and reads a little of the
	// answers before each deadline keeps its connection for as long as it
	// goes on. The listeners of AdminHandler and HealthHandler keep
	// DefaultWriteTimeout. Default DefaultWriteTimeout; at least
	// MinIOTimeout.
	WriteTimeout time.Duration
	// TrustedOrigins are the origins whose pages may call the API from a
	// browser, each as browsers send it in the Origin header
	// ("https://app.example.com", with the port unless it is the scheme's
	// default; ValidateTrustedOrigin). A request with a method other than
	// GET, HEAD or OPTIONS (any method on the admin endpoints and the
	// profiles of Profiling) is refused with 403 cross-origin-request,
	// changing nothing, when it carries any other Origin, even one
	// matching its Host (Floodgate serves no page that sends such
	// requests, and a page whose DNS name is rebound to the service's
	// address sends that name as both), or, without Origin, a
	// Sec-Fetch-Site naming another site (an empty Origin counts as
	// none). Requests with neither header (curl, server-side clients)
	// are never refused. Default none. New
	// refuses an entry ValidateTrustedOrigin refuses.
	TrustedOrigins []string
	// AllowedHosts, when not empty, are the host names requests must be
	// addressed to (ValidateAllowedHost: "floodgate.example.com", or
	// "*.example.com" for every name under example.com; in any case):
	// every HTTP request, on the public handler, AdminHandler and
	// HealthHandler, whose Host, port aside, is neither one of them nor
	// an IP address nor localhost is answered 421 host-not-allowed before
	// anything else and changes nothing. This keeps out a web page whose DNS name is
	// rebound to the service's address (DNS rebinding), which could
	// otherwise read what GETs answer (/metrics, /readyz, the profiles of
	// Profiling) through its visitors' browsers. Default none: every
	// Host is served. New refuses an entry ValidateAllowedHost refuses.
	AllowedHosts []string
	// MaxBodyBytes caps request bodies. Default DefaultMaxBodyBytes (64 KiB).
	MaxBodyBytes int64
	// MaxBatch caps the checks of one batch. Default DefaultMaxBatch (100).
	MaxBatch int
	// DrainTimeout bounds how long Serve waits for in-flight requests when
	// shutting down. Default 10s.
	DrainTimeout time.Duration
	// ShutdownDelay is how long Serve keeps serving after readiness turns
	// off and before it stops accepting connections, so load balancers
	// notice. Default 0.
	ShutdownDelay time.Duration
	// QuotaStore keeps the usage of the configuration's quotas, under the
	// limiter's key prefix: a quota.RedisStore on the limiter's Redis, so
	// that every instance shares it. Default: a new in-process
	// quota.MemoryStore with the default bounds of quota.MemoryOptions.
	QuotaStore quota.Store
	// HTTPEngine is the HTTP server Serve runs (ParseHTTPEngine). Default
	// NetHTTP.
	HTTPEngine HTTPEngine
	// ConnState, when set, is called as Serve's connections change state,
	// as http.Server.ConnState is, on either engine (fasthttp's states
	// given as net/http's): floodgate serve passes the Track of the
	// connection limit its listener is wrapped in (internal/connlimit),
	// which closes the connection idle longest to make room. Default nil.
	ConnState func(net.Conn, http.ConnState)
	// AdminConnState and HealthConnState are ConnState for ServeAdmin's
	// and ServeHealth's connections: floodgate serve passes the Track of
	// each listener's own connection limit, so that a new connection to
	// it can close the one idle longest there. Default nil.
	AdminConnState, HealthConnState func(net.Conn, http.ConnState)
	// ConcurrencyStore keeps the leases of the configuration's
	// concurrency limits, under the limiter's key prefix: a
	// concurrency.RedisStore on the limiter's Redis, so that every
	// instance shares it. Default: a new in-process
	// concurrency.MemoryStore with the default bounds of
	// concurrency.MemoryOptions.
	ConcurrencyStore concurrency.Store
}

// Server serves the HTTP API. It is safe for concurrent use.
type Server struct {
	ticks    *deadline.Ticks // request deadlines (decisionContext)
	lim      *floodgate.Limiter
	cfg      *config.Holder
	opts     Options
	log      *slog.Logger
	assign   config.Assignments
	metrics  *serverMetrics
	decided  *metrics.Metrics
	mux      http.Handler
	draining atomic.Bool
	warn     *ratelog.Log
	// closing is closed when Serve's shutdown stops accepting
	// connections (Closing), once.
	closing     chan struct{}
	closingOnce sync.Once

	quotaStore quota.Store
	leaseStore concurrency.Store
	eng        atomic.Pointer[engines]

	adminMux   http.Handler
	healthMux  http.Handler
	adminGuard *adminGuard
	xorigin    *crossorigin.Trusted
	hosts      *allowedHosts // nil: every Host

	openReleases chan struct{} // MaxOpenReleases (guardRelease)
}

// New returns a Server deciding with lim under the configuration held by
// cfg (read afresh for every request, so reloads apply at once).
func New(lim *floodgate.Limiter, cfg *config.Holder, opts Options) (*Server, error) {
	if lim == nil || cfg == nil {
		return nil, errors.New("server: nil limiter or configuration")
	}
	for _, o := range []struct {
		name string
		neg  bool
		v    any
	}{
		{"DecisionTimeout", opts.DecisionTimeout < 0, opts.DecisionTimeout}, {"MaxBodyBytes", opts.MaxBodyBytes < 0, opts.MaxBodyBytes},
		{"MaxBatch", opts.MaxBatch < 0, opts.MaxBatch}, {"DrainTimeout", opts.DrainTimeout < 0, opts.DrainTimeout},
		{"ShutdownDelay", opts.ShutdownDelay < 0, opts.ShutdownDelay}, {"LookupTimeout", opts.LookupTimeout < 0, opts.LookupTimeout},
		{"WarnEvery", opts.WarnEvery < 0, opts.WarnEvery}, {"ReadTimeout", opts.ReadTimeout < 0, opts.ReadTimeout},
		{"WriteTimeout", opts.WriteTimeout < 0, opts.WriteTimeout},
	} {
		if o.neg {
			return nil, fmt.Errorf("server: option %s is negative: %v", o.name, o.v)
		}
	}
	if _, err := ParseHTTPEngine(string(opts.HTTPEngine)); err != nil {
		return nil, err
	}
	if opts.AdminToken != "" {
		if err := ValidateAdminToken(opts.AdminToken); err != nil {
			return nil, err
		}
	}
	if opts.DecisionTimeout == 0 {
		opts.DecisionTimeout = DefaultDecisionTimeout
	}
	if opts.Clock == nil {
		opts.Clock = lim.Now
	}
	if opts.LookupTimeout == 0 {
		opts.LookupTimeout = 50 * time.Millisecond
	}
	if opts.WarnEvery == 0 {
		opts.WarnEvery = 10 * time.Second
	}
	for _, o := range []struct {
		name string
		v    time.Duration
	}{{"ReadTimeout", opts.ReadTimeout}, {"WriteTimeout", opts.WriteTimeout}} {
		if o.v > 0 && o.v < MinIOTimeout {
			return nil, fmt.Errorf("server: option %s %v: want at least %v (0: the default)", o.name, o.v, MinIOTimeout)
		}
	}
	if opts.ReadTimeout == 0 {
		opts.ReadTimeout = 5 * time.Second
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxBatch == 0 {
		opts.MaxBatch = DefaultMaxBatch
	}
	if opts.DrainTimeout == 0 {
		opts.DrainTimeout = 10 * time.Second
	}
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	if opts.Gatherer == nil {
		opts.Gatherer, _ = opts.Registerer.(prometheus.Gatherer)
	}
	m, err := newServerMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	if opts.Metrics == nil {
		if opts.Metrics, err = metrics.New(opts.Registerer, metrics.Options{}); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
	}
	s := &Server{ticks: deadline.New(), openReleases: make(chan struct{}, MaxOpenReleases), lim: lim, cfg: cfg, opts: opts, log: opts.Logger, assign: opts.Assignments, metrics: m, decided: opts.Metrics,
		quotaStore: opts.QuotaStore, leaseStore: opts.ConcurrencyStore, closing: make(chan struct{})}
	if s.quotaStore == nil {
		if s.quotaStore, err = quota.NewMemoryStore(quota.MemoryOptions{}); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
	}
	if s.leaseStore == nil {
		if s.leaseStore, err = concurrency.NewMemoryStore(concurrency.MemoryOptions{}); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.warn = ratelog.New(s.log, opts.WarnEvery)
	if s.xorigin, err = newCrossOrigin(opts.TrustedOrigins); err != nil {
		return nil, err
	}
	if s.hosts, err = newAllowedHosts(opts.AllowedHosts); err != nil {
		return nil, err
	}
	if s.adminGuard, err = newAdminGuard(time.Now); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if s.assign == nil {
		s.assign = &config.MemoryAssignments{}
	}
	s.routes()
	return s, nil
}

// routes builds the handlers. The API and the admin endpoints that read
// the configuration answer 503 no-configuration while there is none
// (configured).
func (s *Server) routes() {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/check", s.configured(s.handleCheck))
	mux.HandleFunc("POST /v1/check/batch", s.configured(s.handleBatch))
	mux.HandleFunc("POST /v1/peek", s.configured(s.handlePeek))
	mux.HandleFunc("POST /v1/quota/check", s.configured(s.handleQuotaCheck))
	mux.HandleFunc("POST /v1/quota/status", s.configured(s.handleQuotaStatus))
	mux.HandleFunc("POST /v1/quota/reserve", s.configured(s.handleQuotaReserve))
	mux.HandleFunc("POST /v1/quota/settle", s.configured(s.handleQuotaSettle))
	mux.HandleFunc("POST /v1/concurrency/acquire", s.configured(s.handleAcquire))
	mux.HandleFunc("POST /v1/concurrency/release", s.configured(s.handleRelease))
	mux.HandleFunc("POST /v1/concurrency/renew", s.configured(s.handleRenew))
	mux.HandleFunc("GET /healthz", s.handleHealth)
	mux.HandleFunc("GET /readyz", s.handleReady)
	if s.opts.Gatherer != nil && !s.opts.MetricsAdminOnly {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.opts.Gatherer, promhttp.HandlerOpts{}))
	}
	admin := http.NewServeMux()
	admin.HandleFunc("GET /healthz", s.handleHealth)
	if s.opts.Gatherer != nil {
		admin.Handle("GET /metrics", promhttp.HandlerFor(s.opts.Gatherer, promhttp.HandlerOpts{}))
	}
	if s.opts.Profiling {
		// Not /debug/pprof/cmdline: the command line may carry secrets
		// (--admin-token, a Redis URL with its password), and these
		// profiles are served without the token.
		admin.HandleFunc("GET /debug/pprof/", boundedProfile(pprof.Index))
		admin.HandleFunc("GET /debug/pprof/profile", boundedProfile(pprof.Profile))
		admin.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		admin.HandleFunc("GET /debug/pprof/trace", boundedProfile(pprof.Trace))
	}
	for _, m := range []*http.ServeMux{admin, mux} {
		if m == mux && s.opts.SeparateAdmin {
			break
		}
		m.HandleFunc("POST /admin/v1/reset", s.admin(s.configured(s.handleReset)))
		m.HandleFunc("POST /admin/v1/tier", s.admin(s.configured(s.handleSetTier)))
		m.HandleFunc("GET /admin/v1/tier", s.admin(s.handleGetTier))
		m.HandleFunc("GET /admin/v1/top-denied", s.admin(s.handleTopDenied))
		m.HandleFunc("GET /admin/v1/config", s.admin(s.handleConfig))
		m.HandleFunc("POST /admin/v1/login/unlock", s.admin(s.handleLoginUnlock))
		m.HandleFunc("POST /admin/v1/quota/restore", s.admin(s.configured(s.handleQuotaRestore)))
	}
	// Before routing: a refused request learns nothing of the routes.
	s.mux = s.refuseHost(s.refuseCrossOrigin(withProblems(mux, publicEndpoints(s.opts.SeparateAdmin, s.opts.MetricsAdminOnly))))
	s.adminMux = s.refuseHost(s.refuseCrossOrigin(withProblems(admin, adminEndpoints(s.opts.Gatherer != nil, s.opts.Profiling))))
	// The probes' listener: GETs (and HEADs) only, which the cross-origin
	// rule never refuses; the Host rule applies as on the others.
	health := http.NewServeMux()
	health.HandleFunc("GET /healthz", s.handleHealth)
	health.HandleFunc("GET /readyz", s.handleReady)
	s.healthMux = s.refuseHost(healthOnly(health))
}

// MaxHeaderBytes bounds a request's line and headers on both engines (the
// size of fasthttp's read buffer; net/http allows a few KiB more): a
// request with more is answered 431. net/http's default, 1 MiB, let each
// connection sending an unfinished header hold about 1 MiB until
// --read-timeout cut it (300 connections: 350 MB).
const MaxHeaderBytes = fastReadBufferSize

// AdminHandler returns the handler of the admin listener: the admin
// endpoints, GET /metrics and GET /healthz. Serve it on a private address
// (ServeAdmin), with Options.SeparateAdmin so that the public handler does
// not serve the admin endpoints as well.
func (s *Server) AdminHandler() http.Handler { return s.adminMux }

// ServeAdmin serves AdminHandler on ln until ctx ends, then shuts down,
// waiting up to DrainTimeout for admin calls in flight. It returns nil
// after a shutdown, or the error that stopped serving.
func (s *Server) ServeAdmin(ctx context.Context, ln net.Listener) error {
	return s.serveAside(ctx, ln, s.adminMux, "admin", s.opts.AdminConnState)
}

// HealthHandler returns the handler of the probes' listener: GET and HEAD
// /healthz and /readyz, the handlers (and query parameters, such as
// /readyz?degraded=ok) of the public handler, readiness off while Serve
// drains as there; every other request is answered 404, and a Host that
// AllowedHosts refuses 421. It serves no metrics, no admin endpoint, no
// API and no profile, so that it can be served without TLS (ServeHealth)
// to probes that cannot present a client certificate, such as kubelet's,
// while the other listeners require one. /readyz says why the service is
// not ready, as on the public handler: serve it on a private address
// (the pod network).
func (s *Server) HealthHandler() http.Handler { return s.healthMux }

// ServeHealth serves HealthHandler on ln, as ServeAdmin does
// AdminHandler: until ctx ends, then shuts down, waiting up to
// DrainTimeout for probes in flight. To have probes see readiness off
// during Serve's drain, end ctx once Serve has returned. It returns nil
// after a shutdown, or the error that stopped serving.
func (s *Server) ServeHealth(ctx context.Context, ln net.Listener) error {
	return s.serveAside(ctx, ln, s.healthMux, "health", s.opts.HealthConnState)
}

// serveAside serves h, the handler of a listener beside Serve's (name,
// in errors), with net/http on ln, its connections' states reported to
// connState (nil: to none), until ctx ends, then shuts down, waiting up
// to DrainTimeout for the requests in flight. It returns nil after a
// shutdown, or the error that stopped serving.
func (s *Server) serveAside(ctx context.Context, ln net.Listener, h http.Handler, name string, connState func(net.Conn, http.ConnState)) error {
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(5*time.Second, s.opts.ReadTimeout),
		ReadTimeout:       s.opts.ReadTimeout,
		WriteTimeout:      DefaultWriteTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          s.serverLog(),
		ConnState:         connState,
	}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("server: %s: %w", name, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.opts.DrainTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close()
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("server: %s: %w", name, err)
	}
	return nil
}

// ServeHTTP implements http.Handler. While s drains (from the shutdown's
// start, or SetDraining), its answers carry Connection: close, and
// net/http closes the connection once it has written them.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		// Keep-alive clients move to new connections (to another instance
		// once the endpoints are updated) during ShutdownDelay, one answer
		// at a time, instead of having their idle connections closed
		// under them when the listener closes. Not
		// http.Server.SetKeepAlivesEnabled(false): it closes every idle
		// connection at once, and a request already on its way over one
		// would be lost at the signal instead.
		w.Header().Set("Connection", "close")
	}
	s.mux.ServeHTTP(w, r)
	if r.Close && r.ContentLength != 0 {
		lingerAfterClose(w, r)
	}
}

// lingerAfterClose has net/http linger before closing a connection whose
// client asked for the close (Connection: close, or HTTP/1.0) and whose
// body the handler left unread, as an answer given at the headers (413
// for a body announced too large, 403, 404, 421, 415) leaves it.
// net/http shuts its writing side and waits half a second before closing
// after an answer that left a large body unread, but not when the client
// asked for the close: it then closed at once, the kernel reset the
// connection over the unread body, and a client still sending it got
// "connection reset" instead of the answer. Reading one byte past a limit
// of none through http.MaxBytesReader marks the response as having cut
// the body short (what it does for a body over its limit), which has
// net/http linger as it does otherwise. A body read to its end gives EOF
// at once, and nothing changes; a client that sends nothing more within
// lingerTime is not waited for.
func lingerAfterClose(w http.ResponseWriter, r *http.Request) {
	if http.NewResponseController(w).SetReadDeadline(time.Now().Add(lingerTime)) != nil {
		return
	}
	var one [1]byte
	_, _ = http.MaxBytesReader(w, r.Body, 0).Read(one[:])
}

// SetDraining turns readiness off (true) or back on, without stopping.
func (s *Server) SetDraining(on bool) { s.draining.Store(on) }

// CountDegraded counts one answer that o's failure mode took instead of
// Redis in floodgate_degraded_responses_total, as the HTTP API counts its
// own: for another API served beside s (floodgate serve passes it to its
// gRPC service as envoyrls.Options.OnDegraded). It does nothing when o is
// not degraded, and does not allocate.
func (s *Server) CountDegraded(o fallback.Outcome) {
	if o.Degraded {
		s.countDegraded(o)
	}
}

// countDegraded counts o, a degraded answer, and logs one whose reason is
// a Redis key holding a value floodgate did not write (at most once per
// WarnEvery, naming the key): the fallback's own log of it is at debug
// level, and such a key without a TTL keeps its identity on the fallback
// for good.
func (s *Server) countDegraded(o fallback.Outcome) {
	s.metrics.countDegraded(o)
	if o.Reason == fallback.ReasonForeignValue && o.Err != nil {
		s.warnForeignValue(context.Background(), slog.LevelWarn, opCheck.name, o.Err)
	}
}

// CountGRPCRejected counts one call of Envoy's gRPC API served beside s
// that was refused before any decision, in floodgate_grpc_rejected_total
// under reason (floodgate serve passes it to its gRPC service as
// envoyrls.Options.OnRejected), as floodgate_http_rejected_total counts
// the HTTP API's. A message over the gRPC server's size limit
// (envoyrls.RejectMessageSize) is logged too, at most once per WarnEvery:
// Envoy lets such a request through unless failure_mode_deny is set, and
// its other descriptors (the per-IP one too) are not charged.
func (s *Server) CountGRPCRejected(reason envoyrls.Rejection) {
	s.metrics.grpcRejected.WithLabelValues(string(reason)).Inc()
	if reason == envoyrls.RejectMessageSize {
		s.warn.Warn("grpc-message-size", "gRPC rate limit call refused: its message is over the gRPC server's size limit (RESOURCE_EXHAUSTED); Envoy lets the request through, none of its descriptors charged, unless its failure_mode_deny is set",
			"reason", string(reason))
	}
}

// DecisionFailed classifies a failed decision of another API served
// beside s, counts it in floodgate_decision_errors_total and logs it (at
// most once per WarnEvery for each reason), as the HTTP API does its own
// failures: floodgate serve passes it to its gRPC service as
// envoyrls.Options.OnError.
func (s *Server) DecisionFailed(ctx context.Context, err error) { s.decisionProblem(ctx, opCheck, err) }

// Serve serves HTTP on ln until ctx ends, then shuts down gracefully:
// readiness turns off and every answer from then on carries Connection:
// close (its connection is closed once it is written), it waits
// ShutdownDelay, stops accepting connections (Closing is closed then),
// closes the idle ones and waits up to DrainTimeout for in-flight
// requests, then closes the connections still open (a client still
// sending its request; each request's reading is bounded by ReadTimeout
// anyway). It returns nil after a shutdown, or the error that stopped
// serving. It serves with Options.HTTPEngine.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if s.opts.HTTPEngine == FastHTTP {
		return s.serveFast(ctx, ln)
	}
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: min(5*time.Second, s.opts.ReadTimeout),
		ReadTimeout:       s.opts.ReadTimeout,
		WriteTimeout:      s.opts.WriteTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          s.serverLog(),
		ConnState:         s.opts.ConnState,
	}
	return s.serveAndDrain(ctx, func() error { return hs.Serve(ln) }, hs.Shutdown, func() { _ = hs.Close() })
}

// serveAndDrain runs serve (an engine serving its listener) until it
// fails or ctx ends, then shuts it down as Serve documents: beginDrain,
// shutdown (which stops accepting and waits for the requests in flight)
// bounded by DrainTimeout, then closeAll for the connections still open.
// serve's error after a shutdown (http.ErrServerClosed) is no error.
func (s *Server) serveAndDrain(ctx context.Context, serve func() error, shutdown func(context.Context) error, closeAll func()) error {
	done := make(chan error, 1)
	go func() { done <- serve() }()
	select {
	case err := <-done:
		return fmt.Errorf("server: %w", err)
	case <-ctx.Done():
	}
	s.beginDrain()
	s.closingOnce.Do(func() { close(s.closing) })
	sctx, cancel := context.WithTimeout(context.Background(), s.opts.DrainTimeout)
	defer cancel()
	if err := shutdown(sctx); err != nil {
		// What is left after the drain timeout is not a decision (those
		// are bounded by DecisionTimeout) but a connection that has not
		// finished sending its request: cut it and exit cleanly.
		s.log.Warn("drain timeout reached: closing the connections still open", "timeout", s.opts.DrainTimeout, "error", err)
		closeAll()
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("server: %w", err)
	}
	return nil
}

// Closing returns a channel closed when Serve's shutdown stops accepting
// connections, ShutdownDelay after its context ended: floodgate serve
// stops its gRPC listener at the same moment, so that no listener takes
// a new connection after the delay. It is never closed when Serve
// returns for another reason.
func (s *Server) Closing() <-chan struct{} { return s.closing }

// beginDrain starts a shutdown: readiness turns off, answers carry
// Connection: close from now on (ServeHTTP, fastHandler), and it returns after
// ShutdownDelay, when the listener is to stop accepting.
func (s *Server) beginDrain() {
	s.draining.Store(true)
	s.log.Info("shutting down: readiness off, draining", "delay", s.opts.ShutdownDelay, "timeout", s.opts.DrainTimeout)
	if s.opts.ShutdownDelay > 0 {
		time.Sleep(s.opts.ShutdownDelay)
	}
}

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyResponse is the body of GET /readyz.
type readyResponse struct {
	// Status is ready, degraded (the store or a breaker is not healthy:
	// decisions are not central), no-configuration (none loaded yet:
	// decisions answer 503; Error says why) or draining.
	Status string `json:"status"`
	// Error says what is not healthy.
	Error string `json:"error,omitempty"`
	// Breakers are the circuit breakers' states by partition (closed,
	// half_open or open), when the store has breakers.
	Breakers map[string]string `json:"breakers,omitempty"`
	// ConfigVersion and ConfigSource describe the configuration loaded;
	// ConfigHash is the hex SHA-256 of its document, so that instances
	// running different contents under one version can be told apart
	// (floodgate doctor compares them).
	ConfigVersion string `json:"config_version"`
	ConfigSource  string `json:"config_source"`
	ConfigHash    string `json:"config_hash"`
	// Version is Options.Version: the build serving.
	Version string `json:"version,omitempty"`
	// Store is Options.Store: memory or redis.
	Store string `json:"store,omitempty"`
	// HeartbeatID is Options.HeartbeatID.
	HeartbeatID string `json:"heartbeat_id,omitempty"`
	// Sentinels is what Options.Sentinels reports, when set.
	Sentinels *sentinelsResponse `json:"sentinels,omitempty"`
}

// sentinelsResponse is what GET /readyz says of the sentinels
// (Options.Sentinels): information, which never makes it unready.
type sentinelsResponse struct {
	// Configured is how many sentinels the client asks.
	Configured int `json:"configured"`
	// Answering is how many answered the last question (every second).
	Answering int `json:"answering"`
	// Majority is whether a majority named one primary in it.
	Majority bool `json:"majority"`
	// UnknownMaster is whether a majority answered in it that they do
	// not monitor the master (sentinelfollow.Status.UnknownMaster).
	UnknownMaster bool `json:"unknown_master,omitempty"`
	// Primary is the primary a majority named last; none while
	// UnknownMaster.
	Primary string `json:"primary,omitempty"`
	// Warning says what no majority means, while there is none.
	Warning string `json:"warning,omitempty"`
	// NotAskedYet is set before the first question to the sentinels
	// has ended (a moment after the start): the other fields say
	// nothing of them yet, and Warning says so instead.
	NotAskedYet bool `json:"not_asked_yet,omitempty"`
}

// noSentinelMajority is sentinelsResponse.Warning without a majority
// with a primary named before: the sentinels do not answer, refuse, or
// some do not monitor the master (an outside walk read "no majority of
// the sentinels answers" beside two of three answering: one had
// forgotten the master, one was down).
const noSentinelMajority = "no majority of the sentinels names the primary (they do not answer, refuse, or do not monitor it): new connections go on to the primary they last named, and a failover is not followed until a majority names one"

// noSentinelPrimary is sentinelsResponse.Warning without a majority
// when there is no primary to go on with: none was named yet, or a
// majority answered before that they do not monitor the master (its
// primary forgotten), and some of them no longer do. go-redis then asks
// the sentinels at each new connection (or the Follower dials the
// primary the answering minority names), as the log line says.
const noSentinelPrimary = "no majority of the sentinels names a primary, and there is none named before to go on with: each new connection goes to the primary a sentinel that answers names, or fails when none does"

// sentinelsNotAsked is sentinelsResponse.Warning before the first
// question to the sentinels has ended.
const sentinelsNotAsked = "the sentinels have not answered a first question yet (it ends within half a second of the start, before serve listens): new connections ask them as they dial"

// unknownSentinelMaster is sentinelsResponse.Warning while a majority
// answers that they do not monitor the master (%s: master "NAME"). What
// it says new connections do was observed with two of three sentinels
// told SENTINEL REMOVE, then three
// (TestStatusSaysTheSentinelsDoNotKnowTheMaster).
const unknownSentinelMaster = "a majority of the sentinels answer that they do not monitor %s: the primary is forgotten, and each new connection goes to the primary a sentinel that still monitors it names, or fails when none does (check --redis-master against SENTINEL MASTERS, or SENTINEL MONITOR it again)"

// sentinelsReport returns what /readyz says of st, the sentinels of
// master.
func sentinelsReport(st sentinelfollow.Status, master string) *sentinelsResponse {
	r := &sentinelsResponse{Configured: st.Sentinels, Answering: st.Answering, Majority: st.Majority, UnknownMaster: st.UnknownMaster, Primary: st.Primary}
	switch {
	case !st.Asked:
		r.NotAskedYet, r.Warning = true, sentinelsNotAsked
	case st.UnknownMaster:
		name := "the master"
		if master != "" {
			name = fmt.Sprintf("master %q", master)
		}
		r.Warning = fmt.Sprintf(unknownSentinelMaster, name)
	case !st.Majority && st.Primary == "":
		r.Warning = noSentinelPrimary
	case !st.Majority:
		r.Warning = noSentinelMajority
	}
	return r
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	degraded, err := queryParam(r.URL.RawQuery, "degraded")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	resp, status := s.readiness(r.Context(), degraded == "ok")
	writeJSON(w, status, resp)
}

// Serving reports what GET /readyz?degraded=ok answers, the readiness
// the deploy kit probes: nil while the service takes requests and decides
// them (centrally, or degraded when Options.ServesDegraded), an error
// saying why not otherwise (draining, or the store unable to decide). The
// gRPC health service of serve follows it.
func (s *Server) Serving(ctx context.Context) error {
	resp, status := s.readiness(ctx, true)
	if status == http.StatusOK {
		return nil
	}
	if resp.Error != "" {
		return fmt.Errorf("%s: %s", resp.Status, resp.Error)
	}
	return errors.New(resp.Status)
}

// readiness is GET /readyz's answer; degradedOK is its ?degraded=ok.
func (s *Server) readiness(ctx context.Context, degradedOK bool) (readyResponse, int) {
	cfg := s.cfg.Load()
	resp := readyResponse{Status: "ready", ConfigVersion: cfg.Version(), ConfigSource: cfg.Source(), ConfigHash: cfg.Hash(), Version: s.opts.Version, Store: s.opts.Store, HeartbeatID: s.opts.HeartbeatID}
	status := http.StatusOK
	var problems []string
	if s.opts.Sentinels != nil {
		resp.Sentinels = sentinelsReport(s.opts.Sentinels(), s.opts.SentinelMaster)
	}
	if s.opts.Breakers != nil {
		resp.Breakers = map[string]string{}
		states := s.opts.Breakers()
		names := make([]string, 0, len(states))
		for name := range states {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			st := states[name]
			resp.Breakers[name] = st.String()
			if st != fallback.BreakerClosed {
				problems = append(problems, fmt.Sprintf("circuit breaker %s %s", name, st))
			}
		}
	}
	switch {
	case s.draining.Load():
		resp.Status, status = "draining", http.StatusServiceUnavailable
		problems = nil
	case s.opts.Ready != nil:
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if err := s.opts.Ready(ctx); err != nil {
			problems = append([]string{err.Error()}, problems...)
		}
	}
	if len(problems) > 0 {
		resp.Status, resp.Error = "degraded", strings.Join(problems, "; ")
		if !s.opts.ServesDegraded || !degradedOK {
			status = http.StatusServiceUnavailable
		}
	}
	if why := s.cfg.NotLoaded(); why != nil && !s.draining.Load() {
		// Nothing can be decided, degraded or not.
		resp.Status, resp.Error, status = "no-configuration", strings.Join(append([]string{why.Error()}, problems...), "; "), http.StatusServiceUnavailable
	}
	return resp, status
}

// decisionContext returns the context a request's store calls run under:
// one with ctx's values (the request's), ending DecisionTimeout from now.
// The deadline shares its timer with the requests of the same millisecond
// and may come up to a millisecond early (internal/deadline); a client
// that goes away does not cut the calls short, which end by the deadline
// anyway.
func (s *Server) decisionContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return s.ticks.WithTimeout(ctx, time.Now(), s.opts.DecisionTimeout)
}

// serverLog is the log.Logger of the HTTP servers: their lines as warnings
// in the service's log, but failed TLS handshakes (a client without a
// certificate, or with one refused, a scanner) and net/http's accept
// retries (out of file descriptors) at most one per Options.WarnEvery,
// with the count held back: one line each let any client write the log as
// fast as it could connect.
func (s *Server) serverLog() *log.Logger {
	return log.New(serverLogWriter{s}, "", 0)
}

type serverLogWriter struct{ s *Server }

func (w serverLogWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	// fasthttp quotes the bytes of a request it could not parse, headers
	// and all (an Authorization header's admin token, a cookie): cut them.
	if i := strings.Index(line, "contents: "); i >= 0 {
		line = line[:i] + "contents not logged"
	}
	switch {
	case strings.HasPrefix(line, "http: Accept error"):
		// net/http retrying an accept (out of file descriptors): one line
		// per retry, 5 ms to 1 s apart, for as long as it lasts.
		w.s.warn.Warn(servelog.KindAccept, "accepting a connection failed; retrying", "detail", line)
	case strings.Contains(line, "TLS handshake error"), strings.Contains(line, "error when serving connection") && strings.Contains(line, "tls: "):
		// net/http's words, and fasthttp's for the same failure.
		w.s.warn.Warn("tls-handshake", "TLS handshake failed", "detail", line)
	case strings.Contains(line, "error when serving connection"):
		// One per malformed request: any client could fill the log.
		w.s.warn.Warn("http-serve-error", "HTTP request not served", "detail", line)
	default:
		w.s.log.Warn(line)
	}
	return len(p), nil
}
