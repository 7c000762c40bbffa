package sentinelfollow

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// waitStatus polls f.Status until ok accepts it, for at most 15 s (each
// round takes a second), and returns it; it fails t otherwise.
func waitStatus(t *testing.T, f *Follower, what string, ok func(Status) bool) Status {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st := f.Status()
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: Status() = %+v", what, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestStatusCountsSentinelsAnswering: Status says how many of the
// sentinels answered the last round and whether a majority named a
// primary: all three and yes while they run, none and no once they are
// stopped, the primary named last kept. An outside walk stopped every
// sentinel: the service went on with the primary, and only one log line
// said that a failover would not be followed; serve's gauges and /readyz
// read Status.
func TestStatusCountsSentinelsAnswering(t *testing.T) {
	s := redistest.StartSentinel(t)
	f := New(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs})
	if got := f.Status(); got != (Status{Sentinels: 3}) {
		t.Errorf("Status() before Run = %+v, want 3 sentinels, none answering", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx, nil) }()
	defer func() { cancel(); <-done }()
	// Services wait for the first round before they listen, so that
	// their first /readyz tells what the sentinels said.
	if !f.WaitAsked(ctx) {
		t.Fatal("WaitAsked: no first round within twice a round's time")
	}
	if st := f.Status(); !st.Asked || !st.Majority || st.Primary != s.Primary.Addr {
		t.Errorf("Status() after WaitAsked = %+v, want asked, a majority naming %s", st, s.Primary.Addr)
	}
	// A round decides once two agree: the third is counted as it comes.
	waitStatus(t, f, "three answering, a majority", func(st Status) bool {
		return st == Status{Asked: true, Sentinels: 3, Answering: 3, Majority: true, Primary: s.Primary.Addr}
	})
	s.Sentinels[0].Stop()
	waitStatus(t, f, "two answering, a majority", func(st Status) bool {
		return st == Status{Asked: true, Sentinels: 3, Answering: 2, Majority: true, Primary: s.Primary.Addr}
	})
	s.Sentinels[1].Stop()
	s.Sentinels[2].Stop()
	waitStatus(t, f, "none answering, no majority", func(st Status) bool {
		return st == Status{Asked: true, Sentinels: 3, Answering: 0, Majority: false, Primary: s.Primary.Addr}
	})
}

// TestWaitAskedWithFrozenSentinels: with every sentinel frozen
// (connections accepted, nothing answered), the first round still ends
// within a round's bound, so WaitAsked, which services wait on before
// they listen, returns with it counted. Before, Run subscribed to each
// sentinel's +switch-master first, one after the other, each waiting up
// to askTimeout: the first round began after 1.5 s, and WaitAsked gave
// up after its 1 s having waited for nothing (a review: serve's start
// 1 s longer with three frozen sentinels).
func TestWaitAskedWithFrozenSentinels(t *testing.T) {
	var addrs []string
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var held []net.Conn
		t.Cleanup(func() {
			ln.Close()
			mu.Lock()
			defer mu.Unlock()
			for _, c := range held {
				c.Close()
			}
		})
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				held = append(held, c)
				mu.Unlock()
			}
		}()
		addrs = append(addrs, ln.Addr().String())
	}
	f := New(&redis.FailoverOptions{MasterName: "frozen", SentinelAddrs: addrs})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx, nil) }()
	defer func() { cancel(); <-done }()
	if !f.WaitAsked(ctx) {
		t.Fatalf("WaitAsked with three frozen sentinels: the first round was not counted within twice its bound (Status %+v)", f.Status())
	}
	if st := f.Status(); !st.Asked || st.Majority || st.Answering != 0 {
		t.Errorf("Status() after the first round with three frozen sentinels = %+v, want asked, none answering, no majority", st)
	}
}
