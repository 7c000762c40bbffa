package faulttest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// adminClient is a client for the test's own commands (SCRIPT FLUSH,
// CLIENT PAUSE, DEBUG SLEEP...), with room for slow ones.
func adminClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 10 * time.Second, MaxRetries: -1, PoolSize: 2, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func admin(t *testing.T, c *redis.Client, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
}

// TestScriptFlushMidTraffic flushes Redis's script cache again and again
// under concurrent decisions. A decision that meets NOSCRIPT is sent again
// with the script's body (nothing ran the first time), so each counts
// exactly once: Redis's counter equals the number of decisions, all
// central.
func TestScriptFlushMidTraffic(t *testing.T) {
	leakCheck(t)
	srv := redistest.Start(t)
	r := newRig(t, newClient(t, srv.Addr), fallback.Options{Budgets: map[string]time.Duration{"flush": exactBudget, "exact": exactBudget}})
	adm := adminClient(t, srv.Addr)
	const workers, each, limit = 4, 50, 1000
	p := policy(t, "flush", limit)

	stop := make(chan struct{})
	flushed := make(chan int)
	go func() {
		n := 0
		defer func() { flushed <- n }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			if err := adm.ScriptFlush(context.Background()).Err(); err != nil {
				t.Errorf("SCRIPT FLUSH: %v", err)
				return
			}
			n++
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				_, o, err := r.decide(context.Background(), p, "shared")
				if err != nil || o.Degraded {
					t.Errorf("worker %d request %d: error %v, outcome %+v; want central", w, i, err, o)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	n := <-flushed
	peek, err := r.central(srv).Peek(context.Background(), p, "shared")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("MEASURE SCRIPT FLUSH: %d flushes during %d decisions; Redis counted %d", n, workers*each, limit-peek.Remaining)
	if got := limit - peek.Remaining; got != workers*each {
		t.Fatalf("Redis counted %d decisions, want exactly %d", got, workers*each)
	}
	if n == 0 {
		t.Fatal("no SCRIPT FLUSH ran during the decisions")
	}
}

// stall runs a fault (CLIENT PAUSE, DEBUG SLEEP...) that makes Redis stop
// answering for about d, under load, and checks degradation and recovery.
func stall(t *testing.T, r *rig, what string, d time.Duration, fault func()) {
	t.Helper()
	const limit = 50
	p := policy(t, "api", limit)
	l := r.startLoad(p, 8, ids("user-", 4))
	time.Sleep(200 * time.Millisecond)
	fault()
	took := r.waitCentral(p)
	time.Sleep(200 * time.Millisecond)
	l.stop()
	if l.degraded.Load() == 0 || !r.watch.opened(fallback.DefaultPartition) {
		t.Fatalf("%s: %d degraded decisions, breaker opened %v", what, l.degraded.Load(), r.watch.opened(fallback.DefaultPartition))
	}
	worst := l.report(fmt.Sprintf("%s for %v (central again %v after it ended)", what, d, took.Round(time.Millisecond)), limit)
	if worst > 2*limit {
		t.Fatalf("an identity was admitted %d times, above the 2×%d bound (central + local)", worst, limit)
	}
	r.checkCounted(l.degraded.Load() + r.probesDegraded())
	r.checkExact()
}

// TestClientPause pauses every client for a second: commands wait in
// Redis, decisions time out and are taken locally, and the paused commands
// run when the pause ends (counted centrally as well: over-counting, not
// over-admission).
func TestClientPause(t *testing.T) {
	leakCheck(t)
	srv := redistest.Start(t)
	r := newRig(t, newClient(t, srv.Addr), fallback.Options{})
	adm := adminClient(t, srv.Addr)
	stall(t, r, "CLIENT PAUSE ALL", time.Second, func() {
		admin(t, adm, "CLIENT", "PAUSE", 1000, "ALL")
		time.Sleep(time.Second)
	})
}

// TestBusyServer blocks Redis's single thread with DEBUG SLEEP, as a slow
// script or a huge KEYS would.
func TestBusyServer(t *testing.T) {
	leakCheck(t)
	srv := redistest.Start(t, "--enable-debug-command", "yes")
	r := newRig(t, newClient(t, srv.Addr), fallback.Options{})
	adm := adminClient(t, srv.Addr)
	stall(t, r, "DEBUG SLEEP (busy server)", time.Second, func() {
		admin(t, adm, "DEBUG", "SLEEP", 1)
	})
}

// TestClientKill kills every client connection ten times in a second:
// in-flight decisions fail (indeterminate), the pool redials.
func TestClientKill(t *testing.T) {
	leakCheck(t)
	srv := redistest.Start(t)
	r := newRig(t, newClient(t, srv.Addr), fallback.Options{})
	adm := adminClient(t, srv.Addr)
	const limit = 50
	p := policy(t, "api", limit)
	l := r.startLoad(p, 8, ids("user-", 4))
	time.Sleep(200 * time.Millisecond)
	for range 10 {
		admin(t, adm, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
		time.Sleep(100 * time.Millisecond)
	}
	r.waitCentral(p)
	time.Sleep(200 * time.Millisecond)
	l.stop()
	if l.degraded.Load() == 0 {
		t.Fatal("killing the clients' connections degraded no decision")
	}
	worst := l.report("CLIENT KILL TYPE normal, 10 times in 1s", limit)
	if worst > 2*limit {
		t.Fatalf("an identity was admitted %d times, above the 2×%d bound", worst, limit)
	}
	r.checkCounted(l.degraded.Load() + r.probesDegraded())
	r.checkExact()
}

// TestOutOfMemory fills a Redis with maxmemory and noeviction: every
// decision that must write is refused with OOM (nothing written), taken
// locally; deleting the filler brings central counting back.
func TestOutOfMemory(t *testing.T) {
	leakCheck(t)
	srv := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	r := newRig(t, newClient(t, srv.Addr), fallback.Options{})
	adm := adminClient(t, srv.Addr)
	ctx := context.Background()
	filler := strings.Repeat("x", 16<<10)
	var keys []string
	for i := 0; ; i++ {
		if i > 10_000 {
			t.Fatal("Redis never reported OOM")
		}
		key := fmt.Sprint("filler:", i)
		err := adm.Set(ctx, key, filler, 0).Err()
		if err != nil {
			if !strings.HasPrefix(err.Error(), "OOM") {
				t.Fatalf("filling: %v", err)
			}
			break
		}
		keys = append(keys, key)
	}
	const limit = 10
	p := policy(t, "api", limit)
	admitted := 0
	for i := range 30 {
		res, o, err := r.decide(ctx, p, "u1")
		if err != nil || !o.Degraded {
			t.Fatalf("request %d on a full Redis: error %v, outcome %+v; want a local decision", i, err, o)
		}
		if i == 0 && (o.Reason != fallback.ReasonUnavailable || !strings.Contains(o.Err.Error(), "OOM")) {
			t.Fatalf("first refusal: %+v; want unavailable (OOM, nothing written)", o)
		}
		if res.Allowed {
			admitted++
		}
	}
	if admitted != limit {
		t.Fatalf("%d admitted locally, want %d", admitted, limit)
	}
	r.checkCounted(30)
	for i := 0; i < len(keys); i += 100 {
		if err := adm.Unlink(ctx, keys[i:min(i+100, len(keys))]...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	took := r.waitCentral(p)
	t.Logf("MEASURE OOM (maxmemory 4mb, noeviction): 30 decisions local (%d admitted for a limit of %d); central again %v after the filler was deleted", admitted, limit, took.Round(time.Millisecond))
	peek, err := r.central(srv).Peek(ctx, p, "u1")
	if err != nil {
		t.Fatal(err)
	}
	if peek.Remaining != limit {
		t.Fatalf("Redis shows %d of %d remaining for u1: an OOM-refused decision wrote", peek.Remaining, limit)
	}
	r.checkExact()
}
