package server_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/server"
)

func TestWeakAdminTokenRefused(t *testing.T) {
	for _, tok := range []string{"a", "tok", "s3cret-admin-token", strings.Repeat("a", 64), strings.Repeat("abcd", 16), "0123456789abcdef0123456789abcde"} {
		if err := server.ValidateAdminToken(tok); !errors.Is(err, server.ErrWeakAdminToken) {
			t.Errorf("token %q: %v, want ErrWeakAdminToken", tok, err)
		}
		holder, _ := config.NewHolder(parse(t, layered))
		lim, _ := floodgate.New(memStore(t), floodgate.Options{})
		if _, err := server.New(lim, holder, server.Options{AdminToken: tok}); !errors.Is(err, server.ErrWeakAdminToken) {
			t.Errorf("server.New with token %q: %v, want ErrWeakAdminToken", tok, err)
		}
	}
	for _, tok := range []string{testToken, "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "correct-horse-battery-staple-2026!"} {
		if err := server.ValidateAdminToken(tok); err != nil {
			t.Errorf("token %q refused: %v", tok, err)
		}
	}
	if err := server.ValidateAdminToken("0123456789abcdef 0123456789abcdef"); !errors.Is(err, server.ErrWeakAdminToken) {
		t.Errorf("token with a space accepted: %v", err)
	}
}

// adminCall sends one admin request from remote straight to h.
func adminCall(h http.Handler, remote, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, "/admin/v1/config", nil)
	req.RemoteAddr = remote
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, req)
	return rr
}

// TestBearerSchemeIgnoresCase: the Bearer scheme's name matches in any
// case (RFC 9110 §11.1), with one or more spaces before the token; other
// schemes and an empty token are refused. "bearer <token>" used to be 401.
func TestBearerSchemeIgnoresCase(t *testing.T) {
	e := start(t, layered, memStore(t), nil)
	for _, tc := range []struct {
		header string
		want   int
	}{
		{"Bearer " + testToken, http.StatusOK},
		{"bearer " + testToken, http.StatusOK},
		{"BEARER  " + testToken, http.StatusOK},
		{"Basic " + testToken, http.StatusUnauthorized},
		{"Bearer", http.StatusUnauthorized},
		{"Bearer ", http.StatusUnauthorized},
		{"Bearer" + testToken, http.StatusUnauthorized},
	} {
		req := httptest.NewRequest(http.MethodGet, "/admin/v1/config", nil)
		req.RemoteAddr = "192.0.2.9:1234"
		req.Header.Set("Authorization", tc.header)
		rr := httptest.NewRecorder()
		e.srv.ServeHTTP(rr, req)
		if rr.Code != tc.want {
			t.Errorf("Authorization: %q: %d, want %d", strings.Replace(tc.header, testToken, "<token>", 1), rr.Code, tc.want)
		}
	}
}

// TestAdminFailuresThrottled: a network that guessed wrong
// AdminFailureLimit times is refused (429, even with the right token)
// while other networks are not; IPv6 addresses of one /64 share a count.
func TestAdminFailuresThrottled(t *testing.T) {
	var logs bytes.Buffer
	e := start(t, layered, memStore(t), func(o *server.Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	for i := range server.AdminFailureLimit {
		if rr := adminCall(e.srv, "198.51.100.7:4000", "wrong-guess"); rr.Code != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d, want 401", i, rr.Code)
		}
	}
	rr := adminCall(e.srv, "198.51.100.7:4001", testToken)
	if rr.Code != http.StatusTooManyRequests || rr.Header().Get("Retry-After") == "" {
		t.Fatalf("right token after %d failures: %d %v, want 429 with Retry-After", server.AdminFailureLimit, rr.Code, rr.Header())
	}
	if rr := adminCall(e.srv, "198.51.100.8:4000", testToken); rr.Code != http.StatusOK {
		t.Fatalf("another address: %d %s", rr.Code, rr.Body)
	}
	for i := range server.AdminFailureLimit {
		adminCall(e.srv, fmt.Sprintf("[2001:db8:1:2::%x]:443", i+1), "wrong")
	}
	if rr := adminCall(e.srv, "[2001:db8:1:2:ffff::1]:443", testToken); rr.Code != http.StatusTooManyRequests {
		t.Fatalf("same /64 after its failures: %d, want 429", rr.Code)
	}
	if rr := adminCall(e.srv, "[2001:db8:1:3::1]:443", testToken); rr.Code != http.StatusOK {
		t.Fatalf("another /64: %d", rr.Code)
	}
	// Every call is in the log with its caller.
	var calls, failures, refusals int
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec struct{ Msg, Caller, Path string }
		if json.Unmarshal([]byte(line), &rec) != nil || rec.Caller == "" {
			continue
		}
		switch rec.Msg {
		case "admin call":
			calls++
		case "admin authentication failed":
			failures++
		case "admin request refused: too many failed authentications":
			refusals++
		}
		if rec.Path != "/admin/v1/config" {
			t.Errorf("log line without the path: %s", line)
		}
	}
	// The refusals of throttled networks, at most one line per interval.
	if calls != 2 || failures != 2*server.AdminFailureLimit || refusals != 1 {
		t.Fatalf("logged %d calls, %d failures, %d refusals; want 2, %d, 1:\n%s", calls, failures, refusals, 2*server.AdminFailureLimit, logs.String())
	}
}

// TestSeparateAdminListener: with SeparateAdmin and MetricsAdminOnly the
// public handler serves neither the admin endpoints nor /metrics; the
// admin handler serves both.
func TestSeparateAdminListener(t *testing.T) {
	e := start(t, layered, memStore(t), func(o *server.Options) {
		o.SeparateAdmin, o.MetricsAdminOnly = true, true
	})
	if r := e.do("GET", "/admin/v1/config", testToken, nil); r.status != http.StatusNotFound {
		t.Fatalf("public admin endpoint: %d, want 404", r.status)
	}
	if r := e.do("GET", "/metrics", "", nil); r.status != http.StatusNotFound {
		t.Fatalf("public /metrics: %d, want 404", r.status)
	}
	admin := httptest.NewServer(e.srv.AdminHandler())
	t.Cleanup(admin.Close)
	req, _ := http.NewRequest("GET", admin.URL+"/admin/v1/config", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("admin listener config: %d", resp.StatusCode)
	}
	resp, err = http.Get(admin.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("admin listener /metrics: %d", resp.StatusCode)
	}
	// Without SeparateAdmin the public handler keeps serving both.
	e2 := start(t, layered, memStore(t), nil)
	if r := e2.do("GET", "/admin/v1/config", testToken, nil); r.status != http.StatusOK {
		t.Fatalf("default public admin endpoint: %d", r.status)
	}
}

// TestNegativeOptionNamed: server.New names the negative option it refuses
// (it said "server: negative option", whichever of eight it was).
func TestNegativeOptionNamed(t *testing.T) {
	holder, _ := config.NewHolder(parse(t, layered))
	lim, _ := floodgate.New(memStore(t), floodgate.Options{})
	for name, opts := range map[string]server.Options{
		"DecisionTimeout is negative: -1s": {DecisionTimeout: -time.Second},
		"MaxBodyBytes is negative: -5":     {MaxBodyBytes: -5},
		"ReadTimeout is negative: -1ms":    {ReadTimeout: -time.Millisecond},
		"WriteTimeout is negative: -1ms":   {WriteTimeout: -time.Millisecond},
		// Below MinIOTimeout no answer could be written (rwhttp walk).
		"WriteTimeout 1ns: want at least 100ms": {WriteTimeout: time.Nanosecond},
		"ReadTimeout 99ms: want at least 100ms": {ReadTimeout: 99 * time.Millisecond},
	} {
		if _, err := server.New(lim, holder, opts); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%+v: %v; want an error naming %q", opts, err, name)
		}
	}
}

// fromAddr returns a client whose connections come from the loopback
// address ip (any of 127.0.0.0/8 on Linux), keeping up to conns of them
// open: a network of its own to the admin guard.
func fromAddr(t *testing.T, ip net.IP, conns int) *http.Client {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: conns, DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}}).DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// getStatus sends GET url with token and returns the answer's status (0
// after failing t).
func getStatus(t *testing.T, c *http.Client, url, token string) int {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Error(err)
		return 0
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Error(err)
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestConcurrentAdminGuessesBounded: wrong tokens sent at once from one
// network, over connections opened beforehand, are compared at most
// AdminFailureLimit times (401); every other one is refused unread (429),
// and so is the right token from that network afterwards, while another
// network is served. Several networks (loopback addresses) in turn, on
// both engines. (The guard looked at the failures, compared, then
// counted: guesses in flight together all passed the look before any was
// counted. The guesses are long, 48 KB, so that comparing them takes a
// while; even so, on two cores about one round in five let an 11th or
// 12th guess through, and 2 × 24 rounds all passing is about 1 in 10 000.)
func TestConcurrentAdminGuessesBounded(t *testing.T) {
	const networks, guesses = 24, 20
	long := strings.Repeat("wrong-guess-", 4000) // 48 000 bytes, within MaxHeaderBytes
	for _, engine := range []server.HTTPEngine{server.NetHTTP, server.FastHTTP} {
		t.Run(string(engine), func(t *testing.T) {
			e := serveEngine(t, engine, engineConfig, memStore(t), nil)
			for k := range networks {
				ip := net.IPv4(127, 0, 1, byte(k+1))
				c := fromAddr(t, ip, guesses)
				var ready, done sync.WaitGroup
				start := make(chan struct{})
				statuses := make(chan int, guesses)
				for i := range guesses {
					ready.Add(1)
					done.Go(func() {
						getStatus(t, c, e.url+"/healthz", "") // opens (or reuses) a connection
						ready.Done()
						<-start
						statuses <- getStatus(t, c, e.url+"/admin/v1/config", fmt.Sprintf("%s%03d", long, i))
					})
				}
				ready.Wait()
				close(start)
				done.Wait()
				close(statuses)
				got := map[int]int{}
				for s := range statuses {
					got[s]++
				}
				if want := map[int]int{http.StatusUnauthorized: server.AdminFailureLimit, http.StatusTooManyRequests: guesses - server.AdminFailureLimit}; fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("%d wrong tokens at once from %v answered %v (status: count); want %v", guesses, ip, got, want)
				}
				if s := getStatus(t, c, e.url+"/admin/v1/config", testToken); s != http.StatusTooManyRequests {
					t.Fatalf("right token from %v after its failures: %d, want 429", ip, s)
				}
			}
			if s := getStatus(t, fromAddr(t, net.IPv4(127, 0, 2, 1), 1), e.url+"/admin/v1/config", testToken); s != http.StatusOK {
				t.Fatalf("right token from another network: %d, want 200", s)
			}
		})
	}
}

// TestAdminCrossOriginLogged: an admin request a browser sent from
// another origin is refused and, as every admin call, in the log with its
// caller (it was refused silently); a burst of them writes one line.
func TestAdminCrossOriginLogged(t *testing.T) {
	var logs syncbuf.Buffer
	e := start(t, layered, memStore(t), func(o *server.Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	for range 5 {
		req := httptest.NewRequest(http.MethodGet, "/admin/v1/config", nil)
		req.RemoteAddr = "203.0.113.5:4000"
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		req.Header.Set("Origin", "https://evil.example")
		rr := httptest.NewRecorder()
		e.srv.ServeHTTP(rr, req)
		if rr.Code != http.StatusForbidden {
			t.Fatalf("cross-site admin request: %d, want 403", rr.Code)
		}
	}
	out := logs.String()
	if n := strings.Count(out, "admin request refused: sent by a browser from another origin"); n != 1 ||
		!strings.Contains(out, `"caller":"203.0.113.5:4000"`) || !strings.Contains(out, `"origin":"https://evil.example"`) {
		t.Fatalf("%d log lines for 5 cross-origin admin requests, want 1 naming the caller and origin:\n%s", n, out)
	}
}
