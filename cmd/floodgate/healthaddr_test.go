package main

import (
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// healthListening is the log message of serve's --health-addr listener.
const healthListening = "floodgate health listening"

// healthGet sends a plain HTTP request (no TLS, no client certificate, as
// kubelet's httpGet probes) to url and returns its status and body.
func healthGet(t *testing.T, method, url string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestServeHealthAddrWithMutualTLS: with mutual TLS on every listener,
// --health-addr serves kubelet's probes over plain HTTP, without a client
// certificate: GET and HEAD /healthz and /readyz (?degraded=ok too) answer
// 200 there, and to the pod's IP address as Host with --allowed-host,
// while --addr refuses a client without a certificate; the API, /metrics,
// the admin endpoints and the profiles are 404 there. On SIGTERM its
// /readyz turns 503 draining during --shutdown-delay, as --addr's, and it
// stops with the service. Before, a deployment turning mutual TLS on had
// its probes refused (tlsv13 alert certificate required) and restarted.
func TestServeHealthAddrWithMutualTLS(t *testing.T) {
	f := redistest.GenerateTLS(t)
	for _, engine := range []string{"net/http", "fasthttp"} {
		svc := startService(t, "--http-server", engine, "--tls-cert-file", f.Cert, "--tls-key-file", f.Key, "--tls-client-ca-file", f.CA,
			"--health-addr", "127.0.0.1:0", "--shutdown-delay", "3s", "--allowed-host", "floodgate.internal",
			"--admin-token", e2eAdminToken)
		rec, _ := svc.Logged(healthListening)
		health := "http://" + svc.addr(t, healthListening)
		if !strings.Contains(svc.Logs(), `"tls":false`) || rec["serves"] == "" {
			t.Fatalf("%s: the health listener's line does not say it is plain HTTP:\n%s", engine, svc.Logs())
		}
		base := strings.Replace(svc.url, "http://", "https://", 1)

		// --addr: mutual TLS, as before.
		noCert := f.ClientConfig(t)
		noCert.Certificates = nil
		if resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: noCert}}).Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			t.Fatalf("%s: HTTPS on --addr without a client certificate: %d, want a refused handshake", engine, resp.StatusCode)
		}
		withCert := &http.Client{Transport: &http.Transport{TLSClientConfig: f.ClientConfig(t)}}
		resp, err := withCert.Get(base + "/readyz")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: HTTPS on --addr with a client certificate: %v", engine, err)
		}
		resp.Body.Close()

		// --health-addr: plain HTTP, no certificate.
		for _, x := range []struct {
			method, path string
			header       map[string]string
		}{
			{"GET", "/healthz", nil},
			{"HEAD", "/healthz", nil},
			{"GET", "/readyz", nil},
			{"HEAD", "/readyz", nil},
			{"GET", "/readyz?degraded=ok", nil},
			{"GET", "/readyz?degraded=ok", map[string]string{"Host": "10.244.1.17:8086"}}, // kubelet: the pod IP
			{"GET", "/healthz", map[string]string{"Host": "floodgate.internal:8086"}},
		} {
			code, body := healthGet(t, x.method, health+x.path, x.header)
			if code != 200 || (x.method == "GET" && !strings.Contains(body, `"status":"`)) {
				t.Fatalf("%s: %s %s on --health-addr (Host %q): %d %s, want 200", engine, x.method, x.path, x.header["Host"], code, body)
			}
		}
		if code, body := healthGet(t, "GET", health+"/readyz", map[string]string{"Host": "attacker.example:8086"}); code != http.StatusMisdirectedRequest {
			t.Fatalf("%s: /readyz on --health-addr to a Host --allowed-host refuses: %d %s, want 421", engine, code, body)
		}
		for _, x := range []struct{ method, path string }{
			{"GET", "/metrics"}, {"POST", "/v1/check"}, {"POST", "/v1/peek"}, {"POST", "/v1/quota/check"},
			{"POST", "/v1/concurrency/acquire"}, {"GET", "/admin/v1/config"}, {"GET", "/debug/pprof/"}, {"POST", "/healthz"}, {"GET", "/"},
		} {
			code, body := healthGet(t, x.method, health+x.path, map[string]string{"Authorization": "Bearer " + e2eAdminToken})
			if code != http.StatusNotFound || !strings.Contains(body, "--health-addr") {
				t.Fatalf("%s: %s %s on --health-addr: %d %s, want 404", engine, x.method, x.path, code, body)
			}
		}
		// TLS is not spoken there.
		if resp, err := withCert.Get(strings.Replace(health, "http://", "https://", 1) + "/healthz"); err == nil {
			resp.Body.Close()
			t.Fatalf("%s: HTTPS answered on --health-addr: %d", engine, resp.StatusCode)
		}

		// SIGTERM: readiness off on --health-addr during the delay, while
		// it still answers; then it stops with the service.
		if err := svc.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, engine+": /readyz on --health-addr 503 draining after SIGTERM", func() bool {
			code, body := healthGet(t, "GET", health+"/readyz?degraded=ok", nil)
			return code == http.StatusServiceUnavailable && strings.Contains(body, `"draining"`)
		})
		if code, body := healthGet(t, "GET", health+"/healthz", nil); code != 200 {
			t.Fatalf("%s: /healthz on --health-addr during the drain: %d %s, want 200", engine, code, body)
		}
		select {
		case <-svc.Done():
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: serve still running 30 s after SIGTERM\n%s", engine, svc.Logs())
		}
		if err := svc.Err(); err != nil || !strings.Contains(svc.Logs(), "floodgate stopped") {
			t.Fatalf("%s: serve ended with %v after SIGTERM\n%s", engine, err, svc.Logs())
		}
		if resp, err := http.Get(health + "/healthz"); err == nil {
			resp.Body.Close()
			t.Fatalf("%s: --health-addr still answers after serve exited", engine)
		}
	}
}
