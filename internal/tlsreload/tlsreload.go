// Package tlsreload serves a TLS certificate from PEM files, and checks
// client certificates against a PEM file of authorities, and loads them
// again when the files change, so that a certificate renewed on disk (by
// cert-manager, certbot, a secret volume's update) or a client authority
// added or retired is used by new connections without a restart.
package tlsreload

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate/internal/filestamp"
)

// Files names the PEM files of a Cert.
type Files struct {
	Cert, Key string // the certificate (and its chain) and its private key
	// ClientCAs, when set, holds the authorities that sign the client
	// certificates every connection must present (mutual TLS).
	ClientCAs string
}

// Cert is a certificate and its key read from two PEM files, and the
// client authorities of a third when mutual TLS is on. The tls.Config of
// its ServerConfig hands every new connection the pair last loaded
// successfully, and checks its client certificate against the
// authorities last loaded; connections already open keep theirs. It is
// safe for concurrent use.
type Cert struct {
	files Files
	log   *slog.Logger

	cur atomic.Pointer[loaded]

	mu      sync.Mutex // serialises Reload
	seen    []seenFile
	lastErr string
}

type loaded struct {
	pair     *tls.Certificate
	notAfter time.Time
	subject  string
	roots    *x509.CertPool // the client authorities; nil without
	nRoots   int
}

type seenFile struct {
	at   filestamp.Stamp
	info os.FileInfo
}

// Load reads the pair from f.Cert and f.Key (as tls.LoadX509KeyPair
// does), and the client authorities from f.ClientCAs if set, and returns
// a Cert serving them. It fails when a file cannot be read, the two do
// not make a pair, or f.ClientCAs holds no PEM certificate. log receives
// the reloads (nil: none are logged).
func Load(f Files, log *slog.Logger) (*Cert, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Cert{files: f, log: log}
	seen, err := c.stat()
	if err != nil {
		return nil, err
	}
	l, err := c.load()
	if err != nil {
		return nil, err
	}
	c.cur.Store(l)
	c.seen = seen
	return c, nil
}

// GetCertificate returns the pair last loaded; it is a
// tls.Config.GetCertificate.
func (c *Cert) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.cur.Load().pair, nil
}

// ServerConfig returns a new TLS 1.2+ server configuration that serves
// the pair last loaded and, with Files.ClientCAs, requires a client
// certificate that chains to the authorities last loaded and is meant
// for client authentication, as tls.RequireAndVerifyClientCert does with
// fixed ClientCAs. The check runs in VerifyConnection, on resumed
// sessions too, so a retired authority stops admitting its certificates
// at the next connection; the handshake's certificate request names no
// authorities, so a client holding several certificates must be given
// the right one.
func (c *Cert) ServerConfig() *tls.Config {
	tc := &tls.Config{GetCertificate: c.GetCertificate, MinVersion: tls.VersionTLS12}
	if c.files.ClientCAs != "" {
		tc.ClientAuth = tls.RequireAnyClientCert
		tc.VerifyConnection = c.verifyClient
	}
	return tc
}

// verifyClient checks the client's certificate chain against the
// authorities last loaded.
func (c *Cert) verifyClient(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tlsreload: the client presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, ic := range cs.PeerCertificates[1:] {
		inter.AddCert(ic)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots:         c.cur.Load().roots,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return fmt.Errorf("tlsreload: client certificate refused: %w", err)
	}
	return nil
}

// NotAfter is when the certificate served expires.
func (c *Cert) NotAfter() time.Time { return c.cur.Load().notAfter }

// Reload loads the pair and the client authorities again if any of
// their files changed since the last successful load (its size, modification or status change time, or the
// file itself, as when a symbolic link is swapped), and reports whether
// it now serves a new one. A pair that fails to load (a key that does not
// match the certificate, which happens between the writes of the two
// files, or a file half written), or client authorities that do not
// parse, leave the last good ones in place and are tried again at the
// next Reload; its error is returned and logged
// once until it changes.
func (c *Cert) Reload() (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen, err := c.stat()
	if err == nil && same(seen, c.seen) {
		return false, nil
	}
	var l *loaded
	if err == nil {
		l, err = c.load()
	}
	if err != nil {
		if msg := err.Error(); msg != c.lastErr {
			c.lastErr = msg
			c.log.Error("TLS certificate not reloaded; serving the last good one", "error", err, "not_after", c.NotAfter())
		}
		return false, err
	}
	old := c.cur.Swap(l)
	c.seen, c.lastErr = seen, ""
	attrs := []any{"cert_file", c.files.Cert, "subject", l.subject, "not_after", l.notAfter, "previous_not_after", old.notAfter}
	if c.files.ClientCAs != "" {
		attrs = append(attrs, "client_ca_file", c.files.ClientCAs, "client_cas", l.nRoots, "previous_client_cas", old.nRoots)
	}
	c.log.Info("TLS certificate reloaded", attrs...)
	return true, nil
}

// Watch calls Reload every interval until ctx ends.
func (c *Cert) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, _ = c.Reload()
		}
	}
}

func (c *Cert) stat() ([]seenFile, error) {
	names := []string{c.files.Cert, c.files.Key}
	if c.files.ClientCAs != "" {
		names = append(names, c.files.ClientCAs)
	}
	out := make([]seenFile, len(names))
	for i, name := range names {
		fi, err := os.Stat(name)
		if err != nil {
			return out, err
		}
		out[i] = seenFile{at: filestamp.Of(fi), info: fi}
	}
	return out, nil
}

func same(a, b []seenFile) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].info == nil || b[i].info == nil || !a[i].at.Equal(b[i].at) || !os.SameFile(a[i].info, b[i].info) {
			return false
		}
	}
	return true
}

func (c *Cert) load() (*loaded, error) {
	pair, err := tls.LoadX509KeyPair(c.files.Cert, c.files.Key)
	if err != nil {
		return nil, err
	}
	leaf := pair.Leaf
	if leaf == nil {
		if len(pair.Certificate) == 0 {
			return nil, errors.New("tlsreload: no certificate in the file")
		}
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tlsreload: %w", err)
		}
	}
	l := &loaded{pair: &pair, notAfter: leaf.NotAfter, subject: leaf.Subject.String()}
	if c.files.ClientCAs != "" {
		if l.roots, l.nRoots, err = readRoots(c.files.ClientCAs); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// readRoots reads the PEM certificates of file into a pool; it fails
// when the file holds none, a CERTIFICATE block that does not parse, or
// anything but PEM blocks and space (other block types are skipped).
func readRoots(file string) (*x509.CertPool, int, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, 0, err
	}
	pool, n := x509.NewCertPool(), 0
	for len(bytes.TrimSpace(data)) > 0 {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			// A bundle cut short (caught while being written) would
			// otherwise load without its last authorities.
			return nil, 0, fmt.Errorf("tlsreload: %s: data after certificate %d is not PEM (a file half written?)", file, n)
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, 0, fmt.Errorf("tlsreload: %s: certificate %d: %w", file, n+1, err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, 0, fmt.Errorf("tlsreload: %s holds no PEM certificate", file)
	}
	return pool, n, nil
}
