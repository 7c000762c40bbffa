//go:build unix

package posix_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/posix"
)

func TestMkfifo(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := posix.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Type(); got != os.ModeNamedPipe {
		t.Errorf("mode type = %v, want %v", got, os.ModeNamedPipe)
	}
}

func TestKillStopCont(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep command:", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := posix.Kill(cmd.Process.Pid, posix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := posix.Kill(cmd.Process.Pid, posix.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

func TestCPUTime(t *testing.T) {
	d, err := posix.CPUTime()
	if err != nil {
		t.Fatal(err)
	}
	if d < 0 {
		t.Errorf("CPUTime() = %v, want ≥ 0", d)
	}
}
