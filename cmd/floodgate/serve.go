package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/concurrency"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/denycache"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/buildinfo"
	"github.com/floodgate-rl/floodgate/internal/connlimit"
	"github.com/floodgate-rl/floodgate/internal/ratelog"
	"github.com/floodgate-rl/floodgate/loginguard"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/metrics"
	"github.com/floodgate-rl/floodgate/quota"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/replicawait"
	"github.com/floodgate-rl/floodgate/sentinelfollow"
	"github.com/floodgate-rl/floodgate/server"
)

type serveFlags struct {
	addr             string
	grpcAddr         string
	httpServer       string
	envoyConfig      []string
	envoyHeaders     bool
	envoyEach        bool
	configFile       string
	configRedis      bool
	reloadInterval   time.Duration
	redisURL         string
	sentinelAddrs    []string
	sentinelMaster   string
	clusterAddrs     []string
	redisPool        int
	redisTimeout     time.Duration
	redisCoalesce    bool
	redisStateFormat string
	waitReplicas     int
	waitTimeout      time.Duration
	denyEntries      int           // --deny-cache-entries
	denyMaxTTL       time.Duration // --deny-cache-max-ttl
	prefix           string
	adminToken       string
	decisionTimeout  time.Duration
	fallbackMode     string
	fallbackBudget   time.Duration
	instances        int
	fallbackFactor   float64
	drainTimeout     time.Duration
	readTimeout      time.Duration
	writeTimeout     time.Duration
	clockSync        bool
	clockSkewWarn    time.Duration
	clockOffset      time.Duration // hidden, for tests: shifts this process's clock
	shutdownDelay    time.Duration
	logFormat        string
	logLevel         string
	loginPrefix      string
	loginSecretFile  string
	loginIPv4Prefix  int
	loginIPv6Prefix  int
	memoryMaxKeys    int
	memoryMaxPeriods int // quota identity periods, memory mode
	memoryMaxRecords int // quota reservations and outcomes, memory mode
	memoryMaxLeases  int // concurrency leases, memory mode
	gcFloorMiB       int
	maxConns         int
	sec              securityFlags
	tokenFromFlag    bool
	waitTimeoutSet   bool     // --redis-wait-timeout given
	denyMaxTTLSet    bool     // --deny-cache-max-ttl given
	grpcTuned        []string // the gRPC listener's tuning flags given (gRPCTuning)
}

func newServeCmd() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the rate limit service (HTTP/JSON, optionally Envoy gRPC)",
		Long: `Run the rate limit service.

With no flags it runs in memory with the built-in example configuration
(tiers free/pro/enterprise, policies api, login, llm and downstream), so it
works on a fresh machine:

  floodgate serve
  floodgate check --policy api --id user=42

With --redis (or --redis-sentinel, --redis-cluster) every instance shares
its counters in Redis; when Redis fails, each policy is decided by its
on_redis_failure (default --fallback: a local in-memory limiter at the
limit divided by the live instance count) until Redis is back, which
background probes notice within about a second.

Configuration comes from --config FILE (reloaded when the file changes),
from Redis (--config-from-redis; publish with "floodgate config push"), or
the built-in example. The Envoy descriptors of the gRPC API come from
--envoy-config (files or directories, reloaded when they change). An
invalid new configuration is rejected and the last good one stays active.
With --config-from-redis, a Redis document that cannot be used at start
(the key missing, Redis unreachable, the document invalid or not signed
with --config-verify-key-file's key) does not stop the service: it starts
with no configuration, logs why, answers /readyz and the HTTP API with 503
(problem no-configuration) and applies the first valid document it reads.

Endpoints: POST /v1/check, /v1/check/batch, /v1/peek; POST
/v1/quota/check, /status, /reserve, /settle; POST /v1/concurrency/acquire,
/release, /renew; GET /metrics, /healthz, /readyz; admin endpoints under
/admin/v1/ with --admin-token. Requests other than GET, HEAD and OPTIONS
(any request, on the admin endpoints) that a browser sends on behalf of a
web page (with an Origin header, or a Sec-Fetch-Site of another site) are
refused (403) unless --trusted-origin names that Origin: floodgate serves
no page, and a page whose DNS name is rebound to this address sends an
Origin matching the Host. GETs such as
/metrics and /readyz stay readable by such a page unless --allowed-host
lists the names clients use (any other Host but IP addresses and
localhost is then refused with 421). Clients that are not browsers are
not affected.

With mutual TLS (--tls-client-ca-file) every listener requires a client
certificate, which kubelet's and most load balancers' probes cannot
present: --health-addr serves GET /healthz and /readyz, and nothing else,
over plain HTTP on an address of its own for them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.tokenFromFlag = cmd.Flags().Changed("admin-token")
			f.waitTimeoutSet = cmd.Flags().Changed("redis-wait-timeout")
			f.denyMaxTTLSet = cmd.Flags().Changed("deny-cache-max-ttl")
			for _, name := range gRPCTuning {
				if cmd.Flags().Changed(name) {
					f.grpcTuned = append(f.grpcTuned, "--"+name)
				}
			}
			if !f.tokenFromFlag {
				f.adminToken = os.Getenv("FLOODGATE_ADMIN_TOKEN")
			}
			return serve(cmd.Context(), f, cmd)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.addr, "addr", "127.0.0.1:8080", "HTTP listen address (host:port; port 0 picks a free one)")
	fl.StringVar(&f.httpServer, "http-server", string(server.NetHTTP), "HTTP server of --addr: net/http, or fasthttp (15–30 % less CPU per decision in most measured runs; HTTP/1.1 only, headers up to 64 KiB; see docs/operations.md)")
	fl.StringVar(&f.grpcAddr, "grpc-addr", "", "also serve Envoy's rate limit gRPC API on this address (needs --envoy-config)")
	fl.StringArrayVar(&f.envoyConfig, "envoy-config", nil, "descriptor configuration of the gRPC API in envoyproxy/ratelimit's YAML format: a file, or a directory whose .yaml and .yml files directly inside are read (subdirectories and other names are skipped, with a warning); repeatable; reloaded when it changes")
	fl.BoolVar(&f.envoyHeaders, "envoy-response-headers", false, "add X-RateLimit-Limit, -Remaining and -Reset to the gRPC answers for Envoy to return to clients (needs --grpc-addr)")
	fl.BoolVar(&f.envoyEach, "envoy-count-each-descriptor", false, "count a request in every descriptor whose limit admits it, as envoyproxy/ratelimit does (default: all-or-nothing across descriptors; needs --grpc-addr)")
	fl.StringVar(&f.configFile, "config", "", "YAML configuration file, reloaded when it changes (default: the built-in example)")
	fl.BoolVar(&f.configRedis, "config-from-redis", false, "read the configuration from Redis (key <prefix>:config) and apply every published change")
	fl.DurationVar(&f.reloadInterval, "reload-interval", defaultReloadInterval, "how often the configuration, Envoy descriptor and TLS certificate files are checked for changes, at least 10ms (0: the default; SIGHUP checks at once)")
	fl.StringVar(&f.redisURL, "redis", "", "Redis URL: redis://host:port/db, rediss://..., redis-sentinel://h1:p,h2:p/db?master=NAME or redis-cluster://h1:p,h2:p")
	fl.StringSliceVar(&f.sentinelAddrs, "redis-sentinel", nil, "Redis Sentinel addresses (host:port,...), with --redis-master")
	fl.StringVar(&f.sentinelMaster, "redis-master", "", "name of the primary the sentinels monitor")
	fl.StringSliceVar(&f.clusterAddrs, "redis-cluster", nil, "Redis Cluster seed addresses (host:port,...)")
	fl.IntVar(&f.redisPool, "redis-pool", 0, "Redis connections per node (default: 10 per CPU)")
	fl.DurationVar(&f.redisTimeout, "redis-timeout", time.Second, "read/write timeout of one Redis command (0: the default)")
	fl.BoolVar(&f.redisCoalesce, "redis-coalesce", true, "coalesce concurrent decisions into one script call per Redis server (per primary with --redis-cluster, where a layered decision on one primary is then one atomic call); false sends every decision alone")
	fl.IntVar(&f.denyEntries, "deny-cache-entries", 0, "cache the denials of up to this many keys in this process, so that the requests of an identity already over its limit are denied here, without a Redis call, until it may retry; every --deny-cache-max-ttl, one check goes to Redis meanwhile, whose answer renews the denial or drops it. It never admits what Redis would deny; a reset made on another instance (or a key deleted in Redis) is seen here by the first check after up to --deny-cache-max-ttl (POST /admin/v1/reset on this instance drops its entries at once). About 300 bytes per entry besides its key. 0 (the default): off; at most 10000000")
	fl.DurationVar(&f.denyMaxTTL, "deny-cache-max-ttl", defaultDenyMaxTTL, "how long a cached denial (--deny-cache-entries) answers, whatever its retry hint, before one check asks Redis again (the others are still answered from it until Redis has answered, or, once that check gets no answer, go to Redis or the fallback until Redis answers one): 1ms..1h")
	fl.StringVar(&f.redisStateFormat, "redis-state-format", "binary", "how the rate limits' states are written in Redis: binary (less work for Redis per decision) or text (readable by builds older than the binary format; set it on every upgraded instance during a rolling upgrade from such a build, then drop it). Both are always read")
	fl.IntVar(&f.waitReplicas, "redis-wait-replicas", 0, "answer a quota or lease operation, and an admin write (tier assignment, reset, quota restore, login unlock), only once this many replicas of its Redis primary have it (Redis WAIT on the same connection), so that a failover cannot lose an operation already answered; one not confirmed within --redis-wait-timeout fails with 503 store-not-replicated (it was applied on the primary: retry a quota or lease operation with the same request_id; an admin write sent again is harmless), except one that wrote nothing a failover could lose, such as a quota check or reserve that does not fit or an acquire denied, answered as it is. 0 (the default) answers without waiting; rate limit decisions never wait")
	fl.DurationVar(&f.waitTimeout, "redis-wait-timeout", replicawait.DefaultTimeout, "how long a quota or lease operation or an admin write waits for --redis-wait-replicas (0: the default)")
	fl.StringVar(&f.prefix, "prefix", "fg", "prefix of every Redis key and of the configuration and tier keys")
	fl.StringVar(&f.adminToken, "admin-token", "", "bearer token enabling the admin endpoints (default: $FLOODGATE_ADMIN_TOKEN; none disables them)")
	fl.DurationVar(&f.decisionTimeout, "decision-timeout", server.DefaultDecisionTimeout, "deadline of one request's store calls (Redis, or the in-memory store without --redis): an HTTP check (a batch shares one) or a gRPC ShouldRateLimit (0: the default)")
	fl.StringVar(&f.fallbackMode, "fallback", "local", "when Redis fails, for policies without on_redis_failure: local (in-memory limiter), open (allow), closed (deny), or off (answer 503, for every policy)")
	fl.DurationVar(&f.fallbackBudget, "fallback-budget", fallback.DefaultBudget, "how long a request's Redis calls may take before the fallback decides (a check's tier lookup and decision share it; once a call of a batch or Envoy request has timed out, its other checks are decided by the fallback at once; 0: the default; unused with --fallback off, where --decision-timeout bounds each decision)")
	fl.IntVar(&f.instances, "instances", 1, "least number of instances sharing Redis; the local fallback divides limits by the larger of this and the live count (instances heartbeat into <prefix>:instances)")
	fl.Float64Var(&f.fallbackFactor, "fallback-factor", 1, "multiplies each limit of the local fallback after that division (rounded up), so that load spread unevenly over the instances is not denied early: 2 lets each instance admit twice its share while Redis is down (at most twice the limit in all); 1..1000")
	fl.BoolVar(&f.clockSync, "clock-sync", true, "on Redis, stamp decisions with Redis's TIME (measured every 10s) rather than this machine's clock, so that instances agree")
	fl.DurationVar(&f.clockSkewWarn, "clock-skew-warn", 100*time.Millisecond, "log a warning when this machine's clock is further than this from Redis's")
	fl.DurationVar(&f.clockOffset, "clock-offset", 0, "testing only: shift this process's clock")
	_ = fl.MarkHidden("clock-offset")
	fl.DurationVar(&f.drainTimeout, "drain-timeout", 10*time.Second, "how long shutdown waits for in-flight requests, per server: HTTP, then what is left of gRPC's (which drain alongside; with --grpc-addr, up to twice this in all)")
	fl.DurationVar(&f.readTimeout, "read-timeout", 5*time.Second, "how long a client may take to send one request, body included (slower ones are cut), and to set up a connection to --grpc-addr (TLS and HTTP/2 handshakes); at least 100ms (0: the default)")
	fl.DurationVar(&f.writeTimeout, "write-timeout", server.DefaultWriteTimeout, "how long serve may take to write one answer on --addr (on net/http counted from the request's headers, the decision included); a client that stops reading its answers has its connection closed after it; at least 100ms (0: the default)")
	fl.IntVar(&f.maxConns, "max-connections", 0, "connections --addr and --grpc-addr hold open at once, together (--grpc-addr half of them at most); at it, a new connection closes the keep-alive connection idle longest once idle 1 s, or waits in the listen backlog while none is idle, so that clients cannot use up the file descriptors the admin and probes' listeners and Redis need (0: the file descriptor limit less a reserve of a quarter of it, at least 256 and at most half). --admin-addr and --health-addr each hold at most 64 connections of that reserve (a quarter of it if less, at least 8), closing their own idle ones alike")
	fl.DurationVar(&f.shutdownDelay, "shutdown-delay", 0, "how long to keep serving with readiness off before shutting down (0: stop accepting at once; behind a load balancer or Kubernetes Service, at least the time it takes to see /readyz fail and stop sending, e.g. 5s as deploy/kubernetes sets)")
	fl.StringVar(&f.loginSecretFile, "login-secret-file", "", "file holding the HMAC secret of the applications' login guard (package loginguard; at least 32 random bytes, readable by this user only); enables POST /admin/v1/login/unlock (needs Redis)")
	fl.StringVar(&f.loginPrefix, "login-prefix", "login", "Redis key prefix of that login guard (its loginguard.NewRedis prefix)")
	fl.IntVar(&f.loginIPv4Prefix, "login-ipv4-prefix", 32, "network size, in bits, that login guard counts IPv4 clients by (its Options.IPv4Prefix)")
	fl.IntVar(&f.loginIPv6Prefix, "login-ipv6-prefix", 64, "network size, in bits, that login guard counts IPv6 clients by (its Options.IPv6Prefix)")
	fl.IntVar(&f.memoryMaxKeys, "memory-max-keys", 1_000_000, "identities the in-memory store (memory mode, and the local fallback on Redis) tracks at most, each of its shards its share; a new identity in a full shard evicts one of that shard, one-off identities first, so eviction can start below this (about 175 bytes per identity plus its key)")
	fl.IntVar(&f.memoryMaxPeriods, "memory-max-quota-periods", defaultMaxQuotaPeriods, fmt.Sprintf("in memory mode, the quota identity periods (one identity's usage of one quota in one period) held at most; past it, quota operations for identities not held answer 503 until held periods end (a monthly quota's are kept until 25 hours after its month): about %d bytes each, %d MB at the default", quotaPeriodBytes, defaultMaxQuotaPeriods*quotaPeriodBytes/1_000_000))
	fl.IntVar(&f.memoryMaxRecords, "memory-max-quota-records", defaultMaxQuotaRecords, fmt.Sprintf("in memory mode, the quota reservations and settlement outcomes (each settle's, kept an hour for retries) held at most, all identities together; past it, reserves and settles of request ids not held answer 503 until some expire: at most about %d bytes each, %d MB at the default", quotaRecordBytes, defaultMaxQuotaRecords*quotaRecordBytes/1_000_000))
	fl.IntVar(&f.memoryMaxLeases, "memory-max-leases", defaultMaxLeases, fmt.Sprintf("in memory mode, the concurrency leases held at most, all identities together; past it, acquires answer 503 until leases are released or expire: at most about %d bytes each, %d MB at the default", leaseBytes, defaultMaxLeases*leaseBytes/1_000_000))
	addSecurityFlags(fl, &f.sec)
	addGCFlag(fl, &f.gcFloorMiB)
	fl.StringVar(&f.logFormat, "log-format", "json", "log format: json or text")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}

// The bounds of the stores that keep quotas and leases in memory mode:
// their defaults, and the heap an entry costs at most, from
// TestMemoryPerPeriod and TestMemoryPerRecord (package quota) and
// TestMemoryPerLease (package concurrency), rounded up: 260 bytes a period
// with a 64-byte identity (94-byte keys; the key's bytes beyond count
// once more), up to 280 a reservation or outcome with a 128-byte request
// id, and 242 an identity with one lease (each further lease 115). The
// defaults hold at most 26 + 75 + 25 MB of live heap.
const (
	defaultMaxQuotaPeriods = 100_000
	defaultMaxQuotaRecords = 250_000
	defaultMaxLeases       = 100_000
	quotaPeriodBytes       = 260
	quotaRecordBytes       = 300
	leaseBytes             = 250
)

// registerMemoryBounds registers what the in-memory stores hold and the
// most they may (their flags), by store: ratelimit (the memstore of
// memory mode or of the local fallback, in both modes) and, in memory
// mode, quota_periods, quota_records, leases.
func registerMemoryBounds(reg prometheus.Registerer, f serveFlags, b *backend) error {
	type bound struct {
		store string
		max   int
		held  func() int
	}
	bounds := []bound{{"ratelimit", f.memoryMaxKeys, b.local.Len}}
	if b.memQuotas != nil {
		bounds = append(bounds,
			bound{"quota_periods", f.memoryMaxPeriods, func() int { n, _ := b.memQuotas.Len(); return n }},
			bound{"quota_records", f.memoryMaxRecords, func() int { _, n := b.memQuotas.Len(); return n }},
			bound{"leases", f.memoryMaxLeases, b.memLeases.Len})
	}
	for _, s := range bounds {
		if err := metrics.RegisterMemoryStore(reg, s.store, s.max, s.held); err != nil {
			return err
		}
	}
	return nil
}

// memoryOnlyFlags bound what memory mode keeps in this process; with
// Redis they would be silently unused.
var memoryOnlyFlags = []string{"memory-max-quota-periods", "memory-max-quota-records", "memory-max-leases"}

// backend is the store a service decides with, and what goes with it.
type backend struct {
	store     floodgate.Store
	quotas    quota.Store
	leases    concurrency.Store
	client    redis.UniversalClient    // nil in memory
	follow    *sentinelfollow.Follower // on Sentinel only
	fb        *fallback.Store          // nil in memory and with --fallback off
	local     *memstore.Store
	memQuotas *quota.MemoryStore       // nil on Redis
	memLeases *concurrency.MemoryStore // nil on Redis
	redis     *redisstore.Store        // the decisions' store on Redis; nil in memory
	// waiting is the --redis-wait-replicas client the quota, lease and
	// admin writes go through; nil without the flag.
	waiting   *replicawait.Client
	resetters []server.Resetter
	// deny is --deny-cache-entries' cache in front of store; nil when
	// off.
	deny     *denycache.Store
	ready    func(ctx context.Context) error
	describe string
}

// splitReleaseLogEvery is the least time between two log lines of failed
// split releases, as server.Options.WarnEvery's default for the other
// failures met per request.
const splitReleaseLogEvery = 10 * time.Second

// releaseWait is how long shutdown waits for the releases of split
// decisions sent in the background (redisstore.Store.WaitReleases), each
// of which ends within a second.
const releaseWait = 2 * time.Second

// newBackend returns the store. modeFor gives a policy's failure mode
// from the live configuration (0: --fallback's).
func newBackend(f serveFlags, m *metrics.Metrics, log *slog.Logger, modeFor func(string) fallback.Mode) (*backend, error) {
	if f.memoryMaxKeys < 1 {
		return nil, fmt.Errorf("--memory-max-keys %d: want at least 1", f.memoryMaxKeys)
	}
	local, err := memstore.New(memstore.Options{MaxKeys: f.memoryMaxKeys})
	if err != nil {
		return nil, fmt.Errorf("--memory-max-keys: %w", err)
	}
	if f.redisPool < 0 || f.redisPool > config.MaxPoolSize {
		return nil, fmt.Errorf("--redis-pool %d: out of range 0..%d (0: 10 per CPU)", f.redisPool, config.MaxPoolSize)
	}
	if f.redisTimeout < 0 {
		return nil, fmt.Errorf("--redis-timeout %v: want 0 (the default, 1s) or a positive duration", f.redisTimeout)
	}
	rs := config.Redis{URL: f.redisURL, SentinelAddrs: f.sentinelAddrs, SentinelMaster: f.sentinelMaster,
		ClusterAddrs: f.clusterAddrs, PoolSize: f.redisPool, CommandTimeout: f.redisTimeout}
	f.sec.redisSettings(&rs)
	if !rs.Enabled() {
		if f.configRedis {
			return nil, errors.New("--config-from-redis needs --redis, --redis-sentinel or --redis-cluster")
		}
		for _, v := range []struct {
			name string
			n    int
		}{{"memory-max-quota-periods", f.memoryMaxPeriods}, {"memory-max-quota-records", f.memoryMaxRecords}, {"memory-max-leases", f.memoryMaxLeases}} {
			if v.n < 1 {
				return nil, fmt.Errorf("--%s %d: want at least 1", v.name, v.n)
			}
		}
		b := &backend{store: local, local: local, resetters: []server.Resetter{server.MemoryResetter{Store: local}}, describe: "memory"}
		if b.memQuotas, err = quota.NewMemoryStore(quota.MemoryOptions{MaxKeys: f.memoryMaxPeriods, MaxRecords: f.memoryMaxRecords}); err != nil {
			return nil, fmt.Errorf("--memory-max-quota-periods, --memory-max-quota-records: %w", err)
		}
		// Every identity tracked holds a lease: the leases bound them.
		if b.memLeases, err = concurrency.NewMemoryStore(concurrency.MemoryOptions{MaxKeys: f.memoryMaxLeases, MaxLeases: f.memoryMaxLeases}); err != nil {
			return nil, fmt.Errorf("--memory-max-leases: %w", err)
		}
		b.quotas, b.leases = b.memQuotas, b.memLeases
		return b, nil
	}
	client, follow, err := rs.FollowingClient()
	if err != nil {
		return nil, err
	}
	// The breaker's probes and readiness's share what Redis last
	// replied, so that /readyz's timeouts say it (LOADING, say).
	replies := server.NewErrorReplies()
	ro := server.ReadyOptions{Log: log, Replies: replies}
	if follow != nil {
		ro.Nodes = follow // behind Sentinel, /readyz names the nodes that failed
	}
	b := &backend{client: client, follow: follow, local: local, describe: "redis " + rs.String(),
		resetters: []server.Resetter{server.RedisResetter{Client: client}, server.MemoryResetter{Store: local}},
		ready:     server.RedisReadyWith(client, f.prefix+":probe", ro), // the breaker's probe key
	}
	var so redisstore.Options
	if so.StateFormat, err = redisstore.ParseStateFormat(f.redisStateFormat); err != nil {
		client.Close()
		return nil, fmt.Errorf("--redis-state-format: %w", err)
	}
	if !f.redisCoalesce {
		so.Coalesce = redisstore.CoalesceOff
	}
	// A split decision's part whose release failed keeps its charge
	// (floodgate_split_release_failures_total) for a request the store
	// did not admit: another part denied it (the answer is that denial)
	// or failed (the answer is the fallback's, which may admit it, or a
	// fail-closed policy's denial). The answer does not show the kept
	// charge: this line and the counter do.
	relLog := ratelog.New(log, splitReleaseLogEvery)
	so.OnReleaseFailure = func(err error) {
		relLog.Warn("split release", "split decision: a request the store did not admit (a denial, or a failure answered by the fallback or a fail-closed policy) keeps its charge on some layers (their release failed), until their windows or periods end", "error", err)
	}
	primary, err := redisstore.New(client, so)
	if err != nil {
		client.Close()
		return nil, err
	}
	b.store, b.redis = primary, primary
	// Quotas and leases live in the same Redis; they have no local
	// fallback (a quota counted per instance would multiply the allowance),
	// so their operations fail with 503 while Redis is down. With
	// --redis-wait-replicas they are answered once replicated.
	var durable quota.Client = client
	if f.waitReplicas == 0 && f.waitTimeoutSet {
		client.Close()
		return nil, errors.New("--redis-wait-timeout needs --redis-wait-replicas")
	}
	if f.waitReplicas != 0 {
		if f.waitReplicas < 0 || f.waitReplicas > replicawait.MaxReplicas {
			client.Close()
			return nil, fmt.Errorf("--redis-wait-replicas %d: out of range 0..%d (0: do not wait)", f.waitReplicas, replicawait.MaxReplicas)
		}
		if f.waitTimeout < 0 {
			client.Close()
			return nil, fmt.Errorf("--redis-wait-timeout %v: want 0 (the default, %v) or a positive duration", f.waitTimeout, replicawait.DefaultTimeout)
		}
		if b.waiting, err = replicawait.New(client, replicawait.Options{Replicas: f.waitReplicas, Timeout: f.waitTimeout}); err != nil {
			client.Close()
			return nil, fmt.Errorf("--redis-wait-replicas: %w", err)
		}
		durable = b.waiting
		// The admin writes (tier assignments, resets, login unlocks)
		// are answered once replicated too: one answered 200 and then
		// lost by a failover is as silent as a lost settlement.
		b.resetters[0] = server.RedisResetter{Client: client, Writer: b.waiting}
		master := ""
		if st, ok, err := rs.Sentinels(); ok && err == nil {
			master = st.Master
		}
		warnFewReplicas(client, master, f.waitReplicas, log)
	}
	if b.quotas, err = quota.NewRedisStore(durable); err != nil {
		client.Close()
		return nil, err
	}
	if b.leases, err = concurrency.NewRedisStore(durable); err != nil {
		client.Close()
		return nil, err
	}
	if f.fallbackMode == "off" {
		// No fallback store to report the decisions made on Redis:
		// they are reported here, as the fallback store reports its
		// primary's.
		b.store = observedStore{primary, m}
		return b, nil
	}
	mode, err := fallback.ParseMode(f.fallbackMode)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("--fallback %q: want local, open, closed or off", f.fallbackMode)
	}
	if f.fallbackFactor < 1 || f.fallbackFactor > 1000 || f.fallbackFactor != f.fallbackFactor {
		client.Close()
		return nil, fmt.Errorf("--fallback-factor %v: want 1..1000 (1: each instance its share of the limit)", f.fallbackFactor)
	}
	observer := newBreakerLog(m, log)
	observer.replies = replies
	fo := fallback.Options{DefaultMode: mode, ModeFor: modeFor, Budget: f.fallbackBudget, Instances: f.instances, Factor: f.fallbackFactor, Observer: observer,
		// Logged at most once per 10 s per reason, with the count held
		// back: the breaker's lines say nothing of decisions that fell
		// back while it stayed closed.
		OnFallback: logFallbacks(log, fallbackLogEvery),
		// At debug level, every such decision (docs/operations.md, Logs).
		OnDegraded: logEachFallback(log),
		// Background probes, independent of traffic, bring central
		// counting back within about a second of Redis being healthy.
		Probe: replies.Probe(fallback.RedisProbe(client, f.prefix+":probe")),
	}
	if cc, ok := client.(*redis.ClusterClient); ok {
		fo.Partition = fallback.ClusterPartition(cc)
		// A primary demoted by a coordinated failover leaves /readyz and
		// rate_limit_breaker_state within a sweep, even if its breaker
		// never opened.
		fo.Partitions = fallback.ClusterPartitions(cc)
	}
	if b.fb, err = fallback.New(primary, local, fo); err != nil {
		client.Close()
		return nil, err
	}
	b.store = b.fb
	return b, nil
}

// initialHolder holds the configuration the service starts with: the
// --config file (an error if it cannot be used: the operator fixes it on
// this machine), the built-in example, or the Redis document. A Redis
// document that cannot be used (the key missing, Redis unreachable, the
// document invalid or not signed with --config-verify-key-file's key) is
// no reason to exit: every restart would then fail until someone fixed
// Redis, and a supervisor's back-off would delay the instance past the
// fix. The holder then has no configuration (config.NewPendingHolder):
// /readyz answers 503 and the API 503 no-configuration, saying why, until
// the watcher applies the first valid document.
func initialHolder(ctx context.Context, f serveFlags, b *backend, keys config.Keys) (*config.Holder, error) {
	var cfg *config.Config
	var err error
	switch {
	case f.configFile != "":
		// A named pipe (<(command), /dev/stdin) is refused unread: its
		// first read could wait forever, and every later one, at each
		// poll, finds it empty. LoadFile refuses one swapped in since.
		if err := config.RegularFile(f.configFile); err != nil {
			return nil, fmt.Errorf("--config %w", err)
		}
		cfg, err = config.LoadFile(f.configFile)
	case f.configRedis:
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		cfg, err = config.LoadRedisVerified(lctx, b.client, keys, f.sec.verifyKeys...)
		if err != nil {
			// The watcher reads it again at once and logs why.
			return config.NewPendingHolder("redis:"+keys.Config, err), nil
		}
	default:
		cfg, err = config.Default()
	}
	if err != nil {
		return nil, err
	}
	return config.NewHolder(cfg)
}

// checkDurations refuses a negative duration flag, naming it: none of them
// means anything below zero, and some would otherwise take one silently
// (as their default, or as no timeout at all).
func checkDurations(f *serveFlags) error {
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--reload-interval", f.reloadInterval}, {"--redis-timeout", f.redisTimeout}, {"--decision-timeout", f.decisionTimeout},
		{"--fallback-budget", f.fallbackBudget}, {"--clock-skew-warn", f.clockSkewWarn}, {"--drain-timeout", f.drainTimeout},
		{"--read-timeout", f.readTimeout}, {"--write-timeout", f.writeTimeout}, {"--shutdown-delay", f.shutdownDelay},
		{"--deny-cache-max-ttl", f.denyMaxTTL},
	} {
		if d.v < 0 {
			return fmt.Errorf("%s %v: must not be negative", d.flag, d.v)
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--read-timeout", f.readTimeout}, {"--write-timeout", f.writeTimeout}} {
		if d.v > 0 && d.v < server.MinIOTimeout {
			return fmt.Errorf("%s %v: want at least %v (0: the default); shorter, no request could be read or answer written in time (the connection is closed instead)", d.flag, d.v, server.MinIOTimeout)
		}
	}
	if f.reloadInterval > 0 && f.reloadInterval < minReloadInterval {
		return fmt.Errorf("--reload-interval %v: want at least %v (0: the default, %v); each poll stats the files, and a shorter one only burns CPU", f.reloadInterval, minReloadInterval, defaultReloadInterval)
	}
	return nil
}

// warnFewReplicas logs each Redis primary with fewer replicas connected
// than --redis-wait-replicas asks for: every quota and lease operation and
// admin write on it will answer 503 until enough are. A primary that cannot be asked now
// (Redis down at start) is not reported. master is the name the sentinels
// know the primary by behind Sentinel, "" otherwise; the primary is named
// by its address (see primaryAddr).
func warnFewReplicas(client redis.UniversalClient, master string, want int, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	check := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return nil
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
				if n, err := strconv.Atoi(v); err == nil && n < want {
					attrs := []any{"primary", primaryAddr(ctx, c, master), "replicas", n, "redis_wait_replicas", want}
					if master != "" {
						attrs = append(attrs, "master", master)
					}
					log.Warn("the Redis primary has fewer replicas connected than --redis-wait-replicas: its quota and lease operations and admin writes answer 503 store-not-replicated until enough are", attrs...)
				}
			}
		}
		return nil
	}
	switch c := client.(type) {
	case *redis.ClusterClient:
		_ = c.ForEachMaster(ctx, check)
	case *redis.Client:
		_ = check(ctx, c)
	}
}

// primaryAddr returns the address of c's server: c's own, or behind
// Sentinel (master is not "", and go-redis's failover client has no
// address of its own but "FailoverClient") the server's end of a
// connection to it, as CLIENT INFO's laddr gives it (Redis 6.2 and
// later), or, failing that, the master's name.
func primaryAddr(ctx context.Context, c *redis.Client, master string) string {
	if master == "" {
		return c.Options().Addr
	}
	info, err := c.Do(ctx, "client", "info").Text()
	if err == nil {
		for _, field := range strings.Fields(info) {
			if v, ok := strings.CutPrefix(field, "laddr="); ok && v != "" {
				return v
			}
		}
	}
	return master
}

// minReloadInterval is the shortest --reload-interval serve and
// envoy-compat take: a nanosecond's poll kept a core busy.
// defaultReloadInterval is the default of both, and what 0 means.
const (
	minReloadInterval     = 10 * time.Millisecond
	defaultReloadInterval = time.Second
)

// redisOnlyFlags set up the connection to Redis or what is kept there:
// without a Redis address they would be silently unused, and an instance
// meant to share its counters (through Sentinel, say, with
// --redis-master given but --redis-sentinel forgotten) would count alone
// in its own memory.
var redisOnlyFlags = []string{
	"redis-master", "redis-password-file", "redis-username", "redis-sentinel-password-file", "redis-sentinel-username", "redis-tls", "redis-ca-file", "redis-cert-file", "redis-key-file",
	"redis-server-name", "redis-pool", "redis-timeout", "redis-state-format", "redis-coalesce", "redis-wait-replicas", "redis-wait-timeout", "instances", "fallback-factor",
	// The in-memory store answers locally already.
	"deny-cache-entries", "deny-cache-max-ttl",
	"login-prefix",
	// What serve does when Redis fails, and its clock's discipline to
	// Redis's: in memory there is no Redis to fail or to read the time
	// from. --fallback closed was taken silently, and its user believed
	// the service failed closed.
	"fallback", "fallback-budget", "clock-sync", "clock-skew-warn",
}

// checkRedisFlags refuses a flag of redisOnlyFlags set on the command line
// when no Redis is given (--redis, --redis-sentinel or --redis-cluster).
// It refuses a flag of memoryOnlyFlags when Redis is given, and
// --fallback-budget with --fallback off.
func checkRedisFlags(cmd *cobra.Command, f *serveFlags) error {
	if f.redisURL != "" || len(f.sentinelAddrs) > 0 || len(f.clusterAddrs) > 0 {
		for _, name := range memoryOnlyFlags {
			if cmd.Flags().Changed(name) {
				return fmt.Errorf("--%s applies in memory mode only: with --redis, --redis-sentinel or --redis-cluster, quotas and leases are kept in Redis (bound them with its maxmemory)", name)
			}
		}
		if f.fallbackMode == "off" && cmd.Flags().Changed("fallback-budget") {
			return errors.New("--fallback-budget is unused with --fallback off: no fallback decides, and --decision-timeout bounds each decision (drop --fallback-budget, or pick another --fallback)")
		}
		return nil
	}
	for _, name := range redisOnlyFlags {
		if cmd.Flags().Changed(name) {
			if strings.HasPrefix(name, "redis-sentinel-") {
				// Not "needs --redis": a walk added a redis:// URL and
				// was refused again, for want of sentinels.
				return fmt.Errorf("--%s needs sentinels: --redis-sentinel (with --redis-master) or a redis-sentinel:// --redis URL", name)
			}
			return fmt.Errorf("--%s needs --redis, --redis-sentinel or --redis-cluster (without one, serve keeps every count in this process's memory)", name)
		}
	}
	return nil
}

func serve(ctx context.Context, f serveFlags, cmd *cobra.Command) error {
	log, err := newLogger(cmd.ErrOrStderr(), f.logFormat, f.logLevel)
	if err != nil {
		return err
	}
	if err := checkDurations(&f); err != nil {
		return err
	}
	if err := checkDenyFlags(f); err != nil {
		return err
	}
	if f.configFile != "" && f.configRedis {
		// Refused before anything dials Redis.
		return errors.New("give either --config or --config-from-redis, not both")
	}
	if f.maxConns < 0 {
		return fmt.Errorf("--max-connections %d: want 0 (derived from the file descriptor limit) or more", f.maxConns)
	}
	if f.decisionTimeout == 0 {
		// The HTTP API (server.Options) takes 0 as its default; the gRPC
		// API (envoyrls.Options.Timeout) would take it as no bound.
		f.decisionTimeout = server.DefaultDecisionTimeout
	}
	// An invalid --fallback is named as such, before the check that
	// refuses any --fallback in memory mode.
	if _, err := fallback.ParseMode(f.fallbackMode); err != nil && f.fallbackMode != "off" {
		return fmt.Errorf("--fallback %q: want local, open, closed or off", f.fallbackMode)
	}
	if err := checkRedisFlags(cmd, &f); err != nil {
		return err
	}
	if err := checkHealthAddr(&f); err != nil {
		return err
	}
	if err := checkAdminAddr(&f); err != nil {
		return err
	}
	if err := resolveSecrets(&f, f.tokenFromFlag, log); err != nil {
		return err
	}
	// go-redis logs through a process-wide logger: route it into ours.
	redis.SetLogger(newRedisLogger(log, 10*time.Second))
	keys, err := config.KeysFor(f.prefix)
	if err != nil {
		return fmt.Errorf("--prefix: %w", err)
	}
	if _, err := redisstore.ParseStateFormat(f.redisStateFormat); err != nil {
		return fmt.Errorf("--redis-state-format %q: want binary or text", f.redisStateFormat)
	}
	engine, err := server.ParseHTTPEngine(f.httpServer)
	if err != nil {
		return fmt.Errorf("--http-server %q: want %s or %s", f.httpServer, server.NetHTTP, server.FastHTTP)
	}
	stopGC, err := startGC(f.gcFloorMiB)
	if err != nil {
		return err
	}
	defer stopGC()
	reg := prometheus.NewRegistry()
	if err := registerRuntime(reg); err != nil {
		return err
	}
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		return err
	}
	// The failure mode of a policy is its on_redis_failure in the live
	// configuration; holder is set before the first decision.
	var holder *config.Holder
	modeFor := func(layer string) fallback.Mode {
		if holder == nil {
			return 0
		}
		// The store sees "policy.layer" for the configuration's
		// policies; an Envoy descriptor's derived name also starts with
		// "domain.", so a policy and a domain of one name must not share
		// a failure mode: only a layer the policy has takes the policy's
		// (a derived name's tail, the descriptor key, a dash and 12 hex
		// digits, is refused as a layer name).
		// Envoy descriptors take --fallback.
		name, rest, _ := strings.Cut(layer, ".")
		p, ok := holder.Load().Policy(name)
		if !ok || p.OnRedisFailure == "" {
			return 0
		}
		for i := range p.Layers {
			if p.Layers[i].Name == rest {
				mode, _ := fallback.ParseMode(p.OnRedisFailure)
				return mode
			}
		}
		return 0
	}
	b, err := newBackend(f, m, log, modeFor)
	if err != nil {
		return err
	}
	if b.client != nil {
		defer b.client.Close()
	}
	if err := addDenyCache(f, b); err != nil {
		return err
	}
	if b.redis != nil {
		// Run before the client closes: the releases of split decisions
		// sent in the background in the last second end first, so their
		// layers do not keep charges of requests not admitted.
		defer func() {
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseWait)
			defer cancel()
			if err := b.redis.WaitReleases(wctx); err != nil {
				log.Warn("shutdown: split releases still in the background are cut short; their layers may keep charges until their windows end", "error", err)
			}
		}()
	}
	if b.follow != nil {
		// Keeps the client on the primary most sentinels name, until the
		// client is closed (the defers run in reverse).
		fctx, stopFollow := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); b.follow.Run(fctx, log) }()
		defer func() { stopFollow(); <-done }()
		// Before listening, so that /readyz and the sentinel gauges
		// answer with what the sentinels said from the first request.
		b.follow.WaitAsked(ctx)
	}
	if b.fb != nil {
		defer b.fb.Close()
	}
	if b.memQuotas != nil {
		// Their background sweeps end with the service.
		defer b.memQuotas.Close()
		defer b.memLeases.Close()
	}
	if err := reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "floodgate_memstore_evictions_total",
		Help: "Live identities the in-memory store (memory mode or local fallback) dropped to make room for new ones (--memory-max-keys).",
	}, func() float64 { return float64(b.local.Evictions()) })); err != nil {
		return err
	}
	if b.redis != nil {
		if err := metrics.RegisterSplitReleaseFailures(reg, b.redis.ReleaseFailures); err != nil {
			return err
		}
	}
	if b.deny != nil {
		if err := metrics.RegisterDenyCache(reg, b.deny, f.denyEntries); err != nil {
			return err
		}
	}
	if err := registerMemoryBounds(reg, f, b); err != nil {
		return err
	}
	if b.fb != nil {
		if err := metrics.RegisterFallbackInstances(reg, b.fb.Instances); err != nil {
			return err
		}
	}
	if b.follow != nil {
		if err := metrics.RegisterSentinels(reg, "redis", b.follow.Status); err != nil {
			return err
		}
	}
	clock, err := startClock(ctx, f, b, m, log)
	if err != nil {
		return err
	}
	// The service's one clock: the HTTP server's quotas and leases and the
	// gRPC API's decisions read it from lim (floodgate.Limiter.Now).
	lim, err := floodgate.New(b.store, floodgate.Options{Prefix: f.prefix, Clock: clock.now})
	if err != nil {
		return err
	}
	if holder, err = initialHolder(ctx, f, b, keys); err != nil {
		return err
	}
	cfg := holder.Load() // empty while none is loaded
	for _, w := range cfg.Warnings() {
		log.Warn("configuration warning: "+w, "source", cfg.Source(), "config_version", cfg.Version())
	}
	reloader, err := config.NewReloader(holder, config.ReloaderOptions{Logger: log, Registerer: reg, VerifyKeys: f.sec.verifyKeys})
	if err != nil {
		return err
	}
	var assign config.Assignments = &config.MemoryAssignments{}
	var redisAssign *config.RedisAssignments
	if b.client != nil {
		ao := config.RedisAssignmentsOptions{}
		if b.fb != nil {
			ao.Guard = b.fb.Call // no lookups while the breaker is open
		}
		if b.waiting != nil {
			ao.Writer = b.waiting
		}
		if redisAssign, err = config.NewRedisAssignments(b.client, keys.Tiers, ao); err != nil {
			return err
		}
		assign = redisAssign
		if _, ok := b.client.(*redis.ClusterClient); ok {
			warnCrossSlot(log, cfg)
		}
	}
	if b.follow != nil {
		// On a switch of primary the tier assignments, and the document
		// with --config-from-redis, are read again at once, on the new
		// one: a write the old one took in its last moments is lost,
		// and the instances would otherwise use it until their cache
		// expires or their next poll.
		b.follow.OnMove(func(from, to string) {
			if f.configRedis {
				log.Warn("the sentinels name a new Redis primary: connections to the old one are dropped; reading the configuration and tier assignments from the new one", "master", f.sentinelMaster, "old", from, "new", to)
				reloader.PrimaryMoved(from, to)
			} else {
				log.Warn("the sentinels name a new Redis primary: connections to the old one are dropped; reading tier assignments from the new one", "master", f.sentinelMaster, "old", from, "new", to)
			}
			redisAssign.ExpireAll()
		})
	}
	opts := server.Options{
		Logger: log, Registerer: reg, Gatherer: reg, Metrics: m, AdminToken: f.adminToken, Version: build.Version,
		Assignments: assign, Resetters: b.resetters, Ready: b.ready, DecisionTimeout: f.decisionTimeout,
		DrainTimeout: f.drainTimeout, ShutdownDelay: f.shutdownDelay, ReadTimeout: f.readTimeout,
		WriteTimeout: f.writeTimeout,
		QuotaStore:   b.quotas, ConcurrencyStore: b.leases, LookupTimeout: f.fallbackBudget, HTTPEngine: engine,
	}
	if b.follow != nil {
		opts.Sentinels, opts.SentinelMaster = b.follow.Status, b.follow.Master()
	}
	if b.fb != nil {
		opts.Breaker, opts.Breakers = b.fb, b.fb.BreakerStates
		opts.ServesDegraded = true
	}
	f.sec.serverOptions(&opts)
	conns, err := connLimit(f, reg, log)
	if err != nil {
		return err
	}
	if conns != nil {
		opts.ConnState = conns.Track
	}
	side, err := sideLimits(&f.sec, conns, reg)
	if err != nil {
		return err
	}
	if side.admin != nil {
		opts.AdminConnState = side.admin.Track
	}
	if side.health != nil {
		opts.HealthConnState = side.health.Track
	}
	if opts.LoginGuard, err = loginGuard(f, b, log); err != nil {
		return err
	}
	opts.LoginPrefix = f.loginPrefix
	opts.Store = "memory"
	if b.client != nil {
		opts.Store, opts.HeartbeatID = "redis", heartbeatID()
	}
	if opts.LoginGuard != nil && f.adminToken == "" {
		log.Warn("--login-secret-file is set but the admin endpoints are off (no --admin-token or $FLOODGATE_ADMIN_TOKEN): POST /admin/v1/login/unlock answers 403 admin-disabled")
	}
	srv, err := server.New(lim, holder, opts)
	if err != nil {
		return err
	}
	envoy, err := envoyReloader(f, log, reg)
	if err != nil {
		return err
	}
	// The listeners' TLS, built here once so that the copies of f share
	// it and its certificate, which is watched below.
	if _, err := f.sec.serverTLS(); err != nil {
		return err
	}
	closeGRPC, stopGRPC, err := startGRPC(f, lim, srv, m, envoy, conns, log)
	if err != nil {
		return err
	}
	// "floodgate stopped" is logged last, once every listener has
	// drained and the instance has left the live count: a walk saw it
	// 10 s before the process ended, gRPC and the probes still served.
	served, serveErr := false, error(nil)
	defer func() {
		if served {
			log.Info("floodgate stopped", "error", serveErr)
		}
	}()
	// left, once the heartbeat runs, is closed when this instance has
	// left the live count (see below): waited for last, after the drains
	// it overlaps.
	var left chan struct{}
	defer func() {
		if left != nil {
			<-left
		}
	}()
	defer stopGRPC()
	// The gRPC listener stops accepting with the HTTP one, at the end of
	// --shutdown-delay, not once the HTTP drain is over: its calls drain
	// alongside the HTTP requests, and stopGRPC waits for what is left
	// afterwards, for up to --drain-timeout again.
	returned := make(chan struct{})
	defer close(returned)
	go func() {
		select {
		case <-srv.Closing():
			closeGRPC()
		case <-returned:
		}
	}()
	ln, err := f.sec.listen(f.addr, "--addr", conns, "http")
	if err != nil {
		return err
	}
	// The probes' and the admin listeners outlive the signal: they are
	// stopped once the drain has ended (these defers run after Serve has
	// returned), so that probes see /readyz answer 503 draining, and
	// Prometheus scrapes the metrics of a draining instance (with
	// --metrics-admin-only, served there only) until its last answer.
	waitHealth, err := startHealth(ctx, &f.sec, srv, side.health, log)
	if err != nil {
		return err
	}
	defer waitHealth()
	waitAdmin, err := startAdmin(ctx, &f.sec, srv, side.admin, log)
	if err != nil {
		return err
	}
	defer waitAdmin()
	// The first SIGINT or SIGTERM starts the shutdown; a second one ends
	// the process at once, as an operator pressing Ctrl-C again or a
	// supervisor repeating SIGTERM expects, rather than waiting out
	// --shutdown-delay and the drain: it is logged, then raised again with
	// its default action, so the process dies by it (exit status 130 or
	// 143 in a shell) and the log says why the drain was abandoned. The
	// same signal delivered twice at once, as timeout(1) does, is one
	// request to stop (repeatWindow).
	ctx, release := notifyStop(ctx, log, "abandoning the shutdown (delay and drain)")
	defer release()

	// The watchers are waited for at most watchWait once the drain is
	// over: a read that never returns (a hung network mount) is
	// abandoned, and logged as such, rather than keeping the process from
	// exiting after its promised --shutdown-delay and drains.
	var wg watchGroup
	wctx, cancelWatch := context.WithCancel(ctx)
	defer func() {
		cancelWatch()
		if stuck := wg.Wait(watchWait); stuck != nil {
			log.Warn("shutting down: abandoning reads that have not returned (a hung network mount?)", "waited", watchWait.String(), "watchers", stuck)
		}
	}()
	switch {
	case f.configFile != "":
		wg.Go("--config "+f.configFile, func() { reloader.WatchFile(wctx, f.configFile, f.reloadInterval) })
	case f.configRedis:
		wg.Go("--config-from-redis", func() { reloader.WatchRedis(wctx, b.client, keys, 10*time.Second) })
	}
	if envoy != nil {
		wg.Go("--envoy-config", func() { envoy.Watch(wctx, f.reloadInterval) })
	}
	if cert := f.sec.cert; cert != nil {
		// A renewed certificate is served to new connections without a
		// restart, checked as often as the configuration.
		wg.Go("--tls-cert-file", func() { cert.Watch(wctx, f.reloadInterval) })
		if err := metrics.RegisterTLSExpiry(reg, cert.NotAfter); err != nil {
			return err
		}
		if f.sec.tlsClientCAFile != "" {
			if err := metrics.RegisterTLSClientRefused(reg, cert.Refused); err != nil {
				return err
			}
		}
	}
	// SIGHUP reads the configuration sources at once instead of at their
	// next poll; it never stops the service (the signal's default action,
	// which a supervisor sending the customary "reload" would not expect).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	wg.Go("SIGHUP", func() { onHangup(wctx, hup, &f, reloader, envoy, log) })
	if clock.sync != nil {
		wg.Go("clock sync", func() { _ = clock.sync.Run(wctx) })
	}
	if b.client != nil {
		hb, err := startHeartbeat(f, b, opts.HeartbeatID, reg, log)
		if err != nil {
			return err
		}
		ran := make(chan struct{})
		wg.Go("heartbeat", func() { defer close(ran); _ = hb.Run(wctx) })
		// A stopping instance leaves the live count at once, when the
		// shutdown starts (the signal ends wctx), not after
		// --shutdown-delay and the drains: the others widen their local
		// limits at their next beat, and the second the leave may wait
		// for a stalled Redis passes during the delay and the drains,
		// not after them.
		// It leaves once its last beat has ended, so that no beat
		// still in flight puts it back.
		left = make(chan struct{})
		context.AfterFunc(wctx, func() {
			defer close(left)
			<-ran
			lctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = hb.Leave(lctx)
		})
	}

	log.Info("floodgate listening", append(append([]any{"addr", ln.Addr().String()}, buildAttrs(build)...),
		"http_server", engine, "store", b.describe, "config", cfg.Source(),
		"config_loaded", holder.Loaded(), "config_version", cfg.Version(), "policies", len(cfg.Policies()), "quotas", len(cfg.Quotas()),
		"concurrency_limits", len(cfg.ConcurrencyLimits()), "admin", f.adminToken != "", "max_connections", conns.Max(),
		"deny_cache_entries", f.denyEntries)...)
	serveErr = srv.Serve(ctx, ln)
	served = true
	return serveErr
}

// connLimit returns the budget of connections --addr and --grpc-addr
// share (--grpc-addr half of it at most, startGRPC): connBudget of
// --max-connections.
func connLimit(f serveFlags, reg prometheus.Registerer, log *slog.Logger) (*connlimit.Limit, error) {
	return connBudget(f.maxConns, "--max-connections", reg, log)
}

// sideConns are the connection limits of the admin listener and the
// probes' listener, nil for one not configured.
type sideConns struct{ admin, health *connlimit.Limit }

// sideLimits returns a budget of its own for each of --admin-addr and
// --health-addr that is set, of connlimit.Side connections (SideMax when
// the file descriptor limit is unknown), out of the reserve conns, the
// public budget, leaves: a flood of connections to either can neither use
// up the descriptors Redis needs nor take the public listeners' places,
// and, as on --addr, a new connection closes the one idle longest there
// once idle 1 s, so that a probe is still answered. Their metrics are
// floodgate_side_connections_*, by listener (admin, health).
func sideLimits(s *securityFlags, conns *connlimit.Limit, reg prometheus.Registerer) (sideConns, error) {
	b, err := sideBudgets(conns, reg, map[string]bool{"admin": s.adminAddr != "", "health": s.healthAddr != ""})
	return sideConns{admin: b["admin"], health: b["health"]}, err
}

// sideBudgets returns a budget of its own for each listener of set that
// is true (by name, the label of its metrics), beside the public ones
// whose budget is conns: connlimit.Side of the reserve conns leaves, or
// connlimit.SideMax where the file limit is not known.
func sideBudgets(conns *connlimit.Limit, reg prometheus.Registerer, set map[string]bool) (map[string]*connlimit.Limit, error) {
	n := connlimit.SideMax
	if nofile, known := connlimit.FileLimit(); known && conns != nil {
		n = connlimit.Side(nofile, conns.Max())
	}
	sides, err := connlimit.NewSides(reg)
	if err != nil {
		return nil, err
	}
	b := make(map[string]*connlimit.Limit, len(set))
	for _, name := range slices.Sorted(maps.Keys(set)) {
		if !set[name] {
			continue
		}
		if b[name], err = sides.New(name, n); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// connBudget returns a budget of n connections (setting, the flag or
// variable that set it, in its warning), or by default (n 0)
// connlimit.Default of the file descriptor limit; nil when neither is
// known (a system without the limit). An n above that default is warned
// of: it leaves less than the reserve, and a flood of connections can
// then run Redis's and the other listeners' out of descriptors.
func connBudget(n int, setting string, reg prometheus.Registerer, log *slog.Logger) (*connlimit.Limit, error) {
	nofile, known := connlimit.FileLimit()
	switch {
	case n == 0 && !known:
		return nil, nil
	case n == 0:
		n = connlimit.Default(nofile)
	case known && n > connlimit.Default(nofile):
		log.Warn(setting+" leaves fewer file descriptors than the default reserve: a flood of connections may leave none for Redis and the other listeners",
			"max_connections", n, "file_limit", nofile, "default", connlimit.Default(nofile))
	}
	return connlimit.New(n, reg)
}

// loginGuard returns the guard whose lockouts the admin API lifts: one with
// the applications' Redis, prefix and secret, so it derives the same keys.
func loginGuard(f serveFlags, b *backend, log *slog.Logger) (server.LoginUnlocker, error) {
	if f.loginSecretFile == "" {
		if f.loginIPv4Prefix != 32 || f.loginIPv6Prefix != 64 || f.loginPrefix != "login" {
			return nil, errors.New("--login-prefix, --login-ipv4-prefix and --login-ipv6-prefix describe the login guard that --login-secret-file enables: give it too")
		}
		return nil, nil
	}
	if b.client == nil {
		return nil, errors.New("--login-secret-file needs --redis: the login guard to unlock keeps its state there")
	}
	secret, err := readSecretFile(f.loginSecretFile, "--login-secret-file", log)
	if err != nil {
		return nil, err
	}
	var lc loginguard.Client = b.client
	if b.waiting != nil {
		lc = b.waiting // serve's guard only unlocks: its writes wait too
	}
	backend, err := loginguard.NewRedis(lc, f.loginPrefix)
	if err != nil {
		return nil, fmt.Errorf("--login-prefix: %w", err)
	}
	if len(secret) < loginguard.MinSecretLen {
		return nil, fmt.Errorf("--login-secret-file: a secret of %d bytes, want at least %d", len(secret), loginguard.MinSecretLen)
	}
	g, err := loginguard.New(backend, loginguard.Options{Secret: []byte(secret), IPv4Prefix: f.loginIPv4Prefix, IPv6Prefix: f.loginIPv6Prefix})
	if err != nil {
		return nil, fmt.Errorf("--login-ipv4-prefix, --login-ipv6-prefix: %w", err)
	}
	return g, nil
}

// registerRuntime registers on reg what serve and envoy-compat export of
// the process besides their own metrics: the Go runtime's and the
// process's collectors, and floodgate_build_info naming this build.
func registerRuntime(reg *prometheus.Registry) error {
	if err := buildinfo.Register(reg, build); err != nil {
		return err
	}
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// warnCrossSlot logs the policies whose layers key on different
// identities: on Redis Cluster their keys fall in different slots. Such a
// decision is one atomic call when the slots lie on one primary, and is
// split by slot otherwise (reserve, then release on a denial: two round
// trips; see docs/layered.md).
func warnCrossSlot(log *slog.Logger, cfg *config.Config) {
	var bad []string
	for _, p := range cfg.Policies() {
		for _, l := range p.Layers[1:] {
			if l.Dimension() != p.Layers[0].Dimension() || l.Shards > 1 {
				bad = append(bad, p.Name)
				break
			}
		}
	}
	if len(bad) > 0 {
		log.Info("on Redis Cluster, these policies' layers key on different identities, so in different slots: a decision is one call when its slots lie on one primary, and split over the primaries (two round trips) otherwise",
			"policies", strings.Join(bad, ","))
	}
}

// observedStore is the Redis store serve decides on with --fallback off:
// it reports every decision, its duration and its error, to obs
// (rate_limit_redis_latency_seconds, rate_limit_redis_errors_total), as
// the fallback store reports its primary's calls otherwise.
type observedStore struct {
	floodgate.Store
	obs interface{ ObservePrimary(time.Duration, error) }
}

// Decide implements floodgate.Store.
func (o observedStore) Decide(ctx context.Context, now int64, layers []floodgate.Layer, out []floodgate.Result) error {
	start := time.Now()
	err := o.Store.Decide(ctx, now, layers, out)
	o.obs.ObservePrimary(time.Since(start), err)
	return err
}

// onHangup answers every SIGHUP on hup, until ctx ends, by asking the
// running watchers to read their sources at once: the policies' file or
// Redis document (reloader) and the Envoy descriptor files (envoy, nil
// without --envoy-config). What they read is applied, rejected and logged
// as at any poll.
func onHangup(ctx context.Context, hup <-chan os.Signal, f *serveFlags, reloader *config.Reloader, envoy *config.EnvoyReloader, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		// Named first, read after: each read logs what it found, and the
		// watchers run on goroutines of their own, so logging after
		// waking them could put their result before this line.
		var sources []string
		switch {
		case f.configFile != "":
			sources = append(sources, f.configFile)
		case f.configRedis:
			sources = append(sources, "redis")
		}
		if envoy != nil {
			sources = append(sources, envoy.Files()...)
		}
		if f.sec.cert != nil {
			sources = append(sources, f.sec.tlsCertFile)
			if f.sec.tlsClientCAFile != "" {
				sources = append(sources, f.sec.tlsClientCAFile)
			}
		}
		if len(sources) == 0 {
			log.Info("SIGHUP: nothing to reload (the built-in configuration; no --config, --config-from-redis, --envoy-config or --tls-cert-file)")
			continue
		}
		log.Info("SIGHUP: reading the configuration now", "sources", sources)
		if f.configFile != "" || f.configRedis {
			reloader.CheckNow()
		}
		if envoy != nil {
			envoy.CheckNow()
		}
		if f.sec.cert != nil {
			_, _ = f.sec.cert.Reload() // logs what it did
		}
	}
}
