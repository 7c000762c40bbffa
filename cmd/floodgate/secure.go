package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/connlimit"
	"github.com/floodgate-rl/floodgate/internal/regularfile"
	"github.com/floodgate-rl/floodgate/internal/tlsreload"
	"github.com/floodgate-rl/floodgate/server"
)

// securityFlags are serve's flags for secrets, TLS to Redis, the admin
// listener, the origins trusted to call the API from browsers and the
// host names requests must be addressed to.
type securityFlags struct {
	adminAddr         string
	healthAddr        string
	adminTokenFile    string
	metricsAdminOnly  bool
	pprof             bool
	redisPasswordFile string
	redisPassword     string // read from redisPasswordFile
	sentinelUser      string
	redisUser         string // --redis-username
	sentinelPassFile  string
	sentinelPassword  string // read from sentinelPassFile
	redisTLS          bool
	redisCAFile       string
	redisCertFile     string
	redisKeyFile      string
	redisServerName   string
	tlsCertFile       string
	tlsKeyFile        string
	tlsClientCAFile   string
	grpcReflection    bool
	grpcWorkers       int
	grpcMaxAge        time.Duration // --grpc-max-connection-age
	grpcMaxAgeGrace   time.Duration // --grpc-max-connection-age-grace
	verifyKeyFiles    []string
	verifyKeys        [][]byte     // read from verifyKeyFiles
	log               *slog.Logger // set by resolveSecrets, for the certificate's reloads
	cert              *tlsreload.Cert
	tlsConf           *tls.Config // built once by serverTLS, shared by the listeners
	trustedOrigins    []string
	allowedHosts      []string
}

func addSecurityFlags(fl *pflag.FlagSet, s *securityFlags) {
	fl.StringVar(&s.adminAddr, "admin-addr", "", "serve the admin endpoints on this address only, not on --addr, and /metrics here too (it stays on --addr unless --metrics-admin-only); bind it to a private interface, e.g. 127.0.0.1:9090")
	fl.StringVar(&s.healthAddr, "health-addr", "", "also serve GET and HEAD /healthz and /readyz (as on --addr, ?degraded=ok and draining included), and nothing else (404), on this address, always over plain HTTP: no TLS and no client certificate even with --tls-cert-file and --tls-client-ca-file. For kubelet or load balancer probes when mutual TLS is on, as they cannot present a client certificate: point the probes here, e.g. :8086 in a pod (every interface of a pod is the pod network: keep others out with a NetworkPolicy), elsewhere a private address such as 10.0.0.5:8086. /readyz tells why the service is not ready, as on --addr")
	fl.StringVar(&s.adminTokenFile, "admin-token-file", "", "file holding the admin bearer token (instead of --admin-token, which shows in the process list); at least 32 characters, e.g. from: openssl rand -hex 32")
	fl.BoolVar(&s.metricsAdminOnly, "metrics-admin-only", false, "serve /metrics only on --admin-addr, not on --addr")
	fl.StringArrayVar(&s.trustedOrigins, "trusted-origin", nil, "origin (scheme://host[:port], as browsers send it in Origin) whose web pages may call the API from a browser; repeatable. A request other than GET, HEAD and OPTIONS (on the admin endpoints and --pprof, any request) that carries any other Origin, even one matching Host (floodgate serves no page; a page of a DNS name rebound to this address sends its own), or, without Origin, a Sec-Fetch-Site of cross-site or same-site, is refused with 403; curl and server-side clients are never refused")
	fl.StringArrayVar(&s.allowedHosts, "allowed-host", nil, "host name HTTP requests to --addr, --admin-addr and --health-addr must be addressed to (the Host header without its port, in any case; *.example.com for every name under example.com); repeatable. With any given, a request whose Host is none of them, nor an IP address, nor localhost, is refused with 421, so that a web page whose DNS name is rebound to this address (DNS rebinding) cannot read /metrics, /readyz or the profiles through its visitors' browsers. Default: every Host is served")
	fl.BoolVar(&s.pprof, "pprof", false, "serve Go runtime profiles (net/http/pprof, /debug/pprof/) on --admin-addr only, without the token; off by default")
	addRedisSecurityFlags(fl, s)
	fl.StringVar(&s.tlsCertFile, "tls-cert-file", "", "serve HTTPS on --addr (and --admin-addr; never on --health-addr) and TLS on --grpc-addr with this PEM certificate (with --tls-key-file); both files are read again when they change (every --reload-interval, and on SIGHUP), for new connections")
	fl.StringVar(&s.tlsKeyFile, "tls-key-file", "", "PEM key of --tls-cert-file")
	fl.StringVar(&s.tlsClientCAFile, "tls-client-ca-file", "", "require client certificates signed by these PEM authorities on every listener but --health-addr (mutual TLS; probes that cannot present one use --health-addr; needs --tls-cert-file; read again when it changes, as the certificate)")
	fl.IntVar(&s.grpcWorkers, "grpc-stream-workers", grpcMaxStreams, "goroutines kept to run gRPC requests, each reused for many (a request finding none free gets a new goroutine); 0 starts a goroutine per request")
	fl.DurationVar(&s.grpcMaxAge, "grpc-max-connection-age", defaultGRPCMaxAge, "send GOAWAY on a gRPC connection this long (±10%) after it opened, so that its client reconnects (and spreads again over the instances behind a balancer); calls in flight get --grpc-max-connection-age-grace to finish, then the connection is closed whatever they do. 1s..720h")
	fl.DurationVar(&s.grpcMaxAgeGrace, "grpc-max-connection-age-grace", defaultGRPCMaxAgeGrace, "how long a gRPC connection's calls in flight may take to finish after --grpc-max-connection-age before the connection is closed: a call stalled by its client (not reading its answer) holds a connection this long at most. 1s..24h")
	fl.BoolVar(&s.grpcReflection, "grpc-reflection", false, "register gRPC server reflection on --grpc-addr (for grpcurl); off by default")
	fl.StringArrayVar(&s.verifyKeyFiles, "config-verify-key-file", nil, "with --config-from-redis, apply only configurations signed with the key in this file (floodgate config push --sign-key-file; at least 32 bytes); repeatable: a configuration signed with any of the keys is applied, so that during a key rotation instances accept the old key and the new")
}

// addRedisSecurityFlags registers the Redis password and TLS flags (serve,
// config push and doctor share them).
func addRedisSecurityFlags(fl *pflag.FlagSet, s *securityFlags) {
	fl.StringVar(&s.redisPasswordFile, "redis-password-file", "", "file holding the Redis password, for a --redis URL (or sentinel/cluster addresses) without one; behind Sentinel it goes to the primary only (the sentinels' own: --redis-sentinel-password-file)")
	fl.StringVar(&s.redisUser, "redis-username", "", "ACL user name to authenticate to Redis with (with --redis-password-file; behind Sentinel, to the primary; every Cluster node), for sentinel or cluster addresses or a --redis URL without user@ (a URL with one and this flag together are refused; default: the URL's user, else Redis's default user)")
	fl.StringVar(&s.sentinelPassFile, "redis-sentinel-password-file", "", "file holding the password of the sentinels themselves (their requirepass, or their ACL user's with --redis-sentinel-username), when they require one; often the primary's, but never sent unless given here")
	fl.StringVar(&s.sentinelUser, "redis-sentinel-username", "", "ACL user name to authenticate to the sentinels with (with --redis-sentinel-password-file; default: their default user)")
	fl.BoolVar(&s.redisTLS, "redis-tls", false, "connect to Redis over TLS whatever the URL scheme (every sentinel, primary or cluster node too)")
	fl.StringVar(&s.redisCAFile, "redis-ca-file", "", "PEM certificate authorities to verify Redis servers with (implies --redis-tls; default: the system's)")
	fl.StringVar(&s.redisCertFile, "redis-cert-file", "", "PEM client certificate for Redis servers that require one (implies --redis-tls; with --redis-key-file)")
	fl.StringVar(&s.redisKeyFile, "redis-key-file", "", "PEM key of --redis-cert-file")
	fl.StringVar(&s.redisServerName, "redis-server-name", "", "name every Redis server certificate must carry (implies --redis-tls; default: the host dialled)")
}

// redisClientSettings reads the Redis password file, if any, and adds the
// password and TLS flags to rs.
func (s *securityFlags) redisClientSettings(rs *config.Redis, log *slog.Logger) error {
	if err := s.readRedisSecrets(log); err != nil {
		return err
	}
	s.redisSettings(rs)
	return nil
}

// readRedisSecrets reads the Redis password file and the sentinels'
// password file, if given.
func (s *securityFlags) readRedisSecrets(log *slog.Logger) error {
	if s.redisPasswordFile != "" {
		pw, err := readSecretFile(s.redisPasswordFile, "--redis-password-file", log)
		if err != nil {
			return err
		}
		s.redisPassword = pw
	}
	if s.sentinelUser != "" && s.sentinelPassFile == "" {
		return errors.New("--redis-sentinel-username needs --redis-sentinel-password-file (the user's password)")
	}
	if s.sentinelPassFile != "" {
		pw, err := readSecretFile(s.sentinelPassFile, "--redis-sentinel-password-file", log)
		if err != nil {
			return err
		}
		s.sentinelPassword = pw
	}
	return nil
}

// serverTLS returns the TLS configuration of the listeners, or nil when
// --tls-cert-file is not given: built once, and shared, with the
// certificate served from s.cert, which reloadTLS loads again when its
// files change.
func (s *securityFlags) serverTLS() (*tls.Config, error) {
	if s.tlsConf != nil {
		return s.tlsConf, nil
	}
	if s.tlsCertFile == "" && s.tlsKeyFile == "" {
		if s.tlsClientCAFile != "" {
			return nil, errors.New("--tls-client-ca-file needs --tls-cert-file and --tls-key-file")
		}
		return nil, nil
	}
	switch {
	case s.tlsCertFile == "":
		return nil, errors.New("--tls-key-file needs --tls-cert-file (the certificate of that key)")
	case s.tlsKeyFile == "":
		return nil, errors.New("--tls-cert-file needs --tls-key-file (the certificate's private key)")
	}
	cert, err := tlsreload.Load(tlsreload.Files{Cert: s.tlsCertFile, Key: s.tlsKeyFile, ClientCAs: s.tlsClientCAFile}, s.log)
	var fe *tlsreload.FileError
	switch {
	case errors.As(err, &fe):
		// The flag and the file concerned, not all three flags (a TLS walk).
		return nil, errors.New(fe.Explain(tlsFlagOf))
	case err != nil:
		return nil, fmt.Errorf("--tls-cert-file/--tls-key-file/--tls-client-ca-file: %w", err)
	}
	c := cert.ServerConfig()
	s.cert, s.tlsConf = cert, c
	return c, nil
}

// tlsFlagOf names a file of serve's TLS by its flag and path:
// "--tls-cert-file tls.crt".
func tlsFlagOf(f tlsreload.File, path string) string {
	flag := map[tlsreload.File]string{tlsreload.CertFile: "--tls-cert-file", tlsreload.KeyFile: "--tls-key-file", tlsreload.ClientCAsFile: "--tls-client-ca-file"}[f]
	return flag + " " + path
}

// listenTCP listens on the TCP address addr, flag naming it in errors. A
// URL ("http://127.0.0.1:8080", as floodgate check's --addr takes) is
// refused as such: it got net.Listen's "too many colons in address".
func listenTCP(addr, flag string) (net.Listener, error) {
	if strings.Contains(addr, "://") {
		return nil, fmt.Errorf("%s %q: want host:port, such as 127.0.0.1:8080, not a URL", flag, addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return ln, nil
}

// listen listens on addr (flag names it in errors), with TLS when
// configured, its connections counted in conns (nil: not counted) under
// the TLS, as listener name.
func (s *securityFlags) listen(addr, flag string, conns *connlimit.Limit, name string) (net.Listener, error) {
	tc, err := s.serverTLS()
	if err != nil {
		return nil, err
	}
	ln, err := listenTCP(addr, flag)
	if err != nil {
		return nil, err
	}
	if conns != nil {
		ln = conns.Listener(ln, name, 0)
	}
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	return ln, nil
}

// gRPC server limits: concurrent streams per connection, the size of one
// request, and keepalive (idle connections closed, clients pinging more
// often than every 10s cut off). A request's size limit is gRPC's default,
// 4 MiB, which envoyproxy/ratelimit and envoy-compat keep: with 1 MiB, a
// request of 1.1 MiB (a long header value in a descriptor) was refused
// here and decided there, and Envoy lets a refused request through
// unlimited unless its failure_mode_deny is set (a differential walk).
const (
	grpcMaxStreams  = 256
	grpcMaxRecvSize = 4 << 20
	grpcMaxWorkers  = 1 << 14
)

// The defaults of --grpc-max-connection-age and its grace. An idle
// connection is closed after 5 minutes (MaxConnectionIdle), but one whose
// calls never finish (a client that stopped reading its answers while
// answering pings) is never idle: the age and its grace bound every
// connection's life, to 33 minutes (30 plus its 10% jitter) plus the
// grace. A client of the API reconnects on GOAWAY without failing a call.
const (
	defaultGRPCMaxAge      = 30 * time.Minute
	defaultGRPCMaxAgeGrace = time.Minute
)

// grpcServerOptions are the hardened options of the gRPC server: TLS (and
// client certificates) as configured, bounded streams and messages, and
// keepalive enforcement.
func (s *securityFlags) grpcServerOptions() ([]grpc.ServerOption, error) {
	opts := []grpc.ServerOption{
		grpc.MaxConcurrentStreams(grpcMaxStreams),
		grpc.MaxRecvMsgSize(grpcMaxRecvSize),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 5 * time.Minute, Time: 2 * time.Minute, Timeout: 20 * time.Second,
			MaxConnectionAge: s.grpcMaxAge, MaxConnectionAgeGrace: s.grpcMaxAgeGrace}),
	}
	if s.grpcWorkers > 0 {
		// A new goroutine per request starts with a small stack and
		// grows it (runtime.morestack, copying) on every request: a
		// fifth to a quarter of the service's CPU in memory mode
		// (docs/benchmarks.md). Workers keep their grown stacks.
		opts = append(opts, grpc.NumStreamWorkers(uint32(s.grpcWorkers)))
	}
	tc, err := s.serverTLS()
	if err != nil {
		return nil, err
	}
	if tc != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	return opts, nil
}

// readSecretFile reads a secret from path, trimmed of surrounding space.
// It refuses an empty file, and a path that is not a regular file once
// symbolic links are followed (a named pipe, whose read may wait for a
// writer for good) unread, and warns when the file is readable by group
// or others.
func readSecretFile(path, flag string, log *slog.Logger) (string, error) {
	f, err := regularfile.Open(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	raw, err := io.ReadAll(f)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	v := strings.TrimSpace(string(raw))
	if v == "" {
		return "", fmt.Errorf("%s: %s is empty", flag, path)
	}
	warnMode(st, path, flag, log)
	return v, nil
}

// warnIfShared warns when the file at path (none when empty; an unreadable
// one, or one that is not a regular file, such as a named pipe, is
// reported by whatever reads it, which refuses it) is readable by group
// or others. A walk saw the warning's chmod advice logged for a named
// pipe before serve refused it.
func warnIfShared(path, flag string, log *slog.Logger) {
	if path == "" {
		return
	}
	if st, err := regularfile.Stat(path); err == nil {
		warnMode(st, path, flag, log)
	}
}

// warnMode warns about a secret file others may read or write, or its
// group may write, or its group may read when that group is not one of
// this process's. A file only readable by a group of this process (a
// Kubernetes Secret volume with the pod's fsGroup: mode 0440, which the
// process cannot change on the read-only volume) is noted at Info level.
func warnMode(st os.FileInfo, path, flag string, log *slog.Logger) {
	perm := st.Mode().Perm()
	switch {
	case perm&0o077 == 0:
	case perm&0o037 == 0 && groupIsOurs(st):
		log.Info("secret file readable by its group, a group of this process (as a Kubernetes Secret volume with the pod's fsGroup makes it); others cannot read it", "flag", flag, "file", path, "mode", fmt.Sprintf("%04o", perm))
	default:
		log.Warn("secret file readable by group or others; make it readable by this user only (chmod 600)", "flag", flag, "file", path, "mode", fmt.Sprintf("%04o", perm))
	}
}

// resolveSecrets reads the secret files named by the flags into f.
func resolveSecrets(f *serveFlags, tokenFromFlag bool, log *slog.Logger) error {
	s := &f.sec
	s.log = log
	if s.adminTokenFile != "" {
		if tokenFromFlag {
			return errors.New("give either --admin-token or --admin-token-file, not both")
		}
		tok, err := readSecretFile(s.adminTokenFile, "--admin-token-file", log)
		if err != nil {
			return err
		}
		f.adminToken = tok
	}
	if f.adminToken != "" {
		if err := server.ValidateAdminToken(f.adminToken); err != nil {
			return fmt.Errorf("admin token: %w", err)
		}
	}
	if s.adminAddr != "" && f.adminToken == "" {
		return errors.New("--admin-addr needs an admin token (--admin-token-file)")
	}
	// Private keys are secrets too: warn as for the secret files above.
	for _, k := range []struct{ flag, path string }{{"--tls-key-file", s.tlsKeyFile}, {"--redis-key-file", s.redisKeyFile}} {
		warnIfShared(k.path, k.flag, log)
	}
	if s.metricsAdminOnly && s.adminAddr == "" {
		return errors.New("--metrics-admin-only needs --admin-addr")
	}
	if s.grpcWorkers < 0 || s.grpcWorkers > grpcMaxWorkers {
		return fmt.Errorf("--grpc-stream-workers %d: want 0..%d", s.grpcWorkers, grpcMaxWorkers)
	}
	// 0 would be gRPC's "no bound" (infinity), which let stalled calls
	// hold connections for good: refused with the rest out of range.
	if s.grpcMaxAge < time.Second || s.grpcMaxAge > 720*time.Hour {
		return fmt.Errorf("--grpc-max-connection-age %v: want 1s..720h", s.grpcMaxAge)
	}
	if s.grpcMaxAgeGrace < time.Second || s.grpcMaxAgeGrace > 24*time.Hour {
		return fmt.Errorf("--grpc-max-connection-age-grace %v: want 1s..24h", s.grpcMaxAgeGrace)
	}
	if s.pprof && s.adminAddr == "" {
		return errors.New("--pprof needs --admin-addr: profiles are served on the admin listener only")
	}
	for _, o := range s.trustedOrigins {
		if err := server.ValidateTrustedOrigin(o); err != nil {
			return fmt.Errorf("--trusted-origin: %w", err)
		}
	}
	for _, h := range s.allowedHosts {
		if err := server.ValidateAllowedHost(h); err != nil {
			return fmt.Errorf("--allowed-host: %w", err)
		}
	}
	if len(s.verifyKeyFiles) > 0 {
		if !f.configRedis {
			return errors.New("--config-verify-key-file needs --config-from-redis")
		}
		keys, err := readVerifyKeys(s.verifyKeyFiles, log)
		if err != nil {
			return err
		}
		s.verifyKeys = keys
	}
	return s.readRedisSecrets(log)
}

// readVerifyKeys reads the keys of --config-verify-key-file (serve's and
// doctor's), one per file, each at least config.MinSignKeyLen bytes.
func readVerifyKeys(files []string, log *slog.Logger) ([][]byte, error) {
	keys := make([][]byte, 0, len(files))
	for _, file := range files {
		k, err := readSecretFile(file, "--config-verify-key-file", log)
		if err != nil {
			return nil, err
		}
		if len(k) < config.MinSignKeyLen {
			return nil, fmt.Errorf("--config-verify-key-file %s: %d bytes, want at least %d", file, len(k), config.MinSignKeyLen)
		}
		keys = append(keys, []byte(k))
	}
	return keys, nil
}

// redisSettings adds the password and TLS flags to rs.
func (s *securityFlags) redisSettings(rs *config.Redis) {
	rs.Password, rs.Username = s.redisPassword, s.redisUser
	rs.SentinelUsername, rs.SentinelPassword = s.sentinelUser, s.sentinelPassword
	if s.redisTLS || s.redisCAFile != "" || s.redisCertFile != "" || s.redisKeyFile != "" || s.redisServerName != "" {
		rs.TLS = &config.RedisTLS{CAFile: s.redisCAFile, CertFile: s.redisCertFile, KeyFile: s.redisKeyFile, ServerName: s.redisServerName}
	}
}

// serverOptions sets the admin listener's options, the trusted origins
// and the allowed hosts.
func (s *securityFlags) serverOptions(o *server.Options) {
	o.TrustedOrigins = s.trustedOrigins
	o.AllowedHosts = s.allowedHosts
	o.SeparateAdmin = s.adminAddr != ""
	o.MetricsAdminOnly = s.metricsAdminOnly
	o.Profiling = s.pprof
}

// startAdmin listens on --admin-addr, if set, its connections held to
// conns (sideLimits; nil: not held), and serves the admin handler there
// until ctx ends or stop is called; stop returns once it has stopped. As the probes' listener, it is given no signal context:
// serve stops it after the drain, so that the metrics of a draining
// instance can be scraped until it stops.
func startAdmin(ctx context.Context, s *securityFlags, srv *server.Server, conns *connlimit.Limit, log *slog.Logger) (stop func(), err error) {
	if s.adminAddr == "" {
		return func() {}, nil
	}
	ln, err := s.listen(s.adminAddr, "--admin-addr", conns, "admin")
	if err != nil {
		return nil, err
	}
	log.Info("floodgate admin listening", "addr", ln.Addr().String(), "metrics_admin_only", s.metricsAdminOnly, "max_connections", conns.Max())
	return serveAside(ctx, ln, srv.ServeAdmin, "admin listener stopped", log), nil
}

// serveAside runs serve (Server.ServeAdmin or ServeHealth) on ln until
// ctx ends or the stop it returns is called; stop returns once serve has
// returned. An error that stopped serving is logged with msg.
func serveAside(ctx context.Context, ln net.Listener, serve func(context.Context, net.Listener) error, msg string, log *slog.Logger) (stop func()) {
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := serve(sctx, ln); err != nil {
			log.Error(msg, "error", err)
		}
	})
	return func() { cancel(); wg.Wait() }
}

// startHealth listens on --health-addr, if set, over plain HTTP whatever
// the TLS flags (kubelet's probes present no client certificate), its
// connections held to conns (sideLimits; nil: not held), and
// serves the probes there until ctx ends or stop is called; stop returns
// once it has stopped. Unlike the admin listener it is given no signal
// context: serve stops it after the drain, so that probes see /readyz
// answer 503 draining during --shutdown-delay, as on --addr, rather than
// a refused connection.
func startHealth(ctx context.Context, s *securityFlags, srv *server.Server, conns *connlimit.Limit, log *slog.Logger) (stop func(), err error) {
	if s.healthAddr == "" {
		return func() {}, nil
	}
	ln, err := listenTCP(s.healthAddr, "--health-addr")
	if err != nil {
		return nil, err
	}
	if conns != nil {
		ln = conns.Listener(ln, "health", 0)
	}
	log.Info("floodgate health listening", "addr", ln.Addr().String(), "tls", false, "serves", "GET/HEAD /healthz, /readyz", "max_connections", conns.Max())
	return serveAside(ctx, ln, srv.ServeHealth, "health listener stopped", log), nil
}

// checkHealthAddr refuses a --health-addr that is the address of another
// listener (--addr, --grpc-addr, --admin-addr): the same port, on the
// same host or where either listens on every interface. Port 0 (a free
// port, picked for each) conflicts with nothing.
func checkHealthAddr(f *serveFlags) error {
	h := f.sec.healthAddr
	if h == "" {
		return nil
	}
	for _, o := range []struct{ flag, addr string }{{"--addr", f.addr}, {"--grpc-addr", f.grpcAddr}, {"--admin-addr", f.sec.adminAddr}} {
		if sameListenAddr(h, o.addr) {
			return fmt.Errorf("--health-addr %s is the address of %s (%s): the health listener needs a port of its own, e.g. --health-addr :8086", h, o.flag, o.addr)
		}
	}
	return nil
}

// checkAdminAddr refuses an --admin-addr that is the address of --addr or
// --grpc-addr, as checkHealthAddr does (it failed later with "bind:
// address already in use").
func checkAdminAddr(f *serveFlags) error {
	a := f.sec.adminAddr
	for _, o := range []struct{ flag, addr string }{{"--addr", f.addr}, {"--grpc-addr", f.grpcAddr}} {
		if sameListenAddr(a, o.addr) {
			return fmt.Errorf("--admin-addr %s is the address of %s (%s): the admin listener needs a port of its own, e.g. --admin-addr %s", a, o.flag, o.addr, adminAddrExample(a))
		}
	}
	return nil
}

// adminAddrExample is the address checkAdminAddr suggests instead of a,
// in a's address family: [::1]:9090 for an IPv6 address, 127.0.0.1:9090
// otherwise.
func adminAddrExample(a string) string {
	if h, _, err := net.SplitHostPort(a); err == nil {
		if ip, err := netip.ParseAddr(h); err == nil && ip.Is6() && !ip.Is4In6() {
			return "[::1]:9090"
		}
	}
	return "127.0.0.1:9090"
}

// sameListenAddr reports whether listening on a and on b would take the
// same port: equal ports but 0, on equal hosts or where either is a
// wildcard ("", 0.0.0.0, ::). IP addresses are compared as addresses,
// not as text: [0:0:0:0:0:0:0:1]:8080 is [::1]:8080.
func sameListenAddr(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	ah, ap, aerr := net.SplitHostPort(a)
	bh, bp, berr := net.SplitHostPort(b)
	if aerr != nil || berr != nil {
		return a == b
	}
	if an, err := strconv.ParseUint(ap, 10, 16); err == nil {
		if bn, err := strconv.ParseUint(bp, 10, 16); err == nil {
			ap, bp = strconv.FormatUint(an, 10), strconv.FormatUint(bn, 10)
		}
	}
	if ap != bp || ap == "0" || ap == "" { // "" and 0: a port of the kernel's choosing
		return false
	}
	aip, aerr := netip.ParseAddr(ah)
	bip, berr := netip.ParseAddr(bh)
	wild := func(h string, ip netip.Addr, err error) bool {
		return h == "" || err == nil && ip.Unmap().IsUnspecified()
	}
	if wild(ah, aip, aerr) || wild(bh, bip, berr) {
		return true
	}
	if aerr == nil && berr == nil {
		return aip.Unmap() == bip.Unmap()
	}
	return strings.EqualFold(ah, bh)
}
