package redisstore

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/vectors"
	"github.com/redis/go-redis/v9"
)

// cuttingProxy forwards TCP connections to a Redis server and, when armed,
// cuts the connection that carries the next EVALSHA right after the server
// has answered it, before the client sees the answer: the command ran, the
// client gets EOF. It serves only loopback connections of one test. With
// match set (before the first connection), it cuts the next command
// (EVALSHA or EVAL) that contains match instead; with sticky set too,
// every such command until disarmed.
type cuttingProxy struct {
	ln     net.Listener
	target string
	match  []byte
	sticky bool
	armed  atomic.Bool
	cuts   atomic.Int64
	wg     sync.WaitGroup
}

func startCuttingProxy(t *testing.T, target string) *cuttingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cuttingProxy{ln: ln, target: target}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.wg.Wait()
	})
	return p
}

func (p *cuttingProxy) accept() {
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		var cut atomic.Bool
		closeBoth := func() { c.Close(); s.Close() }
		conns.Go(func() { // client → server
			defer closeBoth()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if (p.match == nil && bytes.Contains(bytes.ToLower(buf[:n]), []byte("evalsha")) || p.match != nil && bytes.Contains(buf[:n], p.match)) &&
						(p.sticky && p.armed.Load() || p.armed.CompareAndSwap(true, false)) {
						cut.Store(true)
					}
					if _, err := s.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
		conns.Go(func() { // server → client
			defer closeBoth()
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 && cut.Load() {
					p.cuts.Add(1)
					return // drop the reply and cut both sides
				}
				if n > 0 {
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
	}
}

// TestConnectionCut cuts the connection after Redis ran a decision and
// before its reply arrived. go-redis retries commands on EOF by default;
// the Store must report ErrIndeterminate and the decision must count once,
// not twice.
func TestConnectionCut(t *testing.T) {
	e, srv := newEnv(t)
	px := startCuttingProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: px.ln.Addr().String(), ContextTimeoutEnabled: true})
	defer c.Close()
	s, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := fixed10(t)
	key := e.key(p, "u")
	now := vectors.T0.UnixMicro()
	if r, err := e.one(ctx, now, p, key, 1); err != nil || r.Remaining != 9 { // loads the script
		t.Fatalf("first decision: %+v, %v", r, err)
	}
	px.armed.Store(true)
	err = s.Decide(ctx, now, []floodgate.Layer{{Policy: p, Key: key, Cost: 1}}, make([]floodgate.Result, 1))
	if px.cuts.Load() != 1 {
		t.Fatalf("the proxy cut %d connections, want 1", px.cuts.Load())
	}
	if !errors.Is(err, floodgate.ErrIndeterminate) {
		t.Fatalf("got %v, want ErrIndeterminate", err)
	}
	if r, err := e.one(ctx, now, p, key, 0); err != nil || r.Remaining != 8 {
		t.Fatalf("after the cut: %+v, %v; want 8 remaining (counted exactly once)", r, err)
	}
	// The store works again through the proxy.
	if err := s.Decide(ctx, now, []floodgate.Layer{{Policy: p, Key: key, Cost: 1}}, make([]floodgate.Result, 1)); err != nil {
		t.Fatal(err)
	}
}
