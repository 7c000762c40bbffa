package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TLSFiles are the PEM files of a test certificate authority, a server
// certificate it signed (for 127.0.0.1, localhost and ServerName) and a
// client certificate it signed, made by GenerateTLS.
type TLSFiles struct {
	CA                    string
	Cert, Key             string // the server's
	ClientCert, ClientKey string
	// ServerName is a DNS name the server certificate carries besides
	// localhost: "redis.floodgate.test".
	ServerName string
	// AuthClients makes servers require a client certificate
	// (tls-auth-clients yes).
	AuthClients bool
}

// GenerateTLS makes a fresh CA and the server and client certificates it
// signs (ECDSA P-256, valid for an hour) in a directory under t.TempDir().
func GenerateTLS(t testing.TB) TLSFiles {
	t.Helper()
	return generateTLS(t, TLSExpired{})
}

// TLSExpired says which certificates GenerateTLSExpired makes expired.
type TLSExpired struct {
	Server, Client bool
}

// GenerateTLSExpired is GenerateTLS with the certificates e names expired
// an hour ago (valid from two hours ago), the CA and the others valid.
// Redis loads an expired certificate and serves it.
func GenerateTLSExpired(t testing.TB, e TLSExpired) TLSFiles {
	t.Helper()
	return generateTLS(t, e)
}

func generateTLS(t testing.TB, e TLSExpired) TLSFiles {
	t.Helper()
	dir := t.TempDir()
	f := TLSFiles{
		CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
		ServerName: "redis.floodgate.test",
	}
	now := time.Now()
	caKey := newKey(t)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "floodgate test CA"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("redistest: CA certificate: %v", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, f.CA, "CERTIFICATE", caDER)
	leaf := func(serial int64, cn string, usage []x509.ExtKeyUsage, certPath, keyPath string, expired bool) {
		key := newKey(t)
		from, until := now.Add(-time.Minute), now.Add(time.Hour)
		if expired {
			from, until = now.Add(-2*time.Hour), now.Add(-time.Hour)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: from, NotAfter: until,
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
			DNSNames: []string{"localhost", f.ServerName}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatalf("redistest: certificate %s: %v", cn, err)
		}
		writePEM(t, certPath, "CERTIFICATE", der)
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, keyPath, "EC PRIVATE KEY", kder)
	}
	// The server certificate also authenticates a replica or sentinel to
	// the server it connects to.
	leaf(2, "redis server", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, f.Cert, f.Key, e.Server)
	leaf(3, "floodgate client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, f.ClientCert, f.ClientKey, e.Client)
	return f
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// ClientConfig returns a tls.Config trusting f's CA and presenting its
// client certificate.
func (f TLSFiles) ClientConfig(t testing.TB) *tls.Config {
	t.Helper()
	pemCA, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemCA)
	cert, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

// tlsArgs are the redis-server options of a server with TLS: its TLS port
// and files, and for a cluster node its bus port.
func (s *Server) tlsArgs() []string {
	if s.tls == nil {
		return nil
	}
	auth := "no"
	if s.tls.AuthClients {
		auth = "yes"
	}
	var bus []string
	if s.bus { // keep the bus where freePort reserved it, whatever port is announced
		bus = []string{"--cluster-port", strconv.Itoa(s.Port + clusterBusOffset)}
	}
	return append(bus,
		"--tls-port", strconv.Itoa(s.TLSPort),
		"--tls-cert-file", s.tls.Cert, "--tls-key-file", s.tls.Key,
		"--tls-ca-cert-file", s.tls.CA, "--tls-auth-clients", auth,
	)
}

// StartTLS is Start for a server that also serves TLS, with f's
// certificates, on TLSAddr. Its plain port stays open for redistest's own
// readiness checks and commands.
func StartTLS(t testing.TB, f TLSFiles, extraArgs ...string) *Server {
	t.Helper()
	s := newServer(t, extraArgs)
	s.tls = &f
	s.boot(t)
	return s
}
