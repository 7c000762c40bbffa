package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestServeRefusesPipesAtStart: serve given a named pipe (or a symbolic
// link to one) for a file it reads at start exits 1 naming the flag and
// the file, unopened: the TLS certificate, key and client authorities,
// a Redis CA file, client certificate or password file, and a descriptor
// file of an --envoy-config directory. The fixfifo walk found serve wait
// for a writer, without a word, on the TLS files, and skip the pipe of
// the Envoy directory silently; --config, refused already, says a
// dangling symbolic link is one (it said "stat ...: no such file or
// directory").
func TestServeRefusesPipesAtStart(t *testing.T) {
	a := redistest.GenerateTLS(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "ff")
	if err := posix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "c.pem")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	envoyDir := filepath.Join(dir, "envoy")
	if err := os.Mkdir(envoyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFileAtomic(t, filepath.Join(envoyDir, "a.yaml"), "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n")
	if err := os.Symlink(fifo, filepath.Join(envoyDir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(dir, "dl.yaml")
	if err := os.Symlink("..data/dl.yaml", dangling); err != nil {
		t.Fatal(err)
	}
	pipe := " is a named pipe: want a regular file"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert-file", link, "--tls-key-file", a.Key}, "--tls-cert-file " + link + pipe},
		{[]string{"--tls-cert-file", a.Cert, "--tls-key-file", fifo}, "--tls-key-file " + fifo + pipe},
		{[]string{"--tls-cert-file", a.Cert, "--tls-key-file", a.Key, "--tls-client-ca-file", link}, "--tls-client-ca-file " + link + pipe},
		{[]string{"--redis", "rediss://127.0.0.1:1/0", "--redis-ca-file", link}, link + pipe},
		{[]string{"--redis", "rediss://127.0.0.1:1/0", "--redis-cert-file", link, "--redis-key-file", a.Key}, link + pipe},
		{[]string{"--redis", "redis://127.0.0.1:1/0", "--redis-password-file", link}, "--redis-password-file: " + link + pipe},
		{[]string{"--grpc-addr", "127.0.0.1:0", "--envoy-config", envoyDir}, filepath.Join(envoyDir, "b.yaml") + pipe},
		{[]string{"--config", dangling}, "--config " + dangling + " is a dangling symbolic link: its target ..data/dl.yaml does not exist"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, binary(t), append([]string{"serve", "--addr", "127.0.0.1:0"}, tc.args...)...)
		var errOut strings.Builder
		cmd.Stderr = &errOut
		err := cmd.Run()
		timedOut := ctx.Err() != nil
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || timedOut || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("serve %v: %v (killed after a minute: %v), stderr %q; want exit status 1 and %q", tc.args, err, timedOut, errOut.String(), tc.want)
		}
	}
}

// TestServePipeKeyIsNotWarnedAboutItsMode: serve given a named pipe
// readable by others (mode 0644, mkfifo's under umask 022) for
// --tls-key-file or --redis-key-file says it is a named pipe and exits
// 1, without the warning for a secret file readable by group or others:
// a walk saw "secret file readable by group or others ... (chmod 600)"
// logged first, advice about a file serve would not read.
func TestServePipeKeyIsNotWarnedAboutItsMode(t *testing.T) {
	a := redistest.GenerateTLS(t)
	fifo := filepath.Join(t.TempDir(), "p.key")
	if err := posix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	pipe := fifo + " is a named pipe: want a regular file"
	for _, args := range [][]string{
		{"--tls-cert-file", a.Cert, "--tls-key-file", fifo},
		{"--redis", "rediss://127.0.0.1:1/0", "--redis-cert-file", a.Cert, "--redis-key-file", fifo},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, binary(t), append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
		var errOut strings.Builder
		cmd.Stderr = &errOut
		err := cmd.Run()
		timedOut := ctx.Err() != nil
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || timedOut || !strings.Contains(errOut.String(), pipe) {
			t.Errorf("serve %v: %v (killed after a minute: %v), stderr %q; want exit status 1 and %q", args, err, timedOut, errOut.String(), pipe)
		}
		if strings.Contains(errOut.String(), "readable by group or others") {
			t.Errorf("serve %v warns about the mode of a named pipe it does not read: %q", args, errOut.String())
		}
	}
}
