package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestPushDroppingManyNames: a push that drops more than five names of a
// kind warns once for the kind, with the number and the first five (it
// printed one line per name: 2,999 lines for a 3,000-policy version);
// --list-dropped names each.
func TestPushDroppingManyNames(t *testing.T) {
	url := "redis://" + redistest.Start(t).Addr
	dir := t.TempDir()
	write := func(version string, policies, quotas int) string {
		var b strings.Builder
		fmt.Fprintf(&b, "version: %q\npolicies:\n", version)
		for i := range policies {
			fmt.Fprintf(&b, "  - name: p%02d\n    layers:\n      - {name: u, algorithm: fixed_window, limit: 7, window: 1m, dimension: user}\n", i)
		}
		if quotas > 0 {
			b.WriteString("quotas:\n")
		}
		for i := range quotas {
			fmt.Fprintf(&b, "  - {name: q%02d, limit: 100, period: month, dimension: api_key}\n", i)
		}
		f := filepath.Join(dir, version+".yaml")
		if err := os.WriteFile(f, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	push := func(file string, extra ...string) string {
		t.Helper()
		code, out := runCLI(t, append([]string{"config", "push", file, "--redis", url, "--prefix", "pd"}, extra...)...)
		if code != 0 {
			t.Fatalf("push %s: exit %d\n%s", file, code, out)
		}
		return out
	}
	push(write("1", 40, 3))
	out := push(write("2", 1, 1))
	for _, w := range []string{
		`warning: version "2" drops 39 policies which version "1" defined ("p01", "p02", "p03", "p04", "p05", … 34 more; --list-dropped names them all): requests naming them get 400 unknown-policy`,
		`warning: version "2" drops quota "q01", which version "1" defined: requests naming it get 400 unknown-quota`,
		`warning: version "2" drops quota "q02", which version "1" defined: requests naming it get 400 unknown-quota`,
	} {
		if !strings.Contains(out, w+"\n") {
			t.Errorf("want %q in:\n%s", w, out)
		}
	}
	if n := strings.Count(out, "warning:"); n != 3 {
		t.Errorf("%d warnings, want 3:\n%s", n, out)
	}
	push(write("3", 40, 0))
	out = push(write("4", 1, 0), "--list-dropped")
	if n := strings.Count(out, `warning: version "4" drops policy "p`); n != 39 || !strings.Contains(out, `drops policy "p39"`) {
		t.Errorf("--list-dropped: %d warnings naming a policy, want 39:\n%s", n, out)
	}
}
