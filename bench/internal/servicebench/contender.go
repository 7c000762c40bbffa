package servicebench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/floodgate-rl/floodgate/loadgen"
)

// Service is one rate limit service of the comparison.
type Service uint8

// The services.
const (
	// Theirs is envoyproxy/ratelimit (bench/cmd/envoyratelimit), with its
	// default settings but for those the comparison needs (see theirEnv).
	Theirs Service = iota
	// Serve is `floodgate serve --redis`, with its defaults.
	Serve
	// Compat is `floodgate envoy-compat`, with the same environment as
	// Theirs.
	Compat
	// Floor is bench/cmd/nullservice: net/http and grpc-go with
	// floodgate serve's server settings and a handler that answers a fixed
	// "allowed" without deciding anything or talking to Redis. Its CPU per
	// request is what those libraries cost on this machine, the floor
	// under any service built on them.
	Floor
	// ServeFast is Serve with `--http-server fasthttp`, on HTTP only (its
	// gRPC listener is Serve's).
	ServeFast
	// FloorFast is Floor's HTTP on fasthttp (nullservice -http-server
	// fasthttp), with serve --http-server fasthttp's settings: the floor
	// under ServeFast. HTTP only.
	FloorFast
)

// Services lists every service, envoyproxy/ratelimit first.
var Services = []Service{Theirs, Serve, ServeFast, Compat, Floor, FloorFast}

// serves reports whether s is measured on t: every service but ServeFast
// and FloorFast on both transports, those two on HTTP only.
func (s Service) serves(t Transport) bool { return (s != ServeFast && s != FloorFast) || t == HTTP }

// floor reports whether s is a no-op service (no Redis).
func (s Service) floor() bool { return s == Floor || s == FloorFast }

// String returns the service's name in reports.
func (s Service) String() string {
	switch s {
	case Theirs:
		return "envoyproxy/ratelimit"
	case Serve:
		return "floodgate serve"
	case ServeFast:
		return "floodgate serve --http-server fasthttp"
	case Compat:
		return "floodgate envoy-compat"
	case Floor:
		return "floor: no-op handler, no Redis"
	case FloorFast:
		return "floor on fasthttp: no-op handler, no Redis"
	}
	return fmt.Sprintf("Service(%d)", uint8(s))
}

// Transport is the API a cell drives.
type Transport uint8

// The transports.
const (
	// GRPC is Envoy's ShouldRateLimit with one descriptor {user: id}.
	GRPC Transport = iota
	// HTTP is POST /json (Envoy's request as JSON) on envoyproxy/ratelimit
	// and envoy-compat, POST /v1/check on floodgate serve.
	HTTP
)

// Transports lists both.
var Transports = []Transport{GRPC, HTTP}

// String returns "gRPC" or "HTTP".
func (t Transport) String() string {
	if t == GRPC {
		return "gRPC"
	}
	return "HTTP"
}

// endpoint names the HTTP endpoint of a service.
func (s Service) endpoint(t Transport) string {
	switch {
	case t == GRPC:
		return "ShouldRateLimit"
	case s == Serve, s == ServeFast, s.floor():
		return "POST /v1/check"
	}
	return "POST /json"
}

// Limit is every identity's limit per minute, in the services' shared
// configuration: so high that no decision of a run is denied.
const Limit = 1_000_000_000

// envoyConfig is the descriptor configuration of all three services, in
// envoyproxy/ratelimit's format: domain "api", descriptor key "user", a
// fixed window per minute (their only algorithm, and floodgate's default
// for this format).
var envoyConfig = `domain: api
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: ` + strconv.Itoa(Limit) + "\n"

// serveConfig is floodgate serve's policy for POST /v1/check: the same
// limit as envoyConfig, one layer, same algorithm.
var serveConfig = `version: "1"
policies:
  - name: api
    layers:
      - name: per-user
        algorithm: fixed_window
        limit: ` + strconv.Itoa(Limit) + `
        window: 1m
        dimension: user
`

// layout writes the configuration files into dir: the runtime directory
// of envoyproxy/ratelimit and envoy-compat (dir/runtime/ratelimit/config/
// config.yaml) and floodgate serve's policy file (dir/floodgate.yaml).
func layout(dir string) error {
	cfgDir := filepath.Join(dir, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "config.yaml"), []byte(envoyConfig), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "floodgate.yaml"), []byte(serveConfig), 0o644)
}

// theirEnv is the environment of envoyproxy/ratelimit and envoy-compat:
// their documented settings for a TCP Redis and a runtime directory, stats
// not sent to a statsd that does not exist (USE_STATSD=false: their stats
// go to their logging sink), listeners on loopback ports. Everything else,
// LOG_LEVEL (warn), REDIS_POOL_SIZE (10), pipelining (off), the local
// cache (off), is their default.
func theirEnv(dir, redisAddr string, http, grpc, debug int) []string {
	return []string{
		"REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL=" + redisAddr,
		"RUNTIME_ROOT=" + filepath.Join(dir, "runtime"),
		"RUNTIME_SUBDIRECTORY=ratelimit",
		"USE_STATSD=false",
		"HOST=127.0.0.1", "PORT=" + strconv.Itoa(http),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(grpc),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(debug),
	}
}

// ServeFallbackBudget is floodgate serve's --fallback-budget in the
// comparison, instead of its default 50 ms: as long as its own decision
// deadline (--decision-timeout, default 1 s), so that serve waits for
// Redis as envoyproxy/ratelimit does (up to its REDIS_TIMEOUT, 10 s)
// rather than answering from its local fallback store when the loaded
// machine delays a Redis call past 50 ms. A decision taken by the fallback
// all the same makes its cell invalid (see errNotByRedis).
const ServeFallbackBudget = time.Second

// serveArgs are floodgate serve's arguments: its defaults, but for the
// listeners, the Redis, the two configuration files and the fallback
// budget (ServeFallbackBudget).
func serveArgs(dir, redisAddr string, http, grpc int) []string {
	return []string{"serve",
		"--fallback-budget", ServeFallbackBudget.String(),
		"--addr", "127.0.0.1:" + strconv.Itoa(http),
		"--grpc-addr", "127.0.0.1:" + strconv.Itoa(grpc),
		"--envoy-config", filepath.Join(dir, "runtime", "ratelimit", "config", "config.yaml"),
		"--config", filepath.Join(dir, "floodgate.yaml"),
		"--redis", "redis://" + redisAddr,
	}
}

// Binaries are the executables the harness starts.
type Binaries struct {
	// Floodgate is a floodgate binary (serve and envoy-compat).
	Floodgate string
	// Theirs is envoyproxy/ratelimit's service (bench/cmd/envoyratelimit).
	Theirs string
	// Floor is bench/cmd/nullservice; needed only when Floor or FloorFast
	// is measured.
	Floor string
}

// launch starts service s on Redis at redisAddr, with its files in dir,
// and returns the process, the load generator's target for transport t,
// and the URL of the service's Prometheus metrics ("" for
// envoyproxy/ratelimit, which has no fallback to count).
// LoadgenGRPCClient is the client the load generator calls gRPC services
// with: its own HTTP/2 client, the cheapest for the machine it shares.
const LoadgenGRPCClient = loadgen.RawGRPC

func launch(b Binaries, s Service, t Transport, dir, redisAddr string) (*process, loadgen.Options, string, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, loadgen.Options{}, "", err
	}
	var metricsURL string
	var p *process
	switch s {
	case Theirs:
		p, err = startProcess(b.Theirs, nil, theirEnv(dir, redisAddr, ports[0], ports[1], ports[2]), dir)
	case Compat:
		p, err = startProcess(b.Floodgate, []string{"envoy-compat"}, theirEnv(dir, redisAddr, ports[0], ports[1], ports[2]), dir)
		metricsURL = "http://127.0.0.1:" + strconv.Itoa(ports[2]) + "/metrics" // the debug listener
	case Serve, ServeFast:
		args := serveArgs(dir, redisAddr, ports[0], ports[1])
		if s == ServeFast {
			args = append(args, "--http-server", "fasthttp")
		}
		p, err = startProcess(b.Floodgate, args, nil, dir)
		metricsURL = "http://127.0.0.1:" + strconv.Itoa(ports[0]) + "/metrics"
	case Floor, FloorFast:
		args := []string{"-http", "127.0.0.1:" + strconv.Itoa(ports[0]), "-grpc", "127.0.0.1:" + strconv.Itoa(ports[1])}
		if s == FloorFast {
			args = append(args, "-http-server", "fasthttp")
		}
		p, err = startProcess(b.Floor, args, nil, dir)
	default:
		return nil, loadgen.Options{}, "", fmt.Errorf("servicebench: unknown service %v", s)
	}
	if err != nil {
		return nil, loadgen.Options{}, "", err
	}
	o := loadgen.Options{Domain: "api", Policy: "api", IdentityKey: "user"}
	switch {
	case t == GRPC:
		o.Target, o.Mode = "grpc://127.0.0.1:"+strconv.Itoa(ports[1]), loadgen.GRPC
		o.GRPCClient = LoadgenGRPCClient
	case s == Serve, s == ServeFast, s.floor():
		o.Target, o.Mode = "http://127.0.0.1:"+strconv.Itoa(ports[0]), loadgen.HTTP
	default:
		o.Target, o.Mode = "http://127.0.0.1:"+strconv.Itoa(ports[0]), loadgen.EnvoyJSON
	}
	return p, o, metricsURL, nil
}
