// Package tlsreload serves a TLS certificate from PEM files and loads it
// again when the files change, so that a certificate renewed on disk (by
// cert-manager, certbot, a secret volume's update) is used by new
// connections without a restart.
package tlsreload

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate/internal/filestamp"
)

// Cert is a certificate and its key read from two PEM files. Its
// GetCertificate method, set as a tls.Config's, hands every new
// connection the pair last loaded successfully; connections already open
// keep theirs. It is safe for concurrent use.
type Cert struct {
	certFile, keyFile string
	log               *slog.Logger

	cur atomic.Pointer[loaded]

	mu      sync.Mutex // serialises Reload
	seen    [2]seenFile
	lastErr string
}

type loaded struct {
	pair     *tls.Certificate
	notAfter time.Time
	subject  string
}

type seenFile struct {
	at   filestamp.Stamp
	info os.FileInfo
}

// Load reads the pair from certFile and keyFile (as tls.LoadX509KeyPair
// does) and returns a Cert serving it. It fails when either file cannot
// be read or the two do not make a pair. log receives the reloads (nil:
// none are logged).
func Load(certFile, keyFile string, log *slog.Logger) (*Cert, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Cert{certFile: certFile, keyFile: keyFile, log: log}
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

// NotAfter is when the certificate served expires.
func (c *Cert) NotAfter() time.Time { return c.cur.Load().notAfter }

// Reload loads the pair again if either file changed since the last
// successful load (its size, modification or status change time, or the
// file itself, as when a symbolic link is swapped), and reports whether
// it now serves a new one. A pair that fails to load (a key that does not
// match the certificate, which happens between the writes of the two
// files, or a file half written) leaves the last good pair in place and
// is tried again at the next Reload; its error is returned and logged
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
	c.log.Info("TLS certificate reloaded", "cert_file", c.certFile, "subject", l.subject, "not_after", l.notAfter, "previous_not_after", old.notAfter)
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

func (c *Cert) stat() ([2]seenFile, error) {
	var out [2]seenFile
	for i, name := range []string{c.certFile, c.keyFile} {
		fi, err := os.Stat(name)
		if err != nil {
			return out, err
		}
		out[i] = seenFile{at: filestamp.Of(fi), info: fi}
	}
	return out, nil
}

func same(a, b [2]seenFile) bool {
	for i := range a {
		if a[i].info == nil || b[i].info == nil || !a[i].at.Equal(b[i].at) || !os.SameFile(a[i].info, b[i].info) {
			return false
		}
	}
	return true
}

func (c *Cert) load() (*loaded, error) {
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
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
	return &loaded{pair: &pair, notAfter: leaf.NotAfter, subject: leaf.Subject.String()}, nil
}
