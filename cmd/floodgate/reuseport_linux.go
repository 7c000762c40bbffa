//go:build linux

package main

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// reusePort sets SO_REUSEPORT on a listening socket before it binds, so
// that another process of the same user may listen on the same address
// and the kernel spreads new connections between them, as
// envoyproxy/ratelimit's listeners do: a second instance on a host
// (hostNetwork pods rolling on one node, a start-before-stop restart)
// starts beside the first instead of failing with "address already in
// use".
func reusePort(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	}); err != nil {
		return err
	}
	return serr
}
