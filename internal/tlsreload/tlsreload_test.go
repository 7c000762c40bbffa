package tlsreload_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/tlsreload"
)

// served dials a TLS server on ln and returns the certificate it
// presented.
func served(t *testing.T, addr string) []byte {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) // the test compares the bytes itself
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Raw
}

func der(t *testing.T, file string) []byte {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("%s: no PEM block", file)
	}
	return b.Bytes
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestReloadServesTheRenewedCertificate: a TLS listener built on a Cert
// serves the pair on disk when it loaded; once the files are replaced,
// Reload makes new connections get the new pair; a half-renewed pair
// (new certificate, old key) is refused and the last good one kept until
// the key arrives too.
func TestReloadServesTheRenewedCertificate(t *testing.T) {
	a, b := redistest.GenerateTLS(t), redistest.GenerateTLS(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	copyFile(t, a.Cert, certFile)
	copyFile(t, a.Key, keyFile)
	c, err := tlsreload.Load(tlsreload.Files{Cert: certFile, Key: keyFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := listen(t, c.ServerConfig())
	if !bytes.Equal(served(t, addr), der(t, a.Cert)) {
		t.Fatal("not serving the first certificate")
	}
	if changed, err := c.Reload(); changed || err != nil {
		t.Fatalf("Reload with nothing changed = %v, %v", changed, err)
	}

	// The certificate is renewed first; its key is not written yet.
	copyFile(t, b.Cert, certFile)
	if changed, err := c.Reload(); changed || err == nil {
		t.Fatalf("Reload of a certificate without its key = %v, %v; want an error", changed, err)
	}
	if !bytes.Equal(served(t, addr), der(t, a.Cert)) {
		t.Fatal("a half-renewed pair replaced the good one")
	}
	copyFile(t, b.Key, keyFile)
	if changed, err := c.Reload(); !changed || err != nil {
		t.Fatalf("Reload of the renewed pair = %v, %v", changed, err)
	}
	if !bytes.Equal(served(t, addr), der(t, b.Cert)) {
		t.Fatal("not serving the renewed certificate")
	}
	leaf, err := x509.ParseCertificate(der(t, b.Cert))
	if err != nil {
		t.Fatal(err)
	}
	if !c.NotAfter().Equal(leaf.NotAfter) {
		t.Fatalf("NotAfter %v, want %v", c.NotAfter(), leaf.NotAfter)
	}

	// Watch does the same by itself.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Watch(ctx, 10*time.Millisecond); close(done) }()
	defer func() { cancel(); <-done }()
	copyFile(t, a.Cert, certFile)
	copyFile(t, a.Key, keyFile)
	deadline := time.Now().Add(10 * time.Second)
	for !bytes.Equal(served(t, addr), der(t, a.Cert)) {
		if time.Now().After(deadline) {
			t.Fatal("Watch never served the certificate put back")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLoadRefuses(t *testing.T) {
	a, b := redistest.GenerateTLS(t), redistest.GenerateTLS(t)
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caPEM, err := os.ReadFile(a.CA)
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]tlsreload.Files{
		"missing certificate":        {Cert: filepath.Join(dir, "none.pem"), Key: a.Key},
		"missing key":                {Cert: a.Cert, Key: filepath.Join(dir, "none.pem")},
		"key of another pair":        {Cert: a.Cert, Key: b.Key},
		"key as certificate":         {Cert: a.Key, Key: a.Key},
		"missing client CAs":         {Cert: a.Cert, Key: a.Key, ClientCAs: filepath.Join(dir, "none.pem")},
		"client CAs empty":           {Cert: a.Cert, Key: a.Key, ClientCAs: write("empty.pem", "\n")},
		"client CAs a key only":      {Cert: a.Cert, Key: a.Key, ClientCAs: a.Key},
		"client CAs not PEM":         {Cert: a.Cert, Key: a.Key, ClientCAs: write("text.pem", "not a certificate")},
		"client CAs cut short":       {Cert: a.Cert, Key: a.Key, ClientCAs: write("cut.pem", string(caPEM)+string(caPEM[:len(caPEM)/2]))},
		"client CA that won't parse": {Cert: a.Cert, Key: a.Key, ClientCAs: write("bad.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")},
	} {
		if _, err := tlsreload.Load(f, nil); err == nil {
			t.Errorf("%s: Load succeeded", name)
		}
	}
}

// listen serves TLS handshakes with tc on a loopback port until the test
// ends and returns its address.
func listen(t *testing.T, tc *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", tc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				// The client learns of a refused certificate when it
				// reads (TLS 1.3), so the server writes a byte.
				if conn.(*tls.Conn).Handshake() == nil {
					_, _ = conn.Write([]byte{1})
				}
				conn.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

// admitted reports whether a client with tc completes a handshake with
// addr and reads the byte the server writes after it.
func admitted(addr string, tc *tls.Config) bool {
	conn, err := tls.Dial("tcp", addr, tc)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	return err == nil
}

// TestClientCAsReloaded: with Files.ClientCAs, a client must present a
// certificate of those authorities; when the file changes, the next
// connections are checked against the new authorities (an authority
// retired refuses its clients, one added admits them), and a file that
// does not parse keeps the last good authorities.
func TestClientCAsReloaded(t *testing.T) {
	a, b := redistest.GenerateTLS(t), redistest.GenerateTLS(t)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	copyFile(t, a.CA, caFile)
	c, err := tlsreload.Load(tlsreload.Files{Cert: a.Cert, Key: a.Key, ClientCAs: caFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := listen(t, c.ServerConfig())
	clientA, clientB := a.ClientConfig(t), b.ClientConfig(t)
	clientB.RootCAs = clientA.RootCAs // both trust the server's CA, a's
	noCert := a.ClientConfig(t)
	noCert.Certificates = nil
	if !admitted(addr, clientA) {
		t.Fatal("a client of the authority on file refused")
	}
	if admitted(addr, clientB) || admitted(addr, noCert) {
		t.Fatal("a client of another authority, or without a certificate, admitted")
	}

	copyFile(t, b.CA, caFile) // a retired, b in its place
	if changed, err := c.Reload(); !changed || err != nil {
		t.Fatalf("Reload of new client CAs = %v, %v", changed, err)
	}
	if admitted(addr, clientA) || !admitted(addr, clientB) {
		t.Fatal("after the swap: the retired authority's client admitted, or the new one's refused")
	}

	if err := os.WriteFile(caFile, []byte("-----BEGIN CERTIFICATE-----\nAAAA"), 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := c.Reload(); changed || err == nil {
		t.Fatalf("Reload of a broken CA file = %v, %v; want an error", changed, err)
	}
	if !admitted(addr, clientB) || admitted(addr, clientA) {
		t.Fatal("a broken CA file changed who is admitted")
	}

	// Both authorities in one bundle, as while clients move over.
	pa, _ := os.ReadFile(a.CA)
	pb, _ := os.ReadFile(b.CA)
	if err := os.WriteFile(caFile, append(pa, pb...), 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := c.Reload(); !changed || err != nil {
		t.Fatalf("Reload of a two-authority bundle = %v, %v", changed, err)
	}
	if !admitted(addr, clientA) || !admitted(addr, clientB) {
		t.Fatal("a bundle of both authorities does not admit both clients")
	}
}

// TestClientCertificateForServersRefused: a certificate of the right
// authority that is not for client authentication is refused, as
// tls.RequireAndVerifyClientCert refuses it; one that is, is admitted.
func TestClientCertificateForServersRefused(t *testing.T) {
	a := redistest.GenerateTLS(t)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	leaf := func(serial int64, usage x509.ExtKeyUsage) tls.Certificate {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaf"},
			NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	c, err := tlsreload.Load(tlsreload.Files{Cert: a.Cert, Key: a.Key, ClientCAs: caFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := listen(t, c.ServerConfig())
	tc := a.ClientConfig(t)
	tc.Certificates = []tls.Certificate{leaf(2, x509.ExtKeyUsageServerAuth)}
	if admitted(addr, tc) {
		t.Fatal("a certificate for server authentication only admitted as a client's")
	}
	tc.Certificates = []tls.Certificate{leaf(3, x509.ExtKeyUsageClientAuth)}
	if !admitted(addr, tc) {
		t.Fatal("a client certificate of the authority refused")
	}
}

// writeSelfSigned writes a self-signed server certificate valid from
// notBefore to notAfter, and its key, as PEM files in dir.
func writeSelfSigned(t *testing.T, dir string, notBefore, notAfter time.Time) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "expired"},
		NotBefore: notBefore, NotAfter: notAfter, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "self.crt"), filepath.Join(dir, "self.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestRenewalNotHeldByBrokenCAs: the pair and the client authorities
// reload apart: a CA file that does not parse keeps the last good
// authorities but does not keep a renewed certificate from being served
// (one unit, it did, until the CA file was fixed); an expired
// certificate put in place of a valid one is refused.
func TestRenewalNotHeldByBrokenCAs(t *testing.T) {
	a, b := redistest.GenerateTLS(t), redistest.GenerateTLS(t)
	dir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.pem")
	copyFile(t, a.Cert, certFile)
	copyFile(t, a.Key, keyFile)
	copyFile(t, a.CA, caFile)
	c, err := tlsreload.Load(tlsreload.Files{Cert: certFile, Key: keyFile, ClientCAs: caFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := listen(t, c.ServerConfig())
	clientA := a.ClientConfig(t)
	clientA.InsecureSkipVerify = true // the served certificate changes; compared by hand
	servedTo := func() []byte {
		conn, err := tls.Dial("tcp", addr, clientA)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Raw
	}

	if err := os.WriteFile(caFile, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	copyFile(t, b.Cert, certFile)
	copyFile(t, b.Key, keyFile)
	changed, err := c.Reload()
	if !changed || err == nil {
		t.Fatalf("Reload of a renewed pair beside a broken CA file = %v, %v; want the pair applied and the CA error", changed, err)
	}
	if !bytes.Equal(servedTo(), der(t, b.Cert)) {
		t.Fatal("a broken CA file held up the renewed certificate")
	}
	if !admitted(addr, clientA) {
		t.Fatal("the broken CA file replaced the last good authorities")
	}

	exp, expKey := writeSelfSigned(t, t.TempDir(), time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour))
	copyFile(t, exp, certFile)
	copyFile(t, expKey, keyFile)
	if changed, err := c.Reload(); changed || err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("Reload of an expired certificate = %v, %v; want it refused as expired", changed, err)
	}
	if !bytes.Equal(servedTo(), der(t, b.Cert)) {
		t.Fatal("an expired certificate replaced a valid one")
	}
}

// TestRefusedCounted: each client certificate refused is counted.
func TestRefusedCounted(t *testing.T) {
	a, b := redistest.GenerateTLS(t), redistest.GenerateTLS(t)
	c, err := tlsreload.Load(tlsreload.Files{Cert: a.Cert, Key: a.Key, ClientCAs: a.CA}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := listen(t, c.ServerConfig())
	clientB := b.ClientConfig(t)
	clientB.RootCAs = a.ClientConfig(t).RootCAs
	for range 3 {
		if admitted(addr, clientB) {
			t.Fatal("a client of another authority admitted")
		}
	}
	if !admitted(addr, a.ClientConfig(t)) {
		t.Fatal("a client of the authority refused")
	}
	if got := c.Refused(); got != 3 {
		t.Fatalf("Refused() = %d, want 3", got)
	}
}

// TestServerConfigOffersAEADOnly: under TLS 1.2 the server takes only
// ECDHE with an AEAD cipher; a client offering nothing but the CBC-SHA1
// suites (which Go's defaults accept, and which the HTTPS and admin
// listeners used to take) is refused, one offering AES-GCM is served, and
// TLS 1.1 is refused.
func TestServerConfigOffersAEADOnly(t *testing.T) {
	a := redistest.GenerateTLS(t)
	c, err := tlsreload.Load(tlsreload.Files{Cert: a.Cert, Key: a.Key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := listen(t, c.ServerConfig())
	dial := func(min, max uint16, suites ...uint16) error {
		conn, err := tls.Dial("tcp", addr, &tls.Config{
			InsecureSkipVerify: true, // only the suite is under test
			MinVersion:         min, MaxVersion: max, CipherSuites: suites,
		})
		if err == nil {
			conn.Close()
		}
		return err
	}
	cbc := []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA,
		tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA}
	if err := dial(tls.VersionTLS12, tls.VersionTLS12, cbc...); err == nil {
		t.Error("a TLS 1.2 client offering only CBC-SHA1 suites was served")
	}
	if err := dial(tls.VersionTLS12, tls.VersionTLS12, tlsreload.AEADSuites()...); err != nil {
		t.Errorf("a TLS 1.2 client offering the AEAD suites: %v", err)
	}
	if err := dial(tls.VersionTLS13, tls.VersionTLS13); err != nil {
		t.Errorf("a TLS 1.3 client: %v", err)
	}
	if err := dial(tls.VersionTLS11, tls.VersionTLS11); err == nil {
		t.Error("a TLS 1.1 client was served")
	}
}

// writeChain writes, in dir under name, a leaf certificate valid from
// leafFrom to leafUntil signed by an intermediate valid until interUntil,
// the chain file holding both (leaf first), and the leaf's key.
func writeChain(t *testing.T, dir, name string, leafFrom, leafUntil, interUntil time.Time) (certFile, keyFile string) {
	t.Helper()
	gen := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	rootKey, interKey, leafKey := gen(), gen(), gen()
	now := time.Now()
	root := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "root"}, NotBefore: now.Add(-48 * time.Hour),
		NotAfter: now.Add(48 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	inter := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "intermediate"}, NotBefore: now.Add(-47 * time.Hour),
		NotAfter: interUntil, IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "leaf"}, NotBefore: leafFrom, NotAfter: leafUntil,
		DNSNames: []string{"localhost"}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	interDER, err := x509.CreateCertificate(rand.Reader, inter, root, &interKey.PublicKey, rootKey)
	if err != nil {
		t.Fatal(err)
	}
	interCert, err := x509.ParseCertificate(interDER)
	if err != nil {
		t.Fatal(err)
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, interCert, &leafKey.PublicKey, interKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(leafKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: interDER})...)
	if err := os.WriteFile(certFile, chain, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestChainDatesJudged: a renewal whose chain clients cannot accept now,
// an intermediate expired or a leaf not valid yet, is refused and the
// last good pair kept (an outside walk: both were loaded, and every new
// connection failed); NotAfter, which the expiry metric and its alert
// read, is the chain's earliest, an intermediate's when it ends first.
func TestChainDatesJudged(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	goodCert, goodKey := writeChain(t, dir, "good", now.Add(-time.Hour), now.Add(25*24*time.Hour), now.Add(3*24*time.Hour))
	copyFile(t, goodCert, certFile)
	copyFile(t, goodKey, keyFile)
	c, err := tlsreload.Load(tlsreload.Files{Cert: certFile, Key: keyFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := c.NotAfter().Sub(now); d < 2*24*time.Hour || d > 4*24*time.Hour {
		t.Fatalf("NotAfter in %v, want the intermediate's 3 days, not the leaf's 25", d)
	}
	for _, tc := range []struct {
		name             string
		leafFrom, leafTo time.Time
		interTo          time.Time
		wantInErr        string
	}{
		{"expired intermediate", now.Add(-time.Hour), now.Add(25 * 24 * time.Hour), now.Add(-time.Hour), "expired"},
		{"leaf not valid yet", now.Add(24 * time.Hour), now.Add(48 * time.Hour), now.Add(72 * time.Hour), "not valid until"},
	} {
		cf, kf := writeChain(t, dir, strings.ReplaceAll(tc.name, " ", "-"), tc.leafFrom, tc.leafTo, tc.interTo)
		copyFile(t, cf, certFile)
		copyFile(t, kf, keyFile)
		if changed, err := c.Reload(); changed || err == nil || !strings.Contains(err.Error(), tc.wantInErr) {
			t.Errorf("%s: Reload = %v, %v; want refused (%q)", tc.name, changed, err, tc.wantInErr)
		}
		if d := c.NotAfter().Sub(now); d < 2*24*time.Hour || d > 4*24*time.Hour {
			t.Errorf("%s: NotAfter in %v after a refused reload, want the good chain's", tc.name, d)
		}
	}
}

// TestLoadErrorsSayWhichFile: each refusal of Load names the file
// concerned (both, for a key not of the certificate) and says what is
// wrong with it; a client-CA file in DER, or with no PEM at all, holds no
// PEM certificate (it used to read "data after certificate 0 is not PEM
// (a file half written?)", with nothing before), and the half-written
// hint is kept for junk after a certificate, counted from 1 (a TLS walk).
// A reload refused is logged with the files' names.
func TestLoadErrorsSayWhichFile(t *testing.T) {
	a, b := redistest.GenerateTLS(t), redistest.GenerateTLS(t)
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caPEM, err := os.ReadFile(a.CA)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := os.ReadFile(a.Cert)
	if err != nil {
		t.Fatal(err)
	}
	caDER, certDER := write("ca.der", der(t, a.CA)), write("tls.der", der(t, a.Cert))
	garbage := write("garbage.pem", []byte("garbage\n"))
	cut := write("cut.crt", certPEM[:len(certPEM)/2])
	none := filepath.Join(dir, "none.pem")
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(edKey)
	if err != nil {
		t.Fatal(err)
	}
	otherType := write("ed.key", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}))
	for _, tc := range []struct {
		name  string
		files tlsreload.Files
		want  string
		not   string
	}{
		{"key of another pair", tlsreload.Files{Cert: a.Cert, Key: b.Key}, a.Cert + " and " + b.Key + ": the private key does not match the certificate's public key", ""},
		{"key of another type", tlsreload.Files{Cert: a.Cert, Key: otherType}, a.Cert + " and " + otherType + ": the private key is not of the type of the certificate's public key", ""},
		{"certificate in DER", tlsreload.Files{Cert: certDER, Key: a.Key}, certDER + " holds no PEM certificate: it looks like DER", ""},
		{"certificate not PEM", tlsreload.Files{Cert: garbage, Key: a.Key}, garbage + " holds no PEM certificate", "DER"},
		{"certificate cut short", tlsreload.Files{Cert: cut, Key: a.Key}, cut + " holds no complete PEM certificate: it is cut short (a file half written?)", ""},
		{"key not PEM", tlsreload.Files{Cert: a.Cert, Key: garbage}, garbage + " holds no PEM private key", ""},
		{"key as certificate", tlsreload.Files{Cert: a.Key, Key: a.Key}, a.Key + " holds no PEM certificate", ""},
		{"missing certificate", tlsreload.Files{Cert: none, Key: a.Key}, none + ": no such file", ""},
		{"missing key", tlsreload.Files{Cert: a.Cert, Key: none}, none + ": no such file", ""},
		{"missing client CAs", tlsreload.Files{Cert: a.Cert, Key: a.Key, ClientCAs: none}, none + ": no such file", ""},
		{"client CAs in DER", tlsreload.Files{Cert: a.Cert, Key: a.Key, ClientCAs: caDER}, caDER + " holds no PEM certificate: it looks like DER", "half written"},
		{"client CAs not PEM", tlsreload.Files{Cert: a.Cert, Key: a.Key, ClientCAs: garbage}, garbage + " holds no PEM certificate", "half written"},
		{"client CAs cut short", tlsreload.Files{Cert: a.Cert, Key: a.Key, ClientCAs: write("cut.pem", append(append([]byte{}, caPEM...), "garbage"...))}, "data after certificate 1 is not PEM (a file half written?)", ""},
		{"second client CA that won't parse", tlsreload.Files{Cert: a.Cert, Key: a.Key, ClientCAs: write("bad.pem", append(append([]byte{}, caPEM...), "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"...))}, ": certificate 2: ", ""},
	} {
		_, err := tlsreload.Load(tc.files, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) || tc.not != "" && strings.Contains(err.Error(), tc.not) {
			t.Errorf("%s: Load = %v; want an error saying %q", tc.name, err, tc.want)
		}
	}

	// A reload refused names the files in its log line.
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	copyFile(t, a.Cert, certFile)
	copyFile(t, a.Key, keyFile)
	var logs bytes.Buffer
	c, err := tlsreload.Load(tlsreload.Files{Cert: certFile, Key: keyFile}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, b.Cert, certFile) // the new certificate beside the old key
	if _, err := c.Reload(); err == nil {
		t.Fatal("Reload of a certificate beside another's key succeeded")
	}
	line := logs.String()
	if !strings.Contains(line, "TLS certificate not reloaded") || !strings.Contains(line, "cert_file="+certFile) || !strings.Contains(line, "key_file="+keyFile) {
		t.Fatalf("log of a reload refused:\n%s\nwant cert_file and key_file", line)
	}
}
