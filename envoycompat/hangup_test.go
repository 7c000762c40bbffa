package envoycompat

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"

	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// hangupConfig is the configuration of the hang-up tests: one counter,
// far from its limit.
const hangupConfig = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 1000}
`

// hangupCallers is the number of callers that hang up in each test.
const hangupCallers = 8

// waitUntil polls cond until it holds, failing the test (naming what)
// after a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// hangupStore returns a service on a RedisStore of a private redis-server
// whose counter d_k_v already counts 1, with the store and the server.
func hangupStore(t *testing.T) (*Service, *RedisStore, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	// A REDIS_TIMEOUT makes each request's Redis work run under a shared
	// deadline (internal/deadline), which does not end with the request.
	st := &RedisStore{Client: srv.Client(t), Timeout: time.Minute}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	svc, err := NewService(Options{Store: st, Metrics: m, Now: func() time.Time { return fixedNow }})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := loadStrings(t, false, hangupConfig)
	if err != nil {
		t.Fatal(err)
	}
	svc.SetConfig(cfg)
	if _, err := svc.ShouldRateLimit(context.Background(), req(t, "d", 1, "k=v")); err != nil {
		t.Fatal(err)
	}
	return svc, st, srv
}

// hangUpWhileStalled stalls srv (SIGSTOP), lets hangupCallers callers
// call (each by call, under its own context), waits until the two script
// calls a batcher keeps in flight are taken and the other callers' updates
// queue, cancels every caller, waits until the service has seen them all
// go (gone), resumes srv and waits until every call has returned
// (returned). The counter must then hold the first count and the two
// updates that were sent before the callers went, no more.
func hangUpWhileStalled(t *testing.T, svc *Service, st *RedisStore, srv *redistest.Server, gone, returned *atomic.Int32, call func(ctx context.Context)) {
	t.Helper()
	if err := posix.Kill(srv.Pid, posix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = posix.Kill(srv.Pid, posix.SIGCONT) })
	ctx, cancel := context.WithCancel(context.Background())
	for range hangupCallers {
		go call(ctx)
	}
	q := st.main.q
	waitUntil(t, "the callers' updates are in flight or queued", func() bool {
		return q.InFlight() == incrMaxInFlight && q.Len() == hangupCallers-incrMaxInFlight
	})
	cancel()
	waitUntil(t, "the service has seen every caller go", func() bool { return gone.Load() == hangupCallers })
	if err := posix.Kill(srv.Pid, posix.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "every call has returned", func() bool { return returned.Load() == hangupCallers })
	waitUntil(t, "the batcher is idle", func() bool { return q.InFlight() == 0 && q.Len() == 0 })
	keys, err := srv.Client(t).Keys(context.Background(), "*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %q, %v: want the one counter", keys, err)
	}
	n, err := srv.Client(t).Get(context.Background(), keys[0]).Int()
	if err != nil {
		t.Fatal(err)
	}
	// 1 before the stall, 2 sent (alone, one per script call in flight)
	// before the callers went; the queued ones were not sent.
	if want := 1 + incrMaxInFlight; n != want {
		t.Errorf("counter %s = %d after %d callers hung up (%d of them queued, unsent), want %d: the updates of callers that had gone were applied",
			keys[0], n, hangupCallers, hangupCallers-incrMaxInFlight, want)
	}
	// Redis answered every update it was sent; the dropped ones are the
	// callers' doing, not Redis errors.
	if n := testutil.ToFloat64(svc.opts.Metrics.redisError); n != 0 {
		t.Errorf("redis_error counted %v for callers that hung up, want 0", n)
	}
}

// TestJSONHangupWhileRedisStalledIsNotCounted: POST /json requests whose
// clients hang up while a stalled Redis holds the service's script calls
// are not counted when Redis comes back, but for those whose update had
// been sent. They were all counted: the store's deadline (REDIS_TIMEOUT,
// shared, internal/deadline) does not end with the request, so the
// queued updates never left the queue and went out once Redis answered.
func TestJSONHangupWhileRedisStalledIsNotCounted(t *testing.T) {
	svc, st, srv := hangupStore(t)
	var gone, returned atomic.Int32
	h := svc.HTTPHandler(NewHealth(health.NewServer(), false))
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer returned.Add(1)
		context.AfterFunc(r.Context(), func() { gone.Add(1) })
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	client := hs.Client()
	hangUpWhileStalled(t, svc, st, srv, &gone, &returned, func(ctx context.Context) {
		body := `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`
		r, err := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/json", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return
		}
		if resp, err := client.Do(r); err == nil {
			resp.Body.Close()
		}
	})
}

// TestGRPCCancelWhileRedisStalledIsNotCounted is
// TestJSONHangupWhileRedisStalledIsNotCounted for ShouldRateLimit calls
// that their clients cancel.
func TestGRPCCancelWhileRedisStalledIsNotCounted(t *testing.T) {
	svc, st, srv := hangupStore(t)
	var gone, returned atomic.Int32
	gs := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		defer returned.Add(1)
		context.AfterFunc(ctx, func() { gone.Add(1) })
		return h(ctx, req)
	}))
	svc.Register(gs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := rlspb.NewRateLimitServiceClient(conn)
	r := req(t, "d", 1, "k=v")
	hangUpWhileStalled(t, svc, st, srv, &gone, &returned, func(ctx context.Context) {
		_, _ = client.ShouldRateLimit(ctx, r)
	})
}
