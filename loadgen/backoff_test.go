package loadgen

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
)

// trackingListener keeps its connections by remote address, so that a
// handler can close the one its call came on.
type trackingListener struct {
	net.Listener
	conns *sync.Map
}

func (l trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.conns.Store(c.RemoteAddr().String(), c)
	}
	return c, err
}

// dropEvery is a RateLimitService that answers OK, except every nth
// call, whose TCP connection it closes instead.
type dropEvery struct {
	rlspb.UnimplementedRateLimitServiceServer
	conns *sync.Map
	n     int64
	calls atomic.Int64
}

func (s *dropEvery) ShouldRateLimit(ctx context.Context, _ *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	if s.calls.Add(1)%s.n != 0 {
		return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}, nil
	}
	if p, ok := peer.FromContext(ctx); ok {
		if c, ok := s.conns.Load(p.Addr.String()); ok {
			c.(net.Conn).Close()
		}
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// An answer resets a worker's back-off in closed loop too, where the
// raw gRPC client's answers start the next request without the worker:
// each dropped connection, following answers, is one failure in a row,
// paused 10ms. The back-off used to double across the answers between
// failures (10ms, 20ms, 40ms, ... up to 1s), throughput collapsing after
// a few drops (rwhttp walk: 633 then 100 req/s against a server
// dropping every 100th call).
func TestBackOffResetByAnswers(t *testing.T) {
	target, srv := dropServer(t, 5)
	var mu sync.Mutex
	var waits []time.Duration
	opts := Options{Target: target, Concurrency: 1, Duration: time.Minute, MaxRequests: 30}
	opts.onBackOff = func(d time.Duration) {
		mu.Lock()
		waits = append(waits, d)
		mu.Unlock()
	}
	rep, err := Run(context.Background(), opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, rep, srv.calls.Load())
	mu.Lock()
	defer mu.Unlock()
	if want := srv.calls.Load() / srv.n; rep.Errors != want || rep.Allowed != rep.Sent-want {
		t.Errorf("%d allowed, %d errors of %d sent (samples %v); want every %dth dropped", rep.Allowed, rep.Errors, rep.Sent, rep.ErrorSamples, srv.n)
	}
	if int64(len(waits)) != rep.Errors {
		t.Errorf("%d back-off pauses for %d failures", len(waits), rep.Errors)
	}
	for i, d := range waits {
		if d != minBackoff {
			t.Errorf("pause %d after a failure following answers: %v, want %v (all %v)", i+1, d, minBackoff, waits)
			break
		}
	}
}

// dropServer serves a dropEvery closing every nth call's connection on
// a loopback port until the test ends; it returns the target.
func dropServer(t *testing.T, n int64) (string, *dropEvery) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dropEvery{conns: &sync.Map{}, n: n}
	gs := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(gs, srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(trackingListener{ln, srv.conns})
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
	return "grpc://" + ln.Addr().String(), srv
}

// A connection the server closes fails the calls in flight on it with
// the HTTP client's words: sent, maybe decided, not re-sent (rwhttp
// walk: the raw gRPC client said "reading from the server: EOF"); a
// call whose message was held back (the server's send window 0) was not
// wholly sent, and says so.
func TestRawGRPCClosedUnderCalls(t *testing.T) {
	target, _ := dropServer(t, 1)
	rep, err := Run(context.Background(), Options{Target: target, Concurrency: 1, Duration: time.Minute, MaxRequests: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Errors != 2 || len(rep.ErrorSamples) == 0 {
		t.Fatalf("report %+v: want 2 errors", rep)
	}
	for _, e := range rep.ErrorSamples {
		if !strings.HasPrefix(e.Message, "connection closed before an answer: the request was sent and may have been decided (not re-sent): ") {
			t.Errorf("sent, connection closed: %q", e.Message)
		}
	}

	target = closeOnHeadersServer(t)
	rep, err = Run(context.Background(), Options{Target: target, Concurrency: 1, Duration: time.Minute, MaxRequests: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Errors != 1 || len(rep.ErrorSamples) != 1 ||
		!strings.HasPrefix(rep.ErrorSamples[0].Message, "connection closed before the request was wholly sent: not decided (not re-sent): ") {
		t.Errorf("not wholly sent, connection closed: report %+v", rep)
	}
}

// closeOnHeadersServer speaks HTTP/2 with a send window of 0 for
// streams, so that no request's DATA is sent, and closes the connection
// on the first HEADERS; it returns the target.
func closeOnHeadersServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer nc.Close()
				preface := make([]byte, len(http2.ClientPreface))
				if _, err := io.ReadFull(nc, preface); err != nil {
					return
				}
				fr := http2.NewFramer(nc, nc)
				if fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}) != nil {
					return
				}
				for {
					f, err := fr.ReadFrame()
					if err != nil {
						return
					}
					switch f := f.(type) {
					case *http2.SettingsFrame:
						if !f.IsAck() && fr.WriteSettingsAck() != nil {
							return
						}
					case *http2.HeadersFrame:
						return
					}
				}
			})
		}
	})
	return "grpc://" + ln.Addr().String()
}
