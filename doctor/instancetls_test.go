package doctor_test

import (
	"crypto/tls"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// httpsClient is doctor's HTTP client with tc, as doctor --tls-ca-file,
// --tls-cert-file and --tls-key-file make it.
func httpsClient(tc *tls.Config) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	return &http.Client{Timeout: 5 * time.Second, Transport: tr}
}

// wantFix asserts that check group/name's fix mentions every one of
// mentions and none of refused.
func wantFix(t *testing.T, rep *doctor.Report, group, name string, mentions, refused []string) {
	t.Helper()
	c, ok := rep.Find(group, name)
	if !ok {
		t.Fatalf("no check %s/%s in the report:\n%s", group, name, text(rep))
	}
	for _, m := range mentions {
		if !strings.Contains(c.Fix, m) {
			t.Errorf("%s/%s: fix %q does not mention %q", group, name, c.Fix, m)
		}
	}
	for _, m := range refused {
		if strings.Contains(c.Fix, m) {
			t.Errorf("%s/%s: fix %q mentions %q", group, name, c.Fix, m)
		}
	}
}

// TestInstanceTLSFixes: instances served over TLS as serve serves them
// (net/http and fasthttp, client certificates required), read by a
// doctor without the authority that signed their certificate, without a
// client certificate, with one of another authority, and with the wrong
// scheme. Every one was told it "did not answer at all (connection
// refused or timed out)", or, by the ready check, to read the instance's
// log ("a degraded instance cannot reach Redis"), and plain HTTP to
// net/http's TLS listener to give the instance's main address; each fix
// now names what to give doctor.
func TestInstanceTLSFixes(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	publish(t, client, "it", testConfig)
	f := redistest.GenerateTLS(t)
	f.AuthClients = true
	other := redistest.GenerateTLS(t)
	netTLS := startInstance(t, client, "it", instanceOptions{doc: testConfig, discipline: true, tls: &f, engine: server.NetHTTP})
	fastTLS := startInstance(t, client, "it", instanceOptions{doc: testConfig, discipline: true, tls: &f, engine: server.FastHTTP})
	plain := startInstance(t, client, "it", instanceOptions{doc: testConfig, discipline: true})
	run := func(hc *http.Client, urls ...string) *doctor.Report {
		return runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "it",
			Instances: urls, RateWindow: -1, HTTPClient: hc})
	}
	ca := f.ClientConfig(t).RootCAs
	misleading := []string{"did not answer at all", "a degraded instance cannot reach Redis", "main address"}
	metricsChecks := [][2]string{
		{doctor.GroupClocks, "instances"}, {doctor.GroupInstances, "breakers"}, {doctor.GroupInstances, "fallback-and-denials"},
	}
	for _, tc := range []struct {
		name     string
		hc       *http.Client
		evidence string
		fix      []string
	}{
		{"unknown authority", nil, "x509: certificate signed by unknown authority",
			[]string{"signed by an authority doctor does not trust", "--tls-ca-file"}},
		{"no client certificate", httpsClient(&tls.Config{RootCAs: ca}), "remote error: tls: certificate required",
			[]string{"requires a client certificate", "--tls-client-ca-file", "--tls-cert-file, --tls-key-file"}},
		{"client certificate of another authority", httpsClient(&tls.Config{RootCAs: ca, Certificates: other.ClientConfig(t).Certificates}),
			"remote error: tls: bad certificate",
			[]string{"refused doctor's client certificate", "--tls-client-ca-file", "--tls-cert-file, --tls-key-file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := run(tc.hc, netTLS.url, fastTLS.url)
			want(t, rep, doctor.GroupInstances, "ready", doctor.Fail, "2 of 2 instances not read (TLS failed, or the URL's scheme is not the instance's), so their readiness is unknown",
				netTLS.url+": not read: ", tc.evidence)
			wantFix(t, rep, doctor.GroupInstances, "ready", append(tc.fix, netTLS.url+", "+fastTLS.url+": "), misleading)
			for _, c := range metricsChecks {
				want(t, rep, c[0], c[1], doctor.Warn, fastTLS.url+": nothing read: ")
				wantFix(t, rep, c[0], c[1], tc.fix, misleading)
			}
			wantFix(t, rep, doctor.GroupInstances, "config-version", tc.fix, misleading)
		})
	}

	// The wrong scheme: plain HTTP to both TLS listeners (net/http answers
	// 400 "Client sent an HTTP request to an HTTPS server", fasthttp
	// closes the connection), TLS to a plain one; beside an instance read
	// right.
	t.Run("wrong scheme", func(t *testing.T) {
		httpNet, httpFast := strings.Replace(netTLS.url, "https://", "http://", 1), strings.Replace(fastTLS.url, "https://", "http://", 1)
		httpsPlain := strings.Replace(plain.url, "http://", "https://", 1)
		rep := run(httpsClient(f.ClientConfig(t)), netTLS.url, httpNet, httpFast, httpsPlain)
		want(t, rep, doctor.GroupInstances, "ready", doctor.Fail, "3 of 4 instances not read (TLS failed",
			netTLS.url+`: ready, config version "7"`,
			httpNet+`: not read: GET /readyz answered HTTP 400 "Client sent an HTTP request to an HTTPS server."`,
			httpFast+": not read: ", httpsPlain+": not read: ")
		wantFix(t, rep, doctor.GroupInstances, "ready", []string{
			httpNet + ": the instance serves TLS (serve --tls-cert-file): give its URL as https://",
			httpFast + ": the instance closed the connection without an answer, as a TLS listener does to plain HTTP",
			httpsPlain + ": the instance does not serve TLS: give its URL as http://",
		}, misleading)
		if c, _ := rep.Find(doctor.GroupInstances, "ready"); strings.Contains(c.Summary, "as a Floodgate instance") {
			t.Errorf("ready: %q: the TLS listener is reported as another service", c.Summary)
		}
		for _, c := range metricsChecks {
			wantFix(t, rep, c[0], c[1], []string{"give its URL as https://", "give its URL as http://"}, misleading)
		}
	})
}
