package config

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/clusterslots"
	"github.com/floodgate-rl/floodgate/internal/connsetup"
	"github.com/floodgate-rl/floodgate/internal/oneline"
	"github.com/floodgate-rl/floodgate/internal/redisnil"
	"github.com/floodgate-rl/floodgate/internal/regularfile"
	"github.com/floodgate-rl/floodgate/sentinelfollow"
)

// ErrRedisURL reports Redis connection settings that cannot be used.
var ErrRedisURL = errors.New("config: invalid Redis connection settings")

// Redis says how to reach Redis: a URL, or sentinel or cluster addresses.
// The zero value means "no Redis" (Enabled is false).
//
// URL forms:
//
//	redis://[[user]:password@]host:port[/db]            standalone
//	rediss://...                                        standalone over TLS
//	redis-sentinel://[[user]:password@]host:port[,host:port...][/db]?master=NAME
//	rediss-sentinel://...                               Sentinel and primary over TLS
//	redis-cluster://[[user]:password@]host:port[,host:port...]
//	rediss-cluster://...                                every cluster node over TLS
//
// A password need not be in the URL (where it shows in the process's
// command line): Password supplies it, from a file for example.
type Redis struct {
	// URL is one of the forms above.
	URL string
	// SentinelAddrs are sentinel addresses (host:port), used with
	// SentinelMaster instead of a redis-sentinel:// URL.
	SentinelAddrs []string
	// SentinelMaster is the name the sentinels monitor the primary by.
	SentinelMaster string
	// ClusterAddrs are Redis Cluster seed node addresses, instead of a
	// redis-cluster:// URL.
	ClusterAddrs []string
	// PoolSize is the connection pool size per node, at most MaxPoolSize
	// (go-redis allocates the pool's slots up front). Default 10 per CPU
	// (go-redis's default).
	PoolSize int
	// DialTimeout bounds connecting. Default 2s. A connection is dialled
	// once per attempt (not go-redis's five times with backoff), so a
	// refused one fails the command at once.
	DialTimeout time.Duration
	// CommandTimeout bounds reading and writing one command when the
	// caller's context has no earlier deadline. Default 1s.
	CommandTimeout time.Duration
	// Password authenticates to Redis (with the URL's user name, or
	// Username, if any) when the URL carries no password; a URL with a
	// password and a Password together are refused. Default: the URL's.
	Password string
	// Username is the ACL user to authenticate to Redis as (behind
	// Sentinel, to the primary; every node of a Cluster), with Password or
	// the URL's password, for settings whose URL names no user: sentinel
	// or cluster addresses, or a URL without user@. A URL with a user and
	// a Username together are refused, and so is a Username without a
	// password. Default: the URL's user, else Redis's default user.
	Username string
	// SentinelUsername and SentinelPassword authenticate to the sentinels
	// themselves (a Sentinel deployment only), which are set up apart from
	// the data nodes (requirepass or an ACL user in sentinel.conf): the
	// URL's user and password, and Password, go to the primary only.
	// Default: none, as go-redis does — sentinels without a password
	// refuse an AUTH, so the data nodes' password is not sent to them.
	SentinelUsername, SentinelPassword string
	// TLS, when set, makes every connection TLS — to the server, every
	// sentinel and the primary they name, or every cluster node — verified
	// against TLS.CAFile (default: the system's roots) and under
	// TLS.ServerName (default: each node's own host). rediss URLs turn TLS
	// on with the defaults. Default nil: plain TCP unless the scheme says
	// otherwise.
	TLS *RedisTLS
}

// RedisTLS configures TLS to Redis. The zero value verifies servers
// against the system's roots, under each address's host name, and sends
// no client certificate.
type RedisTLS struct {
	// CAFile is a PEM file of the certificate authorities to trust
	// instead of the system's.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// servers that require one (tls-auth-clients). Both or neither.
	CertFile, KeyFile string
	// ServerName is the name every server's certificate must carry.
	// Default: the host of the address dialled.
	ServerName string
}

// Config returns the tls.Config t describes (TLS 1.2 at least, servers
// verified), or an error naming the file that could not be used.
func (t RedisTLS) Config() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := regularfile.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: CA file: %v", ErrRedisURL, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrRedisURL, t.CAFile)
		}
		c.RootCAs = pool
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, fmt.Errorf("%w: a client certificate needs both a certificate file and a key file", ErrRedisURL)
	}
	if t.CertFile != "" {
		cert, err := regularfile.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: client certificate: %v", ErrRedisURL, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// tlsConfig returns the TLS configuration of r, on when r.TLS is set or
// on is true, nil otherwise.
func (r Redis) tlsConfig(on bool) (*tls.Config, error) {
	if r.TLS == nil && !on {
		return nil, nil
	}
	var t RedisTLS
	if r.TLS != nil {
		t = *r.TLS
	}
	return t.Config()
}

// SentinelTarget is how Client reaches the sentinels of a Sentinel
// deployment.
type SentinelTarget struct {
	// Addrs are the sentinels' host:port addresses.
	Addrs []string
	// Master is the name the sentinels monitor the primary by.
	Master string
	// TLS is the configuration of the connections to the sentinels (and
	// to the primary they name); nil for plain TCP.
	TLS *tls.Config
	// Username and Password authenticate to the sentinels
	// (Redis.SentinelUsername, Redis.SentinelPassword); empty for none.
	Username, Password string
}

// Sentinels returns how Client reaches the sentinels when r describes a
// Sentinel deployment (sentinel addresses, or a redis-sentinel or
// rediss-sentinel URL), with the same TLS settings, and false otherwise.
// Tools that talk to the sentinels themselves (floodgate doctor) use it
// so that they connect exactly as the limiter does.
func (r Redis) Sentinels() (SentinelTarget, bool, error) {
	if len(r.SentinelAddrs) > 0 {
		if err := checkAddrs(r.SentinelAddrs); err != nil {
			return SentinelTarget{}, true, err
		}
		tc, err := r.tlsConfig(false)
		return SentinelTarget{Addrs: r.SentinelAddrs, Master: r.SentinelMaster, TLS: tc,
			Username: r.SentinelUsername, Password: r.SentinelPassword}, true, err
	}
	u, err := parseURL(r.URL)
	if r.URL == "" || err != nil || (u.Scheme != "redis-sentinel" && u.Scheme != "rediss-sentinel") {
		return SentinelTarget{}, false, nil
	}
	m, err := parseMulti(u)
	if err != nil {
		return SentinelTarget{}, true, err
	}
	tc, err := r.tlsConfig(u.Scheme == "rediss-sentinel")
	return SentinelTarget{Addrs: m.addrs, Master: u.Query().Get("master"), TLS: tc,
		Username: r.SentinelUsername, Password: r.SentinelPassword}, true, err
}

// credentials merges the URL's user and password with r.Username and
// r.Password.
func (r Redis) credentials(user, pass string) (string, string, error) {
	if r.Password != "" {
		if pass != "" {
			return "", "", fmt.Errorf("%w: a password both in the URL and given separately; keep only one", ErrRedisURL)
		}
		pass = r.Password
	}
	if r.Username != "" {
		if user != "" {
			return "", "", fmt.Errorf("%w: a user name both in the URL (%s@) and given separately (%s); keep only one", ErrRedisURL, user, r.Username)
		}
		if pass == "" {
			return "", "", fmt.Errorf("%w: user name %s without a password (give the user's password, in a file or the URL)", ErrRedisURL, r.Username)
		}
		user = r.Username
	}
	return user, pass, nil
}

// Enabled reports whether any Redis is configured.
func (r Redis) Enabled() bool {
	return r.URL != "" || len(r.SentinelAddrs) > 0 || len(r.ClusterAddrs) > 0
}

// Client returns a go-redis client for the settings, with
// ContextTimeoutEnabled so that every call honours its context's deadline,
// and connsetup's hook, so that a connection Redis refuses at its
// maxclients limit fails the command as not sent. It does not connect;
// the first command does.
func (r Redis) Client() (redis.UniversalClient, error) {
	c, _, err := r.FollowingClient()
	return c, err
}

// FollowingClient is Client, and for a Sentinel deployment also a
// sentinelfollow.Follower that keeps the client on the primary a majority
// of the sentinels name (nil otherwise): run its Run for as long as the
// client serves, as floodgate serve does. go-redis alone follows one
// sentinel, which leaves the old primary seconds late when it leads the
// failover, and asks it at each new connection, which fails every new
// connection while the sentinels cannot answer (sentinelfollow.NewClient).
func (r Redis) FollowingClient() (redis.UniversalClient, *sentinelfollow.Follower, error) {
	var follow *sentinelfollow.Follower
	failover := func(o *redis.FailoverOptions) *redis.Client {
		o = r.failover(o)
		var c *redis.Client
		c, follow = sentinelfollow.NewClient(o)
		c.AddHook(sentinelAuthHint{})
		c.AddHook(redisnil.MasterHook(o.MasterName))
		return c
	}
	c, err := r.client(failover)
	if err != nil {
		return nil, nil, err
	}
	connsetup.Attach(c)
	return c, follow, nil
}

func (r Redis) client(failover func(*redis.FailoverOptions) *redis.Client) (redis.UniversalClient, error) {
	n := 0
	for _, set := range []bool{r.URL != "", len(r.SentinelAddrs) > 0, len(r.ClusterAddrs) > 0} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, fmt.Errorf("%w: give exactly one of a URL, sentinel addresses or cluster addresses", ErrRedisURL)
	}
	switch {
	case r.PoolSize < 0 || r.PoolSize > MaxPoolSize:
		return nil, fmt.Errorf("%w: pool size %d out of range 0..%d (0: the default)", ErrRedisURL, r.PoolSize, MaxPoolSize)
	case r.DialTimeout < 0:
		return nil, fmt.Errorf("%w: dial timeout %v is negative", ErrRedisURL, r.DialTimeout)
	case r.CommandTimeout < 0:
		return nil, fmt.Errorf("%w: command timeout %v is negative", ErrRedisURL, r.CommandTimeout)
	}
	if r.DialTimeout == 0 {
		r.DialTimeout = 2 * time.Second
	}
	if r.CommandTimeout == 0 {
		r.CommandTimeout = time.Second
	}
	switch {
	case len(r.SentinelAddrs) > 0:
		if r.SentinelMaster == "" {
			return nil, fmt.Errorf("%w: sentinel addresses need a master name", ErrRedisURL)
		}
		if err := checkAddrs(r.SentinelAddrs); err != nil {
			return nil, err
		}
		tc, err := r.tlsConfig(false)
		if err != nil {
			return nil, err
		}
		user, pass, err := r.credentials("", "")
		if err != nil {
			return nil, err
		}
		return failover(&redis.FailoverOptions{
			MasterName: r.SentinelMaster, SentinelAddrs: r.SentinelAddrs, Username: user, Password: pass, TLSConfig: tc,
			SentinelUsername: r.SentinelUsername, SentinelPassword: r.SentinelPassword,
		}), nil
	case len(r.ClusterAddrs) > 0:
		if err := checkAddrs(r.ClusterAddrs); err != nil {
			return nil, err
		}
		if err := r.noSentinelAuth(); err != nil {
			return nil, err
		}
		tc, err := r.tlsConfig(false)
		if err != nil {
			return nil, err
		}
		user, pass, err := r.credentials("", "")
		if err != nil {
			return nil, err
		}
		return clusterslots.NewClusterClient(r.cluster(&redis.ClusterOptions{Addrs: r.ClusterAddrs, Username: user, Password: pass, TLSConfig: tc})), nil
	}
	u, err := parseURL(r.URL)
	if !strings.Contains(r.URL, "://") && (err != nil || !knownSchemes[u.Scheme]) {
		// host:port, as redis-cli and envoyproxy/ratelimit's REDIS_URL
		// take it: url.Parse read "127.0.0.1:6380" as a path ("first path
		// segment in URL cannot contain colon") and "localhost:6380" as
		// the scheme "localhost". (unix:/path is a URL.)
		return nil, fmt.Errorf("%w: %q: no scheme: %s", ErrRedisURL, redactUnparsed(r.URL), schemeHint(r.URL))
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrRedisURL, redact(r.URL), urlError(err))
	}
	if u.Scheme != "redis-sentinel" && u.Scheme != "rediss-sentinel" {
		if err := r.noSentinelAuth(); err != nil {
			return nil, err
		}
	}
	switch u.Scheme {
	case "redis", "rediss", "unix":
		o, err := redis.ParseURL(r.URL)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %v", ErrRedisURL, redact(r.URL), urlError(err))
		}
		if o.Username, o.Password, err = r.credentials(o.Username, o.Password); err != nil {
			return nil, err
		}
		if r.TLS != nil {
			if u.Scheme == "unix" {
				return nil, fmt.Errorf("%w: TLS over a unix socket", ErrRedisURL)
			}
			tc, err := r.tlsConfig(true)
			if err != nil {
				return nil, err
			}
			if tc.ServerName == "" && o.TLSConfig != nil {
				tc.ServerName = o.TLSConfig.ServerName // the URL's host
			}
			o.TLSConfig = tc
		}
		r.apply(o)
		return redis.NewClient(o), nil
	case "redis-sentinel", "rediss-sentinel":
		o, err := parseMulti(u)
		if err != nil {
			return nil, err
		}
		master := u.Query().Get("master")
		if master == "" {
			return nil, fmt.Errorf("%w: %q: a %s URL needs ?master=NAME", ErrRedisURL, redact(r.URL), u.Scheme)
		}
		if o.user, o.pass, err = r.credentials(o.user, o.pass); err != nil {
			return nil, err
		}
		tc, err := r.tlsConfig(u.Scheme == "rediss-sentinel")
		if err != nil {
			return nil, err
		}
		return failover(&redis.FailoverOptions{
			MasterName: master, SentinelAddrs: o.addrs, Username: o.user, Password: o.pass, DB: o.db, TLSConfig: tc,
			SentinelUsername: r.SentinelUsername, SentinelPassword: r.SentinelPassword,
		}), nil
	case "redis-cluster", "rediss-cluster":
		o, err := parseMulti(u)
		if err != nil {
			return nil, err
		}
		if o.db != 0 {
			return nil, fmt.Errorf("%w: Redis Cluster has only database 0", ErrRedisURL)
		}
		if o.user, o.pass, err = r.credentials(o.user, o.pass); err != nil {
			return nil, err
		}
		tc, err := r.tlsConfig(u.Scheme == "rediss-cluster")
		if err != nil {
			return nil, err
		}
		return clusterslots.NewClusterClient(r.cluster(&redis.ClusterOptions{Addrs: o.addrs, Username: o.user, Password: o.pass, TLSConfig: tc})), nil
	}
	return nil, fmt.Errorf("%w: %q: scheme %q (want redis, rediss, redis-sentinel, rediss-sentinel, redis-cluster or rediss-cluster)", ErrRedisURL, redact(r.URL), u.Scheme)
}

// noSentinelAuth refuses sentinel credentials given for a deployment
// without sentinels: they would be silently unused.
func (r Redis) noSentinelAuth() error {
	if r.SentinelUsername != "" || r.SentinelPassword != "" {
		return fmt.Errorf("%w: a sentinel user name or password, but no sentinels (give sentinel addresses or a redis-sentinel URL)", ErrRedisURL)
	}
	return nil
}

// sentinelAuthHint is a hook of failover clients: when the sentinels
// refuse to answer for want of their own password (NOAUTH), or refuse the
// one given (WRONGPASS; or an AUTH to sentinels that have none), the dial
// error says where their password is given. go-redis reports it as "all
// sentinels specified in configuration are unreachable", which sends the
// reader to the network.
type sentinelAuthHint struct{}

func (sentinelAuthHint) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		c, err = next(ctx, network, addr)
		if err != nil && strings.Contains(err.Error(), "all sentinels specified in configuration are unreachable") {
			// The sentinels were asked for the primary's address and
			// none answered: nothing was sent to the primary, whatever
			// the sentinels' connections failed with (a TLS alert or a
			// reset after a write to a sentinel, which alone would read
			// as a command that may have run). A dial error says so to
			// luascript.Classify and its kin.
			// go-redis joins the sentinels' failures one per line:
			// put them on one (readiness quotes op.Err alone).
			defer func() { err = &net.OpError{Op: "dial", Net: network, Err: oneline.Error(err)} }()
			var reply redis.Error
			if errors.As(err, &reply) {
				msg := reply.Error()
				switch {
				case strings.HasPrefix(msg, "NOAUTH"):
					err = fmt.Errorf("%w (the sentinels require a password of their own: give it apart from the primary's, with floodgate's --redis-sentinel-password-file)", err)
				case strings.HasPrefix(msg, "WRONGPASS"), strings.Contains(msg, "without any password configured"):
					err = fmt.Errorf("%w (the sentinels refuse the sentinel user name or password given: check --redis-sentinel-username and --redis-sentinel-password-file, which go to the sentinels only)", err)
				}
			}
		}
		return c, err
	}
}

func (sentinelAuthHint) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (sentinelAuthHint) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// DialAttempts is how many times a connection to Redis is dialled before
// the command that needed it fails: once, in serve's clients and in
// envoy-compat's (as envoyproxy/ratelimit dials). go-redis's default, five with
// backoff (about 400 ms against a refused connection), outlasted every
// decision's budget (50 ms by default, --fallback-budget), so a Redis that
// is down was reported as reason timeout rather than unavailable until the
// breaker opened. The next command dials afresh.
const DialAttempts = 1

// CommandRetries is how many times a client built from a Redis
// configuration sends a plain command again (a tier lookup's HGET, an
// assignment's HSET) after a failure go-redis deems safe to retry (a
// connection broken under it, a refused dial, a LOADING reply): once, and
// at once. go-redis's default, three retries after pauses of 10 ms and
// more (doubling, up to a second), slept 30 ms or more against a Redis
// that refuses connections: a tiered decision's lookup outlasted its
// budget (reason timeout rather than unavailable) and a quota or lease
// operation waited up to a fifth of a second before its 503. One retry
// still replaces a pooled connection Redis closed. Scripts are never sent
// again whatever this says (luascript marks them NoRetry). A Redis
// Cluster client keeps go-redis's three tries beyond the first, which
// bound MOVED and ASK redirections and retries together, but its retries
// too come without a pause.
const CommandRetries = 1

// apply sets o, parsed from a redis:// or rediss:// URL, as serve's
// clients are set; the URL's max_retries, min_retry_backoff and
// max_retry_backoff, when given, are kept.
func (r Redis) apply(o *redis.Options) {
	o.ContextTimeoutEnabled, o.DialerRetries = true, DialAttempts
	if o.MaxRetries == 0 {
		o.MaxRetries = CommandRetries
	}
	if o.MinRetryBackoff == 0 && o.MaxRetryBackoff == 0 {
		o.MinRetryBackoff, o.MaxRetryBackoff = noBackoff, noBackoff
	}
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = r.DialTimeout, r.CommandTimeout, r.CommandTimeout
	if r.PoolSize > 0 {
		o.PoolSize = r.PoolSize
	}
}

// noBackoff is go-redis's value for "no pause before a retry".
const noBackoff = -1

func (r Redis) failover(o *redis.FailoverOptions) *redis.FailoverOptions {
	o.ContextTimeoutEnabled, o.DialerRetries = true, DialAttempts
	o.MaxRetries, o.MinRetryBackoff, o.MaxRetryBackoff = CommandRetries, noBackoff, noBackoff
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = r.DialTimeout, r.CommandTimeout, r.CommandTimeout
	o.PoolSize = r.PoolSize
	return o
}

// cluster leaves MaxRedirects at go-redis's default: it bounds the MOVED
// and ASK redirections followed as well as the retries, and a cluster's
// node clients retry nothing themselves.
func (r Redis) cluster(o *redis.ClusterOptions) *redis.ClusterOptions {
	o.ContextTimeoutEnabled, o.DialerRetries = true, DialAttempts
	o.MinRetryBackoff, o.MaxRetryBackoff = noBackoff, noBackoff
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = r.DialTimeout, r.CommandTimeout, r.CommandTimeout
	o.PoolSize = r.PoolSize
	return o
}

type multiURL struct {
	addrs      []string
	user, pass string
	db         int
}

// parseMulti reads user, password, comma-separated host:port list and /db
// from a sentinel or cluster URL.
func parseMulti(u *url.URL) (multiURL, error) {
	var m multiURL
	if u.User != nil {
		m.user = u.User.Username()
		m.pass, _ = u.User.Password()
	}
	for _, a := range strings.Split(u.Host, ",") {
		if a == "" {
			continue
		}
		m.addrs = append(m.addrs, a)
	}
	if len(m.addrs) == 0 {
		return m, fmt.Errorf("%w: %s URL has no host:port", ErrRedisURL, u.Scheme)
	}
	if err := checkAddrs(m.addrs); err != nil {
		return m, err
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		db, err := strconv.Atoi(p)
		if err != nil || db < 0 {
			return m, fmt.Errorf("%w: database %q is not a number", ErrRedisURL, p)
		}
		m.db = db
	}
	for k := range u.Query() {
		if k != "master" {
			return m, fmt.Errorf("%w: unknown URL parameter %q (only master is understood)", ErrRedisURL, k)
		}
	}
	return m, nil
}

// multiHostSchemes are the schemes of the URLs with a list of hosts.
var multiHostSchemes = map[string]bool{"redis-sentinel": true, "rediss-sentinel": true, "redis-cluster": true, "rediss-cluster": true}

// parseURL is url.Parse, except that it reads the host list of a
// sentinel or cluster URL itself and returns it, as given, in Host:
// url.Parse refuses a list of bracketed IPv6 addresses
// ("[::1]:26379,[::1]:26380": invalid IP-literal). The list's entries
// are checked by parseMulti.
func parseURL(raw string) (*url.URL, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || !multiHostSchemes[strings.ToLower(scheme)] {
		return url.Parse(raw)
	}
	// As url.Parse reads it: the authority ends at the first "/", "?"
	// or "#"; the user part, at its last "@".
	end := len(rest)
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		end = i
	}
	if strings.Contains(rest[end:], "@") {
		// A user part holding an unescaped "/", "?" or "#" ends the
		// authority early: what looks like the host list is part of the
		// password, so it is quoted nowhere. No parameter of these
		// URLs (only master) holds an "@".
		return nil, fmt.Errorf("a %s URL with an @ after its host list: escape a / ? or # in the user or password as %%2F %%3F %%23", strings.ToLower(scheme))
	}
	at := strings.LastIndex(rest[:end], "@") + 1
	u, err := url.Parse(scheme + "://" + rest[:at] + "hosts" + rest[end:])
	if err != nil {
		return nil, err
	}
	hosts := strings.Split(rest[at:end], ",")
	for i, h := range hosts {
		// Each host as url.Parse reads one ("[fe80::1%25eth0]:7000" is
		// [fe80::1%eth0]:7000). One it refuses but that is host:port
		// (a space in the name) is refused; one that is not host:port
		// ("::1:26379", "[::1") is left for parseMulti to explain.
		hu, err := url.Parse("//" + h)
		if err == nil {
			hosts[i] = hu.Host
		} else if _, _, serr := net.SplitHostPort(h); serr == nil {
			return nil, err
		}
	}
	u.Host = strings.Join(hosts, ",")
	return u, nil
}

func checkAddrs(addrs []string) error {
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" {
			if hint := bracketHint(a); hint != "" {
				return fmt.Errorf("%w: address %q is not host:port: %s", ErrRedisURL, a, hint)
			}
			return fmt.Errorf("%w: address %q is not host:port", ErrRedisURL, a)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%w: address %q has an invalid port", ErrRedisURL, a)
		}
	}
	return nil
}

// plainURLParams are the URL query parameters shown as they are in
// messages (the settings go-redis and Floodgate read, none a secret);
// any other parameter's value, "password" or a misspelling of it for one,
// is hidden.
var plainURLParams = map[string]bool{
	"master": true, "db": true, "protocol": true, "client_name": true,
	"dial_timeout": true, "read_timeout": true, "write_timeout": true, "context_timeout_enabled": true,
	"pool_fifo": true, "pool_size": true, "pool_timeout": true, "min_idle_conns": true, "max_idle_conns": true,
	"max_active_conns": true, "conn_max_idle_time": true, "conn_max_lifetime": true,
	"max_retries": true, "min_retry_backoff": true, "max_retry_backoff": true, "skip_verify": true,
}

// redactUnparsed hides the password of a URL that is not parsed (or
// has no scheme): it keeps the host and path only, since the user part
// and the query may hold one.
func redactUnparsed(raw string) string {
	rest := raw
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = "...@" + rest[i+1:]
	}
	if i := strings.Index(rest, "?"); i >= 0 {
		rest = rest[:i] + "?..."
	}
	return rest
}

// knownSchemes are the schemes of the URLs client takes.
var knownSchemes = map[string]bool{"redis": true, "rediss": true, "unix": true,
	"redis-sentinel": true, "rediss-sentinel": true, "redis-cluster": true, "rediss-cluster": true}

// schemeHint says what --redis wants, for a value without a scheme; for
// a bare host:port, with that address.
func schemeHint(raw string) string {
	const want = "want redis://host:port/db (or rediss://)"
	if _, _, err := net.SplitHostPort(raw); err == nil && !strings.ContainsAny(raw, "@/?") {
		return want + ", such as redis://" + raw + "/0"
	}
	if hint := bracketHint(raw); hint != "" {
		return want + "; " + strings.Replace(hint, ": [", ": redis://[", 1) + "/0"
	}
	return want
}

// bracketHint returns, for an IPv6 address and port written without
// brackets ("::1:6380"), how to write them ("put an IPv6 address in
// brackets: [::1]:6380"); "" for anything else.
func bracketHint(a string) string {
	if hp, ok := UnbracketedIPv6(a); ok {
		return "put an IPv6 address in brackets: " + hp
	}
	return ""
}

// UnbracketedIPv6 reports whether a is an IPv6 address and a port
// written without the brackets host:port needs ("::1:6380", which
// net.SplitHostPort refuses: too many colons), and returns them as they
// should be written ("[::1]:6380"). Messages use it to say so.
func UnbracketedIPv6(a string) (string, bool) {
	i := strings.LastIndex(a, ":")
	if i < 0 || strings.ContainsAny(a, "[]") {
		return "", false
	}
	ip, err := netip.ParseAddr(a[:i])
	if n, perr := strconv.Atoi(a[i+1:]); err != nil || !ip.Is6() || perr != nil || n < 1 || n > 65535 {
		return "", false
	}
	return net.JoinHostPort(a[:i], a[i+1:]), true
}

// redact hides a URL's password in messages: the user part's, and the
// value of every query parameter but plainURLParams.
func redact(raw string) string {
	u, err := parseURL(raw)
	if err != nil || u.Opaque != "" {
		// An opaque one is most likely user:password@host:port without
		// a scheme, its user read as one.
		return redactUnparsed(raw)
	}
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			u.RawQuery = "..."
		} else {
			for k, vs := range q {
				if !plainURLParams[k] {
					for i := range vs {
						vs[i] = "xxxxx"
					}
				}
			}
			u.RawQuery = q.Encode()
		}
	}
	return u.Redacted()
}

// urlError returns err without the URL a *url.Error carries (it may hold
// a password).
func urlError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// String describes the settings without passwords, for logs.
func (r Redis) String() string {
	switch {
	case len(r.SentinelAddrs) > 0:
		return "sentinel " + r.SentinelMaster + "@" + strings.Join(r.SentinelAddrs, ",")
	case len(r.ClusterAddrs) > 0:
		return "cluster " + strings.Join(r.ClusterAddrs, ",")
	case r.URL != "":
		return redact(r.URL)
	}
	return "none"
}

// MaxPoolSize bounds Redis.PoolSize: far more connections than one Redis
// serves well, and few enough that the pool's up-front allocation stays
// small (100,000,000 ran serve out of memory).
const MaxPoolSize = 10_000
