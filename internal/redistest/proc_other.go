//go:build !linux

package redistest

import "syscall"

// sysProcAttr returns no special attributes outside Linux: servers are
// stopped by the test's cleanups only.
func sysProcAttr() *syscall.SysProcAttr { return nil }
