//go:build !unix

package posix

import (
	"errors"
	"syscall"
	"time"
)

// SIGSTOP and SIGCONT carry Linux's numbers here; Kill refuses them.
const (
	SIGSTOP = syscall.Signal(0x13)
	SIGCONT = syscall.Signal(0x12)
)

// Kill returns errors.ErrUnsupported: there are no POSIX signals here.
func Kill(pid int, sig syscall.Signal) error { return errors.ErrUnsupported }

// Mkfifo returns errors.ErrUnsupported: there are no named pipes in the
// file system here.
func Mkfifo(path string, mode uint32) error { return errors.ErrUnsupported }

// CPUTime returns errors.ErrUnsupported: there is no getrusage here.
func CPUTime() (time.Duration, error) { return 0, errors.ErrUnsupported }
