// Package faulttest holds Floodgate's fault-injection tests: a rate limiter
// built from redisstore, fallback, memstore and metrics, run against real
// redis-server processes (started by internal/redistest) while they are
// killed, paused, slowed, flushed, filled, failed over or cut off.
//
// The package's only non-test code is Proxy, a TCP proxy with adjustable
// latency and failure modes that the tests put between the client and
// Redis. It exists for tests; nothing in production uses it.
package faulttest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// chunkSize is the largest piece the proxy reads and forwards at once.
const chunkSize = 32 << 10

// Proxy forwards TCP connections from its own 127.0.0.1 port to a target
// address, and can be told to delay every byte, to swallow everything
// (a black hole: connections stay open and nothing arrives), or to reset a
// client's connection when the reply to a given command comes (so the
// client has sent its command, Redis has run it, and the client sees only
// a reset). It is safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu         sync.Mutex
	delay      time.Duration
	blackhole  bool
	cutPattern []byte // lower case; nil when not cutting
	links      map[*link]struct{}
	closed     bool
	wg         sync.WaitGroup
}

// NewProxy starts a proxy listening on a free 127.0.0.1 port and
// forwarding to target (host:port).
func NewProxy(target string) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("faulttest: bad target %q: %w", target, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faulttest: listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address clients should dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay delays every chunk, in both directions, by d from the moment
// the proxy reads it (a latency, not a throughput limit). Zero forwards at
// once.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = max(d, 0)
	p.mu.Unlock()
}

// SetBlackhole turns the black hole on or off. While on, new connections
// are accepted and every byte in either direction is read and dropped.
// Connections that lost bytes this way stay broken after it is turned off
// (their streams are out of step); clients drop them on their next error.
func (p *Proxy) SetBlackhole(on bool) {
	p.mu.Lock()
	p.blackhole = on
	p.mu.Unlock()
}

// SetCutReplies makes the proxy cut the reply to any request containing
// pattern (compared without regard to ASCII case, e.g. "evalsha"): the
// request is forwarded, and when the target answers on that connection,
// the answer is dropped and the client's connection reset. Other requests
// (a client's handshake, say) pass. "" turns cutting off.
func (p *Proxy) SetCutReplies(pattern string) {
	p.mu.Lock()
	p.cutPattern = nil
	if pattern != "" {
		p.cutPattern = bytes.ToLower([]byte(pattern))
	}
	p.mu.Unlock()
}

// ResetConnections resets every open connection, as a network failure or
// a restarted load balancer would.
func (p *Proxy) ResetConnections() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close(true)
	}
}

// Connections returns the number of open proxied connections.
func (p *Proxy) Connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Close stops accepting, resets every connection and waits for all of the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.ResetConnections()
	p.wg.Wait()
	return err
}

func (p *Proxy) settings() (delay time.Duration, blackhole bool, cut []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay, p.blackhole, p.cutPattern
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // listener closed
		}
		server, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			resetConn(c) // the target is down: so is the proxied service
			continue
		}
		l := &link{client: c, server: server, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.close(true)
			continue
		}
		p.links[l] = struct{}{}
		p.wg.Add(4)
		p.mu.Unlock()
		go p.pipe(l, c, server, false)
		go p.pipe(l, server, c, true)
	}
}

// piece is one chunk in flight and when it is due.
type piece struct {
	data []byte
	due  time.Time
}

// pipe moves bytes from src to dst through a queue, so that a delay is
// applied to each chunk from its arrival, not accumulated. fromServer marks
// the direction in which replies travel.
func (p *Proxy) pipe(l *link, src, dst net.Conn, fromServer bool) {
	queue := make(chan piece, 256)
	go func() { // writer
		defer p.wg.Done()
		for pc := range queue {
			if wait := time.Until(pc.due); wait > 0 {
				timer := time.NewTimer(wait)
				select {
				case <-timer.C:
				case <-l.done:
					timer.Stop()
				}
			}
			if _, err := dst.Write(pc.data); err != nil {
				l.close(false)
				for range queue { // drain so the reader never blocks
				}
				return
			}
		}
	}()
	defer p.wg.Done()
	defer close(queue)
	defer p.forget(l)
	buf := make([]byte, chunkSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			delay, blackhole, cut := p.settings()
			if !fromServer && cut != nil && bytes.Contains(bytes.ToLower(buf[:n]), cut) {
				l.armed.Store(true)
			}
			switch {
			case blackhole:
			case fromServer && cut != nil && l.armed.Load():
				l.close(true)
				return
			default:
				queue <- piece{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(delay)}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				l.close(true)
			} else {
				l.close(false)
			}
			return
		}
	}
}

func (p *Proxy) forget(l *link) {
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// link is one proxied connection.
type link struct {
	client, server net.Conn
	done           chan struct{} // closed by close
	armed          atomic.Bool   // a request whose reply must be cut went through
	once           sync.Once
}

// close closes both sides, resetting the client's when reset is set.
func (l *link) close(reset bool) {
	l.once.Do(func() {
		close(l.done)
		if reset {
			resetConn(l.client)
		} else {
			l.client.Close()
		}
		l.server.Close()
	})
}

// resetConn closes c with an RST instead of a FIN.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}
