package httplimit_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/memstore"
)

// A per-client-IP limit of 2 requests per minute on an in-memory store.
// The third request is refused with 429, Retry-After and a problem+json
// body.
func Example() {
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := floodgate.New(store, floodgate.Options{Prefix: "example"})
	if err != nil {
		log.Fatal(err)
	}
	perIP, err := floodgate.NewFixedWindow("per-ip", 2, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	ips, err := clientip.New(clientip.Options{}) // no trusted proxies: the peer is the client
	if err != nil {
		log.Fatal(err)
	}
	mw, err := httplimit.New(limiter, []httplimit.Rule{{Policy: perIP, Key: httplimit.IP(ips)}}, httplimit.Options{
		// A fixed clock keeps this example's output stable; leave it nil in
		// real code.
		Clock: func() time.Time { return time.Date(2026, 12, 1, 10, 0, 10, 0, time.UTC) },
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})))
	defer srv.Close()

	for range 3 {
		resp, err := http.Get(srv.URL)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d limit=%s remaining=%s retry-after=%s\n", resp.StatusCode, resp.Header.Get("X-RateLimit-Limit"),
			resp.Header.Get("X-RateLimit-Remaining"), resp.Header.Get("Retry-After"))
		if resp.StatusCode == http.StatusTooManyRequests {
			fmt.Print(resp.Header.Get("Content-Type"), " ", string(body))
		}
	}
	// Output:
	// 200 limit=2 remaining=1 retry-after=
	// 200 limit=2 remaining=0 retry-after=
	// 429 limit=2 remaining=0 retry-after=50
	// application/problem+json {"type":"about:blank","title":"Too Many Requests","status":429,"detail":"rate limit \"per-ip\" exceeded; retry after 50 seconds","policy":"per-ip","reason":"limited","retry_after":50,"limit":2,"reset":1796119260}
}

// Layered limits: 100 requests per minute per API
// key and 1,000 per minute for the whole server, decided together; the
// IETF draft fields are on. A request without an API key is refused with
// 400 because the per-key rule is required.
func ExampleNew_layered() {
	store, _ := memstore.New(memstore.Options{})
	limiter, _ := floodgate.New(store, floodgate.Options{Prefix: "example"})
	perKey, _ := floodgate.NewSlidingWindow("per-key", 100, time.Minute)
	global, _ := floodgate.NewFixedWindow("global", 1000, time.Minute)

	mw, err := httplimit.New(limiter, []httplimit.Rule{
		{Policy: perKey, Key: httplimit.Header("X-API-Key")},
		{Policy: global},
	}, httplimit.Options{
		IETFHeaders: true,
		Clock:       func() time.Time { return time.Date(2026, 12, 1, 10, 0, 10, 0, time.UTC) },
	})
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	for _, key := range []string{"k-123", ""} {
		req := httptest.NewRequest(http.MethodGet, "/v1/things", nil)
		if key != "" {
			req.Header.Set("X-API-Key", key)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Printf("%d policy=[%s] current=[%s]\n", rec.Code, rec.Header().Get("RateLimit-Policy"), rec.Header().Get("RateLimit"))
	}
	// Output:
	// 200 policy=["per-key";q=100;w=60, "global";q=1000;w=60] current=["per-key";r=99;t=110, "global";r=999;t=50]
	// 400 policy=[] current=[]
}

// Shadow mode: a new, stricter limit is observed before it is enforced.
// Every request is served; the ones it would have refused are reported.
func ExampleRule_shadow() {
	store, _ := memstore.New(memstore.Options{})
	limiter, _ := floodgate.New(store, floodgate.Options{Prefix: "example"})
	strict, _ := floodgate.NewFixedWindow("strict-trial", 1, time.Minute)
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	ips, _ := clientip.New(clientip.Options{TrustedProxies: trusted, IPv6Prefix: 64})

	mw, _ := httplimit.New(limiter, []httplimit.Rule{{Policy: strict, Key: httplimit.IP(ips), Shadow: true}}, httplimit.Options{
		OnShadowDeny: func(r *http.Request, p floodgate.Policy, res floodgate.Result) {
			fmt.Println("would have denied under", p.Name)
		},
	})
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 2 {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = "10.1.2.3:4567"                        // the load balancer
		req.Header.Set("X-Forwarded-For", "2001:db8:1:2::abcd") // the client it saw
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(rec.Code)
	}
	// Output:
	// 200
	// would have denied under strict-trial
	// 200
}
