// Package connlimit caps the connections listeners hold open at once, so
// that the clients of a public listener cannot use up the process's file
// descriptors, which its other listeners, its Redis connections and its
// files need as well: past the file limit every accept fails (EMFILE) and
// every dial too, on any listener.
//
// A Limit is a budget of connections shared by the listeners it wraps
// (Listener). Accept takes a place in the budget, and the connection gives
// it back when it is closed. With the budget spent, Accept first closes the
// connection that has been idle longest (a keep-alive connection between
// two requests, or one that has sent nothing since it was accepted, as
// Track, the HTTP servers' connection state hook, learns) once it has
// been idle MinIdle, so that clients with a request are served
// before idle ones and a busy keep-alive client, idle for a moment between
// two requests, is not closed for a newcomer that may never send one; with
// none idle that long, it waits until a connection closes or has been idle
// MinIdle, and newcomers wait in the kernel's listen backlog meanwhile
// (each listener holds the one it accepted, waiting for its place). A
// listener may be held to part of the budget (Listener's most), so that
// connections it cannot reclaim leave room for the other listeners.
//
// Listeners beside the public ones (floodgate serve's admin and probes'
// listeners) each get a budget of their own (Sides), out of the reserve the
// public budget leaves (Side), with the same idle closing: a flood on one
// of them can neither take the public listeners' places nor the
// descriptors Redis needs.
package connlimit

import (
	"container/list"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// MinIdle is how long a connection must have been idle before it is
// closed to make room: a keep-alive client between two requests is idle
// for a round trip and its own work (microseconds to milliseconds), so a
// second tells a client that has paused from one that is busy, while the
// newcomer waits at most that long for the place.
const MinIdle = time.Second

// Limit is a budget of open connections shared by the listeners it wraps.
// It is safe for concurrent use.
type Limit struct {
	max int
	sem chan struct{} // one token per connection open

	mu      sync.Mutex
	now     func() time.Time           // time.Now; tests set another clock
	idle    map[net.Conn]*list.Element // by the connection a server reports
	order   list.List                  // of idleConn, idle longest first
	waiters int                        // Accepts waiting for a place
	changed chan struct{}              // closed when a connection turns idle while some wait; read with the idle ones (victim)

	open       func(listener string) prometheus.Gauge // floodgate_connections_open or floodgate_side_connections_open
	idleNow    prometheus.Gauge
	idleClosed prometheus.Counter
	waits      prometheus.Counter
}

// New returns a Limit of max connections open at once (at least 1), whose
// metrics are registered with reg (nil: not registered):
// floodgate_connections_max, floodgate_connections_open by listener,
// floodgate_connections_idle, floodgate_connections_idle_closed_total and
// floodgate_connections_waits_total.
func New(max int, reg prometheus.Registerer) (*Limit, error) {
	if max < 1 {
		return nil, errors.New("connlimit: the limit must be at least 1")
	}
	open := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "floodgate_connections_open",
		Help: "Connections open on the public listeners, by listener (http: --addr, grpc: --grpc-addr; envoy-compat: PORT, GRPC_PORT); together at most floodgate_connections_max.",
	}, []string{"listener"})
	l := newLimit(max, func(name string) prometheus.Gauge { return open.WithLabelValues(name) },
		prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floodgate_connections_idle",
			Help: "Keep-alive connections of the public HTTP listener idle between two requests: the one idle longest is closed when a new connection needs a place, once idle 1 s.",
		}),
		prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_connections_idle_closed_total",
			Help: "Idle keep-alive connections, and connections that sent no request within 1 s of their accept, closed to make room for a new connection, the public listeners being at floodgate_connections_max.",
		}),
		prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_connections_waits_total",
			Help: "Times a public listener stopped accepting at floodgate_connections_max (or its own share of it) with no connection idle 1 s (or silent 1 s since its accept) to close: new connections waited in the listen backlog.",
		}))
	if reg != nil {
		limit := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "floodgate_connections_max",
			Help: "Connections the public listeners (--addr, --grpc-addr; envoy-compat: PORT, GRPC_PORT) hold open at once at most (--max-connections; envoy-compat: FLOODGATE_MAX_CONNECTIONS).",
		}, func() float64 { return float64(max) })
		for _, c := range []prometheus.Collector{limit, open, l.idleNow, l.idleClosed, l.waits} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return l, nil
}

func newLimit(max int, open func(string) prometheus.Gauge, idle prometheus.Gauge, idleClosed, waits prometheus.Counter) *Limit {
	return &Limit{
		max:     max,
		sem:     make(chan struct{}, max),
		now:     time.Now,
		idle:    make(map[net.Conn]*list.Element),
		changed: make(chan struct{}),
		open:    open, idleNow: idle, idleClosed: idleClosed, waits: waits,
	}
}

// Sides makes the budgets of listeners beside the public ones, each its
// own, whose metrics are apart from the public budget's (New): its
// floodgate_side_connections_max, _open, _idle, _idle_closed_total and
// _waits_total, each by listener. It is safe for concurrent use.
type Sides struct {
	max, open, idle   *prometheus.GaugeVec
	idleClosed, waits *prometheus.CounterVec
}

// NewSides returns a Sides whose metrics are registered with reg (nil:
// not registered). They have a series for each budget made (Sides.New),
// none before.
func NewSides(reg prometheus.Registerer) (*Sides, error) {
	label := []string{"listener"}
	s := &Sides{
		max: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_side_connections_max",
			Help: "Connections each listener beside the public ones (serve's admin: --admin-addr, health: --health-addr; envoy-compat's debug: DEBUG_PORT, prometheus: PROMETHEUS_ADDR) holds open at once at most, a budget of its own out of the descriptors --max-connections leaves.",
		}, label),
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_side_connections_open",
			Help: "Connections open on each listener beside the public ones (serve's admin: --admin-addr, health: --health-addr; envoy-compat's debug: DEBUG_PORT, prometheus: PROMETHEUS_ADDR); at most its floodgate_side_connections_max.",
		}, label),
		idle: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_side_connections_idle",
			Help: "Keep-alive connections of each listener beside the public ones idle between two requests: the one idle longest is closed when a new connection to that listener needs a place, once idle 1 s.",
		}, label),
		idleClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_side_connections_idle_closed_total",
			Help: "Idle keep-alive connections of a listener beside the public ones, and its connections that sent no request within 1 s of their accept, closed to make room for a new connection to it, the listener being at its floodgate_side_connections_max.",
		}, label),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_side_connections_waits_total",
			Help: "Times a listener beside the public ones stopped accepting at its floodgate_side_connections_max with no connection idle 1 s (or silent 1 s since its accept) to close: new connections waited in the listen backlog.",
		}, label),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{s.max, s.open, s.idle, s.idleClosed, s.waits} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// New returns the budget of max connections (at least 1) of the listener
// named listener, its series in s's metrics labelled with that name
// (whatever name its Listener is given). Give it one listener, and its
// Track to that listener's server.
func (s *Sides) New(listener string, max int) (*Limit, error) {
	if max < 1 {
		return nil, errors.New("connlimit: the limit must be at least 1")
	}
	s.max.WithLabelValues(listener).Set(float64(max))
	open := s.open.WithLabelValues(listener)
	return newLimit(max, func(string) prometheus.Gauge { return open },
		s.idle.WithLabelValues(listener), s.idleClosed.WithLabelValues(listener), s.waits.WithLabelValues(listener)), nil
}

// Max returns the most connections l lets be open at once, or 0 when l
// is nil (no limit).
func (l *Limit) Max() int {
	if l == nil {
		return 0
	}
	return l.max
}

// Listener returns ln whose Accept takes a place in l's budget first,
// and whose connections give it back when closed. name labels its
// connections in floodgate_connections_open (a budget of Sides labels
// them with its own name). most, when above 0 and below
// l's Max, holds ln to that many of the budget's places, leaving the rest
// to the other listeners: give it to a listener whose connections are not
// closed for room (no Track), so that a flood of them cannot shut the
// others out. Wrap the plain TCP listener, under any TLS, so that the
// place is given back when the socket closes.
func (l *Limit) Listener(ln net.Listener, name string, most int) net.Listener {
	w := &listener{Listener: ln, lim: l, open: l.open(name), done: make(chan struct{})}
	if most > 0 && most < l.max {
		w.own = make(chan struct{}, most)
	}
	return w
}

// idleConn is a connection idle since a time: between two requests, or
// silent, accepted then and no request begun since.
type idleConn struct {
	c      net.Conn
	since  time.Time
	silent bool // not counted in idleNow, which counts keep-alive connections
}

// Track is an http.Server's ConnState hook: it learns which connections
// are idle, for Accept to close the one idle longest when the budget is
// spent. c is the connection the server reports (over TLS, the tls.Conn
// wrapping a connection of Listener). A new connection counts as idle
// from its accept until its first request begins: a client with a request
// sends it at once, while one that sends nothing (a flood of silent
// connections, which the server would cut only at its header timeout)
// would otherwise hold its place until then, and a probe behind a full
// budget of them would wait that long (a review: 40 silent connections
// on the probes' listener, whose budget was 32, failed every /readyz
// with a 1 s timeout).
func (l *Limit) Track(c net.Conn, st http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.idle[c]; ok {
		l.order.Remove(e)
		delete(l.idle, c)
		if !e.Value.(idleConn).silent {
			l.idleNow.Dec()
		}
	}
	switch st {
	case http.StateIdle:
		l.idleNow.Inc()
	case http.StateNew:
	default:
		return
	}
	l.idle[c] = l.order.PushBack(idleConn{c, l.now(), st == http.StateNew})
	if l.waiters > 0 {
		close(l.changed)
		l.changed = make(chan struct{})
	}
}

// acquire takes a place in the budget, closing the connection idle
// longest when there is none and it has been idle MinIdle, and waiting
// otherwise (until a place comes back, or a connection turns idle, or the
// one idle longest reaches MinIdle and is closed), or until done is closed
// (net.ErrClosed).
func (l *Limit) acquire(done <-chan struct{}) error {
	select {
	case l.sem <- struct{}{}:
		return nil
	default:
	}
	counted := false
	l.mu.Lock()
	l.waiters++
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.waiters--
		l.mu.Unlock()
	}()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		victim, wait, changed := l.victim()
		var ripe <-chan time.Time
		switch {
		case victim != nil:
			l.idleClosed.Inc()
			// Its place comes back when the socket closes; over TLS the
			// close first sends an alert, which may wait for the client.
			go victim.Close()
		case wait > 0:
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			ripe = timer.C
		}
		if victim == nil && !counted {
			l.waits.Inc()
			counted = true
		}
		select {
		case l.sem <- struct{}{}:
			return nil
		case <-changed:
		case <-ripe:
		case <-done:
			return net.ErrClosed
		}
	}
}

// victim takes the connection idle longest off the idle ones and returns
// it when it has been idle MinIdle; otherwise it returns how long until it
// will have been (0: none is idle). It returns as well the channel Track
// closes when a connection next turns idle, read under the same lock as
// the look: read after it, a connection turning idle in between would
// close a channel no one waits on, and the caller would wait for the next
// one with no timer armed, although that connection could be closed once
// idle MinIdle (a lost wake-up).
func (l *Limit) victim() (net.Conn, time.Duration, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.order.Front()
	if e == nil {
		return nil, 0, l.changed
	}
	ic := e.Value.(idleConn)
	// A clock stepped back counts as no time idle, not as a long one.
	if age := l.now().Sub(ic.since); age < MinIdle {
		return nil, MinIdle - max(age, 0), l.changed
	}
	l.order.Remove(e)
	delete(l.idle, ic.c)
	if !ic.silent {
		l.idleNow.Dec()
	}
	return ic.c, 0, l.changed
}

func (l *Limit) release() { <-l.sem }

// listener is a net.Listener whose connections take places in lim.
type listener struct {
	net.Listener
	lim  *Limit
	open prometheus.Gauge
	own  chan struct{} // one token per connection of ln open; nil: no share of its own

	closeOnce sync.Once
	done      chan struct{} // closed by Close: ends a waiting Accept
}

// Accept accepts a connection, then takes a place in the budget for it
// (first in the listener's own share, if it has one, waiting for a place
// there), closing the connection idle longest or waiting when there is
// none.
// Taking the place only once a connection has come (one descriptor more
// while it waits) keeps idle connections open until someone needs their
// place: a server calls Accept again as soon as it has a connection.
func (ln *listener) Accept() (net.Conn, error) {
	c, err := ln.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if ln.own != nil {
		select {
		case ln.own <- struct{}{}:
		default:
			ln.lim.waits.Inc()
			select {
			case ln.own <- struct{}{}:
			case <-ln.done:
				_ = c.Close()
				return nil, net.ErrClosed
			}
		}
	}
	if err := ln.lim.acquire(ln.done); err != nil {
		ln.release()
		_ = c.Close()
		return nil, err
	}
	ln.open.Inc()
	return &conn{Conn: c, ln: ln}, nil
}

// release gives back a place in ln's own share, if it has one.
func (ln *listener) release() {
	if ln.own != nil {
		<-ln.own
	}
}

// Close closes the listener and ends an Accept waiting for a place.
func (ln *listener) Close() error {
	ln.closeOnce.Do(func() { close(ln.done) })
	return ln.Listener.Close()
}

// conn is a connection holding a place, given back on its first Close.
type conn struct {
	net.Conn
	ln   *listener
	once sync.Once
}

// CloseWrite shuts the writing side of a TCP connection, as
// net.TCPConn's does (fasthttp's lingering close, server/fasthttp.go,
// looks for it).
func (c *conn) CloseWrite() error {
	cw, ok := c.Conn.(interface{ CloseWrite() error })
	if !ok {
		return errors.New("connlimit: the connection has no CloseWrite")
	}
	return cw.CloseWrite()
}

// Close closes the connection and gives its place back.
func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.ln.open.Dec()
		c.ln.lim.release()
		c.ln.release()
	})
	return err
}
