package redistest

import "syscall"

// sysProcAttr puts each server in its own process group, so a Ctrl-C aimed at
// the test does not reach it half-way, and asks the kernel to SIGKILL it if
// the test process dies without running its cleanups, so no orphan is left.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
