package faulttest

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// echoServer is a real TCP server that echoes lines back.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func dialProxy(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// roundTrip sends a line and reads it back within timeout.
func roundTrip(c net.Conn, r *bufio.Reader, timeout time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	return r.ReadString('\n')
}

func TestProxyModes(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	p, err := NewProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, r := dialProxy(t, p)

	if got, err := roundTrip(c, r, 5*time.Second); err != nil || got != "ping\n" {
		t.Fatalf("plain: %q, %v", got, err)
	}

	p.SetDelay(100 * time.Millisecond)
	start := time.Now()
	if _, err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// Each direction is delayed: at least 200ms for the round trip.
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Fatalf("delayed round trip took %v, want at least 200ms", took)
	}
	p.SetDelay(0)

	p.SetBlackhole(true)
	_, err = roundTrip(c, r, 200*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("black hole: %v, want a timeout", err)
	}
	p.SetBlackhole(false)

	// A fresh connection: an ordinary request passes, the reply to the
	// one matching the pattern is cut and the client reset.
	c2, r2 := dialProxy(t, p)
	p.SetCutReplies("PING")
	_ = c2.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c2.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if got, err := r2.ReadString('\n'); err != nil || got != "hello\n" {
		t.Fatalf("unmatched request under cut: %q, %v", got, err)
	}
	_, err = roundTrip(c2, r2, 5*time.Second)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("cut reply: %v, want a connection reset", err)
	}
	p.SetCutReplies("")

	c3, r3 := dialProxy(t, p)
	if _, err := roundTrip(c3, r3, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := p.Connections(); n < 1 {
		t.Fatalf("%d connections open, want at least 1", n)
	}
	p.ResetConnections()
	if _, err := roundTrip(c3, r3, 5*time.Second); err == nil {
		t.Fatal("a reset connection still works")
	}
}

func TestProxyTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	var p *Proxy
	for p == nil || p.Addr() == addr { // the freed port may be handed to the proxy itself
		if p, err = NewProxy(addr); err != nil {
			t.Fatal(err)
		}
		defer p.Close()
	}
	// The proxy resets the connection at once: the dial itself may see it.
	if c, err := net.Dial("tcp", p.Addr()); err == nil {
		defer c.Close()
		if _, err := roundTrip(c, bufio.NewReader(c), 5*time.Second); err == nil {
			t.Fatal("a proxy to a dead target answered")
		}
	}
	if _, err := NewProxy("no-port"); err == nil {
		t.Fatal("NewProxy accepted a target without a port")
	}
}
