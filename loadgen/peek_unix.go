//go:build unix

package loadgen

import (
	"net"
	"syscall"
)

// peerClosed reports whether the server has closed or reset conn: an end
// of stream or an error waits to be read, which a recv that neither waits
// nor consumes sees. Bytes waiting (an answer nobody asked for) count as
// closed too: the connection is out of step. It costs one system call.
func peerClosed(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	closed := false
	var buf [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = n >= 0 && err == nil || err != nil && err != syscall.EAGAIN && err != syscall.EINTR
		return true
	})
	return closed || err != nil
}
