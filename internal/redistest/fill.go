package redistest

import (
	"bufio"
	"net"
	"strings"
	"testing"
)

// fillLimit bounds the connections FillClients opens.
const fillLimit = 200

// FillClients opens connections to the server (or sentinel) at addr,
// each answering a PING, until it refuses one at its maxclients limit
// ("-ERR max number of clients reached"), and holds them open until the
// test ends: every new connection is then refused. The server must have
// been started with a small --maxclients (a sentinel takes it only on
// its command line: StartSentinelArgs); FillClients fails the test if
// fillLimit connections were not enough.
func FillClients(t testing.TB, addr string) {
	t.Helper()
	for range fillLimit {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("redistest: filling %s: %v", addr, err)
		}
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			t.Fatalf("redistest: filling %s: %v", addr, err)
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if strings.HasPrefix(line, "-ERR max number of clients") {
			_ = c.Close()
			return
		}
		if err != nil {
			_ = c.Close()
			t.Fatalf("redistest: filling %s: answered %q, %v", addr, line, err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
	t.Fatalf("redistest: %s took %d connections: not at its maxclients limit", addr, fillLimit)
}
