package tlsreload_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/tlsreload"
)

// returns runs fn and returns its error, failing the test when fn has not
// returned after a minute: a read blocked on a named pipe never does.
func returns(t *testing.T, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatalf("%s still running after a minute: it opened a named pipe and waits for a writer", what)
		return nil
	}
}

// link points the symbolic link at path to target, replacing it at once
// (a rename), as a Kubernetes secret's ..data swap does.
func link(t *testing.T, target, path string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.Symlink(target, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestNamedPipeRefused: a certificate, key or client CA file that is a
// named pipe (or a link to one) is refused unread, naming it: by Load at
// start, and by Reload, which keeps the pair and the authorities in force
// and loads the good files once they are back. A walk found Load hang at
// start, and a link swapped to a pipe block the reload in open for good:
// a renewed pair put in place afterwards was never served.
func TestNamedPipeRefused(t *testing.T) {
	a, b := redistest.GenerateTLS(t), redistest.GenerateTLS(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "ff")
	if err := posix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, caFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem"), filepath.Join(dir, "ca.pem")
	link(t, fifo, certFile)
	link(t, a.Key, keyFile)
	link(t, a.CA, caFile)
	files := tlsreload.Files{Cert: certFile, Key: keyFile, ClientCAs: caFile}

	err := returns(t, "Load of a pipe", func() error { _, err := tlsreload.Load(files, nil); return err })
	if want := certFile + " is a named pipe: want a regular file"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Load with the certificate a pipe: %v; want %q", err, want)
	}

	link(t, a.Cert, certFile)
	c, err := tlsreload.Load(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := listen(t, c.ServerConfig())
	clientA := a.ClientConfig(t)
	for _, path := range []string{certFile, keyFile, caFile} {
		good, err := os.Readlink(path)
		if err != nil {
			t.Fatal(err)
		}
		link(t, fifo, path)
		err = returns(t, "Reload with "+path+" a pipe", func() error { _, err := c.Reload(); return err })
		if want := path + " is a named pipe: want a regular file"; err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Reload with %s a pipe: %v; want %q", path, err, want)
		}
		if !bytes.Equal(served(t, addr), der(t, a.Cert)) || !admitted(addr, clientA) {
			t.Fatalf("with %s a pipe: the pair or the authorities in force were dropped", path)
		}
		link(t, good, path)
	}

	// A renewed pair put in place after a pipe is served.
	link(t, fifo, certFile)
	if err := returns(t, "Reload with the certificate a pipe", func() error { _, err := c.Reload(); return err }); err == nil {
		t.Fatal("Reload with the certificate a pipe: no error")
	}
	link(t, b.Key, keyFile)
	link(t, b.Cert, certFile)
	if changed, err := c.Reload(); !changed || err != nil {
		t.Fatalf("Reload of the renewed pair after a pipe = %v, %v", changed, err)
	}
	if !bytes.Equal(served(t, addr), der(t, b.Cert)) {
		t.Fatal("not serving the renewed pair put in place after a pipe")
	}
}
