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

// TestServeRefusesFIFOConfig: serve --config of a named pipe (mkfifo,
// <(command), /dev/stdin) exits 1 at start naming it, without opening it.
// A new-user walk found the start wait for a writer, or, given one,
// start and then reject the pipe's empty second read every second.
func TestServeRefusesFIFOConfig(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "ff.yaml")
	if err := posix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), "serve", "--addr", "127.0.0.1:0", "--config", fifo)
	var errOut strings.Builder
	cmd.Stderr = &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || ctx.Err() != nil {
		t.Fatalf("serve --config of a named pipe: %v (context %v), want exit status 1; stderr %q", err, ctx.Err(), errOut.String())
	}
	if want := "--config " + fifo + " is a named pipe: want a regular file"; !strings.Contains(errOut.String(), want) {
		t.Fatalf("stderr %q, want it to contain %q", errOut.String(), want)
	}
}

// TestServeConfigReplacedByFIFO: a --config reached through a symbolic
// link (as a Kubernetes ConfigMap's ..data) starts, and when the link is
// swapped to a named pipe, each poll and a SIGHUP log the source
// unreadable, naming the pipe, without opening it; SIGTERM then exits
// within --shutdown-delay and the drains. The walk found the poll blocked
// in the pipe's open for good, the SIGHUP's outcome never logged and
// SIGTERM never ending the process.
func TestServeConfigReplacedByFIFO(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	fifo := filepath.Join(dir, "pipe.yaml")
	link := filepath.Join(dir, "floodgate.yaml")
	if err := os.WriteFile(good, []byte("version: \"f1\"\npolicies:\n  - name: api\n    layers:\n      - {name: u, algorithm: fixed_window, limit: 5, window: 1m, dimension: user}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := posix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	svc := startService(t, "--config", link, "--reload-interval", "50ms", "--shutdown-delay", "0s", "--drain-timeout", "1s")
	tmp := link + ".tmp"
	if err := os.Symlink(fifo, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
	const unreadable = "configuration source unreadable; keeping the last good configuration"
	waitFor(t, "the named pipe logged as unreadable", func() bool {
		rec, ok := svc.Logged(unreadable)
		return ok && strings.Contains(rec["error"], link+" is a named pipe: want a regular file")
	})
	if err := svc.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the SIGHUP's outcome logged", func() bool { return strings.Count(svc.Logs(), unreadable) >= 2 })
	if err := svc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-svc.Done():
		if err := svc.Err(); err != nil {
			t.Fatalf("serve exited with %v after SIGTERM", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("serve still running 10 s after SIGTERM (--shutdown-delay 0s, --drain-timeout 1s):\n%s", svc.Logs())
	}
}
