package loginguard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// scanKeys lists the keys matching pattern on a private test server.
func scanKeys(t *testing.T, c *redis.Client, pattern string) []string {
	t.Helper()
	var keys []string
	iter := c.Scan(context.Background(), 0, pattern, 100).Iterator()
	for iter.Next(context.Background()) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestRedisKeysHaveTTLAndNoClearText: after a varied workload every key has
// a TTL no longer than the longest state lifetime, and neither keys nor
// values contain an account name or an address.
func TestRedisKeysHaveTTLAndNoClearText(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	b, err := NewRedis(c, "lgttl")
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Now()}
	g := newGuard(t, b, Options{Clock: clk.now})
	ctx := context.Background()
	for i := range 40 {
		acct := fmt.Sprintf("Person%d@Example.org", i%7)
		ip := addr(fmt.Sprintf("203.0.113.%d", i%5+1))
		out, v := login(t, g, acct, ip, i%9 == 0, captcha(i%3))
		if out == delayed {
			clk.set(v.Until)
		}
	}
	keys := scanKeys(t, c, "*")
	if len(keys) == 0 {
		t.Fatal("no keys written")
	}
	longest := max(DefaultIP.Window, DefaultAccount.Lockout, DefaultPair.Lockout, DefaultIP.Lockout) + time.Second
	for _, k := range keys {
		if !strings.HasPrefix(k, "{lgttl}:") {
			t.Errorf("key %q outside the prefix's hash tag", k)
		}
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 0 || ttl > longest {
			t.Errorf("key %q has TTL %v, want 0 < ttl <= %v", k, ttl, longest)
		}
		vals, err := c.HGetAll(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		all := k + fmt.Sprint(vals)
		if strings.Contains(strings.ToLower(all), "person") || strings.Contains(all, "203.0.113") {
			t.Errorf("clear text in %q = %v", k, vals)
		}
	}
	// Success deletes what becomes fresh: a lone success leaves nothing.
	if err := g.Success(ctx, "never-failed", addr("192.0.2.44")); err != nil {
		t.Fatal(err)
	}
	if n := len(scanKeys(t, c, "*")); n != len(keys) {
		t.Fatalf("%d keys after a clean success, want %d", n, len(keys))
	}
}

// TestRedisNoScript: after SCRIPT FLUSH (a restarted or failed-over
// server), the first call falls back to EVAL and later calls use EVALSHA
// again; nothing is counted twice.
func TestRedisNoScript(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	b, err := NewRedis(c, "lgnoscript")
	if err != nil {
		t.Fatal(err)
	}
	g := newGuard(t, b, Options{})
	ctx := context.Background()
	ip := addr("203.0.113.9")
	for i := range 3 {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		o, err := g.Failure(ctx, "alice", ip)
		if err != nil {
			t.Fatal(err)
		}
		if o.Failures[0] != int64(i+1) {
			t.Fatalf("failure %d counted as %v", i+1, o.Failures)
		}
	}
	exists, err := c.ScriptExists(ctx, failureScript.SHA(), checkScript.SHA()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !exists[0] || exists[1] {
		t.Fatalf("script cache %v: want failure loaded by the EVAL fallback, check not yet", exists)
	}
}

// TestRedisWrongTypeWritesNothing: a script that fails reading its third
// key fails before its first write, so the other two keys are untouched,
// and the error says nothing was written.
func TestRedisWrongTypeWritesNothing(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	b, err := NewRedis(c, "lgwrong")
	if err != nil {
		t.Fatal(err)
	}
	g := newGuard(t, b, Options{})
	ctx := context.Background()
	ip := addr("203.0.113.9")
	network, _ := g.network(ip)
	pairKey := b.key(2, g.digest('p', "alice", network))
	if err := c.Set(ctx, pairKey, "not a hash", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	_, err = g.Failure(ctx, "alice", ip)
	if !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Fatalf("err = %v, want ErrStoreUnavailable", err)
	}
	if keys := scanKeys(t, c, "*"); len(keys) != 1 {
		t.Fatalf("keys after a failed script: %v", keys)
	}
}

// TestRedisDown: with the server killed, calls fail fast with
// ErrStoreUnavailable (a login endpoint fails closed); after a restart the
// guard works again by itself.
func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	b, err := NewRedis(c, "lgdown")
	if err != nil {
		t.Fatal(err)
	}
	g := newGuard(t, b, Options{})
	ctx := context.Background()
	if _, err := g.Check(ctx, "alice", addr("203.0.113.9")); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	ctx2, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = g.Check(ctx2, "alice", addr("203.0.113.9"))
	if !errors.Is(err, floodgate.ErrStoreUnavailable) && !errors.Is(err, floodgate.ErrIndeterminate) {
		t.Fatalf("err = %v, want a store error", err)
	}
	srv.Restart(t)
	if v, err := g.Check(ctx, "alice", addr("203.0.113.9")); err != nil || v.Action != Allow {
		t.Fatalf("after restart: %v %v", v, err)
	}
}

// TestRedisCluster: on a real three-primary cluster, one attempt's three
// keys share a slot, so every operation is one script; concurrent failures
// are still counted exactly.
func TestRedisCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := cl.Client(t)
	b, err := NewRedis(c, "lgcluster")
	if err != nil {
		t.Fatal(err)
	}
	g := newGuard(t, b, Options{Account: Ladder{Captcha: 10, Delay: 20, Lock: 50}})
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	crossed := 0
	for i := range 100 {
		wg.Go(func() {
			o, err := g.Failure(ctx, "target", addr(fmt.Sprintf("10.9.%d.%d", i/200, i%200+1)))
			if err != nil {
				t.Error(err)
				return
			}
			if o.Locked.Has(DimAccount) {
				mu.Lock()
				crossed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	st, err := g.Status(ctx, "target", addr("10.9.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Account.Failures != 100 || crossed != 1 {
		t.Fatalf("account failures %d, lock crossed %d times", st.Account.Failures, crossed)
	}
	if err := g.Unlock(ctx, "target"); err != nil {
		t.Fatal(err)
	}
	if st, _ := g.Status(ctx, "target", addr("10.9.0.1")); st.Account.Failures != 0 {
		t.Fatalf("after unlock %+v", st.Account)
	}
}

func TestNewRedisValidates(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	for _, prefix := range []string{"", "a{b}", "with space", strings.Repeat("x", 65)} {
		if _, err := NewRedis(c, prefix); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("prefix %q: err = %v", prefix, err)
		}
	}
	if _, err := NewRedis(nil, "ok"); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("nil client: %v", err)
	}
	if _, err := NewRedis((*redis.Client)(nil), "ok"); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("nil *redis.Client: %v, want ErrInvalidOptions", err)
	}
}

func TestDecodeReplyRejectsJunk(t *testing.T) {
	good := make([]any, 16)
	for i := range good {
		good[i] = int64(0)
	}
	if _, err := decodeReply(good); err != nil {
		t.Fatal(err)
	}
	bad := [][]any{nil, good[:15], append(append([]any{}, good[:15]...), "x"), append([]any{int64(9)}, good[1:]...), append(append([]any{}, good[:4]...), append([]any{int64(-1)}, good[5:]...)...)}
	for i, b := range bad {
		if _, err := decodeReply(b); !errors.Is(err, floodgate.ErrBadReply) {
			t.Errorf("case %d: err = %v", i, err)
		}
	}
	if _, err := decodeReply("OK"); !errors.Is(err, floodgate.ErrBadReply) {
		t.Errorf("string reply: %v", err)
	}
}
