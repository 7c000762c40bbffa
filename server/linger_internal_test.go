package server

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestDrainCutsLingeringConnections: at the drain timeout, closeAll closes
// a connection that fasthttp is lingering on (after an error answer, its
// client still connected) at once, and that cuts fasthttp's linger short.
// Before, closeAll's Close lingered too, one connection after the other
// under the set's lock: here, with an hour's linger, it never returned.
func TestDrainCutsLingeringConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	raw, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c := &lingerConn{Conn: raw, linger: lingering{time: time.Hour}}
	var conns connSet
	conns.track(c, fasthttp.StateNew)
	c.lingerOnClose()
	first := make(chan error, 1)
	go func() { first <- c.Close() }() // fasthttp's, after the error answer
	// The client sees the writing side shut: the linger has begun.
	if n, err := client.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("client read: %d, %v; want EOF", n, err)
	}
	conns.closeAll()
	if err := <-first; err != nil && !errors.Is(err, net.ErrClosed) {
		t.Fatalf("lingering Close: %v", err)
	}
}
