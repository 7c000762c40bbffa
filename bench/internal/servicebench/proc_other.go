//go:build !linux

package servicebench

import "syscall"

// sysProcAttr gives a service its own process group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
