package tlsreload_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
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
	c, err := tlsreload.Load(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: c.GetCertificate, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = conn.(*tls.Conn).Handshake(); conn.Close() }()
		}
	}()
	addr := ln.Addr().String()
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
	for name, files := range map[string][2]string{
		"missing certificate": {filepath.Join(t.TempDir(), "none.pem"), a.Key},
		"missing key":         {a.Cert, filepath.Join(t.TempDir(), "none.pem")},
		"key of another pair": {a.Cert, b.Key},
		"key as certificate":  {a.Key, a.Key},
	} {
		if _, err := tlsreload.Load(files[0], files[1], nil); err == nil {
			t.Errorf("%s: Load succeeded", name)
		}
	}
}
