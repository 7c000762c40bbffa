//go:build !unix

package main

import (
	"os"
	"syscall"
)

// raise ends the process with the status a shell gives a death by sig
// (128 plus its number): there is no signal to send to oneself here.
func raise(sig syscall.Signal) { os.Exit(128 + int(sig)) }
