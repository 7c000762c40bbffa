package tlsreload

import (
	"bytes"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/floodgate-rl/floodgate/internal/regularfile"
)

// File names one of the files of Files.
type File int

// The files of Files.
const (
	CertFile      File = iota + 1 // Files.Cert
	KeyFile                       // Files.Key
	ClientCAsFile                 // Files.ClientCAs
)

// FileError is why files of Files did not load: the file concerned, or the
// certificate and the key when they do not make a pair. Its Error names
// the files by their paths; Explain by what the caller calls them (the
// flags that set them, say).
type FileError struct {
	// Files are the files concerned, one or two; Paths their paths, in
	// the same order.
	Files []File
	Paths []string
	// Err is why, naming no file: "no such file or directory", "holds no
	// PEM certificate", "the private key does not match the
	// certificate's public key".
	Err error
}

// Error is "tlsreload: ", the paths of the files and why.
func (e *FileError) Error() string { return "tlsreload: " + e.Explain(nil) }

// Unwrap returns Err.
func (e *FileError) Unwrap() error { return e.Err }

// Explain says why the files did not load, each named by name(file, path)
// (nil: by its path): "--tls-cert-file a.crt and --tls-key-file b.key:
// the private key does not match the certificate's public key",
// "--tls-cert-file a.der holds no PEM certificate (it is DER: ...)".
func (e *FileError) Explain(name func(f File, path string) string) string {
	names := make([]string, len(e.Files))
	for i, f := range e.Files {
		names[i] = e.Paths[i]
		if name != nil {
			names[i] = name(f, e.Paths[i])
		}
	}
	subject := strings.Join(names, " and ")
	var c content
	if errors.As(e.Err, &c) {
		return subject + " " + c.Error()
	}
	return subject + ": " + e.Err.Error()
}

// content is a reason about what a file holds, said after its name
// without a colon ("a.crt holds no PEM certificate").
type content string

func (c content) Error() string { return string(c) }

func fileErr(f File, path string, err error) *FileError {
	var pe *fs.PathError
	var nr *regularfile.Error
	switch {
	case errors.As(err, &nr):
		err = content(nr.Reason()) // the path is said already
	case errors.As(err, &pe):
		err = pe.Err // the path is said already
	}
	return &FileError{Files: []File{f}, Paths: []string{path}, Err: err}
}

// readPair reads the certificate chain and key of certFile and keyFile as
// tls.LoadX509KeyPair does, and says which file is wrong and how when
// they do not load. A file that is not a regular file once symbolic links
// are followed (a named pipe) is refused unread (regularfile.ReadFile):
// its read could wait for a writer for good.
func readPair(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := regularfile.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, fileErr(CertFile, certFile, err)
	}
	keyPEM, err := regularfile.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, fileErr(KeyFile, keyFile, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err == nil {
		return pair, nil
	}
	if why := noPEM(certPEM, "CERTIFICATE", "certificate"); why != nil {
		return tls.Certificate{}, fileErr(CertFile, certFile, why)
	}
	if why := noPEM(keyPEM, "PRIVATE KEY", "private key"); why != nil {
		return tls.Certificate{}, fileErr(KeyFile, keyFile, why)
	}
	both := &FileError{Files: []File{CertFile, KeyFile}, Paths: []string{certFile, keyFile}, Err: err}
	// crypto/tls exports no values for these; its messages are stable.
	msg := err.Error()
	switch {
	case strings.Contains(msg, "private key type does not match public key type"):
		both.Err = errors.New("the private key is not of the type of the certificate's public key (RSA, ECDSA or Ed25519): not the key of this certificate")
	case strings.Contains(msg, "private key does not match public key"):
		both.Err = errors.New("the private key does not match the certificate's public key (not the key of this certificate)")
	case strings.Contains(msg, "failed to parse private key"):
		return tls.Certificate{}, fileErr(KeyFile, keyFile, errors.New("the private key does not parse (PKCS #1, PKCS #8 or SEC 1 wanted)"))
	case strings.HasPrefix(msg, "x509: "):
		// The first certificate does not parse.
		return tls.Certificate{}, fileErr(CertFile, certFile, fmt.Errorf("certificate 1: %w", err))
	}
	return tls.Certificate{}, both
}

// noPEM says why data holds no PEM block whose type ends in suffix (what
// names the thing wanted), or nil when it holds one: it is DER, or a PEM
// block cut short (a file half written), or blocks of other types only.
func noPEM(data []byte, suffix, what string) error {
	rest, other := data, ""
	for {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if strings.HasSuffix(b.Type, suffix) {
			return nil
		}
		other = b.Type
	}
	switch {
	case other != "":
		return content(fmt.Sprintf("holds no PEM %s, only %s blocks", what, other))
	case bytes.Contains(data, []byte("-----BEGIN")):
		return content(fmt.Sprintf("holds no complete PEM %s: it is cut short (a file half written?)", what))
	case looksDER(data):
		return content(fmt.Sprintf("holds no PEM %s: it looks like DER (binary); convert it to PEM (openssl %s -inform der)", what, map[string]string{"certificate": "x509", "private key": "pkey"}[what]))
	case len(bytes.TrimSpace(data)) == 0:
		return content(fmt.Sprintf("holds no PEM %s: it is empty", what))
	}
	return content("holds no PEM " + what)
}

// looksDER reports whether data looks like DER: an ASN.1 SEQUENCE, as
// certificates and keys are.
func looksDER(data []byte) bool { return len(data) > 1 && data[0] == 0x30 }
