package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/envoyrls"
)

const badEnvoyFile = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"

// TestEnvoyErrorsStartWithPosition: config validate and serve print an
// Envoy descriptor file's problems as file:line:column: message, as they
// print a policies file's, without "envoyrls: invalid configuration"; the
// error still matches envoyrls.ErrInvalidConfig.
func TestEnvoyErrorsStartWithPosition(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "d.yaml")
	if err := os.WriteFile(bad, []byte(badEnvoyFile), 0o600); err != nil {
		t.Fatal(err)
	}
	want := bad + `:4:24: unknown unit "fortnight"`
	for _, args := range [][]string{
		{"config", "validate", bad},
		{"config", "validate", "--envoy", bad},
		{"serve", "--addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--envoy-config", bad},
	} {
		code, out := runCLI(t, args...)
		if code == 0 || strings.Contains(out, "envoyrls:") || strings.Contains(out, "--envoy-config:") || !hasLinePrefix(out, want) {
			t.Errorf("%v: exit %d, want a line starting %q:\n%s", args, code, want, out)
		}
	}
	_, err := envoyrls.ParseConfig([]byte(badEnvoyFile), "d.yaml")
	err = located(errors.Join(err, fmt.Errorf("other")))
	if !errors.Is(err, envoyrls.ErrInvalidConfig) || !strings.HasPrefix(err.Error(), `d.yaml:4:24: unknown unit`) {
		t.Errorf("located: %v", err)
	}
}

// hasLinePrefix reports a line of out, or its text after "floodgate: ",
// starting with prefix.
func hasLinePrefix(out, prefix string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimPrefix(l, "floodgate: "), prefix) {
			return true
		}
	}
	return false
}

// TestValidateSizeMessages: a file over 4 MiB with a top-level domain is
// refused as a too large Envoy descriptor file (it was refused as a too
// large policies file, "larger than 1048576 bytes"), and size messages
// give the file's size.
func TestValidateSizeMessages(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "envoy.yaml")
	data := append([]byte("domain: d\ndescriptors:\n"), strings.Repeat("# padding\n", envoyrls.MaxConfigSize/10+1)...)
	if err := os.WriteFile(big, data, 0o600); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(dir, "policies.yaml")
	pdata := append([]byte("version: \"1\"\npolicies: []\n"), strings.Repeat("# padding\n", 150_000)...)
	if err := os.WriteFile(pol, pdata, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"config", "validate", big}, fmt.Sprintf("%s: file is %d bytes (max 4194304 for an Envoy descriptor file); it is read as one", big, len(data))},
		{[]string{"config", "validate", "--envoy", big}, fmt.Sprintf("%s: file is %d bytes (max 4194304 for an Envoy descriptor file)\n", big, len(data))},
		{[]string{"config", "validate", pol}, fmt.Sprintf("%s: file is %d bytes (max 1048576 for a policies file)\n", pol, len(pdata))},
	} {
		if code, out := runCLI(t, c.args...); code != 1 || !strings.Contains(out, c.want) {
			t.Errorf("%v: exit %d, want %q:\n%s", c.args, code, c.want, out)
		}
	}
}
