package config_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// dialCounter is a hook counting the connections a client dials.
type dialCounter struct{ n atomic.Int64 }

func (d *dialCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d.n.Add(1)
		return next(ctx, network, addr)
	}
}

func (*dialCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (*dialCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestTierLookupOnDownRedisFailsAtOnce is the redisretry walk's repro:
// serve's clients dialled once per attempt, but kept go-redis's three
// retries of a plain command, each after a pause (10 ms to a second,
// doubling): the tier lookup's HGET against a refused connection slept
// 30 ms or more before it failed, past a tiered decision's 50 ms budget
// once the dials were counted, so the decision was reported as reason
// timeout rather than unavailable (and a quota check waited up to a
// fifth of a second before its 503). A plain command is now tried at
// most twice, the second time at once: the lookup fails with the dial
// error, after two dials at most.
func TestTierLookupOnDownRedisFailsAtOnce(t *testing.T) {
	rs := redistest.Start(t)
	rs.Kill()
	client, err := config.Redis{URL: "redis://" + rs.Addr + "/0"}.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	dials := &dialCounter{}
	client.AddHook(dials)
	a, err := config.NewRedisAssignments(client, "retryonce:tiers", config.RedisAssignmentsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range []string{"new1", "new2", "new3"} {
		before := dials.n.Load()
		_, _, err := a.Tier(context.Background(), "api_key", v)
		var op *net.OpError
		if !errors.As(err, &op) || op.Op != "dial" {
			t.Fatalf("lookup %d on a down Redis: %v; want the refused dial's error", i, err)
		}
		if n := dials.n.Load() - before; n > 2 {
			t.Fatalf("lookup %d on a down Redis dialled %d times; want at most 2 (one attempt and one retry, without pauses between)", i, n)
		}
	}
}

// TestTierLookupRetriesABrokenConnection: the one retry left is what
// makes a plain read survive a connection broken under it (a Redis
// restarted, a load balancer's reset): the HGET written to the broken
// connection fails, and is sent again, at once, on a new one.
func TestTierLookupRetriesABrokenConnection(t *testing.T) {
	rs := redistest.Start(t)
	px := startResetter(t, rs.Addr)
	client, err := config.Redis{URL: "redis://" + px.addr + "/0"}.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	a, err := config.NewRedisAssignments(client, "retryonce:tiers", config.RedisAssignmentsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.FreshTier(context.Background(), "api_key", "k"); err != nil {
		t.Fatal(err)
	}
	px.armed.Store(true)
	if _, _, err := a.FreshTier(context.Background(), "api_key", "k"); err != nil {
		t.Fatalf("lookup on a connection reset under it: %v; want it sent again on a new connection", err)
	}
	if px.resets.Load() != 1 {
		t.Fatalf("the proxy reset %d connections, want 1", px.resets.Load())
	}
}

// resetter is a TCP proxy to Redis that, once armed, resets the client's
// connection on the next command it sends containing HGET (not forwarded),
// and disarms.
type resetter struct {
	addr   string
	armed  atomic.Bool
	resets atomic.Int64
}

func startResetter(t *testing.T, target string) *resetter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	r := &resetter{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
			go func() {
				defer s.Close()
				buf := make([]byte, 32<<10)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					if bytes.Contains(bytes.ToLower(buf[:n]), []byte("hget")) && r.armed.CompareAndSwap(true, false) {
						r.resets.Add(1)
						_ = c.(*net.TCPConn).SetLinger(0)
						_ = c.Close()
						return
					}
					if _, err := s.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return r
}
