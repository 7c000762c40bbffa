package envoycompat

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// Settings are envoyproxy/ratelimit's environment settings that
// `floodgate envoy-compat` reads, each with their default. Settings that
// change nothing here (statsd, tracing, pipelining) are listed in
// Ignored; settings for features Floodgate does not have are refused by
// FromEnv when set to a value that would need them (Refused).
type Settings struct {
	Host, DebugHost, GrpcHost string
	Port, DebugPort, GrpcPort int
	GrpcUDS                   string
	GrpcMaxConnectionAge      time.Duration
	GrpcMaxConnectionAgeGrace time.Duration
	// MaxConnections is Floodgate's own, not theirs (FLOODGATE_MAX_CONNECTIONS):
	// the connections the HTTP and gRPC listeners hold open at once,
	// together, as serve's --max-connections (the gRPC one half of them
	// at most; at it, the HTTP keep-alive connection idle longest, once
	// idle 1 s, is closed for a new one). 0, the default: the file
	// descriptor limit less a reserve of a quarter of it, at least 256
	// and at most half.
	MaxConnections int
	// GrpcReflection registers gRPC server reflection on the gRPC
	// listener (FLOODGATE_GRPC_REFLECTION, Floodgate's own; false, the
	// default, as theirs, which never registers it, and as serve's
	// --grpc-reflection).
	GrpcReflection bool

	LogLevel, LogFormat string

	ForceStartWithoutInitialConfig    bool
	HealthyWithAtLeastOneConfigLoaded bool
	// RedisHealthCheckActiveConnection keeps probing Redis once it has
	// answered, so that health turns bad again while it does not
	// (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION).
	RedisHealthCheckActiveConnection bool

	UsePrometheus  bool
	PrometheusAddr string
	PrometheusPath string

	RuntimeRoot, RuntimeSubdirectory, RuntimeAppDirectory string
	RuntimeIgnoreDotFiles, RuntimeWatchRoot               bool
	MergeDomainConfig                                     bool

	ExpirationJitterMaxSeconds         int64
	LocalCacheSizeInBytes              int
	NearLimitRatio                     float32
	CacheKeyPrefix                     string
	BackendType                        string
	StopCacheKeyIncrementWhenOverlimit bool

	ResponseHeadersEnabled                    bool
	LimitHeader, RemainingHeader, ResetHeader string

	GlobalShadowMode, GlobalQuotaMode, ResponseDynamicMetadata bool

	// MaxDescriptors is the most descriptors one request may carry
	// (FLOODGATE_MAX_DESCRIPTORS, Floodgate's own: theirs has no bound;
	// default DefaultMaxDescriptors, 1..MaxMaxDescriptors).
	MaxDescriptors int

	Redis          RedisSettings
	RedisPerSecond bool
	PerSecond      RedisSettings

	// Adjusted lists the values FromEnv took as envoyproxy/ratelimit
	// takes them rather than as written (a negative
	// EXPIRATION_JITTER_MAX_SECONDS is no jitter), one line each, for the
	// service to log: a deployment that starts with theirs starts here.
	Adjusted []string
}

// RedisSettings are the REDIS_* (or REDIS_PERSECOND_*) settings of one
// Redis.
type RedisSettings struct {
	SocketType   string // tcp or unix
	Type         string // single, sentinel or cluster (any case)
	URL          string
	PoolSize     int
	Auth         string // "password" or "user:password"
	TLS          bool
	SentinelAuth string
	Timeout      time.Duration
	// TLSClientCert, TLSClientKey, TLSCACert and TLSSkipHostnameVerification
	// are shared by both Redis connections, as in theirs.
	TLSClientCert, TLSClientKey, TLSCACert string
	TLSSkipHostnameVerification            bool
}

// Ignored lists the settings read by envoyproxy/ratelimit that change
// nothing in Floodgate, with why.
var Ignored = map[string]string{
	"USE_STATSD":                "no statsd: the same stats are Prometheus metrics on the debug port",
	"STATSD_HOST":               "no statsd",
	"STATSD_PORT":               "no statsd",
	"USE_DOG_STATSD":            "no statsd",
	"USE_DOG_STATSD_MOGRIFIERS": "no statsd",
	"EXTRA_TAGS":                "no statsd",
	"STATS_FLUSH_INTERVAL":      "Prometheus is scraped, not flushed",
	"DISABLE_STATS":             "metrics cost nothing until scraped",
	"PROMETHEUS_MAPPER_YAML":    "metric names are fixed (docs/envoy.md)",
	"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS":     "no response time histogram",
	"REDIS_PIPELINE_WINDOW":                        "concurrent requests share script calls by themselves (single, sentinel); no window to wait",
	"REDIS_PIPELINE_LIMIT":                         "deprecated in theirs too",
	"REDIS_PERSECOND_PIPELINE_WINDOW":              "as REDIS_PIPELINE_WINDOW",
	"REDIS_PERSECOND_PIPELINE_LIMIT":               "as REDIS_PIPELINE_LIMIT",
	"REDIS_CLUSTER_PIPELINE_PARALLELISM":           "the cluster client sends to every node at once",
	"REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM": "as REDIS_CLUSTER_PIPELINE_PARALLELISM",
	"REDIS_POOL_ON_EMPTY_BEHAVIOR":                 "WAIT is the only behaviour (theirs refuses the others too)",
	"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR":       "as REDIS_POOL_ON_EMPTY_BEHAVIOR",
	"REDIS_STARTUP_INITIAL_INTERVAL":               "the service starts without waiting for Redis; health says when it is reachable",
	"REDIS_STARTUP_MAX_INTERVAL":                   "as REDIS_STARTUP_INITIAL_INTERVAL",
	"REDIS_STARTUP_MAX_ELAPSED_TIME":               "as REDIS_STARTUP_INITIAL_INTERVAL",
	"TRACING_ENABLED":                              "no OpenTelemetry tracing",
	"TRACING_SERVICE_NAME":                         "no tracing",
	"TRACING_SERVICE_NAMESPACE":                    "no tracing",
	"TRACING_SERVICE_INSTANCE_ID":                  "no tracing",
	"TRACING_EXPORTER_PROTOCOL":                    "no tracing",
	"TRACING_SAMPLING_RATE":                        "no tracing",
}

// FromEnv reads the settings with lookup (os.LookupEnv in the binary). A
// malformed value, or a setting asking for a feature Floodgate lacks
// (CONFIG_TYPE other than FILE, BACKEND_TYPE memcache, gRPC server TLS),
// is an error naming the variable: the service must not start doing
// something else than the deployment asks.
func FromEnv(lookup func(string) (string, bool)) (Settings, error) {
	e := &envReader{lookup: lookup}
	s := Settings{
		Host:                      e.str("HOST", "0.0.0.0"),
		Port:                      e.port("PORT", 8080),
		DebugHost:                 e.str("DEBUG_HOST", "0.0.0.0"),
		DebugPort:                 e.port("DEBUG_PORT", 6070),
		GrpcUDS:                   e.str("GRPC_UDS", ""),
		GrpcHost:                  e.str("GRPC_HOST", "0.0.0.0"),
		GrpcPort:                  e.port("GRPC_PORT", 8081),
		GrpcMaxConnectionAge:      e.duration("GRPC_MAX_CONNECTION_AGE", 24*time.Hour),
		GrpcMaxConnectionAgeGrace: e.duration("GRPC_MAX_CONNECTION_AGE_GRACE", time.Hour),
		MaxConnections:            int(e.int64("FLOODGATE_MAX_CONNECTIONS", 0)),
		GrpcReflection:            e.boolean("FLOODGATE_GRPC_REFLECTION", false),
		LogLevel:                  e.str("LOG_LEVEL", "WARN"),
		LogFormat:                 e.str("LOG_FORMAT", "text"),

		ForceStartWithoutInitialConfig:    e.boolean("FORCE_START_WITHOUT_INITIAL_CONFIG", false),
		HealthyWithAtLeastOneConfigLoaded: e.boolean("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false),
		RedisHealthCheckActiveConnection:  e.boolean("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false),

		UsePrometheus:  e.boolean("USE_PROMETHEUS", false),
		PrometheusAddr: e.str("PROMETHEUS_ADDR", ":9090"),
		PrometheusPath: e.str("PROMETHEUS_PATH", "/metrics"),

		RuntimeRoot:           e.str("RUNTIME_ROOT", "/srv/runtime_data/current"),
		RuntimeSubdirectory:   e.str("RUNTIME_SUBDIRECTORY", ""),
		RuntimeAppDirectory:   e.str("RUNTIME_APPDIRECTORY", "config"),
		RuntimeIgnoreDotFiles: e.boolean("RUNTIME_IGNOREDOTFILES", false),
		RuntimeWatchRoot:      e.boolean("RUNTIME_WATCH_ROOT", true),
		MergeDomainConfig:     e.boolean("MERGE_DOMAIN_CONFIG", false),

		ExpirationJitterMaxSeconds:         e.int64("EXPIRATION_JITTER_MAX_SECONDS", 300),
		LocalCacheSizeInBytes:              int(e.int64("LOCAL_CACHE_SIZE_IN_BYTES", 0)),
		NearLimitRatio:                     e.float32("NEAR_LIMIT_RATIO", 0.8),
		CacheKeyPrefix:                     e.str("CACHE_KEY_PREFIX", ""),
		BackendType:                        e.str("BACKEND_TYPE", "redis"),
		StopCacheKeyIncrementWhenOverlimit: e.boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false),

		ResponseHeadersEnabled: e.boolean("LIMIT_RESPONSE_HEADERS_ENABLED", false),
		LimitHeader:            e.str("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
		RemainingHeader:        e.str("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
		ResetHeader:            e.str("LIMIT_RESET_HEADER", "RateLimit-Reset"),

		GlobalShadowMode:        e.boolean("SHADOW_MODE", false),
		GlobalQuotaMode:         e.boolean("QUOTA_MODE", false),
		ResponseDynamicMetadata: e.boolean("RESPONSE_DYNAMIC_METADATA", false),
		RedisPerSecond:          e.boolean("REDIS_PERSECOND", false),

		MaxDescriptors: int(e.int64("FLOODGATE_MAX_DESCRIPTORS", DefaultMaxDescriptors)),
	}
	tlsCert, tlsKey, tlsCA := e.str("REDIS_TLS_CLIENT_CERT", ""), e.str("REDIS_TLS_CLIENT_KEY", ""), e.str("REDIS_TLS_CACERT", "")
	skip := e.boolean("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false)
	s.Redis = RedisSettings{
		SocketType: e.str("REDIS_SOCKET_TYPE", "unix"), Type: e.str("REDIS_TYPE", "SINGLE"),
		URL: e.str("REDIS_URL", "/var/run/nutcracker/ratelimit.sock"), PoolSize: int(e.int64("REDIS_POOL_SIZE", 10)),
		Auth: e.str("REDIS_AUTH", ""), TLS: e.boolean("REDIS_TLS", false), SentinelAuth: e.str("REDIS_SENTINEL_AUTH", ""),
		Timeout:       e.timeout("REDIS_TIMEOUT"),
		TLSClientCert: tlsCert, TLSClientKey: tlsKey, TLSCACert: tlsCA, TLSSkipHostnameVerification: skip,
	}
	s.PerSecond = RedisSettings{
		SocketType: e.str("REDIS_PERSECOND_SOCKET_TYPE", "unix"), Type: e.str("REDIS_PERSECOND_TYPE", "SINGLE"),
		URL: e.str("REDIS_PERSECOND_URL", "/var/run/nutcracker/ratelimitpersecond.sock"), PoolSize: int(e.int64("REDIS_PERSECOND_POOL_SIZE", 10)),
		Auth: e.str("REDIS_PERSECOND_AUTH", ""), TLS: e.boolean("REDIS_PERSECOND_TLS", false), SentinelAuth: e.str("REDIS_PERSECOND_SENTINEL_AUTH", ""),
		Timeout:       e.timeout("REDIS_PERSECOND_TIMEOUT"),
		TLSClientCert: tlsCert, TLSClientKey: tlsKey, TLSCACert: tlsCA, TLSSkipHostnameVerification: skip,
	}
	if ct := e.str("CONFIG_TYPE", "FILE"); ct != "FILE" && e.err == nil {
		e.err = fmt.Errorf("CONFIG_TYPE=%s: only FILE is supported (no xDS configuration source)", ct)
	}
	if e.boolean("GRPC_SERVER_USE_TLS", false) && e.err == nil {
		e.err = fmt.Errorf("GRPC_SERVER_USE_TLS=true: gRPC server TLS is not supported in envoy-compat; terminate TLS in front of it")
	}
	if e.err != nil {
		return Settings{}, e.err
	}
	s.adjust()
	return s, s.validate()
}

// adjust takes the values theirs starts with but reads in its own way as
// theirs reads them, noting each in Adjusted; the values theirs cannot
// start with (a negative pool size) are left for validate and the Redis
// setup to refuse.
func (s *Settings) adjust() {
	note := func(format string, args ...any) { s.Adjusted = append(s.Adjusted, fmt.Sprintf(format, args...)) }
	if r := s.NearLimitRatio; !(r >= 0 && r <= 1) {
		note("NEAR_LIMIT_RATIO=%v is outside 0..1: near_limit is never counted", r)
	}
	if s.ExpirationJitterMaxSeconds < 0 {
		note("EXPIRATION_JITTER_MAX_SECONDS=%d is negative: no expiration jitter", s.ExpirationJitterMaxSeconds)
		s.ExpirationJitterMaxSeconds = 0
	}
	if b := s.LocalCacheSizeInBytes; b != 0 && b < MinLocalCacheBytes {
		note("LOCAL_CACHE_SIZE_IN_BYTES=%d is below %d: the local cache holds %d bytes, as freecache's minimum in theirs", b, MinLocalCacheBytes, MinLocalCacheBytes)
		s.LocalCacheSizeInBytes = MinLocalCacheBytes
	}
	for _, r := range []struct {
		name string
		rs   *RedisSettings
	}{{"REDIS_POOL_SIZE", &s.Redis}, {"REDIS_PERSECOND_POOL_SIZE", &s.PerSecond}} {
		if r.rs.PoolSize == 0 && (r.name == "REDIS_POOL_SIZE" || s.RedisPerSecond) {
			note("%s=0: a pool of %d connections, radix's default in theirs", r.name, DefaultZeroPoolSize)
			r.rs.PoolSize = DefaultZeroPoolSize
		}
	}
}

// MinLocalCacheBytes is the smallest local cache: theirs gives freecache
// LOCAL_CACHE_SIZE_IN_BYTES, which takes any smaller size, negative ones
// too, as 512 KiB.
const MinLocalCacheBytes = 512 << 10

// DefaultZeroPoolSize is the pool a REDIS_POOL_SIZE of 0 gets: radix, the
// client of theirs, makes 0 its default of 4 connections.
const DefaultZeroPoolSize = 4

func (s Settings) validate() error {
	if s.MaxConnections < 0 || s.MaxConnections > 1<<30 {
		return fmt.Errorf("FLOODGATE_MAX_CONNECTIONS=%d: want 0 (derived from the file descriptor limit) or a number of connections up to %d", s.MaxConnections, 1<<30)
	}
	if s.MaxDescriptors < 1 || s.MaxDescriptors > MaxMaxDescriptors {
		return fmt.Errorf("FLOODGATE_MAX_DESCRIPTORS=%d: want 1..%d", s.MaxDescriptors, MaxMaxDescriptors)
	}
	if err := validHosts(s); err != nil {
		return err
	}
	switch strings.ToLower(s.BackendType) {
	case "redis", "", "memory":
	case "memcache":
		return fmt.Errorf("BACKEND_TYPE=memcache: memcached is not supported; use redis")
	default:
		return fmt.Errorf("BACKEND_TYPE=%s: want redis (or memory, Floodgate's in-process store)", s.BackendType)
	}
	for name, h := range map[string]string{"LIMIT_LIMIT_HEADER": s.LimitHeader, "LIMIT_REMAINING_HEADER": s.RemainingHeader, "LIMIT_RESET_HEADER": s.ResetHeader} {
		if s.ResponseHeadersEnabled && !validHeader(h) {
			return fmt.Errorf("%s=%q: not a valid header name", name, h)
		}
	}
	return nil
}

// validHosts refuses a bracketed IPv6 host (HOST=[::1]): the port is
// joined to it as theirs does (net.JoinHostPort), which brackets it again
// ("[[::1]]:8080", missing port in address). Theirs refuses it too, with
// that error alone; this one says what to write.
func validHosts(s Settings) error {
	for _, h := range []struct{ name, host string }{{"HOST", s.Host}, {"GRPC_HOST", s.GrpcHost}, {"DEBUG_HOST", s.DebugHost}} {
		if strings.HasPrefix(h.host, "[") || strings.HasSuffix(h.host, "]") {
			bare := strings.TrimSuffix(strings.TrimPrefix(h.host, "["), "]")
			return fmt.Errorf("%s=%s: give the IPv6 address without brackets (%s=%s)", h.name, h.host, h.name, bare)
		}
	}
	return nil
}

func validHeader(h string) bool {
	if h == "" || len(h) > 256 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// Addresses returns the HTTP, debug and gRPC listen addresses (gRPC may be
// a unix socket path, GRPC_UDS).
func (s Settings) Addresses() (http, debug, grpc string) {
	grpc = net.JoinHostPort(s.GrpcHost, strconv.Itoa(s.GrpcPort))
	if s.GrpcUDS != "" {
		grpc = s.GrpcUDS
	}
	return net.JoinHostPort(s.Host, strconv.Itoa(s.Port)), net.JoinHostPort(s.DebugHost, strconv.Itoa(s.DebugPort)), grpc
}

// Options returns the service options the settings ask for.
func (s Settings) Options() Options {
	return Options{
		CacheKeyPrefix:             s.CacheKeyPrefix,
		ExpirationJitterMax:        time.Duration(s.ExpirationJitterMaxSeconds) * time.Second,
		LocalCacheBytes:            s.LocalCacheSizeInBytes,
		NearLimitRatio:             s.NearLimitRatio,
		StopIncrementWhenOverLimit: s.StopCacheKeyIncrementWhenOverlimit,
		GlobalShadowMode:           s.GlobalShadowMode,
		GlobalQuotaMode:            s.GlobalQuotaMode,
		ResponseHeaders:            s.ResponseHeadersEnabled,
		LimitHeader:                s.LimitHeader,
		RemainingHeader:            s.RemainingHeader,
		ResetHeader:                s.ResetHeader,
		DynamicMetadata:            s.ResponseDynamicMetadata,
		MaxDescriptors:             s.MaxDescriptors,
	}
}

// envReader reads variables, keeping the first error.
type envReader struct {
	lookup func(string) (string, bool)
	err    error
}

func (e *envReader) raw(name string) (string, bool) {
	v, ok := e.lookup(name)
	return v, ok && v != ""
}

func (e *envReader) fail(name, v, want string) {
	if e.err == nil {
		e.err = fmt.Errorf("%s=%q: want %s", name, v, want)
	}
}

func (e *envReader) str(name, def string) string {
	if v, ok := e.raw(name); ok {
		return v
	}
	return def
}

func (e *envReader) boolean(name string, def bool) bool {
	v, ok := e.raw(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.fail(name, v, "true or false")
	}
	return b
}

func (e *envReader) int64(name string, def int64) int64 {
	v, ok := e.raw(name)
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(v, 0, 64)
	if err != nil {
		e.fail(name, v, "an integer")
	}
	return n
}

func (e *envReader) port(name string, def int) int {
	n := e.int64(name, int64(def))
	if n < 0 || n > 65535 {
		e.fail(name, strconv.FormatInt(n, 10), "a port number 0..65535")
	}
	return int(n)
}

func (e *envReader) float32(name string, def float32) float32 {
	v, ok := e.raw(name)
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 32)
	if err != nil {
		e.fail(name, v, "a number")
	}
	return float32(f)
}

// timeout reads a Redis timeout (default 10s): negative ones, which made
// every dial fail at once (and /healthcheck stay 500), are refused; 0 is
// go-redis's defaults and no bound of a request's own.
func (e *envReader) timeout(name string) time.Duration {
	d := e.duration(name, 10*time.Second)
	if d < 0 {
		v, _ := e.raw(name)
		e.fail(name, v, "a duration of 0 or more, such as 10s")
	}
	return d
}

func (e *envReader) duration(name string, def time.Duration) time.Duration {
	v, ok := e.raw(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		n, nerr := strconv.ParseInt(v, 10, 64) // envconfig reads a bare integer as nanoseconds
		if nerr != nil {
			e.fail(name, v, "a duration such as 10s")
		}
		d = time.Duration(n)
	}
	return d
}
