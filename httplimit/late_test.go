package httplimit_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/redis/go-redis/v9"
)

// TestClientGoneBeforeStoreAnswers reproduces the library walk's MEDIUM
// finding on a real Redis: a request whose store call is on the wire when
// its client hangs up, and which Redis then admits (CLIENT PAUSE WRITE
// held the script; the pause ends after the server saw the client go),
// was served — the decision succeeded, so the middleware never looked at
// the request's context. Now it is answered 499 and not served, with
// Timeout 0 and with a Timeout longer than the stall, and what Redis
// admitted stays counted.
func TestClientGoneBeforeStoreAnswers(t *testing.T) {
	rs := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: rs.Addr, ContextTimeoutEnabled: true, ReadTimeout: 30 * time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	st, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.New(st, floodgate.Options{Prefix: fmt.Sprintf("httplimit-late-%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	adm := rs.Client(t)
	api := fixedWindow(t, "api", 1, time.Minute)
	rules := []httplimit.Rule{{Policy: api, Key: httplimit.Header("X-API-Key")}}
	// Load the script first: an EVALSHA held by the pause would come back
	// NOSCRIPT, and the EVAL sent then would see the cancelled context.
	if _, err := lim.AllowAt(context.Background(), t0, api, "warm-up", 1); err != nil {
		t.Fatal(err)
	}
	for _, timeout := range []time.Duration{0, 30 * time.Second} {
		t.Run(fmt.Sprint("timeout=", timeout), func(t *testing.T) {
			ctx := context.Background()
			w := watch(t, lim, rules, httplimit.Options{Timeout: timeout})
			key := "late-" + timeout.String()
			if err := adm.Do(ctx, "CLIENT", "PAUSE", "60000", "WRITE").Err(); err != nil {
				t.Fatal(err)
			}
			unpaused := false
			unpause := func() {
				if !unpaused {
					unpaused = true
					if err := adm.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
						t.Error(err)
					}
				}
			}
			defer unpause()
			cancelled := make(chan context.CancelFunc, 1)
			var wg sync.WaitGroup
			wg.Go(func() { goneRequest(t, w.url, key, cancelled, "X-Signal-Gone", "1") })
			cancel := <-cancelled
			<-w.started
			// The script is on the wire and held by the pause.
			for blocked := false; !blocked; {
				info, err := adm.Info(ctx, "clients").Result()
				if err != nil {
					t.Fatal(err)
				}
				blocked = !strings.Contains(info, "blocked_clients:0")
			}
			cancel()
			wg.Wait()
			<-w.ended // the server saw the client go, with the call still held
			unpause()
			if s := <-w.statuses; s != 499 {
				t.Errorf("the middleware wrote %d for a request whose client had gone, want 499", s)
			}
			if n := w.served.Load(); n != 0 {
				t.Errorf("the handler served %d requests whose client had gone", n)
			}
			if errs := w.storeErrors(); len(errs) != 0 {
				t.Errorf("OnStoreError called: %v", errs)
			}
			if out := w.logs.String(); !strings.Contains(out, "request ended while it was decided") || !strings.Contains(out, "counted=true") {
				t.Errorf("log:\n%s", out)
			}
			// The admission Redis made stays counted, as documented.
			r, err := lim.PeekAt(ctx, t0, api, key)
			if err != nil {
				t.Fatal(err)
			}
			if r.Remaining != 0 {
				t.Errorf("remaining %d after the late admission, want 0 (counted)", r.Remaining)
			}
		})
	}
}
