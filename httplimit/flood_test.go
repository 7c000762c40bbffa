package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/memstore"
)

// TestAPIKeyFloodKeepsTheGlobalCap reproduces the attack on a memory store:
// a client choosing its X-API-Key sends a new key with every request, so
// every admitted request stores a new identity, and each second's global
// window is a new key too. Once the store was at its bound the new second's
// global key could not be stored, every decision failed with "store full",
// and the default fail-open mode served everything: a 20/s global cap
// answered 200 to 200 requests in one second. The store now evicts the
// one-off API keys, and the cap holds every second.
func TestAPIKeyFloodKeepsTheGlobalCap(t *testing.T) {
	st, err := memstore.New(memstore.Options{Shards: 1, MaxKeys: 200})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.New(st, floodgate.Options{Prefix: "flood"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	rules := []httplimit.Rule{
		{Policy: fixedWindow(t, "global", 20, time.Second)},
		{Policy: fixedWindow(t, "per-key", 100, time.Hour), Key: httplimit.Header("X-API-Key")},
	}
	var storeErrors int
	srv := serve(t, lim, rules, httplimit.Options{Clock: clock, OnStoreError: func(*http.Request, error, bool) {
		mu.Lock()
		storeErrors++
		mu.Unlock()
	}})
	c := srv.Client()
	n := 0
	for sec := range 30 { // 600 one-off keys admitted: three times the bound
		mu.Lock()
		now = t0.Add(time.Duration(sec) * time.Second)
		mu.Unlock()
		ok := 0
		for range 200 {
			n++
			if get(t, c, srv.URL, "X-API-Key", fmt.Sprint("junk-", n)).status == http.StatusOK {
				ok++
			}
		}
		if ok != 20 {
			t.Fatalf("second %d: %d of 200 requests with fresh API keys served, want the global cap of 20 (store errors %d, %d identities stored)", sec, ok, storeErrors, st.Len())
		}
	}
	if storeErrors != 0 {
		t.Fatalf("%d store errors", storeErrors)
	}
	if st.Len() > 200 || st.Evictions() == 0 {
		t.Fatalf("store holds %d identities (bound 200), %d evictions", st.Len(), st.Evictions())
	}
}

// fullDecider is a store that reports itself full, as a store with a hard
// key bound (not memstore, which evicts) would.
type fullDecider struct{}

func (fullDecider) AllowLayersAt(context.Context, time.Time, int64, ...floodgate.LayerSpec) (floodgate.Decision, error) {
	return floodgate.Decision{}, fmt.Errorf("%w: 100 identities in shard (cap 100)", floodgate.ErrStoreFull)
}

// TestStoreFullNeverFailsOpen: even in the default FailOpen mode a full
// store's error is answered 503, since the client may have caused it.
func TestStoreFullNeverFailsOpen(t *testing.T) {
	var reported int
	srv := serve(t, fullDecider{}, []httplimit.Rule{{Policy: fixedWindow(t, "global", 20, time.Second)}},
		httplimit.Options{OnStoreError: func(*http.Request, error, bool) { reported++ }})
	resp := get(t, srv.Client(), srv.URL)
	if resp.status != http.StatusServiceUnavailable || resp.header.Get("Retry-After") != "1" || string(resp.body) == "ok" {
		t.Fatalf("full store in fail-open mode: %d %q, want 503", resp.status, resp.body)
	}
	if reported != 1 {
		t.Fatalf("OnStoreError called %d times, want 1", reported)
	}
}
