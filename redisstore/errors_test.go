package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/vectors"
	"github.com/redis/go-redis/v9"
)

func fixed10(t *testing.T) floodgate.Policy {
	return mustPolicy(t, floodgate.Policy{Name: "ten", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Hour})
}

// TestErrorUnavailable checks the failures that certainly wrote nothing.
func TestErrorUnavailable(t *testing.T) {
	e, srv := newEnv(t)
	p := fixed10(t)
	key := e.key(p, "u")
	now := vectors.T0.UnixMicro()

	t.Run("context done before the call", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := e.one(ctx, now, p, key, 1); !errors.Is(err, floodgate.ErrStoreUnavailable) {
			t.Fatalf("got %v, want ErrStoreUnavailable", err)
		}
	})

	t.Run("out of memory", func(t *testing.T) {
		ctx := context.Background()
		c := e.nodes[0]
		if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		defer c.ConfigSet(ctx, "maxmemory", "0")
		_, err := e.one(ctx, now, p, key, 1)
		if !errors.Is(err, floodgate.ErrStoreUnavailable) || !strings.Contains(err.Error(), "OOM") {
			t.Fatalf("got %v, want ErrStoreUnavailable from an OOM reply", err)
		}
		if n := c.Exists(ctx, key).Val(); n != 0 {
			t.Fatal("a decision refused with OOM wrote its key")
		}
		// A peek writes nothing, so it still works.
		if r, err := e.one(ctx, now, p, key, 0); err != nil || r.Remaining != 10 {
			t.Fatalf("peek under OOM: %+v, %v", r, err)
		}
	})

	t.Run("foreign value", func(t *testing.T) {
		ctx := context.Background()
		c := e.nodes[0]
		for _, k := range []string{"foreign:{a}", "foreign:{b}"} {
			t.Cleanup(func() { c.Del(context.Background(), k) })
		}
		c.Set(ctx, "foreign:{a}", "not a state", time.Minute)
		c.HSet(ctx, "foreign:{b}", "f", "v")
		c.Expire(ctx, "foreign:{b}", time.Minute)
		for _, k := range []string{"foreign:{a}", "foreign:{b}"} {
			for _, pol := range allAlgorithms(t, 10, time.Minute) {
				out := make([]floodgate.Result, 1)
				err := e.store.Decide(ctx, now, []floodgate.Layer{{Policy: pol, Key: k, Cost: 1}}, out)
				if !errors.Is(err, floodgate.ErrStoreUnavailable) {
					t.Fatalf("%s on %s: got %v, want ErrStoreUnavailable", pol.Algorithm, k, err)
				}
			}
		}
	})

	t.Run("server down", func(t *testing.T) {
		srv.Kill()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := e.one(ctx, now, p, key, 1); !errors.Is(err, floodgate.ErrStoreUnavailable) {
			t.Fatalf("got %v, want ErrStoreUnavailable", err)
		}
		srv.Restart(t)
		// go-redis fails fast with its last dial error until its background
		// dialer sees the server again (about once a second).
		deadline := time.Now().Add(20 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			r, err := e.one(ctx, now, p, key, 1)
			cancel()
			if err == nil && r.Allowed {
				break
			}
			if !errors.Is(err, floodgate.ErrStoreUnavailable) || time.Now().After(deadline) {
				t.Fatalf("after restart: %+v, %v", r, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("pool timeout", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1, PoolTimeout: 50 * time.Millisecond, ContextTimeoutEnabled: true})
		defer c.Close()
		s, err := New(c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		// Hold the pool's only connection.
		held := c.Conn()
		if err := held.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		err = s.Decide(context.Background(), now, []floodgate.Layer{{Policy: p, Key: key, Cost: 1}}, make([]floodgate.Result, 1))
		held.Close()
		if !errors.Is(err, floodgate.ErrStoreUnavailable) {
			t.Fatalf("got %v, want ErrStoreUnavailable", err)
		}
	})
}

// TestErrorIndeterminate checks that a reply lost after the command was
// sent is reported as indeterminate, and that the command was not sent
// twice: the decision, applied once the server is free, counts once.
func TestErrorIndeterminate(t *testing.T) {
	e, srv := newEnv(t, "--enable-debug-command", "yes")
	p := fixed10(t)
	key := e.key(p, "u")
	now := vectors.T0.UnixMicro()
	ctx := context.Background()
	// Load the script (and count one request) through an ordinary client, so
	// the decision below is a single EVALSHA.
	if r, err := e.one(ctx, now, p, key, 1); err != nil || r.Remaining != 9 {
		t.Fatalf("first decision: %+v, %v", r, err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 200 * time.Millisecond, ContextTimeoutEnabled: true})
	defer c.Close()
	s, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err != nil { // a pooled connection, ready
		t.Fatal(err)
	}
	slept := make(chan error, 1)
	go func() { slept <- e.nodes[0].Do(ctx, "DEBUG", "SLEEP", "1.5").Err() }()
	time.Sleep(300 * time.Millisecond)
	err = s.Decide(ctx, now, []floodgate.Layer{{Policy: p, Key: key, Cost: 1}}, make([]floodgate.Result, 1))
	if err := <-slept; err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, floodgate.ErrIndeterminate) {
		t.Fatalf("got %v, want ErrIndeterminate", err)
	}
	// Redis runs the decision once it wakes up, possibly after serving other
	// clients: wait for it, then check that it counted exactly once and that
	// nothing sends it again.
	peek := func() int64 {
		t.Helper()
		r, err := e.one(ctx, now, p, key, 0)
		if err != nil {
			t.Fatal(err)
		}
		return r.Remaining
	}
	deadline := time.Now().Add(5 * time.Second)
	for peek() == 9 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := peek(); got != 8 {
		t.Fatalf("remaining %d after one decision and one indeterminate one, want 8 (applied exactly once)", got)
	}
	time.Sleep(300 * time.Millisecond)
	if got := peek(); got != 8 {
		t.Fatalf("remaining %d later, want 8: the indeterminate decision was sent again", got)
	}
}

// TestValidation checks that bad calls are refused before anything is sent.
func TestValidation(t *testing.T) {
	// No server: any call that got as far as the network would fail with
	// ErrStoreUnavailable instead of the validation error.
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer c.Close()
	s, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := fixed10(t)
	l := floodgate.Layer{Policy: p, Key: "fgt:k:{a}", Cost: 1}
	now := vectors.T0.UnixMicro()
	many := make([]floodgate.Layer, floodgate.MaxLayers+1)
	for i := range many {
		many[i] = l
		many[i].Key += string(rune('a' + i))
	}
	bad := p
	bad.Limit = 0
	for _, tc := range []struct {
		name   string
		now    int64
		layers []floodgate.Layer
		out    int
		want   error
	}{
		{"no layers", now, nil, 0, floodgate.ErrInvalidLayers},
		{"too many layers", now, many, len(many), floodgate.ErrInvalidLayers},
		{"short out", now, []floodgate.Layer{l, {Policy: p, Key: "other", Cost: 1}}, 1, floodgate.ErrInvalidLayers},
		{"same key twice", now, []floodgate.Layer{l, l}, 2, floodgate.ErrInvalidLayers},
		{"negative time", -1, []floodgate.Layer{l}, 1, floodgate.ErrInvalidLayers},
		{"negative time is a bad time", -1, []floodgate.Layer{l}, 1, floodgate.ErrInvalidTime},
		{"time too far", maxNow + 1, []floodgate.Layer{l}, 1, floodgate.ErrInvalidTime},
		{"the epoch", 0, []floodgate.Layer{l}, 1, floodgate.ErrInvalidTime},
		{"bad policy", now, []floodgate.Layer{{Policy: bad, Key: "k", Cost: 1}}, 1, floodgate.ErrInvalidPolicy},
		{"negative cost", now, []floodgate.Layer{{Policy: p, Key: "k", Cost: -1}}, 1, floodgate.ErrInvalidCost},
		{"cost too large", now, []floodgate.Layer{{Policy: p, Key: "k", Cost: floodgate.MaxCost + 1}}, 1, floodgate.ErrInvalidCost},
		{"empty key", now, []floodgate.Layer{{Policy: p, Cost: 1}}, 1, floodgate.ErrInvalidKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Decide(context.Background(), tc.now, tc.layers, make([]floodgate.Result, tc.out))
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	err = s.Decide(context.Background(), now, []floodgate.Layer{l}, make([]floodgate.Result, 1))
	if !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Fatalf("refused connection: got %v, want ErrStoreUnavailable", err)
	}
}

// TestScriptGuards sends the script malformed arguments directly: it must
// answer with an error reply, never run on garbage.
func TestScriptGuards(t *testing.T) {
	e, _ := newEnv(t)
	c := e.nodes[0]
	ctx := context.Background()
	key := []string{e.prefix + ":guard"}
	good := []any{vectors.T0.UnixMicro(), 1, 10, 60_000_000, 0, 0, 1}
	for name, args := range map[string][]any{
		"too few":           good[:6],
		"not a number":      {"now", 1, 10, 60_000_000, 0, 0, 1},
		"fraction":          {vectors.T0.UnixMicro(), 1, 10.5, 60_000_000, 0, 0, 1},
		"nan":               {vectors.T0.UnixMicro(), 1, 10, "nan", 0, 0, 1},
		"inf":               {vectors.T0.UnixMicro(), 1, "inf", 60_000_000, 0, 0, 1},
		"unknown algorithm": {vectors.T0.UnixMicro(), 7, 10, 60_000_000, 0, 0, 1},
		"quota period":      {vectors.T0.UnixMicro(), 6, 10, 0, 60_000_000, 0, 1},
		"negative cost":     {vectors.T0.UnixMicro(), 1, 10, 60_000_000, 0, 0, -1},
		"window too short":  {vectors.T0.UnixMicro(), 1, 10, 999, 0, 0, 1},
		"rate too fine":     {vectors.T0.UnixMicro(), 4, 10_000, 1000, 0, 0, 1},
		"log limit":         {vectors.T0.UnixMicro(), 2, 100_001, 60_000_000, 0, 0, 1},
	} {
		err := c.Eval(ctx, source, key, args...).Err()
		if err == nil || !strings.Contains(err.Error(), "floodgate: bad") {
			t.Errorf("%s: got %v, want a floodgate argument error", name, err)
		}
	}
	if err := c.Eval(ctx, source, nil, good[:1]...).Err(); err == nil {
		t.Error("no keys: accepted")
	}
	// The reserve and release modes.
	marker := key[0] + ":rel:1"
	now := vectors.T0.UnixMicro()
	start := now - now%60_000_000
	rel := func(px, cost, u1 any) []any {
		return []any{"release", now, px, 1, 10, 60_000_000, 0, 0, cost, u1, 0, 0}
	}
	for name, tc := range map[string]struct {
		keys []string
		args []any
	}{
		"reserve, one argument short":  {key, append(append([]any(nil), good[:6]...), "reserve")},
		"reserve, misspelled":          {key, append(append([]any(nil), good...), "reserv")},
		"release, no marker":           {key, rel(10_000, 1, start)},
		"release, marker TTL 0":        {[]string{key[0], marker}, rel(0, 1, start)},
		"release, marker TTL too long": {[]string{key[0], marker}, rel(86_400_001, 1, start)},
		"release, cost 0":              {[]string{key[0], marker}, rel(10_000, 0, start)},
		"release, negative start":      {[]string{key[0], marker}, rel(10_000, 1, -1)},
		"release, fractional start":    {[]string{key[0], marker}, rel(10_000, 1, 1.5)},
		"release, bad layer":           {[]string{key[0], marker}, append(rel(10_000, 1, start)[:3], 9, 10, 60_000_000, 0, 0, 1, start, 0, 0)},
		"release, one argument short":  {[]string{key[0], marker}, rel(10_000, 1, start)[:11]},
	} {
		err := c.Eval(ctx, source, tc.keys, tc.args...).Err()
		if err == nil || !strings.Contains(err.Error(), "floodgate: bad") {
			t.Errorf("%s: got %v, want a floodgate argument error", name, err)
		}
	}
	if n := c.Exists(ctx, key[0], marker).Val(); n != 0 {
		t.Fatal("a rejected call wrote a key")
	}
}
