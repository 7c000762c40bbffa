//go:build !linux

package redisproc

import "syscall"

// sysProcAttr gives the server its own process group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
