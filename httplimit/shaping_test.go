package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/httplimit"
)

// containsAll reports whether s contains every one of subs.
func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// decidedAt is where shapeWatch's decider notes, for the request whose
// context carries it, when its decision came back and the Delay it gave.
type decidedAt struct {
	at    time.Time
	delay time.Duration
}

type decidedAtKey struct{}

// noteDecided is a Decider that notes each decision in the request's
// decidedAt, and signals decided once it has.
type noteDecided struct {
	httplimit.Decider
	decided chan struct{}
}

func (n noteDecided) AllowLayersAt(ctx context.Context, now time.Time, cost int64, specs ...floodgate.LayerSpec) (floodgate.Decision, error) {
	d, err := n.Decider.AllowLayersAt(ctx, now, cost, specs...)
	if s, ok := ctx.Value(decidedAtKey{}).(*decidedAt); ok && err == nil {
		s.at = time.Now()
		for _, l := range d.Layers {
			s.delay = max(s.delay, l.Delay)
		}
	}
	if n.decided != nil {
		n.decided <- struct{}{}
	}
	return d, err
}

// TestShapingWaitsOutTheDelay reproduces the library walk's MEDIUM
// finding: a GCRA policy with MaxDelay (10/s, Burst 1, MaxDelay 1s) admits
// 11 requests at once, the first with no Delay and the others with 100 ms
// to 1 s; the middleware served all 11 at once, ignoring the Delay — 11
// requests where the policy means to let one through and space the rest.
// Now each request reaches the handler only once its Delay has passed
// since its decision came back (the decisions are stamped with one fixed
// instant, so the Delays are exactly 0, 100 ms, …, 1 s whatever the
// scheduling). The check is a lower bound only: the handler ran no sooner
// than the Delay allows.
func TestShapingWaitsOutTheDelay(t *testing.T) {
	const n = 11
	p := policy(t, floodgate.Policy{Name: "shape", Algorithm: floodgate.GCRA, Limit: 10, Window: time.Second, Burst: 1, MaxDelay: time.Second})
	m, err := httplimit.New(noteDecided{Decider: memLimiter(t)}, []httplimit.Rule{{Policy: p}}, httplimit.Options{Clock: fixedClock})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var delays []time.Duration
	early := 0
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := r.Context().Value(decidedAtKey{}).(*decidedAt)
		waited := time.Since(s.at)
		mu.Lock()
		delays = append(delays, s.delay)
		if waited < s.delay {
			early++
			t.Errorf("served %v after its decision, before its Delay of %v", waited, s.delay)
		}
		mu.Unlock()
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), decidedAtKey{}, &decidedAt{})))
	}))
	t.Cleanup(srv.Close)
	var wg sync.WaitGroup
	statuses := make(chan int, n+1)
	for range n {
		wg.Go(func() { statuses <- get(t, srv.Client(), srv.URL).status })
	}
	wg.Wait()
	for range n {
		if s := <-statuses; s != http.StatusOK {
			t.Errorf("status %d, want 200: the policy admits %d at once (Burst 1 + MaxDelay/interval 10)", s, n)
		}
	}
	if r := get(t, srv.Client(), srv.URL); r.status != http.StatusTooManyRequests {
		t.Errorf("request %d: status %d, want 429", n+1, r.status)
	}
	sort.Slice(delays, func(i, j int) bool { return delays[i] < delays[j] })
	if len(delays) != n {
		t.Fatalf("served %d, want %d", len(delays), n)
	}
	for i, d := range delays {
		if want := time.Duration(i) * 100 * time.Millisecond; d != want {
			t.Errorf("Delays %v, want 0, 100ms, …, 1s", delays)
			break
		}
	}
	if early > 0 {
		t.Errorf("%d of %d requests served before their Delay", early, n)
	}
}

// TestShapingClientGoneDuringDelay: a request admitted with a Delay whose
// client hangs up while the middleware waits the Delay out is answered
// 499 and not served; its admission stays counted.
func TestShapingClientGoneDuringDelay(t *testing.T) {
	p := policy(t, floodgate.Policy{Name: "shape", Algorithm: floodgate.GCRA, Limit: 1, Window: 10 * time.Second, Burst: 1, MaxDelay: time.Minute})
	lim := memLimiter(t)
	decided := make(chan struct{}, 10)
	w := watch(t, noteDecided{Decider: lim, decided: decided}, []httplimit.Rule{{Policy: p, Key: httplimit.Header("X-API-Key")}}, httplimit.Options{})
	useUp(t, w, "k") // no Delay: served at once
	<-decided
	cancelled := make(chan context.CancelFunc, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		goneRequest(t, w.url, "k", cancelled, "X-Signal-Gone", "1")
	}()
	cancel := <-cancelled
	<-w.started
	<-decided // admitted with a Delay of 10 s, which the middleware now waits out
	cancel()
	<-done
	<-w.ended
	if s := <-w.statuses; s != 499 {
		t.Errorf("the middleware wrote %d, want 499", s)
	}
	if n := w.served.Load(); n != 1 {
		t.Errorf("served %d, want 1: the request whose client went during its Delay was served", n)
	}
	if out := w.logs.String(); !containsAll(out, "request ended while it waited out its shaping delay", "delay=10s") {
		t.Errorf("log:\n%s", out)
	}
	r, err := lim.PeekAt(context.Background(), t0, p, "k")
	if err != nil {
		t.Fatal(err)
	}
	if r.Delay != 20*time.Second {
		t.Errorf("a next request's Delay %v, want 20s: the gone request's admission stays counted", r.Delay)
	}
}
