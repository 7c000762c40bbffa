package envoycompat

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// The RedisStore's counter updates against real redis-servers: exact
// counts and results under heavy concurrency with coalescing, every
// counter with its time to live, contexts ending before and after a
// batch is sent (Redis held with CLIENT PAUSE WRITE, which blocks every
// script call until CLIENT UNPAUSE), refused counters, and the Cluster
// path, which never coalesces.

// evalCalls returns the script calls c's server has run (EVALSHA and EVAL).
func evalCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for line := range strings.SplitSeq(info, "\n") {
		for _, name := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), name); ok {
				v, _, _ := strings.Cut(rest, ",")
				k, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("commandstats line %q: %v", line, err)
				}
				n += k
			}
		}
	}
	return n
}

// counter returns the value and time to live of key.
func counter(t *testing.T, c redis.Cmdable, key string) (int64, time.Duration) {
	t.Helper()
	ctx := context.Background()
	v, err := c.Get(ctx, key).Int64()
	if errors.Is(err, redis.Nil) {
		v = 0
	} else if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	ttl, err := c.TTL(ctx, key).Result()
	if err != nil {
		t.Fatalf("TTL %s: %v", key, err)
	}
	return v, ttl
}

// hammer runs callers goroutines, each making rounds Incr calls on s of
// one or two of keys (chosen by caller and round, increments 1 to 3), and
// checks that each key ends at the sum of its increments with a time to
// live, and that the results seen for a key are its running totals, each
// exactly once.
func hammer(t *testing.T, s *RedisStore, read redis.Cmdable, keys []string, callers, rounds int) {
	t.Helper()
	var mu sync.Mutex
	seen := map[string]map[uint64]uint64{} // key -> result after -> increment
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := range callers {
		wg.Go(func() {
			for r := range rounds {
				ops := []*Op{{Key: keys[(g+r)%len(keys)], N: uint64(1 + (g+r)%3), TTL: time.Minute}}
				if (g+r)%4 == 0 {
					ops = append(ops, &Op{Key: keys[(g+r+1)%len(keys)], N: 1, TTL: 90 * time.Second})
				}
				if err := s.Incr(context.Background(), ops); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, op := range ops {
					if seen[op.Key] == nil {
						seen[op.Key] = map[uint64]uint64{}
					}
					if _, dup := seen[op.Key][op.Result]; dup {
						errs <- fmt.Errorf("key %s: result %d seen twice", op.Key, op.Result)
					}
					seen[op.Key][op.Result] = op.N
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, key := range keys {
		var sum uint64
		for _, n := range seen[key] {
			sum += n
		}
		// The results of a key, sorted, are its running totals: each
		// result less its own increment is the previous result.
		for after, n := range seen[key] {
			if before := after - n; before != 0 {
				if _, ok := seen[key][before]; !ok {
					t.Errorf("key %s: result %d (+%d) follows %d, which no update returned", key, after, n, before)
				}
			}
		}
		got, ttl := counter(t, read, key)
		if uint64(got) != sum {
			t.Errorf("key %s = %d, want the sum of its increments %d", key, got, sum)
		}
		if ttl <= 0 {
			t.Errorf("key %s has TTL %v, want one", key, ttl)
		}
	}
}

func TestRedisStoreConcurrentExact(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	keys := []string{"envoy_a_1", "envoy_b_1", "envoy_c_1", "envoy_d_1", "envoy_e_1"}
	for _, tc := range []struct {
		name     string
		maxBatch int
	}{{"coalesced", 0}, {"small batches", 3}, {"coalescing off", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			var ks []string
			for _, k := range keys {
				ks = append(ks, strings.ReplaceAll(tc.name, " ", "_")+"_"+k)
			}
			s := &RedisStore{Client: c, MaxBatch: tc.maxBatch}
			before := evalCalls(t, c)
			const callers, rounds = 200, 25
			hammer(t, s, c, ks, callers, rounds)
			calls := evalCalls(t, c) - before
			t.Logf("%d Incr calls in %d script calls", callers*rounds, calls)
			if tc.maxBatch == 1 && calls != callers*rounds {
				t.Errorf("coalescing off: %d script calls, want one per Incr (%d)", calls, callers*rounds)
			}
			if calls > callers*rounds {
				t.Errorf("%d script calls for %d Incr calls", calls, callers*rounds)
			}
		})
	}
}

// pause holds every script call on c's server until the returned function
// is called (or a minute passes).
func pause(t *testing.T, c *redis.Client) (unpause func()) {
	t.Helper()
	if err := c.Do(context.Background(), "CLIENT", "PAUSE", 60000, "WRITE").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	var once sync.Once
	unpause = func() {
		once.Do(func() {
			if err := c.Do(context.Background(), "CLIENT", "UNPAUSE").Err(); err != nil {
				t.Errorf("CLIENT UNPAUSE: %v", err)
			}
		})
	}
	t.Cleanup(unpause)
	return unpause
}

// waitQueued waits until n Incr calls wait in b's queue.
func waitQueued(t *testing.T, b *incrBatcher, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		q := b.q.Len()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRedisStoreCoalesces holds Redis while two Incr calls are in flight
// and ten more wait: the ten leave together in one script call, each with
// its own result.
func TestRedisStoreCoalesces(t *testing.T) {
	srv := redistest.Start(t)
	c, admin := srv.Client(t), srv.Client(t)
	s := &RedisStore{Client: c}
	b := s.batcherFor(c)
	// Load the script first: a fresh server answers NOSCRIPT once.
	if err := s.Incr(context.Background(), []*Op{{Key: "coalesce_warm", N: 1, TTL: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	before := evalCalls(t, admin)
	unpause := pause(t, admin)
	var wg sync.WaitGroup
	res := make([]uint64, 12)
	errs := make([]error, 12)
	incr := func(i int) {
		wg.Go(func() {
			op := &Op{Key: "coalesce_" + strconv.Itoa(i%3), N: uint64(i + 1), TTL: time.Minute}
			errs[i] = s.Incr(context.Background(), []*Op{op})
			res[i] = op.Result
		})
	}
	incr(0)
	incr(1)
	waitInFlight(t, b, 2)
	for i := 2; i < 12; i++ {
		incr(i)
		waitQueued(t, b, i-1)
	}
	unpause()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Incr %d: %v", i, err)
		}
	}
	if got := evalCalls(t, admin) - before; got != 3 {
		t.Errorf("%d script calls, want 3 (two alone, then the ten queued together)", got)
	}
	// The two sent alone ran first (Redis runs the calls it held before
	// reading new ones), then the ten in queue order: Incr i adds i+1 to
	// key i%3.
	want := map[int]uint64{2: 3, 3: 5, 4: 7, 5: 9, 6: 12, 7: 15, 8: 18, 9: 22, 10: 26, 11: 30}
	for i, w := range want {
		if res[i] != w {
			t.Errorf("Incr %d: result %d, want %d", i, res[i], w)
		}
	}
	for k, w := range []int64{22, 26, 30} {
		key := "coalesce_" + strconv.Itoa(k)
		if got, ttl := counter(t, admin, key); got != w || ttl <= 0 {
			t.Errorf("%s = %d (TTL %v), want %d with a TTL", key, got, ttl, w)
		}
	}
	// A slot is freed just after its last batch's answers are handed out,
	// so the callers may return a moment before the count drops: wait for
	// it (waitInFlight fails after 30 s if a slot is never freed).
	waitInFlight(t, b, 0)
}

// waitInFlight waits until n script calls of b are in flight.
func waitInFlight(t *testing.T, b *incrBatcher, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		f := b.q.InFlight()
		if f == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls in flight, want %d", f, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRedisStoreContexts: an Incr whose context ended before is not sent;
// one whose context ends while it waits in the queue gives
// ErrStoreUnavailable and nothing is written for it; one whose deadline
// passes after it was sent gives ErrIndeterminate.
func TestRedisStoreContexts(t *testing.T) {
	srv := redistest.Start(t)
	c, admin := srv.Client(t), srv.Client(t)
	s := &RedisStore{Client: c}
	b := s.batcherFor(c)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Incr(ctx, []*Op{{Key: "ctx_done", N: 1, TTL: time.Minute}}); !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Errorf("Incr with a done context = %v, want ErrStoreUnavailable", err)
	}

	unpause := pause(t, admin)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			_ = s.Incr(context.Background(), []*Op{{Key: "ctx_alone", N: uint64(i + 1), TTL: time.Minute}})
		})
	}
	waitInFlight(t, b, 2)
	qctx, qcancel := context.WithCancel(context.Background())
	var queuedErr error
	wg.Go(func() { queuedErr = s.Incr(qctx, []*Op{{Key: "ctx_queued", N: 1, TTL: time.Minute}}) })
	waitQueued(t, b, 1)
	qcancel()
	waitQueued(t, b, 0)
	unpause()
	wg.Wait()
	if !errors.Is(queuedErr, floodgate.ErrStoreUnavailable) || !errors.Is(queuedErr, context.Canceled) {
		t.Errorf("Incr cancelled in the queue = %v, want ErrStoreUnavailable wrapping context.Canceled", queuedErr)
	}
	for key, want := range map[string]int64{"ctx_done": 0, "ctx_queued": 0, "ctx_alone": 3} {
		if got, _ := counter(t, admin, key); got != want {
			t.Errorf("%s = %d, want %d", key, got, want)
		}
	}

	// Sent alone, then held past its deadline.
	unpause = pause(t, admin)
	short, cancelShort := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelShort()
	err := s.Incr(short, []*Op{{Key: "ctx_sent", N: 1, TTL: time.Minute}})
	unpause()
	if !errors.Is(err, floodgate.ErrIndeterminate) {
		t.Errorf("Incr whose deadline passed once sent = %v, want ErrIndeterminate", err)
	}
	if got, ttl := counter(t, admin, "ctx_sent"); got > 1 || (got == 1 && ttl <= 0) {
		t.Errorf("ctx_sent = %d (TTL %v), want 0 or 1 with a TTL", got, ttl)
	}
	waitInFlight(t, b, 0)
}

// TestRedisStoreBatchContexts: an Incr whose context ends after it left
// the queue for a batch gives ErrIndeterminate (or, if the batch had not
// been sent yet, is dropped unsent), and the batch goes on: the batch's
// other Incr is applied. The two calls sent alone before
// have a deadline that passes while Redis is held, so that the queued two
// leave together while it is still held.
func TestRedisStoreBatchContexts(t *testing.T) {
	srv := redistest.Start(t)
	c, admin := srv.Client(t), srv.Client(t)
	s := &RedisStore{Client: c}
	b := s.batcherFor(c)
	unpause := pause(t, admin)
	var wg sync.WaitGroup
	aloneCtx, cancelAlone := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancelAlone()
	aloneErrs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			aloneErrs[i] = s.Incr(aloneCtx, []*Op{{Key: "bctx_alone_" + strconv.Itoa(i), N: 1, TTL: time.Minute}})
		})
	}
	waitInFlight(t, b, 2)
	ctx, cancel := context.WithCancel(context.Background())
	var cancelledErr, otherErr error
	other := &Op{Key: "bctx_other", N: 2, TTL: time.Minute}
	cancelledDone := make(chan struct{})
	wg.Go(func() {
		cancelledErr = s.Incr(ctx, []*Op{{Key: "bctx_cancelled", N: 1, TTL: time.Minute}})
		close(cancelledDone)
	})
	waitQueued(t, b, 1)
	wg.Go(func() { otherErr = s.Incr(context.Background(), []*Op{other}) })
	waitQueued(t, b, 2)
	// The alone calls give up; the batch leaves, held by the pause.
	<-aloneCtx.Done()
	waitQueued(t, b, 0)
	waitInFlight(t, b, 1)
	cancel()
	<-cancelledDone // returns while the batch is still held
	unpause()
	wg.Wait()
	for i, err := range aloneErrs {
		if !errors.Is(err, floodgate.ErrIndeterminate) {
			t.Errorf("Incr %d held past its deadline = %v, want ErrIndeterminate", i, err)
		}
	}
	// The batch left the queue before the cancellation, but its slot's
	// goroutine checks the contexts just before it sends (internal/coalesce,
	// sendLive): when that check came after cancel (a slow goroutine start
	// on a busy machine), the Incr was dropped unsent and says so; when it
	// came before, the Incr went out in the batch and may have been
	// applied (the batch still runs once Redis is let go), which is what
	// ErrIndeterminate says. Both keep their word below.
	sent := errors.Is(cancelledErr, floodgate.ErrIndeterminate)
	switch {
	case !errors.Is(cancelledErr, context.Canceled):
		t.Errorf("Incr cancelled after its batch left the queue = %v, want an error wrapping context.Canceled", cancelledErr)
	case !sent && !errors.Is(cancelledErr, floodgate.ErrStoreUnavailable):
		t.Errorf("Incr cancelled after its batch left the queue = %v, want ErrIndeterminate (sent) or ErrStoreUnavailable (dropped unsent)", cancelledErr)
	}
	if otherErr != nil || other.Result != 2 {
		t.Errorf("the batch's other Incr: %v, result %d, want 2", otherErr, other.Result)
	}
	got, ttl := counter(t, admin, "bctx_cancelled")
	if got > 1 || (got == 1 && ttl <= 0) || (!sent && got != 0) {
		t.Errorf("bctx_cancelled = %d (TTL %v) with %v, want 0 if dropped unsent, else 0 or 1 with a TTL", got, ttl, cancelledErr)
	}
}

// TestRedisStoreRefusedCounter: a key holding something else than a counter
// fails its own Incr (ErrStoreUnavailable alone, ErrIndeterminate beside
// counters that were updated), in a batch too, and the others go on. An
// Incr of such a key alone fails as it does in a batch beside healthy
// Incrs: same error, same text. When incr.lua answered Redis's error
// reply for every INCRBY refused, whatever the reason, a text key alone
// failed "ERR value is not an integer" and a list key "WRONGTYPE" (also
// ErrForeignValue), and in a batch "INCRBY refused for" the key.
func TestRedisStoreRefusedCounter(t *testing.T) {
	srv := redistest.Start(t)
	c, admin := srv.Client(t), srv.Client(t)
	ctx := context.Background()
	if err := admin.Set(ctx, "refused_text", "abc", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.RPush(ctx, "refused_list", "x").Err(); err != nil {
		t.Fatal(err)
	}
	s := &RedisStore{Client: c}
	alone := map[string]error{}
	for _, key := range []string{"refused_text", "refused_list"} {
		err := s.Incr(ctx, []*Op{{Key: key, N: 1, TTL: time.Minute}})
		if !errors.Is(err, floodgate.ErrStoreUnavailable) || !strings.Contains(err.Error(), key) {
			t.Errorf("Incr of %s alone = %v, want ErrStoreUnavailable naming it", key, err)
		}
		alone[key] = err
	}
	good := &Op{Key: "refused_good", N: 1, TTL: time.Minute}
	err := s.Incr(ctx, []*Op{good, {Key: "refused_list", N: 1, TTL: time.Minute}})
	if !errors.Is(err, floodgate.ErrIndeterminate) || !strings.Contains(err.Error(), "refused_list") {
		t.Errorf("Incr of a good and a list key = %v, want ErrIndeterminate naming the list", err)
	}
	if got, ttl := counter(t, admin, "refused_good"); got != 1 || ttl <= 0 {
		t.Errorf("refused_good = %d (TTL %v), want 1 with a TTL", got, ttl)
	}
	if got, err := admin.Get(ctx, "refused_text").Result(); err != nil || got != "abc" {
		t.Errorf("refused_text = %q, %v, want it untouched", got, err)
	}

	// In a batch: the refused Incr fails, the others are counted.
	b := s.batcherFor(c)
	unpause := pause(t, admin)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() { _ = s.Incr(ctx, []*Op{{Key: "refused_alone_" + strconv.Itoa(i), N: 1, TTL: time.Minute}}) })
	}
	waitInFlight(t, b, 2)
	errs := make([]error, 5)
	ops := make([]*Op, 5)
	for i := range 5 {
		key := "refused_batch"
		switch i {
		case 2:
			key = "refused_text"
		case 4:
			key = "refused_list"
		}
		ops[i] = &Op{Key: key, N: 1, TTL: time.Minute}
		wg.Go(func() { errs[i] = s.Incr(ctx, []*Op{ops[i]}) })
		waitQueued(t, b, i+1)
	}
	unpause()
	wg.Wait()
	for i, err := range errs {
		if i == 2 || i == 4 {
			key := ops[i].Key
			if !errors.Is(err, floodgate.ErrStoreUnavailable) {
				t.Errorf("the refused Incr of %s in a batch = %v, want ErrStoreUnavailable", key, err)
			}
			a := alone[key]
			for _, sentinel := range []error{floodgate.ErrStoreUnavailable, floodgate.ErrIndeterminate, floodgate.ErrForeignValue} {
				if errors.Is(err, sentinel) != errors.Is(a, sentinel) {
					t.Errorf("Incr of %s: errors.Is(%v) alone %v, in a batch %v; want the same", key, sentinel, errors.Is(a, sentinel), errors.Is(err, sentinel))
				}
			}
			if err != nil && a != nil && err.Error() != a.Error() {
				t.Errorf("Incr of %s: alone %q, in a batch %q; want the same text", key, a, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Incr %d beside a refused one: %v", i, err)
		}
	}
	want := []uint64{1, 2, 0, 3, 0}
	for i, op := range ops {
		if i != 2 && i != 4 && op.Result != want[i] {
			t.Errorf("Incr %d: result %d, want %d", i, op.Result, want[i])
		}
	}
	if got, ttl := counter(t, admin, "refused_batch"); got != 3 || ttl <= 0 {
		t.Errorf("refused_batch = %d (TTL %v), want 3 with a TTL", got, ttl)
	}
}

// TestRedisStoreSameKeysAsMulti: the script leaves a counter exactly as
// INCRBY then EXPIRE (in seconds, at least 1) of the key would.
func TestRedisStoreSameKeysAsMulti(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	s := &RedisStore{Client: c}
	for _, tc := range []struct {
		ttl     time.Duration
		wantTTL time.Duration
	}{{61 * time.Second, 61 * time.Second}, {1500 * time.Millisecond, time.Second}, {200 * time.Millisecond, time.Second}} {
		key := "same_" + tc.ttl.String()
		op := &Op{Key: key, N: 7, TTL: tc.ttl}
		if err := s.Incr(ctx, []*Op{op}); err != nil {
			t.Fatal(err)
		}
		if op.Result != 7 {
			t.Errorf("%s: result %d, want 7", key, op.Result)
		}
		ttl, err := c.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl > tc.wantTTL || ttl < tc.wantTTL-time.Second {
			t.Errorf("%s: PTTL %v, want at most %v", key, ttl, tc.wantTTL)
		}
	}
	// A zero increment reads the counter and renews its time to live.
	op := &Op{Key: "same_1m1s", N: 0, TTL: time.Hour}
	if err := s.Incr(ctx, []*Op{op}); err != nil || op.Result != 7 {
		t.Errorf("Incr by 0 = %v, result %d, want 7", err, op.Result)
	}
	if ttl, _ := c.TTL(ctx, "same_1m1s").Result(); ttl <= time.Minute+time.Second {
		t.Errorf("TTL after Incr by 0 = %v, want it renewed to an hour", ttl)
	}
}

// TestRedisStoreCluster: on a Redis Cluster each counter is its own script
// call (no batcher), keys of a decision in any slots, exact counts under
// concurrency, every counter with its time to live.
func TestRedisStoreCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := cl.Client(t)
	s := &RedisStore{Client: c}
	if b := s.batcherFor(c); b != nil {
		t.Fatal("a batcher on a ClusterClient")
	}
	// Keys without a hash tag, in several slots.
	keys := []string{"cl_api_user_a_60", "cl_api_user_b_60", "cl_api_user_c_60", "cl_api_user_d_60"}
	slots := map[int64]bool{}
	for _, k := range keys {
		slot, err := c.ClusterKeySlot(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[slot] = true
	}
	if len(slots) < 2 {
		t.Fatalf("keys %q in one slot", keys)
	}
	hammer(t, s, c, keys, 50, 10)
}

// TestRedisStorePerSecondConcurrent: with REDIS_PERSECOND, per-second
// counters go to the second server, the others to the first, each
// coalesced on its own.
func TestRedisStorePerSecondConcurrent(t *testing.T) {
	ms, ps := redistest.Start(t), redistest.Start(t)
	mc, pc := ms.Client(t), ps.Client(t)
	s := &RedisStore{Client: mc, PerSecond: pc}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := range 100 {
		wg.Go(func() {
			for range 20 {
				ops := []*Op{{Key: "ps_minute", N: 1, TTL: time.Minute}, {Key: "ps_second", N: 1, TTL: time.Second, PerSecond: true}}
				if g%2 == 0 {
					ops = ops[:1]
				}
				if err := s.Incr(context.Background(), ops); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c    *redis.Client
		key  string
		want int64
	}{{mc, "ps_minute", 2000}, {pc, "ps_second", 1000}, {mc, "ps_second", 0}, {pc, "ps_minute", 0}} {
		if got, _ := counter(t, tc.c, tc.key); got != tc.want {
			t.Errorf("%s = %d, want %d", tc.key, got, tc.want)
		}
	}
}

// TestRedisStorePerSecondDownIsIndeterminate: with the per-second server
// down, a request whose other counters were written on the main server
// fails as indeterminate, not as "store unavailable" (nothing written),
// which an outside walk saw answered while the main counters moved; one
// with only per-second counters is still unavailable.
func TestRedisStorePerSecondDownIsIndeterminate(t *testing.T) {
	ms, ps := redistest.Start(t), redistest.Start(t)
	mc := ms.Client(t)
	pc := redis.NewClient(&redis.Options{Addr: ps.Addr, MaxRetries: -1})
	defer pc.Close()
	s := &RedisStore{Client: mc, PerSecond: pc}
	ps.Kill()
	ctx := context.Background()
	err := s.Incr(ctx, []*Op{{Key: "psd_minute", N: 1, TTL: time.Minute}, {Key: "psd_second", N: 1, TTL: time.Second, PerSecond: true}})
	if !errors.Is(err, floodgate.ErrIndeterminate) || errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Fatalf("Incr with the per-second server down: %v; want ErrIndeterminate only (the minute counter was written)", err)
	}
	if got, _ := counter(t, mc, "psd_minute"); got != 1 {
		t.Fatalf("psd_minute = %d, want 1", got)
	}
	err = s.Incr(ctx, []*Op{{Key: "psd_second", N: 1, TTL: time.Second, PerSecond: true}})
	if !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Fatalf("Incr of a per-second counter alone with its server down: %v; want ErrStoreUnavailable", err)
	}
}

// TestRedisStoreTimeoutCountsTheWait: with Timeout set, an Incr that
// waits in the queue behind script calls held by a stalled Redis ends at
// its own Timeout from its call, the wait included, whatever the client's
// read timeout (a minute here). Without it, a queued call waited for a
// call in flight to fail and then for its own: nearly twice REDIS_TIMEOUT
// (an outside walk measured up to 3.8 s with REDIS_TIMEOUT=2s).
func TestRedisStoreTimeoutCountsTheWait(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: time.Minute, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	s := &RedisStore{Client: c, Timeout: 300 * time.Millisecond}
	if err := s.Incr(context.Background(), []*Op{{Key: "bound_warm", N: 1, TTL: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	unpause := pause(t, admin)
	defer unpause()
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() {
			errs[i] = s.Incr(context.Background(), []*Op{{Key: "bound_" + strconv.Itoa(i), N: 1, TTL: time.Minute}})
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Incr calls held by a paused Redis did not end at their Timeout")
	}
	for i, err := range errs {
		if !errors.Is(err, floodgate.ErrStoreUnavailable) && !errors.Is(err, floodgate.ErrIndeterminate) {
			t.Errorf("Incr %d: %v, want a store error", i, err)
		}
	}
}
