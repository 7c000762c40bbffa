// Command loginserver is a tiny login server protected by Floodgate: a
// per-IP rate limit on POST /login (package httplimit) and brute-force
// protection per account, per IP and per account+IP (package loginguard).
//
// It knows one account, "demo" with password "correct horse battery
// staple". Try:
//
//	go run ./examples/loginserver
//	curl -i -d username=demo -d 'password=correct horse battery staple' localhost:8090/login
//	curl -i -d username=demo -d password=wrong localhost:8090/login   # repeat
//
// After a few failures the answer asks for a CAPTCHA (send captcha=solved,
// the demo's stand-in for a real provider's token), then attempts are
// delayed (429 with Retry-After), then locked for a while. Unknown names
// get exactly the same answers as wrong passwords. A locked account still
// lets an address with a clean record in with a CAPTCHA, so that its owner
// can log in; -strict-account-lock locks it for every address (then anyone
// who knows the name can lock its owner out until the lock ends).
//
// By default state is in memory; with -redis it lives in Redis and is
// shared by every instance (which must then share -secret-file), under
// the key prefix "loginserver": to lift its lockouts with floodgate
// serve's POST /admin/v1/login/unlock, run serve with the same Redis,
// --login-secret-file (both read the file trimmed of surrounding space)
// and --login-prefix loginserver.
//
// A Redis Cluster is given by its seed nodes, and Redis behind Sentinel by
// its sentinels and the primary's name, with the flag names of floodgate
// serve:
//
//	go run ./examples/loginserver -secret-file secret -redis-cluster 10.0.0.1:6379,10.0.0.2:6379
//	go run ./examples/loginserver -secret-file secret -redis-sentinel 10.0.0.1:26379,10.0.0.2:26379 -redis-master mymaster
//
// A node of a Cluster given to -redis, as if it were a single Redis,
// would answer most calls with a redirection (MOVED): the server refuses
// to start, saying the address is a Redis Cluster node and to use
// -redis-cluster. A -redis that does not answer at start is not checked:
// the server starts, and logins fail with 503 until Redis is up.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/loginguard"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/redis/go-redis/v9"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "loginserver:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends.
func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("loginserver", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8090", "listen address (not 8080 and 8081, floodgate serve's HTTP and gRPC ports, so that both run side by side)")
	redisAddr := fs.String("redis", "", "Redis address (host:port) of a single Redis; without it, -redis-cluster or -redis-sentinel, all state is kept in memory")
	clusterAddrs := fs.String("redis-cluster", "", "Redis Cluster seed addresses (host:port,...)")
	sentinelAddrs := fs.String("redis-sentinel", "", "Redis Sentinel addresses (host:port,...), with -redis-master")
	sentinelMaster := fs.String("redis-master", "", "name of the primary the sentinels monitor")
	trusted := fs.String("trusted-proxies", "", "comma-separated networks of trusted reverse proxies, e.g. 10.0.0.0/8")
	perIP := fs.Int64("per-ip", 20, "POST /login requests per minute per client IP")
	iterations := fs.Int("iterations", 600_000, "PBKDF2-SHA256 iterations per password check")
	secretFile := fs.String("secret-file", "", "file holding the guard's HMAC secret (required with -redis, -redis-cluster or -redis-sentinel); empty draws a random one")
	strict := fs.Bool("strict-account-lock", false, "apply an account's lock and delays to every address (loginguard.Options.StrictAccountLock): without it, a clean account+address pair passes a locked account with a CAPTCHA, so the owner can still log in, and so can each of an attacker's addresses once per pair window")
	if err := fs.Parse(args); err != nil {
		return err
	}

	client, err := redisClient(*redisAddr, *clusterAddrs, *sentinelAddrs, *sentinelMaster)
	if err != nil {
		return err
	}
	if client != nil {
		defer client.Close()
	}
	if c, ok := client.(*redis.Client); ok && *redisAddr != "" {
		if err := refuseClusterNode(ctx, c); err != nil {
			return err
		}
	}
	secret, err := loadSecret(*secretFile, client != nil)
	if err != nil {
		return err
	}
	var proxies []string
	if *trusted != "" {
		proxies = strings.Split(*trusted, ",")
	}
	prefixes, err := clientip.ParsePrefixes(proxies)
	if err != nil {
		return err
	}
	ips, err := clientip.New(clientip.Options{TrustedProxies: prefixes, IPv6Prefix: 64})
	if err != nil {
		return err
	}
	policy, err := floodgate.NewSlidingWindow("login-per-ip", *perIP, time.Minute)
	if err != nil {
		return err
	}

	var store floodgate.Store
	var backend loginguard.Backend
	if client == nil {
		if store, err = memstore.New(memstore.Options{}); err != nil {
			return err
		}
		if backend, err = loginguard.NewMemory(loginguard.MemoryOptions{}); err != nil {
			return err
		}
	} else {
		if store, err = redisstore.New(client, redisstore.Options{}); err != nil {
			return err
		}
		if backend, err = loginguard.NewRedis(client, "loginserver"); err != nil {
			return err
		}
	}
	limiter, err := floodgate.New(store, floodgate.Options{Prefix: "loginserver"})
	if err != nil {
		return err
	}
	guard, err := loginguard.New(backend, loginguard.Options{Secret: secret, StrictAccountLock: *strict})
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	h, err := newHandler(config{
		Limiter: limiter, PerIP: policy, Guard: guard, IPs: ips,
		Iterations: *iterations, Clock: time.Now, Logger: logger,
	})
	if err != nil {
		return err
	}

	srv := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	logger.Info("listening", "addr", *addr, "redis", client != nil)
	if err := serve(ctx, srv); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// redisClient returns a client for the Redis given by one of -redis (a
// single server), -redis-cluster (seed nodes) or -redis-sentinel with
// -redis-master, or nil when none is given (state in memory).
func redisClient(addr, cluster, sentinels, master string) (redis.UniversalClient, error) {
	given := 0
	for _, v := range []string{addr, cluster, sentinels} {
		if v != "" {
			given++
		}
	}
	if given > 1 {
		return nil, errors.New("give one of -redis, -redis-cluster and -redis-sentinel")
	}
	if (sentinels == "") != (master == "") {
		return nil, errors.New("-redis-sentinel and -redis-master go together: the sentinels' addresses and the name of the primary they monitor")
	}
	const timeout = 200 * time.Millisecond
	switch {
	case addr != "":
		return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, ReadTimeout: timeout, WriteTimeout: timeout}), nil
	case cluster != "":
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(cluster, ","), ContextTimeoutEnabled: true, ReadTimeout: timeout, WriteTimeout: timeout}), nil
	case sentinels != "":
		return redis.NewFailoverClient(&redis.FailoverOptions{SentinelAddrs: strings.Split(sentinels, ","), MasterName: master, ContextTimeoutEnabled: true, ReadTimeout: timeout, WriteTimeout: timeout}), nil
	}
	return nil, nil
}

// refuseClusterNode fails when the Redis of -redis is a node of a Redis
// Cluster (INFO's redis_mode): it redirects (MOVED) the keys of every slot
// it does not serve, so most logins would fail with 503 and the others
// pass on that node alone. A Redis that cannot be asked now (down at
// start, INFO refused) is not reported: logins answer 503 until it is up.
func refuseClusterNode(ctx context.Context, c *redis.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_mode:"); ok && v == "cluster" {
			return fmt.Errorf("-redis %s is a Redis Cluster node, given as a single Redis: it redirects (MOVED) the keys of every slot it does not serve; give the Cluster's nodes with -redis-cluster (host:port,...)", c.Options().Addr)
		}
	}
	return nil
}

// loadSecret reads the HMAC secret from path, or draws a random one when
// path is empty and state is not shared.
func loadSecret(path string, shared bool) ([]byte, error) {
	if path == "" {
		if shared {
			return nil, errors.New("-secret-file is required with -redis, -redis-cluster or -redis-sentinel: every instance must key the counters alike")
		}
		secret := make([]byte, 32)
		_, _ = rand.Read(secret) // crypto/rand.Read never fails
		return secret, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	secret := []byte(strings.TrimSpace(string(b)))
	if len(secret) < loginguard.MinSecretLen {
		return nil, fmt.Errorf("secret in %s has %d bytes, want at least %d", path, len(secret), loginguard.MinSecretLen)
	}
	return secret, nil
}
