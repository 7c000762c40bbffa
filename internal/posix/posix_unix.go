//go:build unix

package posix

import (
	"syscall"
	"time"
)

// SIGSTOP and SIGCONT stop and resume a process.
const (
	SIGSTOP = syscall.SIGSTOP
	SIGCONT = syscall.SIGCONT
)

// Kill sends sig to the process pid: syscall.Kill.
func Kill(pid int, sig syscall.Signal) error { return syscall.Kill(pid, sig) }

// Mkfifo creates a named pipe at path with permission bits mode:
// syscall.Mkfifo.
func Mkfifo(path string, mode uint32) error { return syscall.Mkfifo(path, mode) }

// CPUTime returns the user plus system CPU time this process has used
// (getrusage RUSAGE_SELF).
func CPUTime() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
