package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/denycache"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/memstore"
)

// inParallel is a Decider of a user's own that decides its first spec on
// one Limiter and its second on another at once, with the request's
// context.
type inParallel struct{ a, b *floodgate.Limiter }

func (p inParallel) AllowLayersAt(ctx context.Context, now time.Time, cost int64, specs ...floodgate.LayerSpec) (floodgate.Decision, error) {
	var wg sync.WaitGroup
	var da, db floodgate.Decision
	var ea, eb error
	wg.Go(func() { da, ea = p.a.AllowLayersAt(ctx, now, cost, specs[0]) })
	wg.Go(func() { db, eb = p.b.AllowLayersAt(ctx, now, cost, specs[1]) })
	wg.Wait()
	switch {
	case ea != nil:
		return da, ea
	case eb != nil:
		return db, eb
	case !da.Allowed:
		return da, nil
	}
	return db, nil
}

// inTurn decides its first spec on one Limiter, then its second on
// another.
type inTurn struct{ a, b *floodgate.Limiter }

func (p inTurn) AllowLayersAt(ctx context.Context, now time.Time, cost int64, specs ...floodgate.LayerSpec) (floodgate.Decision, error) {
	da, err := p.a.AllowLayersAt(ctx, now, cost, specs[0])
	if err != nil || !da.Allowed {
		return da, err
	}
	return p.b.AllowLayersAt(ctx, now, cost, specs[1])
}

// twoRules are a per-user and a global rule, one for each Limiter of a
// two-Limiter Decider.
func twoRules(t *testing.T) []httplimit.Rule {
	t.Helper()
	return []httplimit.Rule{
		{Policy: policy(t, floodgate.Policy{Name: "user", Algorithm: floodgate.FixedWindow, Limit: 1000, Window: time.Hour}), Key: httplimit.Header("X-User")},
		{Policy: policy(t, floodgate.Policy{Name: "global", Algorithm: floodgate.FixedWindow, Limit: 1000, Window: time.Hour})},
	}
}

// serveN sends n requests through h and returns how many were marked
// degraded.
func serveN(h http.Handler, n int) (marked int) {
	for range n {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-User", "u1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Header().Get(httplimit.DegradedHeader) != "" {
			marked++
		}
	}
	return marked
}

// TestParallelDecisionsShareTheOutcome: a Decider that decides two
// Limiters, each on a fallback.Store whose Redis is down, in parallel
// with the request's context (as FallbackStore invites) has each request
// marked degraded, without a data race (run with -race). A review found
// both fallback stores writing the request's bare Outcome at once, and,
// with a denycache in front of each, the race with Redis healthy too.
func TestParallelDecisionsShareTheOutcome(t *testing.T) {
	fa, ra := fallbackStore(t, nil)
	fb, rb := fallbackStore(t, nil)
	la, _ := floodgate.New(fa, floodgate.Options{Prefix: "pa"})
	lb, _ := floodgate.New(fb, floodgate.Options{Prefix: "pb"})
	m, err := httplimit.New(inParallel{la, lb}, twoRules(t), httplimit.Options{FallbackStore: true})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	if got := serveN(h, 5); got != 0 {
		t.Errorf("%d of 5 requests marked degraded with Redis up", got)
	}
	ra.Kill()
	rb.Kill()
	if got := serveN(h, 20); got != 20 {
		t.Errorf("%d of 20 requests marked degraded with both Redis down, want 20", got)
	}

	// A denycache in front of each, Redis healthy: each uncached call
	// used to reset the shared Outcome.
	fc, _ := fallbackStore(t, nil)
	dc1, _ := denycache.New(fc, denycache.Options{})
	dc2, _ := denycache.New(fc, denycache.Options{})
	lc1, _ := floodgate.New(dc1, floodgate.Options{Prefix: "pc1"})
	lc2, _ := floodgate.New(dc2, floodgate.Options{Prefix: "pc2"})
	m2, err := httplimit.New(inParallel{lc1, lc2}, twoRules(t), httplimit.Options{FallbackStore: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := serveN(m2.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})), 20); got != 0 {
		t.Errorf("%d of 20 requests marked degraded through denycaches with Redis up", got)
	}
}

// TestDenycacheKeepsAnEarlierDegradedMark: a request whose first decision
// a failure mode took (Redis down, ModeLocal admits) stays marked and
// reported when its second goes through a denycache over a healthy
// fallback store. A review found the denycache zeroing the request's
// Outcome before its own call: 0 of 10 marked, OnStoreError never called.
func TestDenycacheKeepsAnEarlierDegradedMark(t *testing.T) {
	down, rs := fallbackStore(t, nil)
	rs.Kill()
	healthy, _ := fallbackStore(t, nil)
	dc, err := denycache.New(healthy, denycache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	la, _ := floodgate.New(down, floodgate.Options{Prefix: "ta"})
	lb, _ := floodgate.New(dc, floodgate.Options{Prefix: "tb"})
	var errs storeErrors
	m, err := httplimit.New(inTurn{la, lb}, twoRules(t), httplimit.Options{FallbackStore: true, OnStoreError: errs.add})
	if err != nil {
		t.Fatal(err)
	}
	if got := serveN(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})), 10); got != 10 {
		t.Errorf("%d of 10 requests marked degraded, want 10", got)
	}
	if enforced, _ := errs.counts(); enforced != 10 {
		t.Errorf("OnStoreError called %d times, want 10", enforced)
	}
}

// nilUnwrap is a store wrapper whose Unwrap returns a typed nil store.
type nilUnwrap struct{ floodgate.Store }

func (nilUnwrap) Unwrap() floodgate.Store { return (*denycache.Store)(nil) }

// TestNilUnwrapDoesNotPanic: a store wrapper whose Unwrap returns a nil
// *denycache.Store is no fallback store, and building a middleware or a
// denycache over it does not panic (a review: a nil dereference in
// denycache's Unwrap, through New's look for a fallback store).
func TestNilUnwrapDoesNotPanic(t *testing.T) {
	mem, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(nilUnwrap{mem}, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := httplimit.New(l, twoRules(t)[:1], httplimit.Options{}); err != nil {
		t.Errorf("httplimit.New: %v", err)
	}
	if _, err := denycache.New(nilUnwrap{mem}, denycache.Options{}); err != nil {
		t.Errorf("denycache.New: %v", err)
	}
}
