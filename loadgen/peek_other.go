//go:build !unix

package loadgen

import "net"

// peerClosed reports false: without a recv that neither waits nor
// consumes, a connection the server closed while it was kept alive fails
// the next request on it.
func peerClosed(net.Conn) bool { return false }
