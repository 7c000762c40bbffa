package server_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

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
	if err := syscall.Kill(stalled.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(stalled.Pid, syscall.SIGCONT) })
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
