package server_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/redis/go-redis/v9"
)

// TestClusterReadyNamesTheStalledNode: with one Cluster primary stalled
// (SIGSTOP), the readiness check fails naming that primary only. Before,
// the slot map's reload could pick the stalled node and take the whole
// check's time, and every primary's own check then failed with "context
// deadline exceeded", healthy ones included.
func TestClusterReadyNamesTheStalledNode(t *testing.T) {
	c := redistest.StartCluster(t)
	cc := c.Client(t)
	ready := server.RedisReady(cc, "fgtest:ready")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ready(ctx); err != nil {
		t.Fatalf("healthy cluster: %v", err)
	}
	stalled := c.Nodes[2]
	if err := posix.Kill(stalled.Pid, posix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = posix.Kill(stalled.Pid, posix.SIGCONT) })
	// Several checks (the node a reload asks is chosen at random), all
	// within the cluster's node timeout (5 s): after it, the healthy
	// primaries mark the stalled one failed and report cluster_state:fail
	// themselves, rightly.
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := ready(ctx)
		cancel()
		if err == nil {
			t.Fatalf("check %d: ready with primary %s stalled", i, stalled.Addr)
		}
		if !strings.Contains(err.Error(), stalled.Addr) {
			t.Errorf("check %d: the error does not name the stalled primary %s: %v", i, stalled.Addr, err)
		}
		for _, healthy := range c.Addrs[:2] {
			if strings.Contains(err.Error(), healthy) {
				t.Errorf("check %d: the error names healthy primary %s: %v", i, healthy, err)
			}
		}
	}
}

// TestReadyHintsAtTLS: a plaintext client of a Redis that serves TLS only
// sees the connection closed (EOF); the readiness error says what that
// likely means (it said only "EOF").
func TestReadyHintsAtTLS(t *testing.T) {
	srv := redistest.StartTLS(t, redistest.GenerateTLS(t))
	plain := redis.NewClient(&redis.Options{Addr: srv.TLSAddr, MaxRetries: -1})
	t.Cleanup(func() { plain.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := server.RedisReady(plain, "fgtest:probe")(ctx)
	if err == nil || !strings.Contains(err.Error(), srv.TLSAddr) || !strings.Contains(err.Error(), "rediss://") {
		t.Fatalf("plaintext client of a TLS-only Redis: %v; want an error naming the server and rediss://", err)
	}
	good := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { good.Close() })
	if err := server.RedisReady(good, "fgtest:probe")(ctx); err != nil {
		t.Fatalf("plaintext client of the plaintext port: %v", err)
	}
}

// aclUser makes user (password pw) on srv with the given rules and
// returns a client of it.
func aclUser(t *testing.T, srv *redistest.Server, user string, rules ...string) *redis.Client {
	t.Helper()
	admin := srv.Client(t)
	args := []any{"ACL", "SETUSER", user, "reset", "on", ">pw"}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := admin.Do(context.Background(), args...).Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: user, Password: "pw", MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestReadyWithoutRole: an ACL user refused ROLE (the common production
// "+@all -@dangerous", ROLE being in @dangerous) decides fine, and the
// readiness check passes on its write (it was 503 with the NOPERM
// forever), warning once that +role is missing; a replica behind such a
// user still fails it (the write is refused), and one behind a user with
// ROLE is named as a replica.
func TestReadyWithoutRole(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	primary := redistest.Start(t)
	prod := []string{"~fgtest:*", "&fgtest:*", "+@all", "-@dangerous"}
	c := aclUser(t, primary, "app", prod...)
	if err := c.Do(ctx, "ROLE").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Fatalf("ROLE by a user without @dangerous: %v; want NOPERM (the test's premise)", err)
	}
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ready := server.RedisReadyLog(c, "fgtest:probe", log)
	for i := range 3 {
		if err := ready(ctx); err != nil {
			t.Fatalf("check %d, primary, user without ROLE: %v", i, err)
		}
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "+role") || !strings.Contains(logs.String(), "replica") {
		t.Errorf("log after three checks: %q; want one WARN naming +role and what is lost (the replica)", logs.String())
	}
	// ROLE was sent once by the checks (and once by the premise above):
	// not again after its refusal, which would add to Redis's ACL LOG at
	// every probe.
	entries, err := primary.Client(t).ACLLog(ctx, 10).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Object == "role" && e.Count != 2 {
			t.Errorf("ACL LOG counts %d refusals of ROLE after the premise and three checks, want 2", e.Count)
		}
	}
	// Without a probe key, PING judges.
	if err := server.RedisReady(c, "")(ctx); err != nil {
		t.Fatalf("primary, user without ROLE, no probe key: %v", err)
	}

	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	rc := aclUser(t, replica, "app", prod...)
	if err := server.RedisReady(rc, "fgtest:probe")(ctx); err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Errorf("replica, user without ROLE: %v; want the write refused (READONLY)", err)
	}
	withRole := aclUser(t, replica, "app2", append(prod, "+role")...)
	if err := server.RedisReady(withRole, "fgtest:probe")(ctx); err == nil || !strings.Contains(err.Error(), "not a primary") {
		t.Errorf("replica, user with ROLE: %v; want it named not a primary", err)
	}
}

// TestReadyClusterNodeAsSingleRedis: a client for a single Redis given a
// node of a Cluster (serve --redis redis://NODE) is not ready, and the
// check says the address is a Redis Cluster node and to use
// --redis-cluster: it said "a write was refused: MOVED ..." (the lgserver
// walk). Of three nodes, the two not serving the probe key's slot
// redirect the write.
func TestReadyClusterNodeAsSingleRedis(t *testing.T) {
	c := redistest.StartCluster(t)
	redirected := 0
	for _, addr := range c.Addrs {
		client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = client.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := server.RedisReady(client, "fgtest:ready")(ctx)
		cancel()
		if err == nil {
			continue // this node serves the probe key's slot
		}
		if !strings.Contains(err.Error(), "Redis Cluster node") || !strings.Contains(err.Error(), "--redis-cluster") {
			t.Errorf("node %s: %v, want it to say the address is a Redis Cluster node and to use --redis-cluster", addr, err)
		}
		redirected++
	}
	if redirected != 2 {
		t.Errorf("%d nodes redirected the probe's write, want 2", redirected)
	}
}

// TestReadyPausedWritesIsNoRefusal: readiness against a Redis whose
// writes are paused (CLIENT PAUSE ... WRITE) fails when its probe's write
// gets no reply in time, and says that write failed: it said "redis: a
// write was refused: context deadline exceeded" (the maxclients walk),
// for a write nothing refused.
func TestReadyPausedWritesIsNoRefusal(t *testing.T) {
	s := redistest.Start(t)
	admin := s.Client(t)
	ctx := context.Background()
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "60000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Do(ctx, "CLIENT", "UNPAUSE").Err() })
	client := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err := server.RedisReady(client, "fgtest:paused")(pctx)
	if err == nil || strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), "the probe's write failed") {
		t.Fatalf("paused writes: %v; want the probe's write failed, not refused", err)
	}
}

// TestReadyTimeoutNamesLastErrorReply: a readiness check whose probe
// times out after its Redis gave an error reply less than
// ErrorReplyRecent ago adds that reply: a Redis loading its dataset
// answers LOADING between the chunks it loads and nothing during them,
// and /readyz alternated between LOADING and a bare "i/o timeout" (an
// outside walk), sending the operator after a network fault. Here OOM
// (maxmemory 1), then writes paused. A check with no such reply says
// nothing more.
func TestReadyTimeoutNamesLastErrorReply(t *testing.T) {
	s := redistest.Start(t)
	admin := s.Client(t)
	ctx := context.Background()
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "1"}} {
		if err := admin.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = admin.ConfigSet(ctx, "maxmemory", "0").Err() })
	client := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	ready := server.RedisReady(client, "fgtest:lastreply")
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := ready(cctx)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "OOM command not allowed") {
		t.Fatalf("maxmemory 1: %v; want the probe's OOM", err)
	}
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "60000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Do(ctx, "CLIENT", "UNPAUSE").Err() })
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = ready(pctx)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "the probe's write failed") ||
		!strings.Contains(err.Error(), "(its last error reply, ") || !strings.Contains(err.Error(), " ago: OOM command not allowed") {
		t.Fatalf("paused writes after OOM: %v; want the timeout, then its last error reply, OOM", err)
	}
	pctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	err = server.RedisReady(client, "fgtest:lastreply")(pctx) // a check that saw no reply
	cancel()
	if err == nil || strings.Contains(err.Error(), "last error reply") {
		t.Fatalf("paused writes, no reply seen: %v; want a timeout with no reply named", err)
	}
}
