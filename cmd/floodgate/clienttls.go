package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// clientTLSFlags are a client command's TLS settings for an https (or
// grpcs) service: the authorities to trust and a client certificate, for
// instances run with --tls-client-ca-file.
type clientTLSFlags struct {
	caFile, certFile, keyFile string
}

func (c *clientTLSFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&c.caFile, "tls-ca-file", "", "PEM authorities to trust for https (and grpcs) services, instead of the system's")
	fl.StringVar(&c.certFile, "tls-cert-file", "", "PEM client certificate to present (services run with --tls-client-ca-file); needs --tls-key-file")
	fl.StringVar(&c.keyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
}

// refuseUnlessTLS refuses the flags, when any is set, for a target that
// is not a TLS one: the flag's name, the schemes it applies to and the
// target, as "--tls-ca-file applies to https:// targets only, not
// "http://127.0.0.1:8080" (a TLS listener wants https://)".
func (c *clientTLSFlags) refuseUnlessTLS(fl *pflag.FlagSet, target string, schemes ...string) error {
	for _, s := range schemes {
		if strings.HasPrefix(target, s+"://") {
			return nil
		}
	}
	for _, name := range []string{"tls-ca-file", "tls-cert-file", "tls-key-file"} {
		if fl.Changed(name) {
			want := strings.Join(schemes, ":// or ") + "://"
			return fmt.Errorf("--%s applies to %s targets only, not %q (a TLS listener wants %s)", name, want, target, want)
		}
	}
	return nil
}

// config returns the TLS configuration the flags describe, or nil when
// none is set (the defaults: the system's authorities, no certificate).
func (c *clientTLSFlags) config() (*tls.Config, error) {
	if c.caFile == "" && c.certFile == "" && c.keyFile == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.caFile != "" {
		pem, err := os.ReadFile(c.caFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca-file: %s holds no PEM certificate", c.caFile)
		}
		tc.RootCAs = pool
	}
	switch {
	case c.certFile != "" && c.keyFile != "":
		pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert-file/--tls-key-file: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	case c.certFile != "":
		return nil, errors.New("--tls-cert-file needs --tls-key-file (the certificate's private key)")
	case c.keyFile != "":
		return nil, errors.New("--tls-key-file needs --tls-cert-file (the key's certificate)")
	}
	return tc, nil
}
