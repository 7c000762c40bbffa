package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// sentinelMasterName is the name the sentinels monitor the primary by.
	sentinelMasterName = "fgmaster"
	// sentinelCount is the number of sentinels StartSentinel starts.
	sentinelCount = 3
	// sentinelTimeout bounds the waits of StartSentinel and Failover.
	sentinelTimeout = 30 * time.Second
)

// Sentinel is a Redis Sentinel setup started for a test: one primary, one
// replica (started with --replicaof the primary) and three sentinels
// (redis-server <conf> --sentinel) monitoring the primary as "fgmaster" with
// quorum 2, down-after-milliseconds 1000 and failover-timeout 5000, all on
// free 127.0.0.1 ports. Every process is stopped in t.Cleanup, sentinels
// first.
type Sentinel struct {
	// Primary is the server that currently is the primary. Failover swaps
	// Primary and Replica.
	Primary *Server
	// Replica is the server that currently is (or, right after Failover, is
	// about to be made by the sentinels) the replica.
	Replica *Server
	// Sentinels are the three sentinel processes.
	Sentinels []*Server
	// MasterName is the name the sentinels monitor the primary by: "fgmaster".
	MasterName string
	// SentinelAddrs are the sentinels' addresses, in the order of Sentinels.
	SentinelAddrs []string
	// SentinelTLSAddrs are their TLS addresses (StartSentinelTLS), in the
	// same order; empty strings otherwise.
	SentinelTLSAddrs []string
	// pass is the sentinels' password once RequirePass has set one.
	pass string
}

// StartSentinel starts a primary, a replica and three sentinels, and waits
// until the replica's link to the primary is up and every sentinel sees the
// primary as up, the replica as a healthy replica and the other two
// sentinels. It fails the test if that does not happen within 30s.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	return startSentinel(t, nil, nil)
}

// StartSentinelArgs is StartSentinel with sentinelArgs added to each
// sentinel's command line ("--maxclients", "8"): a sentinel takes some
// settings, maxclients among them, only there or in its configuration
// file, not from CONFIG SET.
func StartSentinelArgs(t testing.TB, sentinelArgs ...string) *Sentinel {
	t.Helper()
	return startSentinel(t, nil, sentinelArgs)
}

// StartSentinelTLS is StartSentinel with TLS (f's certificates) between
// every process: the replica replicates from the primary's TLS port, the
// sentinels monitor that port and talk to each other over TLS
// (tls-replication yes), and each sentinel serves TLS on its TLSAddr
// (SentinelTLSAddrs), so a client that reaches the sentinels and the
// primary they name over TLS only works. Plain ports stay open for
// redistest's own checks. Failover is not supported on it.
func StartSentinelTLS(t testing.TB, f TLSFiles) *Sentinel {
	t.Helper()
	return startSentinel(t, &f, nil)
}

func startSentinel(t testing.TB, f *TLSFiles, sentinelArgs []string) *Sentinel {
	t.Helper()
	s := &Sentinel{MasterName: sentinelMasterName}
	monitorPort := 0
	if f == nil {
		s.Primary = Start(t)
		s.Replica = Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(s.Primary.Port))
		monitorPort = s.Primary.Port
	} else {
		s.Primary = StartTLS(t, *f, "--tls-replication", "yes")
		s.Replica = StartTLS(t, *f, "--tls-replication", "yes", "--replicaof", "127.0.0.1", strconv.Itoa(s.Primary.TLSPort))
		monitorPort = s.Primary.TLSPort
	}

	ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
	defer cancel()
	if err := waitReplicaLinked(ctx, s.Replica); err != nil {
		t.Fatalf("redistest: replica %s did not sync with primary %s: %v%s",
			s.Replica.Addr, s.Primary.Addr, err, s.logTails())
	}

	conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 2\n"+
		"sentinel down-after-milliseconds %[1]s 1000\n"+
		"sentinel failover-timeout %[1]s 5000\n"+
		"sentinel parallel-syncs %[1]s 1\n", s.MasterName, monitorPort)
	for i := 0; i < sentinelCount; i++ {
		extra := append([]string(nil), sentinelArgs...)
		if f != nil {
			extra = append(extra, "--tls-replication", "yes")
		}
		n := newServer(t, extra)
		n.tls = f
		path := filepath.Join(n.Dir, "sentinel.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			t.Fatalf("redistest: writing %s: %v", path, err)
		}
		n.pre = []string{path, "--sentinel"}
		n.boot(t)
		s.Sentinels = append(s.Sentinels, n)
		s.SentinelAddrs = append(s.SentinelAddrs, n.Addr)
		s.SentinelTLSAddrs = append(s.SentinelTLSAddrs, n.TLSAddr)
	}

	if err := s.waitSentinelsReady(ctx); err != nil {
		t.Fatalf("redistest: sentinels did not see the primary, replica and each other: %v%s", err, s.logTails())
	}
	return s
}

// StartReplica starts a server replicating primary (--replicaof) and
// waits until its link to primary is up and primary counts it for WAIT
// (it lists the replica online and a WAIT 1 is acknowledged); it fails
// the test if that takes longer than 30s. It is stopped in t.Cleanup, as Start's servers are.
func StartReplica(t testing.TB, primary *Server, extraArgs ...string) *Server {
	t.Helper()
	r := Start(t, append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(primary.Port)}, extraArgs...)...)
	ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
	defer cancel()
	if err := waitReplicaLinked(ctx, r); err != nil {
		t.Fatalf("redistest: replica %s of %s not linked: %v%s", r.Addr, primary.Addr, err, r.logTail())
	}
	if err := waitReplicaOnline(ctx, primary.Addr, r.Port); err != nil {
		t.Fatalf("redistest: primary %s does not count replica %s: %v%s", primary.Addr, r.Addr, err, primary.logTail())
	}
	return r
}

// WaitReplicaOnline waits, up to a minute, until the primary at addr lists
// replica as online and acknowledges a WAIT 1: until then a coordinated
// CLUSTER FAILOVER of that replica, or a WAIT for it, can time out (a
// replica added a moment ago may still wait for its diskless sync, 5 s,
// or redo it after a dropped link). It fails t otherwise.
func WaitReplicaOnline(t testing.TB, addr string, replica *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := waitReplicaOnline(ctx, addr, replica.Port); err != nil {
		t.Fatalf("redistest: primary %s does not count replica %s: %v%s", addr, replica.Addr, err, replica.logTail())
	}
}

// waitReplicaOnline waits until the primary at addr lists the replica on
// port as online and answers a WAIT 1 with at least one acknowledgement.
// A replica's master_link_status is up before that: after a diskless sync
// the primary streams to it, and counts it for WAIT, only once its first
// REPLCONF ACK arrives (up to a second later), so a test's short
// WAIT timeout could expire meanwhile.
func waitReplicaOnline(ctx context.Context, addr string, port int) error {
	c := adminClient(addr)
	defer c.Close()
	want := "port=" + strconv.Itoa(port) + ",state=online,"
	return poll(ctx, 50*time.Millisecond, func(ctx context.Context) error {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, want) {
			return fmt.Errorf("INFO replication does not list %q", want)
		}
		n, err := c.Do(ctx, "WAIT", 1, 500).Int64()
		if err != nil {
			return err
		}
		if n < 1 {
			return fmt.Errorf("WAIT 1 500 acknowledged by %d replicas", n)
		}
		return nil
	})
}

// waitReplicaLinked waits until r reports master_link_status:up.
func waitReplicaLinked(ctx context.Context, r *Server) error {
	c := adminClient(r.Addr)
	defer c.Close()
	return poll(ctx, 50*time.Millisecond, func(ctx context.Context) error {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if st := infoField(info, "master_link_status"); st != "up" {
			return fmt.Errorf("master_link_status is %q", st)
		}
		return nil
	})
}

// waitSentinelsReady waits until every sentinel sees the primary up with one
// healthy replica (the Replica) and the two other sentinels.
func (s *Sentinel) waitSentinelsReady(ctx context.Context) error {
	return s.eachSentinel(ctx, func(ctx context.Context, sc *redis.SentinelClient) error {
		m, err := sc.Master(ctx, s.MasterName).Result()
		if err != nil {
			return err
		}
		if m["flags"] != "master" || m["num-slaves"] != "1" || m["num-other-sentinels"] != fmt.Sprint(sentinelCount-1) {
			return fmt.Errorf("master flags=%q num-slaves=%q num-other-sentinels=%q",
				m["flags"], m["num-slaves"], m["num-other-sentinels"])
		}
		replicas, err := sc.Replicas(ctx, s.MasterName).Result()
		if err != nil {
			return err
		}
		for _, r := range replicas {
			want := s.Replica.Addr
			if s.Replica.tls != nil {
				want = s.Replica.TLSAddr // what it announces with tls-replication
			}
			if r["ip"]+":"+r["port"] == want && r["flags"] == "slave" && r["master-link-status"] == "ok" {
				return nil
			}
		}
		return fmt.Errorf("replica %s not yet seen as a healthy replica: %v", s.Replica.Addr, replicas)
	})
}

// eachSentinel polls until check passes on every sentinel, or ctx ends.
func (s *Sentinel) eachSentinel(ctx context.Context, check func(context.Context, *redis.SentinelClient) error) error {
	clients := make([]*redis.SentinelClient, len(s.SentinelAddrs))
	for i, addr := range s.SentinelAddrs {
		o := adminOptions(addr)
		o.Password = s.pass
		clients[i] = redis.NewSentinelClient(o)
		defer clients[i].Close()
	}
	return poll(ctx, 100*time.Millisecond, func(ctx context.Context) error {
		for i, sc := range clients {
			if err := check(ctx, sc); err != nil {
				return fmt.Errorf("sentinel %s: %w", s.SentinelAddrs[i], err)
			}
		}
		return nil
	})
}

// FailoverClient returns a go-redis failover client (redis.NewFailoverClient)
// that finds the primary through the sentinels, with ContextTimeoutEnabled
// set. It is closed in t.Cleanup, before the servers are stopped.
func (s *Sentinel) FailoverClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            s.MasterName,
		SentinelAddrs:         append([]string(nil), s.SentinelAddrs...),
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Failover sends SENTINEL FAILOVER fgmaster to the first sentinel and waits
// until every sentinel reports the replica's address as the primary's and
// that server answers ROLE with master; then it swaps Primary and Replica.
// The old primary keeps claiming to be a master until the sentinels turn it
// into a replica, which they do some seconds later. Failover fails the test
// if all this takes longer than 30s.
func (s *Sentinel) Failover(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
	defer cancel()
	oldAddr, newAddr := s.Primary.Addr, s.Replica.Addr

	sc := adminSentinel(s.SentinelAddrs[0])
	defer sc.Close()
	err := poll(ctx, 200*time.Millisecond, func(ctx context.Context) error {
		err := sc.Failover(ctx, s.MasterName).Err()
		if err != nil && strings.HasPrefix(err.Error(), "INPROG") {
			return nil // a failover is already running: wait for its outcome
		}
		return err // NOGOODSLAVE and the like may clear up: retry
	})
	if err != nil {
		t.Fatalf("redistest: SENTINEL FAILOVER %s: %v%s", s.MasterName, err, s.logTails())
	}

	err = s.eachSentinel(ctx, func(ctx context.Context, sc *redis.SentinelClient) error {
		addr, err := sc.GetMasterAddrByName(ctx, s.MasterName).Result()
		if err != nil {
			return err
		}
		if len(addr) != 2 || addr[0]+":"+addr[1] != newAddr {
			return fmt.Errorf("primary is %v, want %s (was %s)", addr, newAddr, oldAddr)
		}
		return nil
	})
	if err == nil {
		err = waitRole(ctx, newAddr, "master")
	}
	if err != nil {
		t.Fatalf("redistest: failover of %s from %s to %s did not complete: %v%s",
			s.MasterName, oldAddr, newAddr, err, s.logTails())
	}
	s.Primary, s.Replica = s.Replica, s.Primary
}

// waitRole waits until the server on addr answers ROLE with role.
func waitRole(ctx context.Context, addr, role string) error {
	c := adminClient(addr)
	defer c.Close()
	return poll(ctx, 50*time.Millisecond, func(ctx context.Context) error {
		v, err := c.Do(ctx, "ROLE").Slice()
		if err != nil {
			return err
		}
		if len(v) == 0 || v[0] != role {
			return fmt.Errorf("ROLE is %v, want %s", v, role)
		}
		return nil
	})
}

// logTails gathers the log tails of all servers for an error message.
func (s *Sentinel) logTails() string {
	var b strings.Builder
	for _, n := range append([]*Server{s.Primary, s.Replica}, s.Sentinels...) {
		n.mu.Lock()
		b.WriteString(n.logTail())
		n.mu.Unlock()
	}
	return b.String()
}

// RequirePass makes every process of s require password pw from its
// default user: the primary and the replica (requirepass, and masterauth
// so that replication goes on), and the sentinels (ACL SETUSER default:
// Sentinel has no CONFIG SET), which are given pw to reach the servers
// (SENTINEL SET auth-pass) and each other (SENTINEL CONFIG SET
// sentinel-pass). A t.Cleanup, run before the processes are stopped,
// drops the passwords again. It fails the test on any error.
func (s *Sentinel) RequirePass(t testing.TB, pw string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
	defer cancel()
	var steps []func() error
	for _, n := range []*Server{s.Primary, s.Replica} {
		c := adminClient(n.Addr)
		defer c.Close()
		steps = append(steps,
			func() error { return c.ConfigSet(ctx, "masterauth", pw).Err() },
			func() error { return c.ConfigSet(ctx, "requirepass", pw).Err() })
	}
	for _, addr := range s.SentinelAddrs {
		sc := adminClient(addr) // for Do; SENTINEL is a command as any other
		defer sc.Close()
		steps = append(steps,
			func() error { return sc.Do(ctx, "SENTINEL", "SET", s.MasterName, "auth-pass", pw).Err() },
			func() error { return sc.Do(ctx, "SENTINEL", "CONFIG", "SET", "sentinel-pass", pw).Err() },
			func() error { return sc.Do(ctx, "ACL", "SETUSER", "default", "on", "resetpass", ">"+pw).Err() })
	}
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("redistest: requiring a password: %v%s", err, s.logTails())
		}
	}
	// The sentinels lose their links to the nodes when those start asking
	// for the password, and see the primary disconnected and the replica
	// down until they have linked again with auth-pass: a test reading
	// them at once saw "0 replicas up".
	s.pass = pw
	if err := s.waitSentinelsReady(ctx); err != nil {
		t.Fatalf("redistest: sentinels not settled after requiring a password: %v%s", err, s.logTails())
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
		defer cancel()
		for _, addr := range s.SentinelAddrs {
			o := adminOptions(addr)
			o.Password = pw
			sc := redis.NewClient(o)
			_ = sc.Do(ctx, "ACL", "SETUSER", "default", "nopass").Err()
			_ = sc.Close()
		}
		for _, n := range []*Server{s.Primary, s.Replica} {
			o := adminOptions(n.Addr)
			o.Password = pw
			c := redis.NewClient(o)
			_ = c.ConfigSet(ctx, "requirepass", "").Err()
			_ = c.Close()
		}
	})
}
