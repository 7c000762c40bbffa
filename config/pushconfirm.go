package config

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/connsetup"
)

// ErrNotConfirmed is wrapped by PublishWith's error when the document was
// stored on a primary but its durability was not confirmed: fewer
// replicas than asked for acknowledged it (PublishOptions.Replicas), or
// the sentinels no longer name that server the primary
// (PublishOptions.Sentinels). A failover may then lose it (the primary
// that took it is demoted and resynchronises from the promoted replica,
// which never had it). The document was not announced, but instances
// polling the key may still apply it at their next poll; publishing it
// again confirms it, unless the primary lists fewer replicas online
// than PublishOptions.Replicas (then it fails the same way until more
// are online).
var ErrNotConfirmed = errors.New("config: the stored document is not confirmed durable")

// ReplicasOnline is the PublishOptions.Replicas that waits for every
// replica the primary lists online, and for at least one when the
// sentinels (PublishOptions.Sentinels) list a replica of it that they do
// not see down.
const ReplicasOnline = -1

// DefaultReplicaTimeout is PublishOptions.ReplicaTimeout's default.
const DefaultReplicaTimeout = 2 * time.Second

// replicaTimeout returns the timeout WAIT is sent with for d: the
// default for 0, else d rounded up to a whole millisecond. Redis counts
// WAIT's timeout in milliseconds and go-redis truncates to them, so
// 500µs would go out as WAIT n 0, which waits for ever.
func replicaTimeout(d time.Duration) time.Duration {
	if d == 0 {
		return DefaultReplicaTimeout
	}
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

// connLost says whether err is the connection to the server closing or
// reset under the command, as Redis closes its clients' connections
// when a failover demotes it.
func connLost(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// notConfirmed returns ErrNotConfirmed for a failed step of the
// confirmation (what, such as "WAIT 1"), its cause first when the
// connection closed under it, and err's text at the end.
func notConfirmed(what string, err error) error {
	if connLost(err) {
		return fmt.Errorf("%w: the connection to the primary closed during the confirmation, as happens when a failover demotes it: %s: %w", ErrNotConfirmed, what, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrNotConfirmed, what, err)
}

// writeNode returns the server a document stored under keys.Config is
// written to: client itself, or on a Redis Cluster the primary of its
// slot.
func writeNode(ctx context.Context, client redis.UniversalClient, keys Keys) (*redis.Client, error) {
	switch c := client.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, keys.Config)
	}
	return nil, fmt.Errorf("config: cannot publish through a %T (want *redis.Client or *redis.ClusterClient)", client)
}

// onlineReplicas returns how many replicas the server on conn lists
// online in INFO replication, and its role.
func onlineReplicas(ctx context.Context, conn *redis.Conn) (n int, role string, err error) {
	info, err := conn.Info(ctx, "replication").Result()
	if err != nil {
		return 0, "", err
	}
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "role:"); ok {
			role = v
		}
		if strings.HasPrefix(line, "slave") && strings.Contains(line, ":ip=") && strings.Contains(line, ",state=online,") {
			n++
		}
	}
	return n, role, nil
}

// sentinelClients returns a client for each sentinel of st.
func sentinelClients(st *SentinelTarget) []*redis.SentinelClient {
	out := make([]*redis.SentinelClient, len(st.Addrs))
	for i, a := range st.Addrs {
		out[i] = redis.NewSentinelClient(&redis.Options{Addr: a, Username: st.Username, Password: st.Password, TLSConfig: st.TLS,
			DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 1})
		// A sentinel at its maxclients limit is reported as such.
		out[i].AddHook(connsetup.Hook{})
	}
	return out
}

// sentinelReplicas returns the most replicas of st.Master any sentinel
// lists without a down or disconnected flag (0 when none answers).
func sentinelReplicas(ctx context.Context, sc []*redis.SentinelClient, master string) int {
	most := 0
	for _, c := range sc {
		rs, err := c.Replicas(ctx, master).Result()
		if err != nil {
			continue
		}
		n := 0
		for _, r := range rs {
			if f := r["flags"]; !strings.Contains(f, "down") && !strings.Contains(f, "disconnected") {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// sentinelPrimary returns the primary a majority of the sentinels names
// for master, and its run id as they know it ("" when unknown); "" and
// the last error a sentinel answered (nil if none) when no majority
// names one.
func sentinelPrimary(ctx context.Context, sc []*redis.SentinelClient, master string) (addr, runID string, lastErr error) {
	count := map[string]int{}
	ids := map[string]string{}
	for _, c := range sc {
		m, err := c.Master(ctx, master).Result()
		if err != nil {
			lastErr = err
			continue
		}
		if m["ip"] == "" {
			continue
		}
		a := net.JoinHostPort(m["ip"], m["port"])
		count[a]++
		if m["runid"] != "" {
			ids[a] = m["runid"]
		}
		if 2*count[a] > len(sc) {
			return a, ids[a], nil
		}
	}
	return "", "", lastErr
}

// confirmPrimary checks that the server on conn is still the primary the
// sentinels name: by the address it sees conn on (CLIENT INFO laddr),
// or, behind address translation, by its run id.
func confirmPrimary(ctx context.Context, conn *redis.Conn, sc []*redis.SentinelClient, master string) error {
	named, namedID, err := sentinelPrimary(ctx, sc, master)
	if named == "" {
		// SENTINEL MASTER: a sentinel ACL user needs +sentinel|master.
		return fmt.Errorf("no majority of the %d sentinels names a primary for %q (SENTINEL MASTER; last error: %v)", len(sc), master, err)
	}
	info, err := conn.ClientInfo(ctx).Result()
	if err != nil {
		return notConfirmed("CLIENT INFO on the server that took it", err)
	}
	if info.LAddr == named {
		return nil
	}
	if namedID != "" {
		if s, err := conn.Info(ctx, "server").Result(); err == nil && strings.Contains(s, "run_id:"+namedID) {
			return nil
		}
	}
	return fmt.Errorf("the sentinels now name %s the primary, not %s, which took it", named, info.LAddr)
}

// confirm makes sure the document just stored through conn is durable as
// opts asks: that enough replicas acknowledged it (WAIT on conn, which
// wrote it) and that the sentinels still name the server the primary. It
// returns nil, or an error wrapping ErrNotConfirmed and whether (fewer)
// the primary lists fewer replicas online than opts.Replicas asks for,
// so that publishing again fails the same way.
func confirm(ctx context.Context, conn *redis.Conn, opts PublishOptions, sc []*redis.SentinelClient, minReplicas int) (fewer bool, err error) {
	n, role, err := onlineReplicas(ctx, conn)
	if err != nil {
		return false, notConfirmed("INFO replication", err)
	}
	if role != "" && role != "master" {
		return false, fmt.Errorf("%w: the server that took it is now a replica (role %s), as when a failover demotes it", ErrNotConfirmed, role)
	}
	want := opts.Replicas
	if want == ReplicasOnline {
		want = max(n, minReplicas)
	}
	if want > 0 {
		timeout := replicaTimeout(opts.ReplicaTimeout)
		got, err := conn.Wait(ctx, want, timeout).Result()
		switch {
		case err != nil:
			return false, notConfirmed(fmt.Sprintf("WAIT %d", want), err)
		case got < int64(want) && opts.Replicas != ReplicasOnline && n < want:
			return true, fmt.Errorf("%w: %d of %d replicas acknowledged it within %v: the primary lists %d online, fewer than --wait-replicas %d; lower --wait-replicas (0: do not wait) or bring the replicas back", ErrNotConfirmed, got, want, timeout, n, want)
		case got < int64(want):
			return false, fmt.Errorf("%w: %d of %d replicas acknowledged it within %v (the primary lists %d online)", ErrNotConfirmed, got, want, timeout, n)
		}
	}
	if opts.Sentinels != nil {
		if err := confirmPrimary(ctx, conn, sc, opts.Sentinels.Master); err != nil {
			if errors.Is(err, ErrNotConfirmed) {
				return false, err
			}
			return false, fmt.Errorf("%w: %v", ErrNotConfirmed, err)
		}
	}
	return false, nil
}

// notConfirmedError returns PublishWith's error for a document of
// version that confirm could not confirm durable (err); wrote says
// whether this push stored it (else the primary already held it).
func notConfirmedError(version string, wrote, fewer bool, err error) error {
	did := fmt.Sprintf("version %q was stored on the primary", version)
	if !wrote {
		did = fmt.Sprintf("version %q is already stored on the primary (nothing was written)", version)
	}
	next := "run the push again to confirm it (during a failover, once it is over)"
	if fewer {
		next = "pushing again fails the same way until the primary lists enough replicas online"
	}
	return fmt.Errorf("%s but is not confirmed durable, and a failover may lose it; it was not announced, but instances polling may still apply it at their next poll; %s: %w", did, next, err)
}
