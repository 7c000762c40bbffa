package httplimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
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
)

// concurrentClients fires m requests at once at a server admitting n (one
// shared budget) and checks that exactly n got 200, each with a distinct
// X-RateLimit-Remaining from n-1 down to 0, and the rest 429 with
// remaining 0 and a Retry-After.
func concurrentClients(t *testing.T, d httplimit.Decider, p floodgate.Policy, m int) {
	t.Helper()
	srv := serve(t, d, []httplimit.Rule{{Policy: p, Key: httplimit.Header("X-API-Key")}}, httplimit.Options{IETFHeaders: true})
	// One connection per client, so the requests really run in parallel.
	tr := &http.Transport{MaxIdleConnsPerHost: m, MaxConnsPerHost: m}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	start := make(chan struct{})
	resps := make([]response, m)
	var wg sync.WaitGroup
	for i := range m {
		wg.Go(func() {
			<-start
			resps[i] = get(t, c, srv.URL, "X-API-Key", "shared-key")
		})
	}
	close(start)
	wg.Wait()

	var remaining []int64
	denied := 0
	retry := "" // every 429 sees the same exhausted state at the same instant
	for i, r := range resps {
		if r.header.Get("X-RateLimit-Limit") != strconv.FormatInt(p.Limit, 10) {
			t.Fatalf("response %d: X-RateLimit-Limit %q", i, r.header.Get("X-RateLimit-Limit"))
		}
		switch r.status {
		case http.StatusOK:
			remaining = append(remaining, headerInt(t, r.header, "X-RateLimit-Remaining"))
		case http.StatusTooManyRequests:
			denied++
			if retry == "" {
				retry = r.header.Get("Retry-After")
			}
			if r.header.Get("X-RateLimit-Remaining") != "0" || r.header.Get("Retry-After") != retry ||
				r.problem.Status != 429 || r.problem.RetryAfter < 1 || strconv.FormatInt(r.problem.RetryAfter, 10) != retry {
				t.Fatalf("response %d: 429 with %v %+v", i, r.header, r.problem)
			}
		default:
			t.Fatalf("response %d: status %d %s", i, r.status, r.body)
		}
	}
	slices.Sort(remaining)
	want := make([]int64, p.Limit)
	for i := range want {
		want[i] = int64(i)
	}
	if !slices.Equal(remaining, want) {
		t.Fatalf("%d admitted with remaining %v, want exactly %d with %v", len(remaining), remaining, p.Limit, want)
	}
	if denied != m-int(p.Limit) {
		t.Fatalf("%d denied, want %d", denied, m-int(p.Limit))
	}
}

func TestConcurrentClientsMemstore(t *testing.T) {
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			p := policy(t, floodgate.Policy{Name: "conc", Algorithm: alg, Limit: 10, Window: time.Minute})
			for run := range 3 {
				t.Run(fmt.Sprint(run), func(t *testing.T) {
					concurrentClients(t, memLimiter(t), p, 60)
				})
			}
		})
	}
}

func TestConcurrentClientsRedis(t *testing.T) {
	srv := redistest.Start(t)
	st, err := redisstore.New(srv.Client(t), redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			p := policy(t, floodgate.Policy{Name: "conc", Algorithm: alg, Limit: 10, Window: time.Minute})
			for run := range 3 {
				t.Run(fmt.Sprint(run), func(t *testing.T) {
					// A fresh prefix per run: the server's state never leaks
					// between runs.
					l, err := floodgate.New(st, floodgate.Options{Prefix: fmt.Sprintf("httplimit-%s-%d", alg, run)})
					if err != nil {
						t.Fatal(err)
					}
					concurrentClients(t, l, p, 60)
				})
			}
		})
	}
}

// TestRedisDownFailureModes kills a real Redis under the middleware: the
// default mode keeps serving, the closed mode answers 503.
func TestRedisDownFailureModes(t *testing.T) {
	srv := redistest.Start(t)
	st, err := redisstore.New(srv.Client(t), redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(st, floodgate.Options{Prefix: "httplimit-down"})
	if err != nil {
		t.Fatal(err)
	}
	rule := []httplimit.Rule{{Policy: fixedWindow(t, "api", 100, time.Minute)}}
	open := serve(t, l, rule, httplimit.Options{Timeout: 2 * time.Second})
	closed := serve(t, l, rule, httplimit.Options{FailureMode: httplimit.FailClosed, Timeout: 2 * time.Second})
	if r := get(t, open.Client(), open.URL); r.status != 200 || r.header.Get("X-RateLimit-Remaining") != "99" {
		t.Fatalf("before: %d %v", r.status, r.header)
	}
	srv.Kill()
	if r := get(t, open.Client(), open.URL); r.status != 200 || r.header.Get("X-RateLimit-Limit") != "" {
		t.Fatalf("open while down: %d %v", r.status, r.header)
	}
	if r := get(t, closed.Client(), closed.URL); r.status != 503 || r.header.Get("Retry-After") != "1" {
		t.Fatalf("closed while down: %d %v", r.status, r.header)
	}
	srv.Restart(t)
	// Back to central counting by itself (the restarted server is empty).
	if r := get(t, closed.Client(), closed.URL); r.status != 200 || r.header.Get("X-RateLimit-Remaining") != "99" {
		t.Fatalf("after restart: %d %v", r.status, r.header)
	}
}

// TestStoreErrorLogHasNoIdentity: a key holding a value floodgate did not
// write fails the decision with an error naming the key; the middleware's
// log carries it with the identity replaced, as Options.Logger promises
// (an outside walk found API keys and client addresses in it).
func TestStoreErrorLogHasNoIdentity(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	st, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(st, floodgate.Options{Prefix: "httplimit-redact"})
	if err != nil {
		t.Fatal(err)
	}
	p := fixedWindow(t, "per-key", 100, time.Minute)
	if err := client.Set(context.Background(), l.Key(p, "secret-api-key-123"), "garbage", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var logs proctest.Buffer
	var seen atomic.Value
	h := serve(t, l, []httplimit.Rule{{Policy: p, Key: httplimit.Header("X-API-Key")}}, httplimit.Options{
		Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
		OnStoreError: func(_ *http.Request, err error, _ bool) { seen.Store(err.Error()) },
	})
	if r := get(t, h.Client(), h.URL, "X-API-Key", "secret-api-key-123"); r.status != 200 {
		t.Fatalf("fail-open request: %d", r.status)
	}
	out := logs.String()
	if !strings.Contains(out, "store failed") || !strings.Contains(out, "httplimit-redact:per-key:fw:{…}") {
		t.Fatalf("no store failure with the key redacted in the log:\n%s", out)
	}
	if strings.Contains(out, "secret-api-key-123") {
		t.Fatalf("identity in the log:\n%s", out)
	}
	if s, _ := seen.Load().(string); !strings.Contains(s, "secret-api-key-123") {
		t.Fatalf("OnStoreError got %q, want the error as it is", s)
	}
}
