package redisproc

import (
	"os"
	"os/exec"
	"testing"
)

// Require returns when every named binary (default: redis-server) is on
// the PATH. Otherwise it fails t when the environment variable CI is set,
// since CI must install them (see .ci/run), and skips t with a clear
// message elsewhere.
func Require(t testing.TB, bins ...string) {
	t.Helper()
	if len(bins) == 0 {
		bins = []string{"redis-server"}
	}
	for _, bin := range bins {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s not found; CI must install it (apt-get install redis-server redis-tools)", bin)
			}
			t.Skipf("%s not installed; install redis-server and redis-tools to run this test", bin)
		}
	}
}
