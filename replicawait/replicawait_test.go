package replicawait_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/concurrency"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/quota"
	"github.com/floodgate-rl/floodgate/replicawait"
	"github.com/redis/go-redis/v9"
)

// startPair starts a primary and a replica of it, and waits until the
// replica's link is up.
func startPair(t *testing.T) (primary, replica *redistest.Server) {
	t.Helper()
	primary = redistest.Start(t)
	replica = redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	rc := replica.Client(t)
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := rc.Info(context.Background(), "replication").Result()
		if err == nil && containsLine(info, "master_link_status:up") {
			return primary, replica
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s never linked to %s: %v %s", replica.Addr, primary.Addr, err, info)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func containsLine(s, line string) bool {
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\n' {
			i++
		}
		if l := s[:i]; l == line || l == line+"\r" {
			return true
		}
		if i == len(s) {
			break
		}
		s = s[i+1:]
	}
	return false
}

func newQuota(t *testing.T, c quota.Client, limit int64) *quota.Quota {
	t.Helper()
	store, err := quota.NewRedisStore(c)
	if err != nil {
		t.Fatal(err)
	}
	q, err := quota.New(store, quota.Policy{Name: "tokens", Limit: limit, Calendar: quota.Calendar{Unit: quota.Month}}, quota.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func signal(t *testing.T, s *redistest.Server, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(s.Pid, sig); err != nil {
		t.Fatalf("signal %v to redis-server %d: %v", sig, s.Pid, err)
	}
}

func TestNewRefuses(t *testing.T) {
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer single.Close()
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	var nilClient *redis.Client
	for _, tc := range []struct {
		name string
		c    redis.UniversalClient
		o    replicawait.Options
	}{
		{"no replicas", single, replicawait.Options{}},
		{"negative replicas", single, replicawait.Options{Replicas: -1}},
		{"too many replicas", single, replicawait.Options{Replicas: replicawait.MaxReplicas + 1}},
		{"negative timeout", single, replicawait.Options{Replicas: 1, Timeout: -time.Second}},
		{"ring", ring, replicawait.Options{Replicas: 1}},
		{"nil client", nilClient, replicawait.Options{Replicas: 1}},
		{"nil interface", nil, replicawait.Options{Replicas: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c, err := replicawait.New(tc.c, tc.o); err == nil {
				t.Fatalf("New = %v, want an error", c)
			}
		})
	}
}

// TestAnsweredOnceReplicated: with its replica stopped, a primary applies a
// reserve and a settle but the Client does not answer them as done; the
// error says the write may be lost. Once the replica runs again, the
// retried operations are replayed (applied once) and answered.
func TestAnsweredOnceReplicated(t *testing.T) {
	primary, replica := startPair(t)
	pc := primary.Client(t)
	w, err := replicawait.New(pc, replicawait.Options{Replicas: 1, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	q := newQuota(t, w, 1000)
	ctx := context.Background()

	r, err := q.Reserve(ctx, "tenant-1", "req-1", 100)
	if err != nil || !r.Allowed || r.Reserved != 100 {
		t.Fatalf("Reserve with the replica up = %+v, %v; want allowed, 100 reserved", r, err)
	}

	signal(t, replica, syscall.SIGSTOP)
	stopped := true
	defer func() {
		if stopped {
			signal(t, replica, syscall.SIGCONT)
		}
	}()
	_, err = q.Settle(ctx, "tenant-1", "req-1", 70)
	if !errors.Is(err, replicawait.ErrNotReplicated) || !errors.Is(err, floodgate.ErrIndeterminate) {
		t.Fatalf("Settle with the replica stopped: err = %v, want ErrNotReplicated and ErrIndeterminate", err)
	}
	// The primary did apply it: a plain client sees the settlement.
	plain := newQuota(t, pc, 1000)
	if r, err := plain.Status(ctx, "tenant-1"); err != nil || r.Used != 70 || r.Reserved != 0 {
		t.Fatalf("Status on the primary = %+v, %v; want used 70, nothing reserved", r, err)
	}
	_, err = q.Reserve(ctx, "tenant-1", "req-2", 10)
	if !errors.Is(err, replicawait.ErrNotReplicated) {
		t.Fatalf("Reserve with the replica stopped: err = %v, want ErrNotReplicated", err)
	}

	signal(t, replica, syscall.SIGCONT)
	stopped = false
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err = q.Settle(ctx, "tenant-1", "req-1", 70)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || !r.Replayed || r.Used != 70 {
		t.Fatalf("Settle retried with the replica back = %+v, %v; want replayed, used 70", r, err)
	}
	r, err = q.Reserve(ctx, "tenant-1", "req-2", 10)
	if err != nil || !r.Replayed {
		t.Fatalf("Reserve retried = %+v, %v; want replayed", r, err)
	}
	// And the replica holds what was answered.
	rq := newQuota(t, replica.Client(t), 1000)
	if r, err := rq.Status(ctx, "tenant-1"); err != nil || r.Used != 70 || r.Reserved != 10 {
		t.Fatalf("Status on the replica = %+v, %v; want used 70, 10 reserved", r, err)
	}
}

// TestNoReplica: a primary without replicas fails every write after the
// timeout instead of answering it as durable; a failed script is returned
// as it failed, without waiting.
func TestNoReplica(t *testing.T) {
	s := redistest.Start(t)
	w, err := replicawait.New(s.Client(t), replicawait.Options{Replicas: 1, Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	leases, err := concurrency.NewRedisStore(w)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := concurrency.New(leases, concurrency.Policy{Name: "jobs", Limit: 2}, concurrency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = lim.Acquire(context.Background(), "tenant-1")
	if !errors.Is(err, replicawait.ErrNotReplicated) || !errors.Is(err, floodgate.ErrIndeterminate) {
		t.Fatalf("Acquire without a replica: err = %v, want ErrNotReplicated and ErrIndeterminate", err)
	}

	// A script Redis refuses fails as Redis answered, not as unreplicated.
	if err := s.Client(t).Set(context.Background(), "wrongtype", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	cmd := redis.NewCmd(context.Background(), "eval", "return redis.call('HGET', KEYS[1], 'f')", 1, "wrongtype")
	if err := w.Process(context.Background(), cmd); err == nil || errors.Is(err, replicawait.ErrNotReplicated) {
		t.Fatalf("Process of a refused script: err = %v, want Redis's WRONGTYPE", err)
	}
}

// TestSentinelFailoverLosesNothingAnswered runs quota checks from eight
// goroutines through a Sentinel failover client wrapped in a Client, while
// the sentinels fail the primary over (SENTINEL FAILOVER, whose old
// primary keeps accepting writes for a moment after the replica was
// promoted). Every check answered as done must be in the new primary's
// usage. (Without waiting, an outside run of this scenario lost about a
// second of them: docs/quotas.md.)
func TestSentinelFailoverLosesNothingAnswered(t *testing.T) {
	if testing.Short() {
		t.Skip("a Sentinel failover takes seconds")
	}
	s := redistest.StartSentinel(t)
	fc := s.FailoverClient(t)
	w, err := replicawait.New(fc, replicawait.Options{Replicas: 1, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	q := newQuota(t, w, 1<<40)

	var answered, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err := q.Check(ctx, "tenant-1", 1)
				cancel()
				if err != nil {
					failed.Add(1)
					if g == 0 && failed.Load()%50 == 1 {
						t.Logf("check failed: %v", err)
					}
					time.Sleep(5 * time.Millisecond)
					continue
				}
				answered.Add(1)
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	before := answered.Load()
	s.Failover(t)
	// Keep going on the new primary for a while, so that operations sent
	// to the old one until the client noticed are in the count.
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	if before == 0 {
		t.Fatal("no check answered before the failover")
	}

	ctx := context.Background()
	nc := redis.NewClient(&redis.Options{Addr: s.Primary.Addr})
	defer nc.Close()
	r, err := newQuota(t, nc, 1<<40).Status(ctx, "tenant-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("answered %d (%d before the failover), failed %d; usage on the new primary %s: %d",
		answered.Load(), before, failed.Load(), s.Primary.Addr, r.Used)
	if r.Used < answered.Load() {
		t.Fatalf("the new primary counts %d, fewer than the %d checks answered: %d answered checks lost", r.Used, answered.Load(), answered.Load()-r.Used)
	}
	if r.Used > answered.Load()+failed.Load() {
		t.Fatalf("the new primary counts %d, more than the %d checks sent", r.Used, answered.Load()+failed.Load())
	}
}

// TestCluster: each script goes to its key's primary and waits for that
// primary's replicas; only the primary given a replica answers.
func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	c.AddReplica(t, 0)
	cc := c.Client(t)
	w, err := replicawait.New(cc, replicawait.Options{Replicas: 1, Timeout: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	q := newQuota(t, w, 1000)
	ctx := context.Background()
	seen := map[bool]bool{}
	for i := 0; len(seen) < 2 && i < 200; i++ {
		id := fmt.Sprintf("tenant-%d", i)
		key := "{" + floodgate.EncodeIdentity(id) + "}" // the quota's hash tag
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		onReplicated := node.Options().Addr == c.Addrs[0]
		_, err = q.Reserve(ctx, id, "req-1", 1)
		switch {
		case onReplicated && err != nil:
			t.Fatalf("Reserve for %s on %s (with a replica): %v", id, node.Options().Addr, err)
		case !onReplicated && !errors.Is(err, replicawait.ErrNotReplicated):
			t.Fatalf("Reserve for %s on %s (no replica): err = %v, want ErrNotReplicated", id, node.Options().Addr, err)
		}
		seen[onReplicated] = true
	}
	if len(seen) < 2 {
		t.Fatalf("200 identities never reached both kinds of primary: %v", seen)
	}

	// Only script calls can be routed.
	if err := w.Process(ctx, redis.NewStringCmd(ctx, "get", "k")); !errors.Is(err, replicawait.ErrUnsupported) {
		t.Fatalf("GET on a Cluster: err = %v, want ErrUnsupported", err)
	}
}

// BenchmarkQuotaCheck measures one quota check on a primary with a
// replica on this machine, answered at once and answered once replicated.
func BenchmarkQuotaCheck(b *testing.B) {
	primary := redistest.Start(b)
	replica := redistest.Start(b, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	rc := replica.Client(b)
	for {
		info, err := rc.Info(context.Background(), "replication").Result()
		if err == nil && containsLine(info, "master_link_status:up") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	pc := primary.Client(b)
	w, err := replicawait.New(pc, replicawait.Options{Replicas: 1})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		c    quota.Client
	}{{"plain", pc}, {"wait", w}} {
		b.Run(bc.name, func(b *testing.B) {
			store, err := quota.NewRedisStore(bc.c)
			if err != nil {
				b.Fatal(err)
			}
			q, err := quota.New(store, quota.Policy{Name: "bench", Limit: 1 << 40, Calendar: quota.Calendar{Unit: quota.Month}}, quota.Options{})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			for b.Loop() {
				if _, err := q.Check(ctx, "tenant-1", 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
