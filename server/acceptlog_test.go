package server_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/server"
)

// acceptTempErr is an accept failure for want of descriptors, temporary
// as net/http's Serve wants to retry it.
type acceptTempErr struct{ error }

func (acceptTempErr) Timeout() bool   { return false }
func (acceptTempErr) Temporary() bool { return true }

// emfileListener fails its first fails Accepts with EMFILE, then closes
// blocked and waits until closed.
type emfileListener struct {
	mu        sync.Mutex
	fails     int
	once      sync.Once
	blocked   chan struct{}
	closeOnce sync.Once
	done      chan struct{}
}

func (l *emfileListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.fails > 0 {
		l.fails--
		l.mu.Unlock()
		return nil, acceptTempErr{&net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}}
	}
	l.mu.Unlock()
	l.once.Do(func() { close(l.blocked) })
	<-l.done
	return nil, net.ErrClosed
}

func (l *emfileListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

func (l *emfileListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

// TestAsideAcceptRetriesRateLimited: out of file descriptors, net/http's
// accept retries on the health and admin listeners wrote one warning per
// retry (30 lines in 10 s from --health-addr); they are now one per
// WarnEvery, as fasthttp's on --addr.
func TestAsideAcceptRetriesRateLimited(t *testing.T) {
	for _, name := range []string{"health", "admin"} {
		t.Run(name, func(t *testing.T) {
			var out syncbuf.Buffer
			e := start(t, layered, memStore(t), func(o *server.Options) {
				o.Logger = slog.New(slog.NewJSONHandler(&out, nil))
			})
			ln := &emfileListener{fails: 5, blocked: make(chan struct{}), done: make(chan struct{})}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				if name == "health" {
					done <- e.srv.ServeHealth(ctx, ln)
				} else {
					done <- e.srv.ServeAdmin(ctx, ln)
				}
			}()
			<-ln.blocked
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(out.String(), "Accept error"); n != 1 {
				t.Errorf("%d accept lines, want 1:\n%s", n, out.String())
			}
		})
	}
}
