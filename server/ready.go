package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/clusterslots"
)

// RedisReady returns a readiness check (Options.Ready) for the Redis the
// service decides with, asking every node it needs:
//
//   - Redis Cluster: every primary answers CLUSTER INFO with
//     cluster_state:ok (a cluster that lost a primary without failover
//     says fail, and every node refuses commands);
//   - Sentinel or a standalone server: the server the client is connected
//     to answers ROLE with master (after a failover, a client still
//     talking to the demoted primary is not ready until it follows the
//     sentinels).
//
// With probeKey set, each such primary must also take a write: a SET of
// probeKey (on a Cluster, of a key in one of that primary's slots), with a
// 10 s expiry, as the breaker's background probe (fallback.RedisProbe) is
// (a Cluster slot migrating away during a resharding redirects the write,
// which is no refusal: another slot of the primary is tried).
// A Redis out of memory (maxmemory with noeviction) still answers ROLE
// and CLUSTER INFO but refuses every decision's script; without the write
// it was reported ready until enough decisions had failed to open the
// breaker, which light traffic may never do.
//
// The check's error names the node and what it said. A write redirected
// (MOVED or ASK) by a Cluster node given as a single Redis says so, and
// to use --redis-cluster.
//
// An ACL user refused ROLE (NOPERM: ROLE is in @dangerous, which
// production ACLs often take away) is not unready for it: the server is
// judged by the write (or, without probeKey, by a PING) alone. A replica
// behind the address then still fails the write (READONLY), but is no
// longer named as a replica; without probeKey it is not noticed at all.
// RedisReadyLog says so once in a log.
func RedisReady(client redis.UniversalClient, probeKey string) func(ctx context.Context) error {
	return RedisReadyLog(client, probeKey, nil)
}

// RedisReadyLog is RedisReady, warning once in log (nil: nowhere) when
// the ACL user may not send ROLE: the grant to add (+role) and what the
// check does without it. After a refusal ROLE is not sent again for
// RoleRetry, so that a probe every few seconds does not add a NOPERM to
// Redis's ACL LOG each time; a grant made meanwhile is used from then on.
func RedisReadyLog(client redis.UniversalClient, probeKey string, log *slog.Logger) func(ctx context.Context) error {
	return RedisReadyWith(client, probeKey, ReadyOptions{Log: log})
}

// ReadyOptions are RedisReadyWith's optional knobs; the zero value is
// RedisReady's behaviour.
type ReadyOptions struct {
	// Log gets RedisReadyLog's warning. Nil: nowhere.
	Log *slog.Logger
	// Nodes, for a Sentinel (failover) client, gives the failures met at
	// each sentinel and server since a time (sentinelfollow.Follower does,
	// for the client it was made with). A failed check's error then adds
	// those met while it ran, each naming its node: go-redis's own error
	// behind Sentinel is often its deadline ("context deadline exceeded",
	// its retries of the sentinels having run out the check's time), or
	// says what failed but not where. Nil: nothing is added.
	//
	// When Nodes also has a method Primary() string, the address of the
	// primary the sentinels named last ("" before any answer), a reply
	// error of that server (WRONGPASS for the primary's password) names
	// it: go-redis's does not. A failure of the sentinels themselves adds
	// those met at them in the SentinelLookback before the check too: the
	// Follower asks them every second, and a sentinel's refusal (WRONGPASS)
	// is a reply, not a connection's failure, so only those questions
	// record it.
	Nodes NodeErrors
	// Replies, if set, is where the error replies of the Redis nodes'
	// probes are remembered, the check's own and the breaker's (wrap
	// fallback.RedisProbe with Replies.Probe), so that a probe of the
	// check that times out after its Redis gave an error reply less than
	// ErrorReplyRecent ago adds it, e.g. "i/o timeout (its last error
	// reply, 1.2s ago: LOADING Redis is loading the dataset in memory)".
	// Nil: the check remembers its own probes' replies only.
	Replies *ErrorReplies
}

// SentinelLookback is how far before a check that found no sentinel
// answering ReadyOptions.Nodes is asked for the sentinels' failures.
const SentinelLookback = 3 * time.Second

// errNoSentinel is the start of go-redis's error when no sentinel gave
// the primary's address.
const errNoSentinel = "all sentinels specified in configuration are unreachable"

// NodeErrors gives the failures met at Redis nodes since a time, each
// naming its node and wrapping the failure.
type NodeErrors interface {
	NodeErrors(since time.Time) []error
}

// isRedirect reports a Redis Cluster redirection (MOVED or ASK), which a
// client for a single Redis gets from a node of a Cluster.
func isRedirect(err error) bool {
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	return moved || ask
}

// RedisReadyWith is RedisReadyLog with opts.
func RedisReadyWith(client redis.UniversalClient, probeKey string, opts ReadyOptions) func(ctx context.Context) error {
	log := opts.Log
	var probe func(ctx context.Context, partition string) error
	if probeKey != "" {
		probe = fallback.RedisProbe(client, probeKey)
	}
	replies := opts.Replies
	if replies == nil {
		replies = NewErrorReplies()
	}
	var warnOnce sync.Once
	var refusedAt atomic.Int64 // Unix ns of ROLE's last NOPERM; 0: none
	return func(ctx context.Context) error {
		if cc, ok := client.(*redis.ClusterClient); ok {
			return clusterReady(ctx, cc, probe, replies)
		}
		start := time.Now()
		named := func(err error) error {
			// The last error reply before a timeout, then this one's.
			note := replies.note(fallback.DefaultPartition, err)
			replies.Record(fallback.DefaultPartition, err)
			if note != "" {
				err = fmt.Errorf("%w%s", err, note)
			}
			if opts.Nodes == nil {
				return addrErr(client, err, nil)
			}
			since := start
			if strings.Contains(err.Error(), errNoSentinel) {
				since = start.Add(-SentinelLookback)
				// config's hook makes it a dial error, for the stores
				// ("dial tcp: redis: all sentinels..."): say it once.
				if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "dial" && strings.Contains(op.Err.Error(), errNoSentinel) {
					err = op.Err
				}
			}
			var reply redis.Error
			if p, ok := opts.Nodes.(interface{ Primary() string }); ok && errors.As(err, &reply) && !strings.Contains(err.Error(), errNoSentinel) {
				// A reply of the primary (the sentinels' replies come in
				// go-redis's errNoSentinel): name the server it came from.
				if addr := p.Primary(); addr != "" && !strings.Contains(err.Error(), addr) {
					err = fmt.Errorf("redis primary %s (named by the sentinels): %w", addr, err)
				}
			}
			return addrErr(client, err, opts.Nodes.NodeErrors(since))
		}
		var err error
		if at := refusedAt.Load(); at != 0 && time.Since(time.Unix(0, at)) < RoleRetry {
			err = errRoleRefused
		} else if err = primaryReady(ctx, client, named); errors.Is(err, errRoleRefused) {
			refusedAt.Store(time.Now().UnixNano())
		}
		if errors.Is(err, errRoleRefused) {
			warnOnce.Do(func() {
				if log == nil {
					return
				}
				judged, lost := "the probe's write", "a replica behind the address fails the write (READONLY) but is not named as a replica"
				if probe == nil {
					judged, lost = "PING", "a replica behind the address is not noticed"
				}
				log.Warn("redis: the ACL user may not send ROLE (NOPERM), so readiness cannot check that the server is a primary; grant the user +role", "judged_by", judged, "lost", lost, "error", err)
			})
			if probe == nil {
				if perr := client.Ping(ctx).Err(); perr != nil {
					return named(perr)
				}
				return nil
			}
			err = nil
		}
		if err != nil || probe == nil {
			return err
		}
		if err := probe(ctx, fallback.DefaultPartition); err != nil {
			note := replies.note(fallback.DefaultPartition, err)
			replies.Record(fallback.DefaultPartition, err)
			if isRedirect(err) {
				return fmt.Errorf("redis: the address is a Redis Cluster node, given as a single Redis (it redirected a write: %w): give the cluster's nodes with --redis-cluster (or a redis-cluster:// URL)", err)
			}
			return fmt.Errorf("redis: the probe's write failed: %w%s", err, note)
		}
		return nil
	}
}

func clusterReady(ctx context.Context, cc *redis.ClusterClient, probe func(ctx context.Context, partition string) error, replies *ErrorReplies) error {
	// The listing gets a third of the time (a stalled node chosen for
	// the slot map's reload used to take all of it, failing every
	// primary's own check with "context deadline exceeded"), each
	// primary's check the rest.
	nodes, err := clusterslots.Primaries(ctx, cc)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			if err := nodeReady(ctx, n, probe, replies); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("redis cluster node %s: %w", n.Options().Addr, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// nodeReady checks one Cluster primary: CLUSTER INFO says
// cluster_state:ok and, with probe, it takes a write. A timeout after an
// error reply of the node (replies) adds that reply.
func nodeReady(ctx context.Context, n *redis.Client, probe func(ctx context.Context, partition string) error, replies *ErrorReplies) error {
	addr := n.Options().Addr
	info, err := n.ClusterInfo(ctx).Result()
	if err != nil {
		note := replies.note(addr, err)
		replies.Record(addr, err)
		return fmt.Errorf("%w%s", err, note)
	}
	if err == nil && !strings.Contains(info, "cluster_state:ok") {
		state := "unknown"
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster_state:"); ok {
				state = v
			}
		}
		err = fmt.Errorf("cluster_state:%s", state)
	}
	if err == nil && probe != nil {
		// A primary gone from the slot map since the listing serves no
		// key: nothing to be ready for.
		if err = probe(ctx, addr); err != nil && !errors.Is(err, fallback.ErrPartitionGone) {
			note := replies.note(addr, err)
			replies.Record(addr, err)
			return fmt.Errorf("the probe's write failed: %w%s", err, note)
		}
		return nil
	}
	return err
}

// RoleRetry is how long readiness goes without sending ROLE after the ACL
// user was refused it.
const RoleRetry = 10 * time.Minute

// errRoleRefused wraps a NOPERM reply to ROLE.
var errRoleRefused = errors.New("ROLE refused to the ACL user")

// primaryReady checks that c's server is a primary; named names the
// node in a failure (addrErr).
func primaryReady(ctx context.Context, c redis.UniversalClient, named func(error) error) error {
	v, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		if strings.HasPrefix(err.Error(), "NOPERM") {
			return fmt.Errorf("%w: %w", errRoleRefused, err)
		}
		return named(err)
	}
	if len(v) == 0 {
		return errors.New("redis: empty ROLE reply")
	}
	if role, _ := v[0].(string); role != "master" {
		return fmt.Errorf("redis: the server is a %s, not a primary: writes would fail", role)
	}
	return nil
}

// addrErr names the server in err: a stalled or unreachable server's
// error often does not say which (context deadline exceeded). A failover
// client's address names no server: nodes, the failures met at the
// sentinels and servers meanwhile (ReadyOptions.Nodes), are added in
// parentheses, and wrapped, so that a sentinel's EOF gets the hint a
// standalone server's does.
func addrErr(c redis.UniversalClient, err error, nodes []error) error {
	if len(nodes) > 0 {
		args := append([]any{err}, make([]any, len(nodes))...)
		for i, n := range nodes {
			args[i+1] = n
		}
		err = fmt.Errorf("%w ("+strings.Repeat("; %w", len(nodes))[2:]+")", args...)
	}
	hint := ""
	if rc, ok := c.(*redis.Client); ok {
		if rc.Options().TLSConfig == nil && errors.Is(err, io.EOF) {
			// A TLS-only Redis closes a plaintext connection at once.
			hint = " (the server closed the connection: if it serves TLS only, connect with rediss:// or --redis-tls)"
		}
		if addr := rc.Options().Addr; addr != "" && addr != "FailoverClient" && !strings.Contains(err.Error(), addr) {
			return fmt.Errorf("redis %s: %w%s", addr, err, hint)
		}
	}
	if msg := err.Error(); strings.HasPrefix(msg, "redis: ") || strings.HasPrefix(msg, "redis primary ") {
		// go-redis's own "redis: ...", or a node named above.
		if hint == "" {
			return err
		}
		return fmt.Errorf("%w%s", err, hint)
	}
	return fmt.Errorf("redis: %w%s", err, hint)
}
