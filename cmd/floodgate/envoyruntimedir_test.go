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
		"HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "PORT=21210", "GRPC_PORT=21211", "DEBUG_PORT=21212",
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

	p := startCompat(t, "BACKEND_TYPE=memory", "USE_STATSD=false", "PORT=21213", "GRPC_PORT=21214", "DEBUG_PORT=21215",
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=nonexist", "RUNTIME_WATCH_ROOT=true")
	if err := p.Stop(t); err != nil {
		t.Errorf("RUNTIME_WATCH_ROOT=true: exit after SIGTERM: %v", err)
	}
}
