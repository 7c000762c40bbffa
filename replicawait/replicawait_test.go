package replicawait_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/concurrency"
	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/quota"
	"github.com/floodgate-rl/floodgate/replicawait"
	"github.com/redis/go-redis/v9"
)

// startPair starts a primary and a replica of it, linked.
func startPair(t testing.TB) (primary, replica *redistest.Server) {
	t.Helper()
	primary = redistest.Start(t)
	return primary, redistest.StartReplica(t, primary)
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
	if err := posix.Kill(s.Pid, sig); err != nil {
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
		{"negative bound", single, replicawait.Options{Replicas: 1, MaxConcurrent: -1}},
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
	w, err := replicawait.New(pc, replicawait.Options{Replicas: 1, Timeout: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	q := newQuota(t, w, 1000)
	ctx := context.Background()

	r, err := q.Reserve(ctx, "tenant-1", "req-1", 100)
	if err != nil || !r.Allowed || r.Reserved != 100 {
		t.Fatalf("Reserve with the replica up = %+v, %v; want allowed, 100 reserved", r, err)
	}

	signal(t, replica, posix.SIGSTOP)
	stopped := true
	defer func() {
		if stopped {
			signal(t, replica, posix.SIGCONT)
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

	signal(t, replica, posix.SIGCONT)
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
// as it failed, but only after WAIT's timeout (WAIT was sent with it).
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
	start := time.Now()
	if err := w.Process(context.Background(), cmd); err == nil || errors.Is(err, replicawait.ErrNotReplicated) {
		t.Fatalf("Process of a refused script: err = %v, want Redis's WRONGTYPE", err)
	}
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Errorf("Process of a refused script took %v; want at least the 20ms Timeout: WAIT is pipelined with it and runs anyway", took)
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
	// Until the primary has the replica's first acknowledgement (up to a
	// second after its link is up) a WAIT can expire, and 500 ms was too
	// short for a live replica's answer under load: loaded runs saw "0 of
	// 1 replicas within 500ms" for the replicated primary (3 of 8, and 1
	// of 8 with the wait for the replica alone).
	redistest.WaitReplicaOnline(t, c.Addrs[0], c.AddReplica(t, 0))
	cc := c.Client(t)
	w, err := replicawait.New(cc, replicawait.Options{Replicas: 1, Timeout: 2 * time.Second})
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
	primary, _ := startPair(b)
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

// TestWaitFailureIsIndeterminate: WAIT refused after the script ran (here
// by an ACL without it; a primary demoted between the two answers the
// same way) says the operation may have been applied, never that nothing
// was written: the primary did apply it.
func TestWaitFailureIsIndeterminate(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	admin := s.Client(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "nowait", "on", ">nowait-password", "~*", "&*", "+@all", "-wait").Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Username: "nowait", Password: "nowait-password", ContextTimeoutEnabled: true})
	defer c.Close()
	w, err := replicawait.New(c, replicawait.Options{Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = newQuota(t, w, 1000).Reserve(ctx, "tenant-1", "req-1", 10)
	if !errors.Is(err, replicawait.ErrNotReplicated) || !errors.Is(err, floodgate.ErrIndeterminate) || errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Fatalf("Reserve with WAIT refused: err = %v, want ErrNotReplicated and ErrIndeterminate, not ErrStoreUnavailable", err)
	}
	if r, err := newQuota(t, admin, 1000).Status(ctx, "tenant-1"); err != nil || r.Reserved != 10 {
		t.Fatalf("Status = %+v, %v; want the reservation applied", r, err)
	}
}

// TestBoundedConnections: operations waiting for replicas that do not
// answer hold at most MaxConcurrent of the pool's connections (default:
// half), so other commands on the same client (rate limit decisions, in
// serve) still get one; an operation finding no place before its context
// ends fails unsent.
func TestBoundedConnections(t *testing.T) {
	s := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 4, PoolTimeout: 5 * time.Second, ContextTimeoutEnabled: true})
	defer c.Close()
	w, err := replicawait.New(c, replicawait.Options{Replicas: 1, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	q := newQuota(t, w, 1<<20)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = q.Check(context.Background(), fmt.Sprint("tenant-", i), 1) // no replica: each waits 2s
		}()
	}
	time.Sleep(300 * time.Millisecond) // the first two hold their connections
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := c.Set(ctx, "other", "x", 0).Err(); err != nil {
		t.Fatalf("another command on the pool while operations wait for replicas: %v", err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if _, err := q.Check(short, "tenant-x", 1); !errors.Is(err, replicawait.ErrBusy) || !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Fatalf("an operation finding no place: err = %v, want ErrBusy and ErrStoreUnavailable (not sent)", err)
	}
	// A status does not wait: neither for a place nor for replicas.
	sctx, cancel3 := context.WithTimeout(context.Background(), time.Second)
	defer cancel3()
	if _, err := q.Status(sctx, "tenant-x"); err != nil {
		t.Fatalf("Status while operations wait for replicas: %v", err)
	}
	wg.Wait()
}

// TestClusterSlotMoving: a quota reserve whose keys are being moved to
// another primary follows the ASK redirection (ASKING, the script and WAIT
// on one connection of the new owner), which answers TRYAGAIN until the
// move is finished, and then the MOVED one; it is answered once the new
// owner's replica has it.
func TestClusterSlotMoving(t *testing.T) {
	cl := redistest.StartCluster(t)
	cc := cl.Client(t)
	ctx := context.Background()
	w, err := replicawait.New(cc, replicawait.Options{Replicas: 1, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	q := newQuota(t, w, 1000)
	tag := "{" + floodgate.EncodeIdentity("alice") + "}"
	owner, err := cc.MasterForKey(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	var fromI, toI int
	for i, a := range cl.Addrs {
		if a == owner.Options().Addr {
			fromI = i
		}
	}
	toI = (fromI + 1) % len(cl.Addrs)
	cl.AddReplica(t, fromI)
	cl.AddReplica(t, toI)
	if _, err := q.Reserve(ctx, "alice", "job-1", 10); err != nil {
		t.Fatalf("Reserve before the move: %v", err)
	}
	from, to := cl.Nodes[fromI].Client(t), cl.Nodes[toI].Client(t)
	slot := redisSlot(t, from, tag)
	fromID, toID := from.ClusterMyID(ctx).Val(), to.ClusterMyID(ctx).Val()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(to.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err())
	must(from.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err())
	keys, err := from.ClusterGetKeysInSlot(ctx, int(slot), 100).Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys in slot %d: %v %v", slot, keys, err)
	}
	args := []any{"MIGRATE", "127.0.0.1", cl.Nodes[toI].Port, "", 0, 5000, "KEYS"}
	for _, k := range keys {
		args = append(args, k)
	}
	must(from.Do(ctx, args...).Err())
	tryAgains := func() int {
		for _, line := range strings.Split(to.Info(ctx, "errorstats").Val(), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_TRYAGAIN:count="); ok {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
		return 0
	}
	before := tryAgains()
	// The keys are on the new owner now: the old one answers ASK, and the
	// new one, asked, runs a call only once it holds every key the call
	// names (the previous period's do not exist): TRYAGAIN until the move
	// is finished. The reserve must get through then.
	done := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err := q.Reserve(rctx, "alice", "job-2", 20)
		done <- err
	}()
	deadline := time.Now().Add(20 * time.Second)
	for tryAgains() == before {
		select {
		case err := <-done:
			t.Fatalf("Reserve during the move returned before it was finished: %v (ASK not followed to the new owner?)", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the new owner never answered TRYAGAIN: the ASK redirection was not followed")
		}
		time.Sleep(2 * time.Millisecond)
	}
	must(to.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err())
	must(from.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err())
	for i := range cl.Nodes {
		must(cl.Nodes[i].Client(t).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err())
	}
	if err := <-done; err != nil {
		t.Fatalf("Reserve across the move: %v", err)
	}
	r, err := q.Reserve(ctx, "alice", "job-3", 30)
	if err != nil {
		t.Fatalf("Reserve after the move: %v", err)
	}
	if r.Reserved != 60 {
		t.Fatalf("reserved %d after three reservations, want 60", r.Reserved)
	}
}

func redisSlot(t *testing.T, c *redis.Client, key string) int64 {
	t.Helper()
	n, err := c.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestClusterFailoverFollowsMoved: reserves running through a coordinated
// CLUSTER FAILOVER of their primary are answered once the promoted replica
// (and its own replica) has them; none fails with the MOVED reply of the
// demoted primary (an outside walk saw them answered 503 before MOVED was
// followed). The wait for a slot map naming the promoted node (Process)
// covers a node asked for the map that has not heard of the promotion
// yet, which this small cluster does not reliably produce: the walk saw
// it in two failovers of five on 3 primaries with 2 replicas each.
func TestClusterFailoverFollowsMoved(t *testing.T) {
	if testing.Short() {
		t.Skip("a failover takes seconds")
	}
	cl := redistest.StartCluster(t)
	r1 := cl.AddReplica(t, 0)
	r2 := cl.AddReplica(t, 0)
	// A coordinated failover needs the replica in sync: wait for both
	// (CI runs under load saw the takeover never come).
	redistest.WaitReplicaOnline(t, cl.Addrs[0], r1)
	redistest.WaitReplicaOnline(t, cl.Addrs[0], r2)
	cc := cl.Client(t)
	ctx := context.Background()
	w, err := replicawait.New(cc, replicawait.Options{Replicas: 1, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	q := newQuota(t, w, 1<<40)
	var ids []string
	for i := 0; len(ids) < 8 && i < 2000; i++ {
		id := fmt.Sprint("t", i)
		if m, err := cc.MasterForKey(ctx, "{"+floodgate.EncodeIdentity(id)+"}"); err == nil && m.Options().Addr == cl.Addrs[0] {
			ids = append(ids, id)
		}
	}
	var moved, answered atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := q.Reserve(rctx, id, fmt.Sprint("r", n), 1)
				cancel()
				switch {
				case err == nil:
					answered.Add(1)
				case strings.Contains(err.Error(), "MOVED"):
					moved.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	// A coordinated failover that cannot finish in time (a loaded
	// machine) is abandoned by Redis: ask again, up to three times.
	tookOver := func() bool {
		m, err := cc.MasterForKey(ctx, "{"+floodgate.EncodeIdentity(ids[0])+"}")
		return err == nil && m.Options().Addr == r1.Addr
	}
	for attempt := 1; !tookOver(); attempt++ {
		if attempt > 3 {
			t.Fatal("the replica never took over (three CLUSTER FAILOVERs)")
		}
		if err := r1.Client(t).ClusterFailover(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && !tookOver(); {
			cc.ReloadState(ctx)
			time.Sleep(20 * time.Millisecond)
		}
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("%d reserves answered, %d failed with MOVED", answered.Load(), moved.Load())
	if moved.Load() != 0 {
		t.Fatalf("%d reserves failed with MOVED during the failover (first: %v)", moved.Load(), firstErr.Load())
	}
}

// TestRestoreResultNotReplicated: a restore the primary applied but no
// replica confirmed fails with ErrNotReplicated and comes with its
// Result (the usage set and the one it replaced), for the audit trail.
func TestRestoreResultNotReplicated(t *testing.T) {
	s := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
	defer c.Close()
	w, err := replicawait.New(c, replicawait.Options{Replicas: 1, Timeout: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	q := newQuota(t, w, 1000)
	ctx := context.Background()
	for i, want := range []int64{0, 40} {
		r, err := q.RestorePeriod(ctx, "tenant-r", "", 40)
		if !errors.Is(err, replicawait.ErrNotReplicated) || r.Used != 40 || r.Replaced != want || r.Period.Key == "" {
			t.Fatalf("restore #%d without a replica = %+v, %v; want ErrNotReplicated with used 40, replaced %d", i+1, r, err, want)
		}
	}
}

// TestNoScriptKeepsItsPlace: four lease acquires at once through a Client
// with one place (MaxConcurrent 1), on a primary with an empty script
// cache and no replica (each WAIT takes its whole Timeout). The first
// refused NOSCRIPT is sent again as EVAL in its place, loading the script,
// so that the three queued behind it find it: one NOSCRIPT in all. When
// the EVAL queued for a place again, behind the others, each of them was
// refused NOSCRIPT in turn (four in all), and under a deadline and enough
// callers none loaded the script before giving up ErrBusy: a CI run of
// concurrency's TestUnconfirmedReleasedUnderLoad saw 250 of 250 acquires
// busy.
func TestNoScriptKeepsItsPlace(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	w, err := replicawait.New(c, replicawait.Options{Replicas: 1, Timeout: 50 * time.Millisecond, MaxConcurrent: 1})
	if err != nil {
		t.Fatal(err)
	}
	leases, err := concurrency.NewRedisStore(w)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := concurrency.New(leases, concurrency.Policy{Name: "jobs", Limit: 10}, concurrency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const callers = 4
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, errs[i] = lim.Acquire(ctx, fmt.Sprint("tenant-", i))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		var ue *concurrency.UnconfirmedError
		if !errors.As(err, &ue) {
			t.Errorf("acquire %d: err = %v, want an UnconfirmedError (granted on the primary, no replica)", i, err)
		}
	}
	info, err := c.Info(context.Background(), "errorstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "errorstat_NOSCRIPT:count=1\r") {
		t.Fatalf("%d acquires at once on an empty script cache, one place: want exactly one NOSCRIPT, Redis counted:\n%s", callers, info)
	}

	// A command that cannot be turned into an EVAL is answered NOSCRIPT.
	cmd := redis.NewCmd(context.Background(), "evalsha", strings.Repeat("0", 40), 1, "k")
	if err := w.Process(context.Background(), cmd); err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") {
		t.Fatalf("EVALSHA of an unknown script: err = %v, want NOSCRIPT", err)
	}
}

// TestNoScriptTooLateLoadsTheScript: quota checks under a deadline
// through a Client with one place (MaxConcurrent 1) and one connection,
// on a primary whose script cache was flushed and whose replica is
// stopped after that connection wrote, so that each WAIT (even one after
// a NOSCRIPT, which writes nothing) takes all the time the deadline
// leaves it: WAIT counts the replicas holding the connection's last
// write. The first check's
// NOSCRIPT comes with WAIT's answer, too late for an EVAL, and the checks
// queued behind it get their place too late to be sent: they fail ErrBusy.
// The first loads the script (SCRIPT LOAD) as it gives up, so the checks
// after them are sent (and fail ErrNotReplicated: the replica is still
// stopped). When nothing loaded it, every check met NOSCRIPT in turn and
// failed ErrBusy, for as long as the replica lagged: an outside walk saw
// 0 of 20 lease releases a second sent.
//
// The primary runs at hz 100 (a 10 ms tick), so that WAIT's answer, due
// at the deadline less the answer margin, is not cut off by the deadline
// on a loaded host.
func TestNoScriptTooLateLoadsTheScript(t *testing.T) {
	primary := redistest.Start(t, "--hz", "100")
	replica := redistest.StartReplica(t, primary)
	c := redis.NewClient(&redis.Options{Addr: primary.Addr, ContextTimeoutEnabled: true, PoolSize: 1, PoolTimeout: redistest.PoolTimeout})
	t.Cleanup(func() { _ = c.Close() })
	signal(t, replica, posix.SIGSTOP)
	t.Cleanup(func() { signal(t, replica, posix.SIGCONT) })
	ctx := context.Background()
	if err := c.Set(ctx, "written-while-the-replica-lags", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// A Timeout longer than the deadline: WAIT takes the deadline less
	// the answer margin, and no EVAL can follow the NOSCRIPT.
	w, err := replicawait.New(c, replicawait.Options{Replicas: 1, Timeout: 2 * time.Second, MaxConcurrent: 1})
	if err != nil {
		t.Fatal(err)
	}
	q := newQuota(t, w, 1000)
	check := func(id string) error {
		ctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
		defer cancel()
		_, err := q.Check(ctx, id, 1)
		return err
	}

	const callers = 4
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = check(fmt.Sprint("tenant-", i))
		}()
	}
	wg.Wait()
	busy := 0
	for i, err := range errs {
		switch {
		case errors.Is(err, replicawait.ErrBusy):
			busy++
		case errors.Is(err, replicawait.ErrNotReplicated):
			// Started late enough (a loaded host) to be sent once
			// the first had loaded the script.
		default:
			t.Errorf("check %d on an empty script cache: err = %v, want ErrBusy (no time left for the EVAL, or for WAIT after a place)", i, err)
		}
	}
	if busy == 0 {
		t.Errorf("no check failed ErrBusy: the first, refused NOSCRIPT by WAIT's answer, had time left for an EVAL")
	}
	stats, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stats, "cmdstat_script|load:calls=1,") {
		t.Errorf("the check that met NOSCRIPT too late to send EVAL did not SCRIPT LOAD; Redis counted:\n%s", stats)
	}

	for i := range 2 {
		if err := check("tenant-after"); !errors.Is(err, replicawait.ErrNotReplicated) {
			t.Fatalf("check %d after the first gave up: err = %v, want ErrNotReplicated (sent: the script is loaded; the replica is stopped)", i+1, err)
		}
	}
	errstats, err := c.Info(ctx, "errorstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errstats, "errorstat_NOSCRIPT:count=1\r") {
		t.Fatalf("want exactly one NOSCRIPT (the first check's), Redis counted:\n%s", errstats)
	}
}

// TestNoScriptAfterDeadlineLoadsTheScript: a quota check whose NOSCRIPT
// comes back after its context's deadline (the primary is stopped while
// the check is sent, and resumed once the deadline has passed; the
// client's reads are bounded by ReadTimeout, not by the context) fails
// ErrBusy, and still loads the script, so that the check after it is
// sent as EVALSHA and finds it: one NOSCRIPT in all. SCRIPT LOAD went out
// within the caller's context, which had ended: go-redis refused to send
// it, nothing loaded the script, and every call that met NOSCRIPT as
// late did the same (the deadline less the answer margin, less Redis's
// tick, leaves the context 50 ms at hz 10, none on a stalled host).
func TestNoScriptAfterDeadlineLoadsTheScript(t *testing.T) {
	primary := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: primary.Addr, PoolSize: 1, PoolTimeout: redistest.PoolTimeout})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	if err := c.ScriptFlush(ctx).Err(); err != nil { // also opens the pool's one connection
		t.Fatal(err)
	}
	w, err := replicawait.New(c, replicawait.Options{Replicas: 1, Timeout: 50 * time.Millisecond, MaxConcurrent: 1})
	if err != nil {
		t.Fatal(err)
	}
	q := newQuota(t, w, 1000)

	signal(t, primary, posix.SIGSTOP)
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			signal(t, primary, posix.SIGCONT)
		}
	})
	checkCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := q.Check(checkCtx, "tenant-late", 1)
		done <- err
	}()
	<-checkCtx.Done()
	signal(t, primary, posix.SIGCONT)
	resumed = true
	if err := <-done; !errors.Is(err, replicawait.ErrBusy) || !strings.Contains(err.Error(), "script loaded for the next calls") {
		t.Fatalf("check whose NOSCRIPT came after its deadline: err = %v, want ErrBusy, the script loaded for the next calls", err)
	}

	// No replica: the check is sent, runs, and is not acknowledged.
	if _, err := q.Check(ctx, "tenant-after", 1); !errors.Is(err, replicawait.ErrNotReplicated) {
		t.Fatalf("check after the late NOSCRIPT: err = %v, want ErrNotReplicated (sent: the script is loaded; no replica)", err)
	}
	errstats, err := c.Info(ctx, "errorstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errstats, "errorstat_NOSCRIPT:count=1\r") {
		t.Fatalf("want exactly one NOSCRIPT (the late check's), Redis counted:\n%s", errstats)
	}
}

// TestZeroClientRefused: a zero Client (not made by New) has no places,
// and its first command waited for one for ever (a quota check through
// quota.NewRedisStore(&replicawait.Client{}) never returned, and with a
// deadline failed "at most 0 at once"). The stores refuse it when made,
// and Process fails at once with ErrUnsupported.
func TestZeroClientRefused(t *testing.T) {
	var zero replicawait.Client
	if err := zero.Usable(); !errors.Is(err, replicawait.ErrUnsupported) {
		t.Fatalf("Usable of a zero Client: %v, want ErrUnsupported", err)
	}
	if _, err := quota.NewRedisStore(&zero); !errors.Is(err, floodgate.ErrInvalidPolicy) || !errors.Is(err, replicawait.ErrUnsupported) {
		t.Fatalf("quota.NewRedisStore of a zero Client: %v, want ErrInvalidPolicy and ErrUnsupported", err)
	}
	if _, err := concurrency.NewRedisStore(&zero); !errors.Is(err, floodgate.ErrInvalidPolicy) || !errors.Is(err, replicawait.ErrUnsupported) {
		t.Fatalf("concurrency.NewRedisStore of a zero Client: %v, want ErrInvalidPolicy and ErrUnsupported", err)
	}
	cmd := redis.NewCmd(context.Background(), "eval", "return 1", 1, "k")
	if err := zero.Process(context.Background(), cmd); !errors.Is(err, replicawait.ErrUnsupported) || !errors.Is(cmd.Err(), replicawait.ErrUnsupported) {
		t.Fatalf("Process on a zero Client: %v (cmd %v), want ErrUnsupported", err, cmd.Err())
	}
}
