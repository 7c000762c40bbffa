package servicebench

import "syscall"

// sysProcAttr gives a service its own process group (a Ctrl-C aimed at the
// harness does not reach it before the harness stops it) and has the kernel
// kill it if the harness dies without stopping it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
