package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/loginguard"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/redis/go-redis/v9"
)

// testClock is a settable clock shared by the middleware and the guard.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// start runs the login server on a real listener, behind a "proxy" on
// loopback (trusted), so tests choose each client's address with
// X-Forwarded-For.
func start(t *testing.T, store floodgate.Store, backend loginguard.Backend, clk *testClock) *httptest.Server {
	t.Helper()
	limiter, err := floodgate.New(store, floodgate.Options{Prefix: "loginserver-test"})
	if err != nil {
		t.Fatal(err)
	}
	policy, err := floodgate.NewSlidingWindow("login-per-ip", 20, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	guard, err := loginguard.New(backend, loginguard.Options{Secret: []byte("loginserver-test-secret-0123456789"), Clock: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	ips, err := clientip.New(clientip.Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := newHandler(config{Limiter: limiter, PerIP: policy, Guard: guard, IPs: ips, Iterations: 1000, Clock: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

type answer struct {
	status int
	retry  time.Duration
	body   string
	header http.Header
}

func post(t *testing.T, srv *httptest.Server, ip, user, password, captcha string) answer {
	t.Helper()
	form := url.Values{"username": {user}, "password": {password}}
	if captcha != "" {
		form.Set("captcha", captcha)
	}
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/login", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-For", ip)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, body: string(body), header: resp.Header}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		secs, err := strconv.Atoi(ra)
		if err != nil || secs < 1 {
			t.Fatalf("Retry-After %q", ra)
		}
		a.retry = time.Duration(secs) * time.Second
	}
	return a
}

func memBackends(t *testing.T) (floodgate.Store, loginguard.Backend) {
	t.Helper()
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := loginguard.NewMemory(loginguard.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return st, b
}

// TestAttack drives the lesson's three attacks at the running server.
func TestAttack(t *testing.T) {
	clk := &testClock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	store, backend := memBackends(t)
	srv := start(t, store, backend, clk)
	const home = "2001:db8:aa::10"

	// The owner logs in.
	if a := post(t, srv, home, "demo", demoPassword, ""); a.status != 200 {
		t.Fatalf("owner: %d %s", a.status, a.body)
	}

	// 1. Brute force from one address, honouring every Retry-After and
	// sending junk for every CAPTCHA: a handful of guesses, then CAPTCHAs,
	// delays and a lock. It never gets in.
	attacker := "203.0.113.66"
	guesses, lockedFor := 0, time.Duration(0)
	for i := 0; i < 500 && lockedFor == 0; i++ {
		a := post(t, srv, attacker, "demo", fmt.Sprintf("guess-%d", i), "junk")
		switch {
		case a.status == 200:
			t.Fatalf("guess %d got in", i)
		case a.status == 401 && strings.Contains(a.body, "invalid_credentials"):
			guesses++
		case a.status == 401 && strings.Contains(a.body, `"captcha_required"`):
		case a.status == 429 && a.retry >= 10*time.Minute:
			lockedFor = a.retry
		case a.status == 429:
			clk.advance(a.retry)
		default:
			t.Fatalf("attempt %d: %d %s", i, a.status, a.body)
		}
		clk.advance(time.Second)
	}
	if guesses != int(loginguard.DefaultPair.Captcha) {
		t.Fatalf("%d passwords checked for the attacker, want %d", guesses, loginguard.DefaultPair.Captcha)
	}
	if lockedFor == 0 || lockedFor > loginguard.DefaultPair.Lockout {
		t.Fatalf("attacker locked for %v", lockedFor)
	}

	// 2. Many addresses, three wrong passwords each: the account dimension
	// locks the account...
	for i := range 30 {
		bot := fmt.Sprintf("198.51.100.%d", i+1)
		for j := range 3 {
			post(t, srv, bot, "demo", fmt.Sprintf("bot-%d-%d", i, j), "junk")
		}
	}
	// ...a bot coming back is locked out...
	if a := post(t, srv, "198.51.100.1", "demo", "again", "solved"); a.status != 429 {
		t.Fatalf("returning bot: %d %s", a.status, a.body)
	}

	// 3. ...but the owner, from a clean address, is asked for a CAPTCHA
	// (nothing counted for not having sent one) and gets in with it: the
	// attack did not lock the owner out.
	a := post(t, srv, home, "demo", demoPassword, "")
	if a.status != 401 || !strings.Contains(a.body, `"captcha_required":true`) {
		t.Fatalf("owner during the attack: %d %s", a.status, a.body)
	}
	if a := post(t, srv, home, "demo", demoPassword, demoCaptcha); a.status != 200 {
		t.Fatalf("owner with a CAPTCHA: %d %s", a.status, a.body)
	}

	// The per-IP limit of the middleware still applies on top: a 21st
	// request within a minute from one address gets 429 from it.
	clk.advance(time.Hour)
	var last answer
	for i := range 21 {
		last = post(t, srv, "192.0.2.200", fmt.Sprintf("user%d", i), "x", "solved")
	}
	if last.status != 429 || !strings.Contains(last.body, "login-per-ip") || last.header.Get("X-RateLimit-Limit") != "20" {
		t.Fatalf("21st request: %d %s %v", last.status, last.body, last.header)
	}
}

// TestUnknownUserLooksTheSame: a wrong password for the demo account and
// any password for a name that does not exist get byte-identical answers
// at every step of the ladder.
func TestUnknownUserLooksTheSame(t *testing.T) {
	clk := &testClock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	store, backend := memBackends(t)
	srv := start(t, store, backend, clk)
	statuses := map[int]int{}
	for i := range 15 {
		known := post(t, srv, "203.0.113.1", "demo", "wrong", "junk")
		unknown := post(t, srv, "203.0.113.2", "no-such-user", "wrong", "junk")
		if known.status != unknown.status || known.body != unknown.body || known.header.Get("Retry-After") != unknown.header.Get("Retry-After") {
			t.Fatalf("attempt %d: known %d %s, unknown %d %s", i, known.status, known.body, unknown.status, unknown.body)
		}
		statuses[known.status]++
		if known.retry > 0 && known.retry < time.Minute {
			clk.advance(known.retry)
		}
	}
	// The sequence went up the whole ladder: wrong passwords, CAPTCHAs,
	// delays and the lock, identically for both.
	if statuses[401] == 0 || statuses[429] == 0 {
		t.Fatalf("statuses %v", statuses)
	}
}

// TestInvalidUsernameSaysWhy: a username that is sent but refused gets a
// 400 saying why (it used to say "a username is required", as for one
// not sent, hiding the reason); a missing or empty one is still asked for.
func TestInvalidUsernameSaysWhy(t *testing.T) {
	clk := &testClock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	store, backend := memBackends(t)
	srv := start(t, store, backend, clk)
	tests := []struct{ name, body, detail string }{
		{"missing", "password=x", "a username is required"},
		{"empty", "username=&password=x", "a username is required"},
		{"not UTF-8", "username=%FF%FE&password=x", "invalid username: not valid UTF-8"},
		{"too long", "username=" + strings.Repeat("a", loginguard.MaxAccountLen+1) + "&password=x", "invalid username: 1025 bytes, at most 1024"},
		{"invisible only", "username=%E2%80%8B%E2%80%8B&password=x", "invalid username: empty once invisible characters and surrounding white space are dropped"},
	}
	// A form over 4 KiB, a long password or a username of escapes,
	// says so; it said "malformed form".
	tests = append(tests,
		struct{ name, body, detail string }{"long password", "username=demo&password=" + strings.Repeat("a", 4100), "the form is over 4096 bytes"},
		struct{ name, body, detail string }{"escapes", "username=" + strings.Repeat("%FF", 2000) + "&password=x", "the form is over 4096 bytes"})
	for _, tt := range tests {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/login", strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-For", "203.0.113.9")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Detail string `json:"detail"`
		}
		err = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		want := http.StatusBadRequest
		if strings.HasPrefix(tt.detail, "the form is over") {
			want = http.StatusRequestEntityTooLarge
		}
		if err != nil || resp.StatusCode != want || p.Detail != tt.detail {
			t.Errorf("%s: %d %q (%v), want %d %q", tt.name, resp.StatusCode, p.Detail, err, want, tt.detail)
		}
	}
	// The refusals counted nothing: the address can still log in.
	if a := post(t, srv, "203.0.113.9", "demo", demoPassword, ""); a.status != http.StatusOK {
		t.Fatalf("after the refusals: %d %s", a.status, a.body)
	}
}

// commandCalls returns the calls of the given commands from INFO
// commandstats of a private test server.
func commandCalls(t *testing.T, c *redis.Client, names ...string) map[string]int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		for _, n := range names {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+n+":calls="); ok {
				v, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
				out[n] = v
			}
		}
	}
	return out
}

// TestUniformOnRedis: on Redis, one attempt with a wrong password for the
// demo account and one for an unknown name run the same number of scripts
// and create the same number of keys.
func TestUniformOnRedis(t *testing.T) {
	rs := redistest.Start(t)
	c := rs.Client(t)
	clk := &testClock{t: time.Now()}
	backend, err := loginguard.NewRedis(c, "loginserver-uniform")
	if err != nil {
		t.Fatal(err)
	}
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := start(t, st, backend, clk)
	ctx := context.Background()
	measure := func(user, ip string) (map[string]int, int64, answer) {
		before := commandCalls(t, c, "evalsha", "eval")
		keys0, _ := c.DBSize(ctx).Result()
		a := post(t, srv, ip, user, "wrong-password", "")
		after := commandCalls(t, c, "evalsha", "eval")
		keys1, _ := c.DBSize(ctx).Result()
		for k := range after {
			after[k] -= before[k]
		}
		return after, keys1 - keys0, a
	}
	measure("warm-up", "192.0.2.1") // loads the scripts
	kc, kk, ka := measure("demo", "203.0.113.1")
	uc, uk, ua := measure("nobody", "203.0.113.2")
	if fmt.Sprint(kc) != fmt.Sprint(uc) || kk != uk || ka.status != ua.status || ka.body != ua.body {
		t.Fatalf("known: calls %v keys +%d %d %s; unknown: calls %v keys +%d %d %s", kc, kk, ka.status, ka.body, uc, uk, ua.status, ua.body)
	}
	if kc["evalsha"] != 2 || kk != 3 {
		t.Fatalf("calls %v, keys +%d: want 2 scripts (check, failure) and 3 keys", kc, kk)
	}
}

// TestGuardDownFailsClosed: when the guard's Redis is gone, logins are
// refused with 503, never let through unguarded.
func TestGuardDownFailsClosed(t *testing.T) {
	rs := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	backend, err := loginguard.NewRedis(c, "loginserver-down")
	if err != nil {
		t.Fatal(err)
	}
	// The rate limiter stays up (in memory): the 503 comes from the guard.
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := start(t, store, backend, &testClock{t: time.Now()})
	if a := post(t, srv, "203.0.113.1", "demo", demoPassword, ""); a.status != 200 {
		t.Fatalf("before: %d %s", a.status, a.body)
	}
	rs.Kill()
	a := post(t, srv, "203.0.113.1", "demo", demoPassword, "")
	if a.status != 503 || a.header.Get("Retry-After") != "1" {
		t.Fatalf("redis down: %d %v %s", a.status, a.header, a.body)
	}
	var p map[string]any
	if err := json.Unmarshal([]byte(a.body), &p); err != nil || p["status"] != float64(503) || p["detail"] != "login is temporarily unavailable" {
		t.Fatalf("body %s: %v", a.body, err)
	}
}

// TestGuessCountsWhenClientHangsUp: a client that sends its guess and
// closes its side of the connection (net/http then cancels the request's
// context) while the password is being checked still has the guess
// counted as a failure. Before, the guard's Failure ran with the canceled
// context and failed: the guess was never counted, only left in progress
// until AttemptTimeout, and the client could still read the answer on its
// half-open connection, so guesses were free.
func TestGuessCountsWhenClientHangsUp(t *testing.T) {
	st, backend := memBackends(t)
	clk := &testClock{t: time.Unix(1_800_000_000, 0)}
	limiter, err := floodgate.New(st, floodgate.Options{Prefix: "loginserver-test"})
	if err != nil {
		t.Fatal(err)
	}
	policy, err := floodgate.NewSlidingWindow("login-per-ip", 20, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	guard, err := loginguard.New(backend, loginguard.Options{Secret: []byte("loginserver-test-secret-0123456789"), Clock: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	ips, err := clientip.New(clientip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// A password check long enough (about a second) for the server to
	// see the client's end of stream while it runs.
	h, err := newHandler(config{Limiter: limiter, PerIP: policy, Guard: guard, IPs: ips, Iterations: 1_000_000, Clock: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	form := url.Values{"username": {"demo"}, "password": {"wrong guess"}}.Encode()
	fmt.Fprintf(conn, "POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n%s", len(form), form)
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(conn)
	st2, err := guard.Status(context.Background(), "demo", netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	if st2.Account.Failures != 1 {
		t.Fatalf("the guess of a client that hung up counted %d failures (pending %d), want 1; it was answered %.40q", st2.Account.Failures, st2.Account.Pending, answer)
	}
}

// TestStrictAccountLockFlag runs the command as a user would, with and
// without -strict-account-lock: after bots from 30 addresses lock the
// account, the owner from a clean address gets in with a CAPTCHA by
// default, and is refused (429) in strict mode.
func TestStrictAccountLockFlag(t *testing.T) {
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprintf("strict=%v", strict), func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := l.Addr().String()
			l.Close()
			args := []string{"-addr", addr, "-trusted-proxies", "127.0.0.0/8", "-iterations", "1000", "-per-ip", "1000"}
			if strict {
				args = append(args, "-strict-account-lock")
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- run(ctx, args) }()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("run: %v", err)
				}
			})
			for i := 0; ; i++ { // wait for the listener, bounded
				c, err := net.Dial("tcp", addr)
				if err == nil {
					c.Close()
					break
				}
				if i == 500 {
					t.Fatalf("loginserver never listened on %s: %v", addr, err)
				}
				time.Sleep(10 * time.Millisecond)
			}
			for i := range 30 {
				bot := fmt.Sprintf("198.51.100.%d", i+1)
				for j := range 3 {
					postTo(t, addr, bot, fmt.Sprintf("bot-%d-%d", i, j), "junk")
				}
			}
			status, body := postTo(t, addr, "2001:db8:aa::10", demoPassword, demoCaptcha)
			if want := map[bool]int{false: 200, true: 429}[strict]; status != want {
				t.Fatalf("owner from a clean address with a CAPTCHA: %d %s, want %d", status, body, want)
			}
		})
	}
}

// postTo posts a login of "demo" to the server at addr, as from ip.
func postTo(t *testing.T, addr, ip, password, captcha string) (int, string) {
	t.Helper()
	form := url.Values{"username": {"demo"}, "password": {password}, "captcha": {captcha}}
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/login", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-For", ip)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// deadlines is a guard's Redis client that records, for each command,
// whether its context had a deadline.
type deadlines struct {
	loginguard.Client
	mu      sync.Mutex
	with    int
	without int
}

func (d *deadlines) Process(ctx context.Context, cmd redis.Cmder) error {
	_, ok := ctx.Deadline()
	d.mu.Lock()
	if ok {
		d.with++
	} else {
		d.without++
	}
	d.mu.Unlock()
	return d.Client.Process(ctx, cmd)
}

// TestGuardCallsHaveADeadline: every call the login handler makes to the
// guard carries a deadline of its own. They used to carry none
// (context.WithoutCancel of the request's), relying on this program's
// Redis clients' 200 ms timeouts: the handler copied next to a client
// with go-redis's defaults held a login 5 s per call, 15 s in all, on a
// stalled Redis.
func TestGuardCallsHaveADeadline(t *testing.T) {
	rs := redistest.Start(t)
	rec := &deadlines{Client: rs.Client(t)}
	backend, err := loginguard.NewRedis(rec, "loginserver-deadline")
	if err != nil {
		t.Fatal(err)
	}
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := start(t, st, backend, &testClock{t: time.Now()})
	for _, tc := range []struct {
		password string
		status   int
	}{{demoPassword, http.StatusOK}, {"wrong-password", http.StatusUnauthorized}} {
		if a := post(t, srv, "203.0.113.1", "demo", tc.password, ""); a.status != tc.status {
			t.Fatalf("login: %d %s, want %d", a.status, a.body, tc.status)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.without != 0 || rec.with < 4 {
		t.Fatalf("%d guard commands without a deadline, %d with; want all of at least 4 (Check, Success, Check, Failure) with", rec.without, rec.with)
	}
}
