package regularfile_test

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"unsafe"

	"github.com/floodgate-rl/floodgate/internal/regularfile"
)

// TestOpenTTYIsNotMadeControlling: Open of a terminal (refused: not a
// regular file) must not make it the controlling terminal of a process
// that has none. It opened without O_NOCTTY, and a session leader with no
// controlling terminal that Opened a pseudo-terminal's path got it as
// its controlling terminal (/dev/tty then opened). The check runs in a
// child process in a session of its own (setsid), the test binary run
// again.
func TestOpenTTYIsNotMadeControlling(t *testing.T) {
	if os.Getenv("REGULARFILE_CTTY_CHILD") == "1" {
		cttyChild()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpenTTYIsNotMadeControlling$")
	cmd.Env = append(os.Environ(), "REGULARFILE_CTTY_CHILD=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// cttyChild, in a session of its own with no controlling terminal, opens
// a pseudo-terminal through Open and exits 1 if that made it the
// controlling terminal.
func cttyChild() {
	fail := func(format string, a ...any) {
		fmt.Printf(format+"\n", a...)
		os.Exit(1)
	}
	if f, err := os.Open("/dev/tty"); err == nil {
		f.Close()
		fail("the child has a controlling terminal before Open")
	}
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		fail("no pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	var n, unlock uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, ptmx.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		fail("unlock the pseudo-terminal: %v", e)
	}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, ptmx.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		fail("the pseudo-terminal's number: %v", e)
	}
	path := fmt.Sprintf("/dev/pts/%d", n)
	if f, err := regularfile.Open(path); err == nil {
		f.Close()
		fail("Open(%s) = nil error, want an *Error", path)
	}
	if f, err := os.Open("/dev/tty"); err == nil {
		f.Close()
		fail("Open(%s) made it the child's controlling terminal", path)
	}
}
