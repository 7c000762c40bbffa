package luascript_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/luascript"
	"github.com/redis/go-redis/v9"
)

// counter increments KEYS[1] (which expires a minute later) and returns the
// new count: a script whose every run shows.
var counter = luascript.New(`
local n = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], 60000)
return n`, luascript.Options{})

// slowCounter increments KEYS[1], then keeps the server busy for ARGV[1]
// microseconds before it replies.
var slowCounter = luascript.New(`
local n = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], 60000)
local function us() local t = redis.call('TIME') return t[1] * 1000000 + t[2] end
local stop = us() + tonumber(ARGV[1])
while us() < stop do end
return n`, luascript.Options{})

// keySeq makes keys unique within one test binary run.
var keySeq atomic.Int64

// uniqueKey returns a key no other test (or run) uses.
func uniqueKey(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("fgt:luascript:{%s.%x.%d}", strings.ReplaceAll(t.Name(), "/", "."), time.Now().UnixNano()&0xffffffffff, keySeq.Add(1))
}

// count returns the integer stored at key, 0 when there is none.
func count(t *testing.T, c *redis.Client, key string) int64 {
	t.Helper()
	n, err := c.Get(context.Background(), key).Int64()
	if err == redis.Nil {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// commandStats returns the server's INFO commandstats, whose lines read
// "cmdstat_evalsha:calls=3,usec=...".
func commandStats(t *testing.T, c *redis.Client) string {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// cutter is a loopback TCP proxy to a Redis server. Once armed, it lets the
// next EVALSHA through to the server and then cuts that connection when
// the server's reply arrives, dropping the reply: the script ran, and the
// client sees its connection end.
type cutter struct {
	ln     net.Listener
	target string
	armed  atomic.Bool
	cuts   atomic.Int64
}

// startCutter starts a cutter in front of target; it stops at cleanup.
func startCutter(t *testing.T, target string) *cutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutter{ln: ln, target: target}
	var wg sync.WaitGroup
	wg.Go(func() { p.serve(&wg) })
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return p
}

// Addr is the address clients dial.
func (p *cutter) Addr() string { return p.ln.Addr().String() }

func (p *cutter) serve(wg *sync.WaitGroup) {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		var once sync.Once
		closeBoth := func() { once.Do(func() { client.Close(); server.Close() }) }
		var cut atomic.Bool
		wg.Go(func() {
			defer closeBoth()
			pipe(client, server, func(b []byte) bool {
				if bytes.Contains(bytes.ToLower(b), []byte("evalsha")) && p.armed.CompareAndSwap(true, false) {
					cut.Store(true)
				}
				return true
			})
		})
		wg.Go(func() {
			defer closeBoth()
			pipe(server, client, func([]byte) bool {
				if cut.Load() {
					p.cuts.Add(1)
					return false
				}
				return true
			})
		})
	}
}

// pipe copies from src to dst until either fails or pass, shown each chunk
// before it is forwarded, returns false.
func pipe(src, dst net.Conn, pass func([]byte) bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !pass(buf[:n]) {
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
