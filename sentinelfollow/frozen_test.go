package sentinelfollow

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestCheckDoesNotWaitForAFrozenSentinel: with one sentinel of three
// frozen (SIGSTOP: connections open, nothing answered), a check decides as
// soon as the other two agree. It waited for every answer before, up to
// askTimeout, which an outside walk saw delay a move by half a second (1.5
// s of writes to the old primary instead of 1).
func TestCheckDoesNotWaitForAFrozenSentinel(t *testing.T) {
	s := redistest.StartSentinel(t)
	o := &redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs}
	f := New(o)
	clients := make([]*redis.SentinelClient, len(s.SentinelAddrs))
	for i, a := range s.SentinelAddrs {
		clients[i] = redis.NewSentinelClient(f.opts(a))
		defer clients[i].Close()
	}
	ctx := context.Background()
	f.check(ctx, clients, nil) // connections open to all three
	if got := f.Primary(); got != s.Primary.Addr {
		t.Fatalf("Primary() = %q, want %s", got, s.Primary.Addr)
	}
	frozen := s.Sentinels[2]
	if err := posix.Kill(frozen.Pid, posix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = posix.Kill(frozen.Pid, posix.SIGCONT) }()
	f.mu.Lock()
	f.current = "" // so that the check below must decide again
	f.mu.Unlock()
	start := time.Now()
	f.check(ctx, clients, nil)
	took := time.Since(start)
	if got := f.Primary(); got != s.Primary.Addr {
		t.Fatalf("with a sentinel frozen, Primary() = %q, want %s", got, s.Primary.Addr)
	}
	if took >= askTimeout*4/5 {
		t.Errorf("with a sentinel frozen a check took %v: it waited for the frozen one (askTimeout %v)", took, askTimeout)
	}
}

// TestLeftPrimariesSteerOnlyWhileCurrent: every primary left since stays
// left (after A→B→C both A and B), until named again; and the client is
// steered only while Run runs and a majority answered recently (a review
// found only the last left primary tracked, and the steering kept after
// Run had returned).
func TestLeftPrimariesSteerOnlyWhileCurrent(t *testing.T) {
	f := New(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"s1:1", "s2:1", "s3:1"}})
	f.steer.Store(&steering{left: map[string]struct{}{"a:1": {}, "b:1": {}}, to: "c:1", until: time.Now().Add(staleAfter)})
	for addr, want := range map[string]bool{"a:1": true, "b:1": true, "c:1": false, "s1:1": false} {
		if got := f.isLeft(addr); got != want {
			t.Errorf("isLeft(%s) = %v, want %v", addr, got, want)
		}
	}
	f.steer.Store(&steering{left: map[string]struct{}{"a:1": {}}, to: "c:1", until: time.Now().Add(-time.Second)})
	if f.isLeft("a:1") {
		t.Error("a stale view still steers the client")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f.steer.Store(&steering{left: map[string]struct{}{"a:1": {}}, to: "c:1", until: time.Now().Add(staleAfter)})
	f.Run(ctx, nil) // returns at once: ctx is done
	if f.isLeft("a:1") {
		t.Error("the view steers the client after Run returned")
	}
}

// TestDialMinorityWithTwoSentinelsFrozen: with two sentinels of three
// frozen before the first round, no majority ever names a primary. A
// client made with NewClient that called DialMinority (floodgate
// doctor's) dials the primary the one answering sentinel names, and its
// PING is answered; without DialMinority (serve's) it does not dial it,
// and go-redis asks the sentinels, waiting for the frozen ones: an
// outside walk saw doctor's probe fail after the whole deadline while the
// primary answered.
func TestDialMinorityWithTwoSentinelsFrozen(t *testing.T) {
	s := redistest.StartSentinel(t)
	for _, i := range []int{0, 2} {
		if err := posix.Kill(s.Sentinels[i].Pid, posix.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = posix.Kill(s.Sentinels[i].Pid, posix.SIGCONT) })
	}
	for _, minority := range []bool{false, true} {
		c, f := NewClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs})
		if minority {
			f.DialMinority()
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); f.Run(ctx, nil) }()
		<-f.Asked()
		want := ""
		if minority {
			want = s.Primary.Addr
		}
		if got := f.following(); got != want {
			t.Errorf("DialMinority %v: the client dials %q, want %q", minority, got, want)
		}
		if minority {
			pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := c.Ping(pctx).Err(); err != nil {
				t.Errorf("DialMinority: PING: %v", err)
			}
			pcancel()
		}
		cancel()
		<-done
		_ = c.Close()
	}
}

// TestMajorityLeavesTheMinorityPrimary: with DialMinority (doctor), while
// two sentinels of three are frozen the client dials the primary the one
// answering names; once a majority answers again and names another (a
// failover meanwhile), that primary is left as a current one would be:
// the client's connections to it are steered away and OnMove's function
// is called. The move was not seen (no primary was current), and pooled
// connections to the minority's primary stayed in use.
func TestMajorityLeavesTheMinorityPrimary(t *testing.T) {
	s := redistest.StartSentinel(t)
	c, f := NewClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs})
	defer c.Close()
	f.DialMinority()
	var moves []string
	f.OnMove(func(from, to string) { moves = append(moves, from+" -> "+to) })
	f.runs.Add(1) // as while Run runs: the client follows the Follower
	defer f.runs.Add(-1)
	clients := make([]*redis.SentinelClient, len(s.SentinelAddrs))
	for i, a := range s.SentinelAddrs {
		clients[i] = redis.NewSentinelClient(f.opts(a))
		defer clients[i].Close()
	}
	ctx := context.Background()
	old := s.Primary.Addr
	for _, i := range []int{0, 2} {
		if err := posix.Kill(s.Sentinels[i].Pid, posix.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	thawed := false
	thaw := func() {
		if thawed {
			return
		}
		thawed = true
		for _, i := range []int{0, 2} {
			_ = posix.Kill(s.Sentinels[i].Pid, posix.SIGCONT)
		}
	}
	t.Cleanup(thaw)
	f.check(ctx, clients, nil)
	if got := f.following(); got != old {
		t.Fatalf("with two sentinels frozen the client dials %q, want %s (DialMinority)", got, old)
	}
	thaw()
	s.Failover(t)
	f.check(ctx, clients, nil)
	if got := f.Primary(); got != s.Primary.Addr {
		t.Fatalf("after the failover Primary() = %q, want %s", got, s.Primary.Addr)
	}
	if !f.isLeft(old) {
		t.Errorf("the primary the minority named, %s, is not left once a majority names %s: the client's connections to it stay in use", old, s.Primary.Addr)
	}
	if want := old + " -> " + s.Primary.Addr; len(moves) != 1 || moves[0] != want {
		t.Errorf("OnMove calls %q, want [%s]", moves, want)
	}
}
