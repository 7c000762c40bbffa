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
	"github.com/floodgate-rl/floodgate/internal/ratelog"
	"github.com/floodgate-rl/floodgate/internal/regularfile"
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
// authorities last loaded; connections already open keep theirs. The
// pair and the authorities are reloaded apart: a broken file of one
// does not hold up the other. It is safe for concurrent use.
type Cert struct {
	files Files
	log   *slog.Logger
	// refusedLog writes the client certificates refused, at most one
	// line per 10 s with the count of those it held back.
	refusedLog *ratelog.Log

	pair    atomic.Pointer[pairState]
	cas     atomic.Pointer[caState] // nil without Files.ClientCAs
	refused atomic.Uint64

	mu           sync.Mutex // serialises Reload
	pairFs, caFs watched
}

type pairState struct {
	pair *tls.Certificate
	// notBefore and notAfter bound when clients can accept the chain
	// served: the latest NotBefore and the earliest NotAfter of its
	// certificates (an intermediate that expires first ends it too);
	// limit is the subject of the certificate with that NotAfter.
	notBefore, notAfter time.Time
	subject, limit      string
}

// invalid says why clients would refuse p's chain at now, or "".
func (p *pairState) invalid(now time.Time) string {
	switch {
	case now.After(p.notAfter):
		return fmt.Sprintf("the certificate chain expired at %v (%s)", p.notAfter.UTC(), p.limit)
	case now.Before(p.notBefore):
		return fmt.Sprintf("the certificate chain is not valid until %v", p.notBefore.UTC())
	}
	return ""
}

type caState struct {
	roots *x509.CertPool
	n     int
}

// watched is what a Reload saw of a set of files.
type watched struct {
	seen    []seenFile
	lastErr string
}

type seenFile struct {
	at   filestamp.Stamp
	info os.FileInfo
}

// Load reads the pair from f.Cert and f.Key (as tls.LoadX509KeyPair
// does), and the client authorities from f.ClientCAs if set, and returns
// a Cert serving them. It fails when a file cannot be read, the two do
// not make a pair, or f.ClientCAs holds no PEM certificate; a chain out
// of its dates (a certificate of it expired or not valid yet) is served,
// with an error logged. An error about a file is a *FileError, which
// names the file (both, for a key not of the certificate) and says what
// is wrong with it. log receives the reloads and the refused client
// certificates (nil: none are logged).
func Load(f Files, log *slog.Logger) (*Cert, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Cert{files: f, log: log, refusedLog: ratelog.New(log, 10*time.Second)}
	seen, err := f.stat(CertFile, KeyFile)
	if err != nil {
		return nil, err
	}
	p, err := loadPair(f.Cert, f.Key)
	if err != nil {
		return nil, err
	}
	if why := p.invalid(time.Now()); why != "" {
		log.Error("the TLS certificate is out of its dates: clients that verify it refuse every connection", "cert_file", f.Cert, "subject", p.subject, "why", why)
	}
	c.pair.Store(p)
	c.pairFs.seen = seen
	if f.ClientCAs != "" {
		seen, err := f.stat(ClientCAsFile)
		if err != nil {
			return nil, err
		}
		ca, err := loadCAs(f.ClientCAs)
		if err != nil {
			return nil, err
		}
		c.cas.Store(ca)
		c.caFs.seen = seen
	}
	return c, nil
}

// GetCertificate returns the pair last loaded; it is a
// tls.Config.GetCertificate.
func (c *Cert) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.pair.Load().pair, nil
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
//
// Under TLS 1.2 it offers only ECDHE key exchange with AEAD ciphers
// (AES-GCM, ChaCha20-Poly1305), as grpc-go's credentials do on the gRPC
// listener: Go's defaults also accept the CBC-SHA1 suites, which an
// outside walk found the HTTPS and admin listeners taking. (TLS 1.3's
// suites are all AEAD and not configurable.)
func (c *Cert) ServerConfig() *tls.Config {
	tc := &tls.Config{GetCertificate: c.GetCertificate, MinVersion: tls.VersionTLS12, CipherSuites: AEADSuites()}
	if c.files.ClientCAs != "" {
		tc.ClientAuth = tls.RequireAnyClientCert
		tc.VerifyConnection = c.verifyClient
	}
	return tc
}

// AEADSuites returns the TLS 1.2 cipher suites a server configuration of
// this package offers: ECDHE key exchange with AES-GCM or
// ChaCha20-Poly1305.
func AEADSuites() []uint16 {
	return []uint16{
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
		tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
		tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
	}
}

// verifyClient checks the client's certificate chain against the
// authorities last loaded; a refusal is counted (Refused) and logged,
// with the certificate's subject and issuer, so that the clients still on
// a retired authority can be found.
func (c *Cert) verifyClient(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		c.refused.Add(1)
		return errors.New("tlsreload: the client presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, ic := range cs.PeerCertificates[1:] {
		inter.AddCert(ic)
	}
	leaf := cs.PeerCertificates[0]
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots:         c.cas.Load().roots,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		c.refused.Add(1)
		c.refusedLog.Warn("client-certificate-refused", "TLS client certificate refused", "subject", leaf.Subject.String(),
			"issuer", leaf.Issuer.String(), "not_after", leaf.NotAfter, "resumed", cs.DidResume, "error", err)
		return fmt.Errorf("tlsreload: client certificate refused: %w", err)
	}
	return nil
}

// Refused counts the client certificates refused since Load (presented
// ones that do not chain to the authorities, are not for client
// authentication or have expired); handshakes without any certificate
// are refused by crypto/tls before the check and are not counted.
func (c *Cert) Refused() uint64 { return c.refused.Load() }

// NotAfter is when the certificate chain served expires: the earliest
// NotAfter of its certificates.
func (c *Cert) NotAfter() time.Time { return c.pair.Load().notAfter }

// Reload loads the pair again if its files changed since its last
// successful load (their size, modification or status change time, or
// the file itself, as when a symbolic link is swapped), and the client
// authorities again if theirs did, and reports whether it now serves
// anything new. A pair that fails to load (a key that does not match the
// certificate, which happens between the writes of the two files, or a
// file half written), or whose chain clients cannot accept now (one of
// its certificates expired or not valid yet), leaves the last
// good pair in place; client authorities that do not parse leave the last
// good ones; each is tried again at the next Reload, apart from the
// other. The errors are returned and logged once until they change.
func (c *Cert) Reload() (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pairNew, pairErr := c.reloadPair()
	caNew, caErr := false, error(nil)
	if c.files.ClientCAs != "" {
		caNew, caErr = c.reloadCAs()
	}
	return pairNew || caNew, errors.Join(pairErr, caErr)
}

func (c *Cert) reloadPair() (bool, error) {
	seen, err := c.files.stat(CertFile, KeyFile)
	if err == nil && same(seen, c.pairFs.seen) {
		return false, nil
	}
	var p *pairState
	if err == nil {
		p, err = loadPair(c.files.Cert, c.files.Key)
	}
	if err == nil {
		if why := p.invalid(time.Now()); why != "" {
			err = fileErr(CertFile, c.files.Cert, errors.New(why))
		}
	}
	if err != nil {
		if msg := err.Error(); msg != c.pairFs.lastErr {
			c.pairFs.lastErr = msg
			c.log.Error("TLS certificate not reloaded; serving the last good one", "cert_file", c.files.Cert, "key_file", c.files.Key, "error", err, "not_after", c.NotAfter())
		}
		return false, err
	}
	old := c.pair.Swap(p)
	c.pairFs = watched{seen: seen}
	c.log.Info("TLS certificate reloaded", "cert_file", c.files.Cert, "subject", p.subject, "not_after", p.notAfter, "previous_not_after", old.notAfter)
	return true, nil
}

func (c *Cert) reloadCAs() (bool, error) {
	seen, err := c.files.stat(ClientCAsFile)
	if err == nil && same(seen, c.caFs.seen) {
		return false, nil
	}
	var ca *caState
	if err == nil {
		ca, err = loadCAs(c.files.ClientCAs)
	}
	if err != nil {
		if msg := err.Error(); msg != c.caFs.lastErr {
			c.caFs.lastErr = msg
			c.log.Error("TLS client authorities not reloaded; checking clients against the last good ones", "client_ca_file", c.files.ClientCAs, "error", err, "client_cas", c.cas.Load().n)
		}
		return false, err
	}
	old := c.cas.Swap(ca)
	c.caFs = watched{seen: seen}
	c.log.Info("TLS client authorities reloaded", "client_ca_file", c.files.ClientCAs, "client_cas", ca.n, "previous_client_cas", old.n)
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

// stat returns what the files of f named by which look like now; one that
// is not a regular file once symbolic links are followed is an error.
func (f Files) stat(which ...File) ([]seenFile, error) {
	out := make([]seenFile, len(which))
	for i, w := range which {
		name := map[File]string{CertFile: f.Cert, KeyFile: f.Key, ClientCAsFile: f.ClientCAs}[w]
		fi, err := regularfile.Stat(name)
		if err != nil {
			return out, fileErr(w, name, err)
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

func loadPair(certFile, keyFile string) (*pairState, error) {
	pair, err := readPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	if len(pair.Certificate) == 0 {
		return nil, fileErr(CertFile, certFile, content("holds no PEM certificate"))
	}
	p := &pairState{pair: &pair}
	for i, raw := range pair.Certificate {
		cert := pair.Leaf
		if i > 0 || cert == nil {
			if cert, err = x509.ParseCertificate(raw); err != nil {
				return nil, fileErr(CertFile, certFile, fmt.Errorf("certificate %d: %w", i+1, err))
			}
		}
		if i == 0 {
			p.subject = cert.Subject.String()
		}
		if i == 0 || cert.NotAfter.Before(p.notAfter) {
			p.notAfter, p.limit = cert.NotAfter, cert.Subject.String()
		}
		if cert.NotBefore.After(p.notBefore) {
			p.notBefore = cert.NotBefore
		}
	}
	return p, nil
}

func loadCAs(file string) (*caState, error) {
	roots, n, err := readRoots(file)
	if err != nil {
		return nil, err
	}
	return &caState{roots: roots, n: n}, nil
}

// readRoots reads the PEM certificates of file into a pool; it fails
// when the file holds none, a CERTIFICATE block that does not parse, or
// anything but PEM blocks and space (other block types are skipped), and
// refuses a file that is not regular (a named pipe) unread.
func readRoots(file string) (*x509.CertPool, int, error) {
	all, err := regularfile.ReadFile(file)
	if err != nil {
		return nil, 0, fileErr(ClientCAsFile, file, err)
	}
	pool, n, data := x509.NewCertPool(), 0, all
	for len(bytes.TrimSpace(data)) > 0 {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			if n == 0 {
				break // nothing came before: said below
			}
			// A bundle cut short (caught while being written) would
			// otherwise load without its last authorities.
			return nil, 0, fileErr(ClientCAsFile, file, fmt.Errorf("data after certificate %d is not PEM (a file half written?)", n))
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, 0, fileErr(ClientCAsFile, file, fmt.Errorf("certificate %d: %w", n+1, err))
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, 0, fileErr(ClientCAsFile, file, noPEM(all, "CERTIFICATE", "certificate"))
	}
	return pool, n, nil
}
