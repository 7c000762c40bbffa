package quota

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// newRedisStore starts a private redis-server and returns a RedisStore on
// it and the client it uses, to look behind the store.
func newRedisStore(t *testing.T) (*RedisStore, *redis.Client) {
	t.Helper()
	c := redistest.Start(t).Client(t)
	s, err := NewRedisStore(c)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// TestRedisKeysHaveTTLs checks that every key the script writes carries a
// TTL matching the period's end plus grace (the marker a day more), and
// that all keys of one identity, across periods, share one slot.
func TestRedisKeysHaveTTLs(t *testing.T) {
	s, c := newRedisStore(t)
	ctx := context.Background()
	p := Policy{Name: "ttl", Limit: 1000, Calendar: Calendar{Unit: Day}}
	q := newQuota(t, s, p, Options{Prefix: "ttl", Grace: 2 * time.Hour})
	// Real time, so that Redis's clock and the period agree.
	now := time.Now()
	if _, err := q.CheckAt(ctx, now, "user:{42}", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := q.ReserveAt(ctx, now, "user:{42}", "held", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := q.SettleAt(ctx, now, "user:{42}", "done", 5); err != nil {
		t.Fatal(err)
	}
	keys := c.Keys(ctx, "ttl:*").Val()
	if len(keys) != 4 {
		t.Fatalf("keys %v, want usage, holds, settled and marker", keys)
	}
	end := q.PeriodAt(now).End.Add(2 * time.Hour)
	tag := algo.HashTag(keys[0])
	slot := c.ClusterKeySlot(ctx, keys[0]).Val()
	for _, k := range keys {
		want := end.Sub(now)
		if strings.HasSuffix(k, ":k") {
			want += markerExtra
		}
		got := c.PTTL(ctx, k).Val()
		if got <= 0 || got > want+time.Millisecond || got < want-time.Minute {
			t.Errorf("PTTL %s = %v, want about %v", k, got, want)
		}
		if algo.HashTag(k) != tag || c.ClusterKeySlot(ctx, k).Val() != slot {
			t.Errorf("key %s not in the slot of %s", k, keys[0])
		}
	}
	if strings.Contains(tag, "{") || strings.Contains(tag, ":") {
		t.Errorf("identity escaped its hash tag: %q", tag)
	}
}

// TestRedisKeysOutliveHoldsAndOutcomes checks that a period's keys live at
// least as long as what was just written into them, past the period's end
// plus grace: a hold made at 23:59 with a 3h HoldTTL, and a settlement
// outcome written at 00:04 into the day before (kept SettledTTL, 1h).
// Keys that expired Grace (1h) after midnight took them along, so the
// settlement, or its retry, was charged again to the new day. The step
// table shows the charge on the memory store, whose clock is the caller's;
// Redis expires keys on its own clock, so here the TTLs are compared.
func TestRedisKeysOutliveHoldsAndOutcomes(t *testing.T) {
	s, c := newRedisStore(t)
	ctx := context.Background()
	p := Policy{Name: "late", Limit: 1000, Calendar: Calendar{Unit: Day}}
	midnight := time.Date(2026, 12, 11, 0, 0, 0, 0, time.UTC)
	minTTL := func(t *testing.T, key string, want time.Duration) {
		t.Helper()
		if got := c.PTTL(ctx, key).Val(); got < want-time.Second {
			t.Errorf("PTTL %s = %v, want at least %v", key, got, want)
		}
	}

	long := newQuota(t, s, p, Options{Prefix: "hold", HoldTTL: 3 * time.Hour})
	at := midnight.Add(-time.Minute)
	if _, err := long.ReserveAt(ctx, at, "u", "r1", 10); err != nil {
		t.Fatal(err)
	}
	minTTL(t, usageKey(long, "u", at), 3*time.Hour)
	minTTL(t, newKeySet(long.keyBase("u", long.PeriodAt(at))).holds, 3*time.Hour)

	q := newQuota(t, s, p, Options{Prefix: "settle"})
	if _, err := q.ReserveAt(ctx, midnight.Add(-5*time.Minute), "u", "r1", 10); err != nil {
		t.Fatal(err)
	}
	after := midnight.Add(4 * time.Minute)
	r, err := q.SettleAt(ctx, after, "u", "r1", 7)
	if err != nil {
		t.Fatal(err)
	}
	if r.Period.Key != "2026-12-10" || r.Charged != 7 {
		t.Fatalf("settle after midnight: period %s charged %d, want 2026-12-10 and 7", r.Period.Key, r.Charged)
	}
	before := newKeySet(q.keyBase("u", r.Period))
	for _, k := range []string{before.usage, before.settled} {
		minTTL(t, k, time.Hour) // the outcome is kept SettledTTL from 00:04
	}
}

// TestRedisScriptCacheFlushed: after SCRIPT FLUSH (a restart, a failover)
// EVALSHA fails with NOSCRIPT and the store falls back to EVAL.
func TestRedisScriptCacheFlushed(t *testing.T) {
	s, c := newRedisStore(t)
	ctx := context.Background()
	q := newQuota(t, s, monthly(10), Options{Prefix: "flush"})
	if _, err := q.CheckAt(ctx, t0, "u", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := q.CheckAt(ctx, t0, "u", 1); err != nil || r.Used != 2 {
		t.Fatalf("after SCRIPT FLUSH: %+v, %v", r, err)
	}
	if r, err := q.CheckAt(ctx, t0, "u", 1); err != nil || r.Used != 3 {
		t.Fatalf("third: %+v, %v", r, err)
	}
	stats := c.Info(ctx, "commandstats").Val()
	if !strings.Contains(stats, "cmdstat_evalsha:calls=3") || !strings.Contains(stats, "cmdstat_eval:calls=2") {
		t.Fatalf("want 3 EVALSHA (two NOSCRIPT) and 2 EVAL (first load, reload):\n%s", stats)
	}
}

// TestRedisScriptGuards runs the script with arguments the Go side never
// sends: it must refuse them (an error wrapping floodgate.ErrBadReply) and
// write nothing.
func TestRedisScriptGuards(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ctx := context.Background()
	keys := []string{"g:{x}:u", "g:{x}:h", "g:{x}:s", "g:{x}:k"}
	good := []any{"c", 1, 10, 1, "", 1, 1, 1e9, 1e9, 1e9, 1, 1, 1, int64(MaxUsed)}
	for _, tt := range []struct {
		name string
		i    int
		v    any
	}{
		{"unknown op", 0, "z"},
		{"non-numeric now", 1, "soon"},
		{"zero limit", 2, 0},
		{"negative amount", 3, -1},
		{"reserve without id", 0, "r"},
		{"zero hold", 5, 0},
	} {
		args := append([]any(nil), good...)
		args[tt.i] = tt.v
		_, err := quotaScript.Run(ctx, c, keys, args...)
		if !errors.Is(err, floodgate.ErrBadReply) || !strings.Contains(err.Error(), "invalid arguments") {
			t.Errorf("%s: err = %v, want ErrBadReply for invalid arguments", tt.name, err)
		}
	}
	if _, err := quotaScript.Run(ctx, c, keys[:4], "s", 1, 10, 1, "id", 1, 1, 1e9, 1e9, 1e9, 1, 1, 1, int64(MaxUsed)); !errors.Is(err, floodgate.ErrBadReply) {
		t.Errorf("settle with 4 keys: %v, want ErrBadReply", err)
	}
	if n := c.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("refused calls wrote %d keys", n)
	}
}

// TestRedisDown: a stopped server is reported as ErrStoreUnavailable (the
// connection is refused, nothing was sent), and the store works again when
// the server is back.
func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	// onNewClient returns a Quota on a new client of the server.
	onNewClient := func() *Quota {
		t.Helper()
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		s, err := NewRedisStore(c)
		if err != nil {
			t.Fatal(err)
		}
		return newQuota(t, s, monthly(10), Options{Prefix: "down"})
	}
	q := onNewClient()
	if _, err := q.CheckAt(context.Background(), t0, "u", 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Kill()
	_, err := q.CheckAt(ctx, t0, "u", 1)
	if !errors.Is(err, floodgate.ErrStoreUnavailable) && !errors.Is(err, floodgate.ErrIndeterminate) {
		t.Fatalf("killed server: %v", err)
	}
	// With no pooled connection left, the failure is a refused dial.
	q2 := onNewClient()
	if _, err := q2.CheckAt(ctx, t0, "u", 1); !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Fatalf("refused connection: %v, want ErrStoreUnavailable", err)
	}
	srv.Restart(t)
	if r, err := q2.CheckAt(ctx, t0, "u", 1); err != nil || !r.Allowed {
		t.Fatalf("after restart: %+v, %v", r, err)
	}
}

// TestRedisCluster runs reserve, settle across a period boundary and the
// lost-state check on a real three-primary Redis Cluster: every script's
// keys hash to one slot, so nothing fails with CROSSSLOT.
func TestRedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	c := redistest.StartCluster(t).Client(t)
	s, err := NewRedisStore(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	q := newQuota(t, s, Policy{Name: "cl", Limit: 100, Calendar: Calendar{Unit: Day}}, Options{Prefix: "cl"})
	end := q.PeriodAt(t0).End
	for _, id := range []string{"alice", "bob", "carol", "dave", "user:{evil}"} {
		if r, err := q.ReserveAt(ctx, end.Add(-time.Minute), id, "job", 60); err != nil || !r.Allowed {
			t.Fatalf("%s reserve: %+v, %v", id, r, err)
		}
		r, err := q.SettleAt(ctx, end.Add(time.Minute), id, "job", 40)
		if err != nil || !r.Period.Start.Equal(q.PeriodAt(t0).Start) || r.Used != 40 || r.Refunded != 20 {
			t.Fatalf("%s settle across midnight: %+v, %v", id, r, err)
		}
		if err := c.Del(ctx, usageKey(q, id, t0)).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := q.CheckAt(ctx, end.Add(-time.Second), id, 1); !errors.Is(err, ErrQuotaStateLost) {
			t.Fatalf("%s: %v, want ErrQuotaStateLost", id, err)
		}
	}
	redistest.AuditTTL(t, c, "*")
}

// TestRedisClusterSlotHalfMoved reserves while a resharding has moved one
// of the identity's keys to another primary and not yet the others: the
// node refuses the script with TRYAGAIN (nothing ran), and the call used
// to fail at once (serve answered /v1/quota/reserve 503). It must be sent
// again until the move is finished, and then count once.
func TestRedisClusterSlotHalfMoved(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	cl := redistest.StartCluster(t)
	c := cl.Client(t)
	s, err := NewRedisStore(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	q := newQuota(t, s, Policy{Name: "hm", Limit: 1000, Calendar: Calendar{Unit: Day}}, Options{Prefix: "hm"})
	at := q.PeriodAt(t0).Start.Add(time.Hour)
	if r, err := q.ReserveAt(ctx, at, "alice", "job-1", 10); err != nil || !r.Allowed {
		t.Fatalf("first reserve: %+v, %v", r, err)
	}
	key := usageKey(q, "alice", t0)
	slot, err := c.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	owner, err := c.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var from, to *redis.Client
	for _, n := range cl.Nodes {
		cli := n.Client(t)
		if n.Addr == owner.Options().Addr {
			from = cli
		} else if to == nil {
			to = cli
		}
	}
	fromID, toID := from.ClusterMyID(ctx).Val(), to.ClusterMyID(ctx).Val()
	keys, err := from.ClusterGetKeysInSlot(ctx, int(slot), 100).Result()
	if err != nil || len(keys) < 2 {
		t.Fatalf("keys in slot %d: %v, %v (want the quota's keys, two or more)", slot, keys, err)
	}
	toHost, toPort, _ := strings.Cut(to.Options().Addr, ":")
	sl := strconv.FormatInt(slot, 10)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(to.Do(ctx, "CLUSTER", "SETSLOT", sl, "IMPORTING", fromID).Err())
	must(from.Do(ctx, "CLUSTER", "SETSLOT", sl, "MIGRATING", toID).Err())
	must(from.Do(ctx, "MIGRATE", toHost, toPort, "", 0, 5000, "KEYS", keys[0]).Err())
	tryAgains := func() int {
		info := from.Info(ctx, "errorstats").Val()
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_TRYAGAIN:count="); ok {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
		return 0
	}
	before := tryAgains()

	type result struct {
		r   Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		r, err := q.ReserveAt(rctx, at, "alice", "job-2", 10)
		done <- result{r, err}
	}()
	// Finish the move only once the reserve has been refused at least once.
	deadline := time.Now().Add(20 * time.Second)
	for tryAgains() == before {
		select {
		case res := <-done:
			t.Fatalf("reserve on a half-moved slot returned before the move was finished: %+v, %v", res.r, res.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the reserve was never refused with TRYAGAIN")
		}
		time.Sleep(time.Millisecond)
	}
	must(from.Do(ctx, append([]any{"MIGRATE", toHost, toPort, "", 0, 5000, "KEYS"}, anys(keys[1:])...)...).Err())
	// The new owner first, then the old one, then the rest, as Redis's
	// resharding guide orders it: the other way round, the old owner
	// redirects to the new one, which, still importing, redirects back,
	// and a call sent meanwhile runs out of redirections (MOVED).
	must(to.Do(ctx, "CLUSTER", "SETSLOT", sl, "NODE", toID).Err())
	must(from.Do(ctx, "CLUSTER", "SETSLOT", sl, "NODE", toID).Err())
	for _, n := range cl.Nodes {
		must(n.Client(t).Do(ctx, "CLUSTER", "SETSLOT", sl, "NODE", toID).Err())
	}
	res := <-done
	if res.err != nil || !res.r.Allowed || res.r.Reserved != 20 {
		t.Fatalf("reserve across the move: %+v, %v (want allowed, 20 reserved)", res.r, res.err)
	}
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// TestRedisStalledCheck: a check whose context ends while Redis holds it
// unanswered (the server stopped with SIGSTOP after the check was sent)
// may have been counted, so it fails with ErrIndeterminate, and once
// Redis runs again the check shows in the usage. A check whose context
// ends while it waits for the client's one connection (held by a blocked
// command) was never sent: ErrStoreUnavailable, and nothing is counted.
//
// The client has ContextTimeoutEnabled, as serve's, and go-redis's default
// retries (three, after pauses; serve's retry a plain command once, at
// once, config.CommandRetries): go-redis answers a plain command cut off this way
// with the bare context error of its retry loop, which the script's
// commands, marked NoRetry, never enter.
func TestRedisStalledCheck(t *testing.T) {
	srv := redistest.Start(t)
	direct := srv.Client(t)
	ctx := context.Background()

	t.Run("sent, then the deadline", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		s, err := NewRedisStore(c)
		if err != nil {
			t.Fatal(err)
		}
		q := newQuota(t, s, monthly(10), Options{Prefix: "stalled"})
		// A first check loads the script and leaves a connection in the
		// pool, so the stalled check is written on it.
		if r, err := q.CheckAt(ctx, t0, "u", 1); err != nil || r.Used != 1 {
			t.Fatalf("first check: %+v, %v", r, err)
		}
		if err := posix.Kill(srv.Pid, posix.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		resumed := false
		resume := func() {
			if !resumed {
				resumed = true
				_ = posix.Kill(srv.Pid, posix.SIGCONT)
			}
		}
		t.Cleanup(resume)
		// Long enough for the check to be written on a loaded machine
		// (Redis is stopped: the deadline always ends the call).
		short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err = q.CheckAt(short, t0, "u", 1)
		cancel()
		resume()
		if !errors.Is(err, floodgate.ErrIndeterminate) || errors.Is(err, floodgate.ErrStoreUnavailable) {
			t.Fatalf("check cut off after it was sent: %v, want ErrIndeterminate", err)
		}
		if r, err := q.CheckAt(ctx, t0, "u", 0); err != nil || r.Used != 2 {
			t.Fatalf("usage after Redis resumed: %+v, %v; want Used 2 (the cut-off check ran)", r, err)
		}
	})

	t.Run("waiting for a pooled connection", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 1, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		s, err := NewRedisStore(c)
		if err != nil {
			t.Fatal(err)
		}
		q := newQuota(t, s, monthly(10), Options{Prefix: "poolwait"})
		if r, err := q.CheckAt(ctx, t0, "u", 1); err != nil || r.Used != 1 {
			t.Fatalf("first check: %+v, %v", r, err)
		}
		// Hold the pool's one connection with a command Redis answers only
		// when the list below gets an element.
		list := "fgt:quota:{stalled}:blocker:" + strconv.FormatInt(time.Now().UnixNano(), 10)
		blocked := make(chan error, 1)
		go func() { blocked <- c.BLPop(ctx, 0, list).Err() }()
		waitBlocked(t, direct, 1)
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err = q.CheckAt(short, t0, "u", 1)
		cancel()
		if err := direct.RPush(ctx, list, "go").Err(); err != nil {
			t.Fatal(err)
		}
		if err := <-blocked; err != nil {
			t.Fatalf("the blocking command: %v", err)
		}
		if !errors.Is(err, floodgate.ErrStoreUnavailable) || errors.Is(err, floodgate.ErrIndeterminate) {
			t.Fatalf("check that never got a connection: %v, want ErrStoreUnavailable", err)
		}
		if r, err := q.CheckAt(ctx, t0, "u", 0); err != nil || r.Used != 1 {
			t.Fatalf("usage after the unsent check: %+v, %v; want Used 1", r, err)
		}
	})
}

// waitBlocked waits until n clients of c's server are blocked in a command.
func waitBlocked(t *testing.T, c *redis.Client, n int) {
	t.Helper()
	for range 1000 {
		info, err := c.Info(context.Background(), "clients").Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, "blocked_clients:"+strconv.Itoa(n)+"\r\n") {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("fewer than %d clients blocked", n)
}
