package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// runWithStdin runs the binary with args, stdin as its standard input,
// and returns its exit code, standard output and standard error.
func runWithStdin(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), out.String(), errOut.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, out.String(), errOut.String()
}

// TestConfigStdin: "config validate -" and "config push -" read standard
// input (an outside walk found "-" taken for a file name), and name it
// <stdin> in their messages; push publishes it to a real Redis.
func TestConfigStdin(t *testing.T) {
	if code, out, errOut := runWithStdin(t, e2eConfig, "config", "validate", "-"); code != 0 || !strings.Contains(out, `<stdin>: OK (version "1", 2 policies`) {
		t.Fatalf("validate - of a valid document: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	bad := strings.Replace(e2eConfig, "algorithm: token_bucket", "algorithm: token-bucket", 1)
	if code, _, errOut := runWithStdin(t, bad, "config", "validate", "-"); code != 1 || !strings.Contains(errOut, `<stdin>:9:37: layer "per-user" of policy "api": unknown algorithm "token-bucket"`) {
		t.Fatalf("validate - of an invalid document: exit %d, stderr %q", code, errOut)
	}
	envoyDoc := "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n"
	if code, out, errOut := runWithStdin(t, envoyDoc, "config", "validate", "-"); code != 0 || !strings.Contains(out, `<stdin>: OK (Envoy descriptors, domain "edge", 1 rule)`) {
		t.Fatalf("validate - of Envoy descriptors: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	rs := redistest.Start(t)
	prefix := fmt.Sprintf("stdin%d", time.Now().UnixNano())
	url := "redis://" + rs.Addr + "/0"
	if code, _, errOut := runWithStdin(t, bad, "config", "push", "-", "--redis", url, "--prefix", prefix); code != 1 || !strings.Contains(errOut, `<stdin>:9:37: layer "per-user"`) {
		t.Fatalf("push - of an invalid document: exit %d, stderr %q", code, errOut)
	}
	if code, out, errOut := runWithStdin(t, e2eConfig, "config", "push", "-", "--redis", url, "--prefix", prefix); code != 0 || !strings.Contains(out, `published version "1"`) {
		t.Fatalf("push -: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if got, err := rs.Client(t).Get(context.Background(), prefix+":config").Result(); err != nil || got != e2eConfig {
		t.Fatalf("stored document %q, %v; want what was given on standard input", got, err)
	}
}

// TestConfigValidateWarnsWithoutVersion: a file without a version field
// (or with an empty one) is valid, as serve --config runs it, but config
// push refuses it: validate passes it with a warning saying so and why a
// version matters (it passed it silently).
func TestConfigValidateWarnsWithoutVersion(t *testing.T) {
	dir := t.TempDir()
	for name, doc := range map[string]string{
		"none.yaml":  strings.Replace(e2eConfig, `version: "1"`, "", 1),
		"empty.yaml": strings.Replace(e2eConfig, `version: "1"`, `version: ""`, 1),
	} {
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := cli("config", "validate", file)
		if code != 0 || !strings.Contains(out, file+`: OK (version ""`) {
			t.Errorf("%s: exit %d, stdout %q; want 0 and OK", name, code, out)
		}
		for _, want := range []string{file + ": warning: no version field: config push would refuse it", "floodgate_config_version_regressions_total"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("%s: stderr %q lacks %q", name, errOut, want)
			}
		}
	}
	// A file with a version gets no such warning.
	file := filepath.Join(dir, "v.yaml")
	os.WriteFile(file, []byte(e2eConfig), 0o644)
	if _, _, errOut := cli("config", "validate", file); strings.Contains(errOut, "version") {
		t.Errorf("a file with a version: stderr %q", errOut)
	}
}

// TestConfigValidatePipe: validate reads a pipe given by name
// (<(command) is /dev/fd/N, cat s.yaml | ... /dev/stdin) once, and tells
// an Envoy descriptor file from a policies file by those bytes: it read
// the first bytes to tell them apart, then the file again, and the pipe's
// second read was empty ("empty document: want a mapping with a policies
// list", exit 1, for a valid document).
func TestConfigValidatePipe(t *testing.T) {
	envoyDoc := "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n"
	for _, tc := range []struct{ doc, want string }{
		{e2eConfig, `/dev/fd/3: OK (version "1", 2 policies`},
		{envoyDoc, `/dev/fd/3: OK (Envoy descriptors, domain "edge", 1 rule)`},
	} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			_, _ = w.WriteString(tc.doc)
			w.Close()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, binary(t), "config", "validate", "/dev/fd/3")
		cmd.ExtraFiles = []*os.File{r} // descriptor 3 in the child
		out, err := cmd.CombinedOutput()
		cancel()
		r.Close()
		if err != nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("validate /dev/fd/3 (a pipe): %v, output %q; want %q", err, out, tc.want)
		}
	}
	if code, out, errOut := runWithStdin(t, e2eConfig, "config", "validate", "/dev/stdin"); code != 0 || !strings.Contains(out, `/dev/stdin: OK (version "1", 2 policies`) {
		t.Errorf("validate /dev/stdin (a pipe): exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
