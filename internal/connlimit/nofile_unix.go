//go:build unix

package connlimit

import "syscall"

// FileLimit returns the process's limit of open file descriptors (the
// soft RLIMIT_NOFILE, which the Go runtime raises to the hard one at
// start), or false when it cannot be read.
func FileLimit() (uint64, bool) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, false
	}
	return uint64(rl.Cur), true
}
