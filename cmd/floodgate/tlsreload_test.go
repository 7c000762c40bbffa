package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestServeTLSCertificateRenewed: serve loads --tls-cert-file and
// --tls-key-file again when they change (polled every --reload-interval,
// or at once on SIGHUP), and new HTTPS and gRPC connections get the
// renewed certificate without a restart; a half-written renewal (the new
// certificate beside the old key) keeps the old pair served. Rotating a
// certificate took a restart.
func TestServeTLSCertificateRenewed(t *testing.T) {
	a, b := redistest.GenerateTLS(t), redistest.GenerateTLS(t)
	envoyDir := t.TempDir()
	writeFileAtomic(t, filepath.Join(envoyDir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 100}\n")
	leafDER := func(file string) []byte {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(data)
		return blk.Bytes
	}
	put := func(dir string, f redistest.TLSFiles, keyToo bool) {
		t.Helper()
		for _, c := range [][2]string{{f.Cert, "tls.crt"}, {f.Key, "tls.key"}} {
			if c[1] == "tls.key" && !keyToo {
				continue
			}
			data, err := os.ReadFile(c[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, c[1]), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	// served returns the certificates the HTTPS and the gRPC listeners
	// present to a new connection.
	served := func(svc *service) (httpsCert, grpcCert []byte) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} // compared by hand
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, strings.Replace(svc.url, "http://", "https://", 1)+"/healthz", nil)
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatalf("HTTPS: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		httpsCert = resp.TLS.PeerCertificates[0].Raw
		var mu sync.Mutex
		tc := &tls.Config{InsecureSkipVerify: true, VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			mu.Lock()
			grpcCert = raw[0]
			mu.Unlock()
			return nil
		}}
		conn, err := grpc.NewClient(svc.addr(t, grpcListening), grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, err = rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}},
		}})
		if err != nil {
			t.Fatalf("gRPC over TLS: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		return httpsCert, grpcCert
	}
	serving := func(svc *service, f redistest.TLSFiles) bool {
		h, g := served(svc)
		want := leafDER(f.Cert)
		return bytes.Equal(h, want) && bytes.Equal(g, want)
	}
	start := func(interval string) (*service, string) {
		dir := t.TempDir()
		put(dir, a, true)
		return startService(t, "--tls-cert-file", filepath.Join(dir, "tls.crt"), "--tls-key-file", filepath.Join(dir, "tls.key"),
			"--grpc-addr", "127.0.0.1:0", "--envoy-config", envoyDir, "--reload-interval", interval), dir
	}

	t.Run("polled", func(t *testing.T) {
		svc, dir := start("50ms")
		defer svc.stop(t)
		if !serving(svc, a) {
			t.Fatal("not serving the first certificate")
		}
		put(dir, b, false) // the certificate first, the key not yet
		time.Sleep(300 * time.Millisecond)
		if !serving(svc, a) {
			t.Fatal("a certificate without its key replaced the good pair")
		}
		put(dir, b, true)
		waitUntil(t, "the renewed certificate on HTTPS and gRPC", func() bool { return serving(svc, b) })
		if !strings.Contains(svc.Logs(), "TLS certificate reloaded") || !strings.Contains(svc.Logs(), "TLS certificate not reloaded") {
			t.Fatalf("the log lacks the refused and the applied reload:\n%s", svc.Logs())
		}
		leaf, err := x509.ParseCertificate(leafDER(b.Cert))
		if err != nil {
			t.Fatal(err)
		}
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
		defer tr.CloseIdleConnections()
		got := metricSumWith(t, &http.Client{Transport: tr}, strings.Replace(svc.url, "http://", "https://", 1)+"/metrics",
			"floodgate_tls_certificate_expiry_timestamp_seconds")
		if int64(got) != leaf.NotAfter.Unix() {
			t.Fatalf("floodgate_tls_certificate_expiry_timestamp_seconds %v, want the renewed certificate's %d", got, leaf.NotAfter.Unix())
		}
	})

	t.Run("SIGHUP", func(t *testing.T) {
		svc, dir := start("1h")
		defer svc.stop(t)
		put(dir, b, true)
		if err := svc.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the certificate read on SIGHUP", func() bool { return serving(svc, b) })
	})
}

// TestServeClientCAsRenewed: serve reads --tls-client-ca-file again when
// it changes, as it does the certificate: after the authority of the
// client certificates is replaced on disk, new HTTPS and gRPC connections
// with the retired authority's certificates are refused and the new
// one's admitted, without a restart. The file was read at start only.
func TestServeClientCAsRenewed(t *testing.T) {
	a, b := redistest.GenerateTLS(t), redistest.GenerateTLS(t)
	envoyDir := t.TempDir()
	writeFileAtomic(t, filepath.Join(envoyDir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 100}\n")
	caFile := filepath.Join(t.TempDir(), "clients-ca.pem")
	copyCA := func(from string) {
		t.Helper()
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		writeFileAtomic(t, caFile, string(data))
	}
	copyCA(a.CA)
	svc := startService(t, "--tls-cert-file", a.Cert, "--tls-key-file", a.Key, "--tls-client-ca-file", caFile,
		"--grpc-addr", "127.0.0.1:0", "--envoy-config", envoyDir, "--reload-interval", "50ms")
	defer svc.stop(t)
	clientA, clientB := a.ClientConfig(t), b.ClientConfig(t)
	clientB.RootCAs = clientA.RootCAs // the server's certificate is a's
	https := func(tc *tls.Config) bool {
		tr := &http.Transport{TLSClientConfig: tc}
		defer tr.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, strings.Replace(svc.url, "http://", "https://", 1)+"/healthz", nil)
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	grpcOK := func(tc *tls.Config) bool {
		conn, err := grpc.NewClient(svc.addr(t, grpcListening), grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}},
		}})
		return err == nil
	}
	if !https(clientA) || !grpcOK(clientA) {
		t.Fatal("a client of the authority on file refused")
	}
	if https(clientB) || grpcOK(clientB) {
		t.Fatal("a client of another authority admitted")
	}
	copyCA(b.CA)
	waitUntil(t, "the new client authority on HTTPS and gRPC", func() bool { return https(clientB) && grpcOK(clientB) })
	if https(clientA) || grpcOK(clientA) {
		t.Fatal("the retired authority's client still admitted")
	}
	if !strings.Contains(svc.Logs(), `"client_cas":1`) {
		t.Fatalf("the reload is not logged with the client authorities:\n%s", svc.Logs())
	}
	// The refusals are counted and logged with the certificate's issuer,
	// so the clients still on a retired authority can be found.
	if !strings.Contains(svc.Logs(), "TLS client certificate refused") {
		t.Fatalf("no refused client certificate in the log:\n%s", svc.Logs())
	}
	mtr := &http.Transport{TLSClientConfig: clientB}
	defer mtr.CloseIdleConnections()
	refused := metricSumWith(t, &http.Client{Transport: mtr}, strings.Replace(svc.url, "http://", "https://", 1)+"/metrics",
		"floodgate_tls_client_certificates_refused_total")
	if refused < 4 { // b's HTTPS and gRPC before the swap, a's after
		t.Fatalf("floodgate_tls_client_certificates_refused_total = %v, want at least 4", refused)
	}
}

// TestServeTLSFileErrorsNameTheFlag: serve refuses TLS files it cannot
// use naming the flag and the file concerned, not all three flags over
// crypto/tls's message ("--tls-cert-file/--tls-key-file/--tls-client-ca-file:
// tls: private key does not match public key", in a TLS walk).
func TestServeTLSFileErrorsNameTheFlag(t *testing.T) {
	a, b := redistest.GenerateTLS(t), redistest.GenerateTLS(t)
	dir := t.TempDir()
	certPEM, err := os.ReadFile(a.Cert)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	certDER, garbage, none := filepath.Join(dir, "tls.der"), filepath.Join(dir, "garbage.pem"), filepath.Join(dir, "none.pem")
	writeFileAtomic(t, certDER, string(block.Bytes))
	writeFileAtomic(t, garbage, "garbage\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert-file", a.Cert, "--tls-key-file", b.Key}, "--tls-cert-file " + a.Cert + " and --tls-key-file " + b.Key + ": the private key does not match"},
		{[]string{"--tls-cert-file", certDER, "--tls-key-file", a.Key}, "--tls-cert-file " + certDER + " holds no PEM certificate: it looks like DER"},
		{[]string{"--tls-cert-file", a.Cert, "--tls-key-file", garbage}, "--tls-key-file " + garbage + " holds no PEM private key"},
		{[]string{"--tls-cert-file", a.Cert, "--tls-key-file", a.Key, "--tls-client-ca-file", none}, "--tls-client-ca-file " + none + ": no such file"},
	} {
		code, _, errOut := cli(append([]string{"serve", "--addr", "127.0.0.1:0"}, tc.args...)...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("serve %v: exit %d, stderr %q; want %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestCheckPlainHTTPAtFastHTTPTLS: check given http:// for a fasthttp TLS
// listener, which closes a plain HTTP request unanswered, says to use
// https:// as loadtest and doctor do; it printed only `server: Post
// "http://...": EOF` (a TLS walk).
func TestCheckPlainHTTPAtFastHTTPTLS(t *testing.T) {
	f := redistest.GenerateTLS(t)
	svc := startService(t, "--http-server", "fasthttp", "--tls-cert-file", f.Cert, "--tls-key-file", f.Key)
	defer svc.stop(t)
	host := strings.TrimPrefix(svc.url, "http://")
	code, _, errOut := cli("check", "--addr", svc.url, "--policy", "api", "--id", "user=plain")
	if code != 1 || !strings.Contains(errOut, "as a TLS listener does to plain HTTP") || !strings.Contains(errOut, "use https://"+host) {
		t.Fatalf("check http:// at a fasthttp TLS listener: exit %d, stderr %q; want the hint to use https://%s", code, errOut, host)
	}
}
