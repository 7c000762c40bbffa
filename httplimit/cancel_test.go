package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/internal/proctest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/redis/go-redis/v9"
)

// watched is a middleware behind a real HTTP server, with what a test of
// departing clients needs to see: the requests the handler served, the
// status the middleware wrote to each request (as an access log around
// it would record it), the store failures it reported and its log.
type watched struct {
	url      string
	served   atomic.Int64
	started  chan struct{} // one per store call begun
	arrived  chan struct{} // one per request that waits for its client to go
	statuses chan int      // one per request the middleware is done with
	ended    chan struct{} // one per request with X-Signal-Gone whose context ended
	mu       sync.Mutex
	errs     []error
	logs     proctest.Buffer
}

// watch serves rules on d behind a real server. A request with the header
// X-Wait-Gone reaches the middleware only once its context has ended, so
// its decision is made for a client that has certainly gone. One with the
// header X-Signal-Gone reaches it at once, and signals ended when its
// context ends (its client went) while the middleware holds it.
func watch(t *testing.T, d httplimit.Decider, rules []httplimit.Rule, opts httplimit.Options) *watched {
	t.Helper()
	w := &watched{started: make(chan struct{}, 100), arrived: make(chan struct{}, 100), statuses: make(chan int, 100), ended: make(chan struct{}, 100)}
	opts.Clock = fixedClock
	opts.Logger = slog.New(slog.NewTextHandler(&w.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts.OnStoreError = func(_ *http.Request, err error, _ bool) {
		w.mu.Lock()
		w.errs = append(w.errs, err)
		w.mu.Unlock()
	}
	m, err := httplimit.New(startSignal{d, w.started}, rules, opts)
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.served.Add(1)
		_, _ = io.WriteString(rw, "ok")
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Wait-Gone") != "" {
			w.arrived <- struct{}{}
			<-r.Context().Done()
		}
		if r.Header.Get("X-Signal-Gone") != "" {
			go func() {
				<-r.Context().Done()
				w.ended <- struct{}{}
			}()
		}
		sw := &statusWriter{ResponseWriter: rw}
		h.ServeHTTP(sw, r)
		w.statuses <- sw.status
	}))
	t.Cleanup(srv.Close)
	w.url = srv.URL
	return w
}

// storeErrors returns the errors OnStoreError was called with.
func (w *watched) storeErrors() []error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]error(nil), w.errs...)
}

// startSignal is a Decider that signals every call it begins.
type startSignal struct {
	httplimit.Decider
	started chan<- struct{}
}

func (s startSignal) AllowLayersAt(ctx context.Context, now time.Time, cost int64, specs ...floodgate.LayerSpec) (floodgate.Decision, error) {
	s.started <- struct{}{}
	return s.Decider.AllowLayersAt(ctx, now, cost, specs...)
}

// statusWriter records the status written through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// goneRequest sends a GET with the API key and headers, and hands its
// cancel function to cancelled once the request is sent. It returns when
// the client has given up on the request.
func goneRequest(t *testing.T, url, key string, cancelled chan<- context.CancelFunc, headers ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Error(err)
		return
	}
	req.Header.Set("X-API-Key", key)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	cancelled <- cancel
	// A fresh connection per request: a cancelled request's connection is
	// closed, which is what net/http's server notices.
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Errorf("request for %s was answered %d before its client went away", key, resp.StatusCode)
	}
}

// useUp spends key's limit of 1 with a request that must be served.
func useUp(t *testing.T, w *watched, key string) {
	t.Helper()
	if r := get(t, http.DefaultClient, w.url, "X-API-Key", key); r.status != 200 {
		t.Fatalf("first request of %s: %d", key, r.status)
	}
	<-w.started
	if s := <-w.statuses; s != 200 {
		t.Fatalf("first request of %s: middleware wrote %d", key, s)
	}
	if n := w.served.Load(); n != 1 {
		t.Fatalf("first request of %s: served %d", key, n)
	}
}

// checkNotServed checks that none of the gone requests was served, each
// was answered 499 by the middleware, and none was reported as a store
// failure.
func checkNotServed(t *testing.T, w *watched, gone int, servedBefore int64) {
	t.Helper()
	for i := range gone {
		if s := <-w.statuses; s != 499 {
			t.Errorf("gone request %d: the middleware wrote %d, want 499", i, s)
		}
	}
	if n := w.served.Load() - servedBefore; n != 0 {
		t.Errorf("the handler served %d of %d requests whose client had gone", n, gone)
	}
	if errs := w.storeErrors(); len(errs) != 0 {
		t.Errorf("OnStoreError called %d times: %v", len(errs), errs)
	}
	out := w.logs.String()
	if strings.Contains(out, "store failed") || !strings.Contains(out, "request ended before its decision") {
		t.Errorf("log:\n%s", out)
	}
}

// TestClientGoneIsNotStoreFailure reproduces the walk's finding on
// memstore: a request whose client has closed the connection (net/http
// then cancels its context) failed its store call with context.Canceled,
// which FailOpen took for an outage and served, past a used-up limit,
// reporting each as a store failure. Now such a request is answered 499
// and not served, in either mode, and reported as nothing but a Debug
// line.
func TestClientGoneIsNotStoreFailure(t *testing.T) {
	for _, mode := range []httplimit.FailureMode{httplimit.FailOpen, httplimit.FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			rules := []httplimit.Rule{{Policy: fixedWindow(t, "api", 1, time.Minute), Key: httplimit.Header("X-API-Key")}}
			w := watch(t, memLimiter(t), rules, httplimit.Options{FailureMode: mode})
			useUp(t, w, "used")
			for _, key := range []string{"used", "fresh"} {
				cancelled := make(chan context.CancelFunc, 1)
				done := make(chan struct{})
				go func() {
					defer close(done)
					goneRequest(t, w.url, key, cancelled, "X-Wait-Gone", "1")
				}()
				cancel := <-cancelled
				<-w.arrived
				cancel()
				<-done
				<-w.started
				checkNotServed(t, w, 1, 1)
			}
		})
	}
}

// TestClientGoneShadowIsNotStoreFailure: a shadow rule's store call that
// fails because the client went away is not reported as a store failure
// either; the request, admitted by the enforced rules (none here), is
// served as before.
func TestClientGoneShadowIsNotStoreFailure(t *testing.T) {
	rules := []httplimit.Rule{{Policy: fixedWindow(t, "api", 1, time.Minute), Key: httplimit.Header("X-API-Key"), Shadow: true}}
	w := watch(t, memLimiter(t), rules, httplimit.Options{})
	cancelled := make(chan context.CancelFunc, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		goneRequest(t, w.url, "k", cancelled, "X-Wait-Gone", "1")
	}()
	cancel := <-cancelled
	<-w.arrived
	cancel()
	<-done
	<-w.started
	<-w.statuses
	if n := w.served.Load(); n != 1 {
		t.Errorf("served %d, want 1: shadow rules never refuse", n)
	}
	if errs := w.storeErrors(); len(errs) != 0 {
		t.Errorf("OnStoreError called for a departed client: %v", errs)
	}
	if out := w.logs.String(); strings.Contains(out, "store failed") {
		t.Errorf("log:\n%s", out)
	}
}

// pausedRedis returns a limiter on a real Redis and a function that pauses
// the server's writes (scripts included) until the test ends. Its client
// honours context deadlines and gives up a read after readTimeout.
func pausedRedis(t *testing.T, prefix string, readTimeout time.Duration) (*floodgate.Limiter, func()) {
	t.Helper()
	rs := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: rs.Addr, ContextTimeoutEnabled: true, ReadTimeout: readTimeout, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	st, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(st, floodgate.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	adm := rs.Client(t)
	pause := func() {
		if err := adm.Do(context.Background(), "CLIENT", "PAUSE", "60000", "WRITE").Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = adm.Do(context.Background(), "CLIENT", "UNPAUSE").Err() })
	}
	return l, pause
}

// TestClientGoneWhileRedisPaused is the walk's repro on a real Redis: 20
// clients of an identity whose limit is used up send a request each while
// Redis holds every script (CLIENT PAUSE WRITE), and hang up. Their store
// calls fail (the queued ones at once with the context's error, the one on
// the wire when the go-redis client's read times out) after their
// contexts were cancelled: the middleware used to serve all of them
// (FailOpen) and report each as a store failure. Now none is served.
func TestClientGoneWhileRedisPaused(t *testing.T) {
	const gone = 20
	lim, pause := pausedRedis(t, fmt.Sprintf("httplimit-gone-%d", time.Now().UnixNano()), 2*time.Second)
	rules := []httplimit.Rule{{Policy: fixedWindow(t, "api", 1, time.Minute), Key: httplimit.Header("X-API-Key")}}
	w := watch(t, lim, rules, httplimit.Options{})
	useUp(t, w, "used")
	pause()
	cancelled := make(chan context.CancelFunc, gone)
	var wg sync.WaitGroup
	for range gone {
		wg.Go(func() { goneRequest(t, w.url, "used", cancelled) })
	}
	// Every request's store call has begun (and is held by the pause)
	// before any client goes.
	for range gone {
		<-w.started
	}
	for range gone {
		(<-cancelled)()
	}
	wg.Wait()
	checkNotServed(t, w, gone, 1)
}

// TestTimeoutIsStoreFailure: the middleware's own Timeout expiring, with
// the client still waiting, is a store failure, as documented: FailOpen
// serves the request, FailClosed answers 503, and both report it.
func TestTimeoutIsStoreFailure(t *testing.T) {
	lim, pause := pausedRedis(t, fmt.Sprintf("httplimit-timeout-%d", time.Now().UnixNano()), 30*time.Second)
	pause()
	rules := []httplimit.Rule{{Policy: fixedWindow(t, "api", 1, time.Minute), Key: httplimit.Header("X-API-Key")}}
	for _, mode := range []httplimit.FailureMode{httplimit.FailOpen, httplimit.FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			w := watch(t, lim, rules, httplimit.Options{FailureMode: mode, Timeout: 100 * time.Millisecond})
			r := get(t, http.DefaultClient, w.url, "X-API-Key", "k-"+mode.String())
			<-w.started
			<-w.statuses
			want := map[httplimit.FailureMode]int{httplimit.FailOpen: 200, httplimit.FailClosed: 503}[mode]
			if r.status != want {
				t.Errorf("status %d, want %d", r.status, want)
			}
			errs := w.storeErrors()
			if len(errs) != 1 || !(errors.Is(errs[0], floodgate.ErrStoreUnavailable) || errors.Is(errs[0], floodgate.ErrIndeterminate)) {
				t.Errorf("OnStoreError got %v, want one store failure", errs)
			}
			if !strings.Contains(w.logs.String(), "store failed") {
				t.Errorf("log:\n%s", w.logs.String())
			}
		})
	}
}
