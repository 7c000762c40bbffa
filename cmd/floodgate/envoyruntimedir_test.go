package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/posix"
)

// TestEnvoyCompatRefusesMissingRuntimeDirectory: with
// RUNTIME_WATCH_ROOT=false, a runtime directory that does not exist (a
// mistyped RUNTIME_SUBDIRECTORY, a volume not mounted) stops the start
// with exit status 1 and a message naming the directory and the
// settings, as theirs panics (unable to watch file); envoy-compat started
// healthy and answered every request OK without a limit, with one
// warning. With RUNTIME_WATCH_ROOT=true both still start.
func TestEnvoyCompatRefusesMissingRuntimeDirectory(t *testing.T) {
	root := filepath.Join(t.TempDir(), "rt")
	if err := os.MkdirAll(filepath.Join(root, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), "envoy-compat")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "BACKEND_TYPE=memory", "USE_STATSD=false",
		"HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "PORT=0", "GRPC_PORT=0", "DEBUG_PORT=0",
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=nonexist", "RUNTIME_WATCH_ROOT=false"}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1\n%s", err, out)
	}
	for _, want := range []string{filepath.Join(root, "nonexist", "config"), `RUNTIME_SUBDIRECTORY="nonexist"`, "RUNTIME_WATCH_ROOT=false", "no such file or directory"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output does not name %q:\n%s", want, out)
		}
	}

	p := startCompat(t, "BACKEND_TYPE=memory", "USE_STATSD=false", "RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=nonexist", "RUNTIME_WATCH_ROOT=true")
	if err := p.Stop(t); err != nil {
		t.Errorf("RUNTIME_WATCH_ROOT=true: exit after SIGTERM: %v", err)
	}
}

// TestEnvoyCompatSIGTERMWithRuntimeFileSwappedToFIFO: a descriptor file
// whose link is swapped, again and again, between a regular file and a
// named pipe while the runtime directory is polled every 10 ms, and left
// on the pipe, does not keep envoy-compat from exiting after SIGTERM. An
// outside re-walk found a reload blocked in the pipe's open (the file
// was checked regular, then opened again by path) and envoy-compat still
// running 16 s after SIGTERM, its shutdown waiting for the reload.
func TestEnvoyCompatSIGTERMWithRuntimeFileSwappedToFIFO(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	store := filepath.Join(root, "store")
	for _, d := range []string{dir, store} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const limit = "domain: %s\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n"
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(strings.ReplaceAll(limit, "%s", "a")), 0o644); err != nil {
		t.Fatal(err)
	}
	regular, fifo := filepath.Join(store, "b.yaml"), filepath.Join(store, "p.fifo")
	if err := os.WriteFile(regular, []byte(strings.ReplaceAll(limit, "%s", "b")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := posix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "b.yaml")
	swap := func(target string) {
		tmp := filepath.Join(dir, "tmp.lnk")
		if err := os.Symlink(target, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, link); err != nil {
			t.Fatal(err)
		}
	}
	swap(regular)
	p := startCompatArgs(t, []string{"--reload-interval", "10ms"}, "BACKEND_TYPE=memory", "USE_STATSD=false",
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false")
	for i, end := 0, time.Now().Add(4*time.Second); time.Now().Before(end); i++ {
		swap([]string{fifo, regular}[i%2])
	}
	swap(fifo)
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
		if err := p.Err(); err != nil {
			t.Fatalf("envoy-compat exited with %v after SIGTERM", err)
		}
	case <-time.After(8 * time.Second):
		// Let a blocked open return, so that the cleanup ends it.
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		t.Fatal("envoy-compat still running 8 s after SIGTERM")
	}
}
