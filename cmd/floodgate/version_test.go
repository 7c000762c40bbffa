package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestVersionFlag checks that --version prints the stamped version (the
// container image test in deploy/ checks a build stamped with -ldflags).
func TestVersionFlag(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if got, want := strings.TrimSpace(out.String()), "floodgate version "+version; got != want {
		t.Errorf("--version printed %q, want %q", got, want)
	}
}
