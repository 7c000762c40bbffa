//go:build !linux

package main

import "syscall"

// reusePort does nothing here: SO_REUSEPORT's spreading of connections
// between processes is Linux's.
func reusePort(_, _ string, _ syscall.RawConn) error { return nil }
