package connlimit_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate/internal/connlimit"
)

// serve runs an HTTP server on a listener of lim and returns its address.
// Its handler answers "ok", first waiting for hold to be closed when the
// request's path is /hold.
func serve(t *testing.T, lim *connlimit.Limit, hold <-chan struct{}) string {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/hold" {
				<-hold
			}
			_, _ = io.WriteString(w, "ok")
		}),
		ConnState: lim.Track,
	}
	go func() { _ = hs.Serve(lim.Listener(raw, "http", 0)) }()
	t.Cleanup(func() { _ = hs.Close() })
	return raw.Addr().String()
}

// client is a keep-alive connection sending requests by hand.
type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &client{c: c, r: bufio.NewReader(c)}
}

// send writes a request for path.
func (c *client) send(t *testing.T, path string) {
	t.Helper()
	if _, err := io.WriteString(c.c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
}

// answer reads one response, bounded by 10 s (a hang, not a measure), and
// returns its status, or the error.
func (c *client) answer() (int, error) {
	_ = c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func (c *client) get(t *testing.T, path string) {
	t.Helper()
	c.send(t, path)
	if code, err := c.answer(); err != nil || code != 200 {
		t.Fatalf("GET %s: %d, %v", path, code, err)
	}
}

// eventually polls cond every 10 ms for up to 10 s (a bound on a hang).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("never: %s", what)
		}
	}
}

func newLimit(t *testing.T, max int) (*connlimit.Limit, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	lim, err := connlimit.New(max, reg)
	if err != nil {
		t.Fatal(err)
	}
	return lim, reg
}

func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return sum
}

// TestIdleClosedFirst: at the limit, a new connection is served by
// closing the connection idle longest, not the others.
func TestIdleClosedFirst(t *testing.T) {
	lim, reg := newLimit(t, 2)
	addr := serve(t, lim, nil)
	a, b := dial(t, addr), dial(t, addr)
	a.get(t, "/")
	// The server tells a is idle after it has answered.
	eventually(t, "a idle", func() bool { return metric(t, reg, "floodgate_connections_idle") == 1 })
	b.get(t, "/")
	eventually(t, "b idle", func() bool { return metric(t, reg, "floodgate_connections_idle") == 2 })
	c := dial(t, addr)
	c.get(t, "/")
	// a, idle longest, was closed; b still serves.
	if _, err := a.answer(); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("the connection idle longest: %v, want it closed", err)
	}
	b.get(t, "/")
	if got := metric(t, reg, "floodgate_connections_idle_closed_total"); got != 1 {
		t.Errorf("idle closed: %v, want 1", got)
	}
	eventually(t, "2 open", func() bool { return metric(t, reg, "floodgate_connections_open") == 2 })
	if got := metric(t, reg, "floodgate_connections_max"); got != 2 {
		t.Errorf("max: %v, want 2", got)
	}
}

// TestWaitsWhileNoneIdle: at the limit with every connection busy, a new
// connection is not accepted until one turns idle, and is then served.
func TestWaitsWhileNoneIdle(t *testing.T) {
	lim, reg := newLimit(t, 1)
	hold := make(chan struct{})
	addr := serve(t, lim, hold)
	a := dial(t, addr)
	a.send(t, "/hold")
	eventually(t, "a accepted", func() bool { return metric(t, reg, "floodgate_connections_open") == 1 })
	b := dial(t, addr) // in the listen backlog
	b.send(t, "/")
	eventually(t, "a wait counted", func() bool { return metric(t, reg, "floodgate_connections_waits_total") == 1 })
	if got := metric(t, reg, "floodgate_connections_open"); got != 1 {
		t.Fatalf("open while waiting: %v, want 1", got)
	}
	close(hold)
	if code, err := a.answer(); err != nil || code != 200 {
		t.Fatalf("the busy connection: %d, %v", code, err)
	}
	// a turned idle: it is closed, and b is served.
	if code, err := b.answer(); err != nil || code != 200 {
		t.Fatalf("the waiting connection: %d, %v", code, err)
	}
	if got := metric(t, reg, "floodgate_connections_idle_closed_total"); got != 1 {
		t.Errorf("idle closed: %v, want 1", got)
	}
}

// TestCloseEndsWaitingAccept: closing the listener ends an Accept that
// waits for a place.
func TestCloseEndsWaitingAccept(t *testing.T) {
	lim, _ := newLimit(t, 1)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := lim.Listener(raw, "http", 0)
	c1 := dial(t, raw.Addr().String())
	first, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	_ = c1
	done := make(chan error, 1)
	go func() { _, err := ln.Accept(); done <- err }()
	_ = ln.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept still waiting after Close")
	}
}

// TestClosingGivesPlaceBack: a closed connection's place serves the next
// one, once however often it is closed.
func TestClosingGivesPlaceBack(t *testing.T) {
	lim, reg := newLimit(t, 1)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := lim.Listener(raw, "grpc", 0)
	defer ln.Close()
	for i := range 3 {
		dial(t, raw.Addr().String())
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if got := metric(t, reg, "floodgate_connections_open"); got != 1 {
			t.Errorf("round %d: open %v, want 1", i, got)
		}
		_ = c.Close()
		_ = c.Close()
	}
	if got := metric(t, reg, "floodgate_connections_open"); got != 0 {
		t.Errorf("open after closing: %v, want 0", got)
	}
}

func TestDefault(t *testing.T) {
	for _, tc := range []struct {
		nofile uint64
		want   int
	}{
		{0, 1}, {1, 1}, {2, 1}, {256, 128}, {512, 256}, {1024, 768},
		{20_000, 15_000}, {65_536, 49_152}, {1 << 62, 3 << 28},
	} {
		if got := connlimit.Default(tc.nofile); got != tc.want {
			t.Errorf("Default(%d) = %d, want %d", tc.nofile, got, tc.want)
		}
	}
}

func TestNewRefusesNoPlace(t *testing.T) {
	if _, err := connlimit.New(0, nil); err == nil {
		t.Error("New(0): no error")
	}
}

// clock is a time tests set by hand, safe for concurrent use.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestBusyClientNotClosedForRoom: at the limit, a keep-alive client idle
// for less than MinIdle between two requests keeps its connection, and
// the newcomer waits; once the client has been idle MinIdle, it is closed
// and the newcomer served. Before, it was closed at once: a flood of
// connections that never finish a request evicted busy clients (8
// concurrent clients fell from 8,236 to 3,027 requests a second).
func TestBusyClientNotClosedForRoom(t *testing.T) {
	lim, reg := newLimit(t, 1)
	clk := &clock{now: time.Unix(1_000_000, 0)}
	connlimit.SetClock(lim, clk.Now)
	addr := serve(t, lim, nil)
	a := dial(t, addr)
	a.get(t, "/")
	eventually(t, "a idle", func() bool { return metric(t, reg, "floodgate_connections_idle") == 1 })
	b := dial(t, addr) // in the listen backlog
	b.send(t, "/")
	eventually(t, "a wait counted", func() bool { return metric(t, reg, "floodgate_connections_waits_total") == 1 })
	// No time has passed: a is still served.
	a.get(t, "/")
	eventually(t, "a idle again", func() bool { return metric(t, reg, "floodgate_connections_idle") == 1 })
	if got := metric(t, reg, "floodgate_connections_idle_closed_total"); got != 0 {
		t.Fatalf("idle closed before MinIdle: %v, want 0", got)
	}
	clk.add(connlimit.MinIdle)
	if code, err := b.answer(); err != nil || code != 200 {
		t.Fatalf("the waiting connection once a was idle MinIdle: %d, %v", code, err)
	}
	if _, err := a.answer(); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("the connection idle MinIdle: %v, want it closed", err)
	}
	if got := metric(t, reg, "floodgate_connections_idle_closed_total"); got != 1 {
		t.Errorf("idle closed: %v, want 1", got)
	}
}

// TestListenerShare: a listener held to a share of the budget waits at
// its share while the budget has room, the other listener takes the rest,
// and a place given back in the share lets the waiting one in.
func TestListenerShare(t *testing.T) {
	lim, reg := newLimit(t, 3)
	listen := func(name string, most int) (net.Listener, string) {
		raw, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln := lim.Listener(raw, name, most)
		t.Cleanup(func() { _ = ln.Close() })
		return ln, raw.Addr().String()
	}
	g, gaddr := listen("grpc", 1)
	h, haddr := listen("http", 0)
	accept := func(ln net.Listener) <-chan net.Conn {
		ch := make(chan net.Conn, 1)
		go func() {
			c, err := ln.Accept()
			if err == nil {
				t.Cleanup(func() { _ = c.Close() })
				ch <- c
			}
			close(ch)
		}()
		return ch
	}
	dial(t, gaddr)
	first := <-accept(g)
	dial(t, gaddr)
	second := accept(g)
	eventually(t, "a wait counted", func() bool { return metric(t, reg, "floodgate_connections_waits_total") == 1 })
	for i := range 2 {
		dial(t, haddr)
		if c := <-accept(h); c == nil {
			t.Fatalf("http connection %d not accepted", i)
		}
	}
	if got := metric(t, reg, "floodgate_connections_open"); got != 3 {
		t.Errorf("open: %v, want 3", got)
	}
	select {
	case c := <-second:
		t.Fatalf("accepted past the listener's share: %v", c)
	default:
	}
	_ = first.Close()
	if c := <-second; c == nil {
		t.Fatal("the waiting grpc connection not accepted once the first closed")
	}
}

// TestSilentClosedForRoom: at the limit, a connection that has sent
// nothing since its accept is closed for a newcomer once silent MinIdle,
// as an idle keep-alive one is, and not before; it is not counted as a
// keep-alive connection idle. Before, only connections idle between two
// requests were closed for room: a budget full of silent connections
// held every newcomer (a probe) until the server's header timeout cut
// them (a review: 40 on the probes' listener, budget 32, failed every
// /readyz with a 1 s timeout).
func TestSilentClosedForRoom(t *testing.T) {
	lim, reg := newLimit(t, 1)
	clk := &clock{now: time.Unix(1_000_000, 0)}
	connlimit.SetClock(lim, clk.Now)
	addr := serve(t, lim, nil)
	a := dial(t, addr) // sends nothing
	eventually(t, "a accepted", func() bool { return metric(t, reg, "floodgate_connections_open") == 1 })
	b := dial(t, addr) // in the listen backlog
	b.send(t, "/")
	eventually(t, "a wait counted", func() bool { return metric(t, reg, "floodgate_connections_waits_total") == 1 })
	if got := metric(t, reg, "floodgate_connections_idle_closed_total"); got != 0 {
		t.Fatalf("closed before silent MinIdle: %v, want 0", got)
	}
	if got := metric(t, reg, "floodgate_connections_idle"); got != 0 {
		t.Errorf("a silent connection counted idle: %v, want 0", got)
	}
	clk.add(connlimit.MinIdle)
	if code, err := b.answer(); err != nil || code != 200 {
		t.Fatalf("the waiting connection once a was silent MinIdle: %d, %v", code, err)
	}
	if _, err := a.answer(); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("the connection silent MinIdle: %v, want it closed", err)
	}
	if got := metric(t, reg, "floodgate_connections_idle_closed_total"); got != 1 {
		t.Errorf("closed for room: %v, want 1", got)
	}
}
