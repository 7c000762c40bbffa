package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestServeFastHTTP runs the binary with --http-server fasthttp: decisions
// (allowed, enforced denials with Retry-After), the endpoints served
// through the net/http handler, HTTPS with client certificates (HTTP/1.1,
// as net/http on that listener), and a graceful shutdown.
func TestServeFastHTTP(t *testing.T) {
	f := redistest.GenerateTLS(t)
	for _, engine := range []string{"net/http", "fasthttp"} {
		svc := startService(t, "--http-server", engine, "--tls-cert-file", f.Cert, "--tls-key-file", f.Key, "--tls-client-ca-file", f.CA)
		if !strings.Contains(svc.Logs(), `"http_server":"`+engine+`"`) {
			t.Fatalf("%s: not in the log:\n%s", engine, svc.Logs())
		}
		base := strings.Replace(svc.url, "http://", "https://", 1)
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: f.ClientConfig(t), ForceAttemptHTTP2: true}}
		var statuses []int
		for range 102 {
			resp, err := c.Post(base+"/v1/check?enforce=1", "application/json", strings.NewReader(`{"policy":"api","identity":{"user":"7"}}`))
			if err != nil {
				t.Fatalf("%s: %v", engine, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.Proto != "HTTP/1.1" || resp.TLS == nil {
				t.Fatalf("%s: %s, TLS %v; want HTTP/1.1 over TLS", engine, resp.Proto, resp.TLS != nil)
			}
			if resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
				t.Fatalf("%s: 429 without Retry-After", engine)
			}
			statuses = append(statuses, resp.StatusCode)
		}
		// The built-in example's api policy allows 100 an hour per user
		// on the free tier.
		if statuses[99] != 200 || statuses[100] != 429 || statuses[101] != 429 {
			t.Fatalf("%s: statuses %v, want 100 × 200 then 429", engine, statuses)
		}
		for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200, "/nope": 404} {
			resp, err := c.Get(base + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want || resp.Header.Get("Server") != "" {
				t.Fatalf("%s: GET %s: %d, Server %q; want %d and no Server header", engine, path, resp.StatusCode, resp.Header.Get("Server"), want)
			}
		}
		noCert := f.ClientConfig(t)
		noCert.Certificates = nil
		if resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: noCert}}).Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			t.Fatalf("%s: HTTPS without a client certificate: %d, want a refused handshake", engine, resp.StatusCode)
		}
		svc.stop(t)
	}
}

// TestServeRefusesUnknownHTTPServer: a bad --http-server value is refused
// with an error naming the flag and the values it takes.
func TestServeRefusesUnknownHTTPServer(t *testing.T) {
	code, _, errOut := cli("serve", "--http-server", "nginx", "--addr", "127.0.0.1:0")
	if code != 1 || !strings.Contains(errOut, `--http-server "nginx": want net/http or fasthttp`) {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

// TestServeTrustedOrigin: serve refuses, on both HTTP servers, a decision a
// browser sends from a page of another origin (403, nothing counted), and
// serves one from a --trusted-origin page, one from curl, and one of the
// same origin.
func TestServeTrustedOrigin(t *testing.T) {
	for _, engine := range []string{"net/http", "fasthttp"} {
		svc := startService(t, "--http-server", engine, "--trusted-origin", "https://app.example.com", "--trusted-origin", "http://localhost:3000")
		checkFrom := func(header map[string]string) int {
			t.Helper()
			req, err := http.NewRequest("POST", svc.url+"/v1/check", strings.NewReader(`{"policy":"api","identity":{"user":"7"}}`))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", engine, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode
		}
		for _, c := range []struct {
			header map[string]string
			want   int
		}{
			{map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example", "Content-Type": "text/plain"}, 403},
			{map[string]string{"Origin": "http://localhost:3001"}, 403},
			// Its own origin (floodgate serves no page): what a page of a
			// DNS name rebound to 127.0.0.1 sends, Host included.
			{map[string]string{"Origin": svc.url, "Sec-Fetch-Site": "same-origin"}, 403},
			{map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://app.example.com"}, 200},
			{map[string]string{"Origin": "http://localhost:3000"}, 200},
			{map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 200},
			{map[string]string{"Sec-Fetch-Site": "same-origin"}, 200},
		} {
			if got := checkFrom(c.header); got != c.want {
				t.Errorf("%s: check with %v: %d, want %d", engine, c.header, got, c.want)
			}
		}
		// The built-in api policy allows 100 an hour: 4 were served.
		resp, err := http.Post(svc.url+"/v1/peek", "application/json", strings.NewReader(`{"policy":"api","identity":{"user":"7"}}`))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(raw), `"remaining":96`) {
			t.Errorf("%s: peek after 4 served and 3 refused checks: %s, want remaining 96", engine, raw)
		}
		svc.stop(t)
	}
}

// TestServeAllowedHost: with --allowed-host, serve answers 421 on both
// HTTP servers and on --admin-addr to a request addressed to any other
// name (a page's, rebound to 127.0.0.1), and serves the listed names, IP
// addresses and localhost.
func TestServeAllowedHost(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(e2eAdminToken), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, engine := range []string{"net/http", "fasthttp"} {
		svc := startService(t, "--http-server", engine, "--allowed-host", "floodgate.internal", "--allowed-host", "*.floodgate.example",
			"--admin-token-file", tokenFile, "--admin-addr", "127.0.0.1:0")
		adminURL := "http://" + svc.addr(t, "floodgate admin listening")
		do := func(method, url, host, body string) (int, string) {
			t.Helper()
			req, err := http.NewRequest(method, url, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if host != "" {
				req.Host = host
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", engine, err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, string(raw)
		}
		const check = `{"policy":"api","identity":{"user":"7"}}`
		for _, c := range []struct {
			method, url, host string
			want              int
		}{
			{"POST", svc.url + "/v1/check", "attacker.example:30020", 421},
			{"GET", svc.url + "/metrics", "attacker.example:30020", 421},
			{"GET", adminURL + "/metrics", "attacker.example:9090", 421},
			{"POST", svc.url + "/v1/check", "", 200},
			{"POST", svc.url + "/v1/check", "floodgate.internal:8080", 200},
			{"POST", svc.url + "/v1/check", "eu.floodgate.example", 200},
			{"POST", svc.url + "/v1/check", "localhost:8080", 200},
			{"POST", svc.url + "/v1/check", "[::1]:8080", 200},
			{"GET", adminURL + "/metrics", "localhost:9090", 200},
		} {
			code, body := do(c.method, c.url, c.host, check)
			if code != c.want || (code == 421 && !strings.Contains(body, `"type":"urn:floodgate:problem:host-not-allowed"`)) {
				t.Errorf("%s: %s %s to Host %q: %d %s, want %d", engine, c.method, c.url, c.host, code, body, c.want)
			}
		}
		// 5 served of the api policy's 100 an hour, the refused one not
		// counted.
		if _, body := do("POST", svc.url+"/v1/peek", "", check); !strings.Contains(body, `"remaining":95`) {
			t.Errorf("%s: peek after 5 served and 1 refused checks: %s, want remaining 95", engine, body)
		}
		svc.stop(t)
	}
}

// TestServeMalformedRequestNotLogged: a request fasthttp cannot parse is
// logged without its bytes (it quoted them, an Authorization header's
// admin token included, once per request) and at most once per interval.
func TestServeMalformedRequestNotLogged(t *testing.T) {
	svc := startService(t, "--http-server", "fasthttp", "--admin-token", e2eAdminToken)
	defer svc.stop(t)
	addr := strings.TrimPrefix(svc.url, "http://")
	for range 5 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET /admin/v1/config HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", e2eAdminToken)
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.ReadAll(conn)
		conn.Close()
	}
	waitUntil(t, "the malformed request logged", func() bool { return strings.Contains(svc.Logs(), "HTTP request not served") })
	logs := svc.Logs()
	if strings.Contains(logs, e2eAdminToken) {
		t.Fatalf("the admin token is in the log:\n%s", logs)
	}
	if n := strings.Count(logs, "HTTP request not served"); n != 1 {
		t.Fatalf("%d lines for 5 malformed requests, want 1 (rate-limited):\n%s", n, logs)
	}
}

// TestServeRefusesContentEncoding: a body sent with a Content-Encoding
// (gzip, br) is refused with 415 and counts nothing, on both HTTP servers
// and on the natively served and the other routes: it was read as JSON as
// it came (gzip failing as malformed JSON, plain JSON labelled gzip
// decided).
func TestServeRefusesContentEncoding(t *testing.T) {
	for _, engine := range []string{"net/http", "fasthttp"} {
		svc := startService(t, "--http-server", engine)
		post := func(path, body, encoding string) (int, string) {
			h := http.Header{}
			for _, e := range strings.Split(encoding, "|") { // one header line each
				if e != "" {
					h.Add("Content-Encoding", e)
				}
			}
			return postWith(t, svc.url+path, body, h)
		}
		check := `{"policy":"api","identity":{"user":"ce"}}`
		for _, tc := range []struct{ path, body, enc string }{
			{"/v1/check", check, "gzip"},
			{"/v1/check/batch", `{"requests":[` + check + `]}`, "br"},
			{"/v1/quota/check", `{"quota":"llm-tokens","identity":{"api_key":"ce"},"amount":1}`, "GZIP"},
			// Two lines are one list, "identity, gzip": the second line
			// was not read.
			{"/v1/check", check, "identity|gzip"},
			{"/v1/check", check, "identity, br"},
		} {
			if code, body := post(tc.path, tc.body, tc.enc); code != http.StatusUnsupportedMediaType || !strings.Contains(body, "unsupported-content-encoding") {
				t.Fatalf("%s: %s with Content-Encoding %s: %d %s; want 415 unsupported-content-encoding", engine, tc.path, tc.enc, code, body)
			}
		}
		if code, body := post("/v1/peek", check, "identity"); code != 200 || !strings.Contains(body, `"remaining":100`) {
			t.Fatalf("%s: peek after the refused checks: %d %s; want 100 remaining (nothing counted)", engine, code, body)
		}
		svc.stop(t)
	}
}
