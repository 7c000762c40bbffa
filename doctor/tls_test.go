package doctor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestTLSMismatchHint: plaintext to a TLS-only port failed with a bare
// "EOF", TLS to a plaintext port with "context deadline exceeded" after
// 5s; neither mentioned TLS. Both now say what to try (in the failing
// check Redis/reachable).
func TestTLSMismatchHint(t *testing.T) {
	f := redistest.GenerateTLS(t)
	srv := redistest.StartTLS(t, f)
	for _, tc := range []struct {
		name  string
		redis config.Redis
		hint  string
	}{
		{"plaintext to TLS", config.Redis{URL: "redis://" + srv.TLSAddr}, "is it TLS-only? use rediss:// or --redis-tls"},
		{"TLS to plaintext", config.Redis{URL: "redis://" + srv.Addr, TLS: &config.RedisTLS{CAFile: f.CA}}, "the server may not speak TLS"},
		// The server speaks TLS; its certificate is not trusted: the fix
		// is the CA file, not plaintext (a re-walk got the plaintext hint).
		{"untrusted certificate", config.Redis{URL: "rediss://" + srv.TLSAddr}, "its certificate was refused: give doctor the authority that signed it (--redis-ca-file)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := unreachable(t, doctor.Options{Redis: tc.redis, Prefix: "tm"})
			if !strings.Contains(got, tc.hint) {
				t.Fatalf("Redis/reachable says %q, want the hint %q", got, tc.hint)
			}
		})
	}
}

// TestTLSClientCertificateHint: a Redis that requires a client
// certificate (tls-auth-clients yes) refused doctor's handshake with the
// alert "certificate required" (none given) or "unknown certificate
// authority" (one of another authority), and doctor said the server may
// not speak TLS and to use redis:// for a plaintext server. The hint now
// names the client certificate flags; the plaintext hint stays for a TLS
// client to a plaintext server.
func TestTLSClientCertificateHint(t *testing.T) {
	f := redistest.GenerateTLS(t)
	f.AuthClients = true
	other := redistest.GenerateTLS(t)
	srv := redistest.StartTLS(t, f)
	plaintext := "the server may not speak TLS"
	for _, tc := range []struct {
		name   string
		redis  config.Redis
		hints  []string
		refuse string
	}{
		{"no client certificate", config.Redis{URL: "rediss://" + srv.TLSAddr, TLS: &config.RedisTLS{CAFile: f.CA}},
			[]string{"remote error: tls: certificate required", "requires a client certificate (tls-auth-clients), which doctor did not present",
				"(--redis-cert-file, --redis-key-file) signed by an authority in the server's tls-ca-cert-file"}, plaintext},
		{"client certificate of another authority", config.Redis{URL: "rediss://" + srv.TLSAddr,
			TLS: &config.RedisTLS{CAFile: f.CA, CertFile: other.ClientCert, KeyFile: other.ClientKey}},
			[]string{"remote error: tls: unknown certificate authority", "refused doctor's client certificate",
				"(--redis-cert-file, --redis-key-file) signed by an authority in the server's tls-ca-cert-file"}, plaintext},
		// Still right: the plaintext port never answers the handshake.
		{"TLS to plaintext", config.Redis{URL: "rediss://" + srv.Addr, TLS: &config.RedisTLS{CAFile: f.CA}},
			[]string{plaintext}, "client certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := unreachable(t, doctor.Options{Redis: tc.redis, Prefix: "tc"})
			for _, h := range tc.hints {
				if !strings.Contains(got, h) {
					t.Errorf("Redis/reachable says %q, want %q", got, h)
				}
			}
			if strings.Contains(got, tc.refuse) {
				t.Errorf("Redis/reachable says %q: %q is the wrong hint", got, tc.refuse)
			}
		})
	}
	// With the right certificate, doctor reads: the server is the one
	// the hints are about.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := doctor.Run(ctx, doctor.Options{Redis: config.Redis{URL: "rediss://" + srv.TLSAddr,
		TLS: &config.RedisTLS{CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey}}, Prefix: "tc", RateWindow: -1, LatencySamples: 2}); err != nil {
		t.Fatalf("doctor.Run with the client certificate: %v", err)
	}
}

// TestTLSExpiredCertificateHint: a Redis serving an expired certificate
// (x509: certificate has expired or is not yet valid) got the fix to give
// doctor --redis-ca-file and --redis-server-name, which cannot help: the
// fix is now to renew the server's certificate (or check the clock). A
// Redis that refuses doctor's expired client certificate (the alert
// "expired certificate") gets the same for doctor's certificate.
func TestTLSExpiredCertificateHint(t *testing.T) {
	server := redistest.GenerateTLSExpired(t, redistest.TLSExpired{Server: true})
	srv := redistest.StartTLS(t, server)
	client := redistest.GenerateTLSExpired(t, redistest.TLSExpired{Client: true})
	client.AuthClients = true
	mtls := redistest.StartTLS(t, client)
	for _, tc := range []struct {
		name  string
		redis config.Redis
		hints []string
	}{
		{"expired server certificate", config.Redis{URL: "rediss://" + srv.TLSAddr, TLS: &config.RedisTLS{CAFile: server.CA}},
			[]string{"certificate has expired", "renew the server's certificate", "openssl x509 -noout -dates"}},
		{"expired client certificate", config.Redis{URL: "rediss://" + mtls.TLSAddr,
			TLS: &config.RedisTLS{CAFile: client.CA, CertFile: client.ClientCert, KeyFile: client.ClientKey}},
			[]string{"expired certificate", "refused doctor's client certificate as expired", "renew it (--redis-cert-file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := unreachable(t, doctor.Options{Redis: tc.redis, Prefix: "te"})
			for _, h := range tc.hints {
				if !strings.Contains(got, h) {
					t.Errorf("Redis/reachable says %q, want %q", got, h)
				}
			}
			for _, wrong := range []string{"--redis-server-name", "--redis-ca-file", "signed by an authority"} {
				if strings.Contains(got, wrong) {
					t.Errorf("Redis/reachable says %q: %q cannot fix a certificate out of its dates", got, wrong)
				}
			}
		})
	}
}
