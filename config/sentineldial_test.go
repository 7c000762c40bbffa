package config

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/luascript"
)

// A script call whose primary could not be found, because every sentinel
// broke its connection after being asked (as a sentinel refusing the
// client's certificate does under TLS 1.3: the alert comes after the
// client's first write), was never sent to the primary: it is
// unavailable, not indeterminate. An outside walk saw envoy-compat behind
// such sentinels call every failure "outcome indeterminate".
func TestSentinelsUnreachableIsNotSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { // read what the client writes, then reset
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				var buf [64]byte
				c.Read(buf[:])
				if tc, ok := c.(*net.TCPConn); ok {
					tc.SetLinger(0)
				}
				c.Close()
			}()
		}
	}()
	client, err := Redis{SentinelAddrs: []string{ln.Addr().String()}, SentinelMaster: "mymaster"}.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = luascript.New("return 1", luascript.Options{}).Run(ctx, client, []string{"k"})
	if err == nil {
		t.Fatal("a script call through sentinels that reset every connection succeeded")
	}
	if !errors.Is(err, floodgate.ErrStoreUnavailable) || errors.Is(err, floodgate.ErrIndeterminate) {
		t.Errorf("error %q: want floodgate.ErrStoreUnavailable (nothing reached the primary), not indeterminate", err)
	}
}
