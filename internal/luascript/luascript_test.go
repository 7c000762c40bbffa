package luascript_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/luascript"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestSHA: the SHA-1 New computes is the one Redis gives the script.
func TestSHA(t *testing.T) {
	c := redistest.Start(t).Client(t)
	got, err := c.ScriptLoad(context.Background(), counter.Source()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got != counter.SHA() {
		t.Fatalf("SCRIPT LOAD says %s, New computed %s", got, counter.SHA())
	}
}

// TestNoScript: the first run on a server, and the first after SCRIPT
// FLUSH (a restart, a failover), gets NOSCRIPT and falls back to EVAL,
// which caches the script again; the script runs exactly once per call.
func TestNoScript(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ctx := context.Background()
	key := uniqueKey(t)
	run := func(want int64) {
		t.Helper()
		v, err := counter.Run(ctx, c, []string{key})
		if err != nil || v != want {
			t.Fatalf("run: %v, %v; want %d", v, err, want)
		}
	}
	run(1) // NOSCRIPT, EVAL
	run(2) // EVALSHA
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	run(3) // NOSCRIPT, EVAL
	run(4) // EVALSHA
	if stats := commandStats(t, c); !strings.Contains(stats, "cmdstat_evalsha:calls=4,") || !strings.Contains(stats, "cmdstat_eval:calls=2,") {
		t.Errorf("want 4 EVALSHA (two answered NOSCRIPT) and 2 EVAL (once after each NOSCRIPT):\n%s", stats)
	}
	if got := count(t, c, key); got != 4 {
		t.Fatalf("counter %d after 4 runs", got)
	}
}

// TestUnavailable checks failures that certainly wrote nothing: each must
// wrap floodgate.ErrStoreUnavailable and leave the counter as it was.
func TestUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()

	t.Run("context done before the call", func(t *testing.T) {
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		done, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := counter.Run(done, c, []string{uniqueKey(t)}); !errors.Is(err, floodgate.ErrStoreUnavailable) || !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want ErrStoreUnavailable wrapping context.Canceled", err)
		}
		if stats := commandStats(t, c); strings.Contains(stats, "cmdstat_eval") {
			t.Fatalf("a script command was sent with a done context:\n%s", stats)
		}
	})

	t.Run("out of memory", func(t *testing.T) {
		key := uniqueKey(t)
		if _, err := counter.Run(ctx, c, []string{key}); err != nil { // load the script
			t.Fatal(err)
		}
		if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		_, err := counter.Run(ctx, c, []string{key})
		if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(err, floodgate.ErrStoreUnavailable) || !strings.Contains(err.Error(), "OOM") {
			t.Fatalf("got %v, want ErrStoreUnavailable from an OOM reply", err)
		}
		if got := count(t, c, key); got != 1 {
			t.Fatalf("counter %d, want 1: the refused run wrote", got)
		}
	})

	t.Run("wrong type read", func(t *testing.T) {
		key := uniqueKey(t)
		if err := c.HSet(ctx, key, "f", "v").Err(); err != nil {
			t.Fatal(err)
		}
		c.Expire(ctx, key, time.Minute)
		_, err := counter.Run(ctx, c, []string{key})
		if !errors.Is(err, floodgate.ErrStoreUnavailable) || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("got %v, want ErrStoreUnavailable from a WRONGTYPE reply", err)
		}
	})

	t.Run("pool timeout", func(t *testing.T) {
		key := uniqueKey(t)
		one := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1, PoolTimeout: 50 * time.Millisecond, ContextTimeoutEnabled: true})
		defer one.Close()
		held := one.Conn() // hold the pool's only connection
		defer held.Close()
		if err := held.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := counter.Run(ctx, one, []string{key})
		if !errors.Is(err, floodgate.ErrStoreUnavailable) || !errors.Is(err, redis.ErrPoolTimeout) {
			t.Fatalf("got %v, want ErrStoreUnavailable wrapping redis.ErrPoolTimeout", err)
		}
		if got := count(t, c, key); got != 0 {
			t.Fatalf("counter %d after a pool timeout", got)
		}
	})

	t.Run("closed client", func(t *testing.T) {
		closed := redis.NewClient(&redis.Options{Addr: srv.Addr})
		closed.Close()
		if _, err := counter.Run(ctx, closed, []string{uniqueKey(t)}); !errors.Is(err, floodgate.ErrStoreUnavailable) {
			t.Fatalf("got %v, want ErrStoreUnavailable", err)
		}
	})
}

// TestServerKilled: with the server gone, a call is refused at dial time
// (ErrStoreUnavailable, not ErrIndeterminate), and the same client works
// again once the server is back.
func TestServerKilled(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer c.Close()
	key := uniqueKey(t)
	srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := counter.Run(ctx, c, []string{key})
	if !errors.Is(err, floodgate.ErrStoreUnavailable) || errors.Is(err, floodgate.ErrIndeterminate) {
		t.Fatalf("got %v, want ErrStoreUnavailable", err)
	}
	srv.Restart(t)
	// go-redis fails fast with its last dial error until its background
	// dialer reaches the server again, about once a second.
	deadline := time.Now().Add(20 * time.Second)
	for {
		v, err := counter.Run(ctx, c, []string{key})
		if err == nil {
			if v != int64(1) {
				t.Fatalf("first run after restart returned %v, want 1", v)
			}
			return
		}
		if !errors.Is(err, floodgate.ErrStoreUnavailable) || time.Now().After(deadline) {
			t.Fatalf("after restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestConnectionCut cuts the connection after Redis ran the script and
// before its reply reached the client. go-redis resends a command after a
// broken connection by default (MaxRetries 3 here); a Script's command
// must not be resent: the error wraps ErrIndeterminate and the script ran
// exactly once.
func TestConnectionCut(t *testing.T) {
	srv := redistest.Start(t)
	direct := srv.Client(t)
	px := startCutter(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true, MaxRetries: 3})
	defer c.Close()
	ctx := context.Background()
	key := uniqueKey(t)
	if v, err := counter.Run(ctx, c, []string{key}); err != nil || v != int64(1) { // loads the script
		t.Fatalf("first run: %v, %v", v, err)
	}
	px.armed.Store(true)
	_, err := counter.Run(ctx, c, []string{key})
	if got := px.cuts.Load(); got != 1 {
		t.Fatalf("the proxy cut %d connections, want 1", got)
	}
	if !errors.Is(err, floodgate.ErrIndeterminate) {
		t.Fatalf("got %v, want ErrIndeterminate", err)
	}
	if got := count(t, direct, key); got != 2 {
		t.Fatalf("counter %d, want 2: the cut run ran exactly once", got)
	}
	if v, err := counter.Run(ctx, c, []string{key}); err != nil || v != int64(3) {
		t.Fatalf("through the proxy after the cut: %v, %v; want 3", v, err)
	}
}

// TestDeadlineWhileRunning: the context's deadline passes while the script
// runs on the server. go-redis surfaces it as a socket timeout, which must
// be ErrIndeterminate (the script did run), never ErrStoreUnavailable.
func TestDeadlineWhileRunning(t *testing.T) {
	srv := redistest.Start(t)
	direct := srv.Client(t)
	ctx := context.Background()
	key := uniqueKey(t)
	if _, err := direct.ScriptLoad(ctx, slowCounter.Source()).Result(); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := slowCounter.Run(short, direct, []string{key}, 600_000)
	if !errors.Is(err, floodgate.ErrIndeterminate) {
		t.Fatalf("got %v, want ErrIndeterminate", err)
	}
	// Served once the script is done, since Redis runs one command at a
	// time.
	if got := count(t, direct, key); got != 1 {
		t.Fatalf("counter %d, want 1: the timed-out run ran exactly once", got)
	}
}

// TestRefusal: a script's own error replies are ErrBadReply when they carry
// the Options.Refusal text, and ErrStoreUnavailable otherwise.
func TestRefusal(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ctx := context.Background()
	const src = `
if ARGV[1] ~= 'ok' then return redis.error_reply('ERR test script: refused ' .. ARGV[1]) end
return 1`
	tagged := luascript.New(src, luascript.Options{Refusal: "test script:"})
	plain := luascript.New(src, luascript.Options{})
	other := luascript.New(src, luascript.Options{Refusal: "another script:"})
	key := []string{uniqueKey(t)}
	if v, err := tagged.Run(ctx, c, key, "ok"); err != nil || v != int64(1) {
		t.Fatalf("accepted call: %v, %v", v, err)
	}
	for _, tc := range []struct {
		name string
		s    *luascript.Script
		want error
	}{
		{"tagged", tagged, floodgate.ErrBadReply},
		{"untagged", plain, floodgate.ErrStoreUnavailable},
		{"other tag", other, floodgate.ErrStoreUnavailable},
	} {
		_, err := tc.s.Run(ctx, c, key, "nonsense")
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), "refused nonsense") {
			t.Errorf("%s: got %v, want %v quoting the reply", tc.name, err, tc.want)
		}
	}
}

// TestReplies: Run hands back the reply as go-redis decodes it, a Lua nil
// or false included, and Ints accepts exactly an array of the wanted
// number of integers.
func TestReplies(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ctx := context.Background()
	key := []string{uniqueKey(t)}
	for _, tc := range []struct {
		name   string
		lua    string
		want   string // the reply, printed with %#v
		intsOK bool   // Ints into 3 integers succeeds
	}{
		{"three integers", "return {1, -2, 3}", "[]interface {}{1, -2, 3}", true},
		{"too short", "return {1, 2}", "[]interface {}{1, 2}", false},
		{"too long", "return {1, 2, 3, 4}", "[]interface {}{1, 2, 3, 4}", false},
		{"a string inside", "return {1, 'x', 3}", `[]interface {}{1, "x", 3}`, false},
		{"a nil inside", "return {1, false, 3}", "[]interface {}{1, interface {}(nil), 3}", false},
		{"a status", "return redis.status_reply('OK')", `"OK"`, false},
		{"an integer", "return 7", "7", false},
		{"nil", "return nil", "<nil>", false},
		{"false", "return false", "<nil>", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := luascript.New(tc.lua, luascript.Options{}).Run(ctx, c, key)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprintf("%#v", v); got != tc.want {
				t.Fatalf("reply %s, want %s", got, tc.want)
			}
			var n [3]int64
			err = luascript.Ints(v, n[:])
			if tc.intsOK {
				if err != nil || n != [3]int64{1, -2, 3} {
					t.Fatalf("Ints: %v, %v", n, err)
				}
			} else if !errors.Is(err, floodgate.ErrBadReply) {
				t.Fatalf("Ints accepted %#v: %v, %v", v, n, err)
			}
		})
	}
}

// TestNeedsAKey: a call without a key is refused before anything is sent
// (the client's address refuses connections, so a sent call would fail
// with ErrStoreUnavailable instead).
func TestNeedsAKey(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	if _, err := counter.Run(ctx, c, nil, "arg"); !errors.Is(err, floodgate.ErrInvalidKey) {
		t.Errorf("Run without keys: %v, want ErrInvalidKey", err)
	}
	if _, err := counter.RunCommand(ctx, c, []any{nil, nil, 0}); !errors.Is(err, floodgate.ErrInvalidKey) {
		t.Errorf("RunCommand without keys: %v, want ErrInvalidKey", err)
	}
	if _, err := counter.Run(ctx, c, []string{"k"}); !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Errorf("Run with a key to a closed port: %v, want ErrStoreUnavailable", err)
	}
}

// TestRunCommandReusesArgv: RunCommand fills in the first two elements and
// leaves the rest alone, so one argv serves several calls.
func TestRunCommandReusesArgv(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ctx := context.Background()
	key := uniqueKey(t)
	argv := []any{nil, nil, "1", &key}
	for want := int64(1); want <= 3; want++ {
		if want == 3 {
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		v, err := counter.RunCommand(ctx, c, argv)
		if err != nil || v != want {
			t.Fatalf("call %d: %v, %v", want, v, err)
		}
		if argv[2] != "1" || argv[3] != &key {
			t.Fatalf("argv changed beyond its first two elements: %v", argv)
		}
	}
}

// TestCluster runs a script on a real three-primary cluster for keys in
// many slots: each call goes to the node serving its first key, loading
// the script there on first use, and multi-key calls work when the keys
// share a hash tag.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	c := redistest.StartCluster(t).Client(t)
	ctx := context.Background()
	both := luascript.New(`
redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000)
redis.call('SET', KEYS[2], ARGV[1], 'PX', 60000)
return redis.call('DBSIZE')`, luascript.Options{})
	base := uniqueKey(t)
	for i := range 30 {
		key := fmt.Sprintf("%s:{%d}", base, i)
		for want := int64(1); want <= 2; want++ {
			if v, err := counter.Run(ctx, c, []string{key}); err != nil || v != want {
				t.Fatalf("key %s run %d: %v, %v", key, want, v, err)
			}
		}
		if _, err := both.Run(ctx, c, []string{key + ":a", key + ":b"}, "x"); err != nil {
			t.Fatalf("two keys with one tag: %v", err)
		}
	}
}

// TestRunInts: RunInts reads an array of integers as int64s (after the
// NOSCRIPT fallback too), refuses a nil reply as ErrBadReply, fails
// without panicking on any other shape, and classifies error replies as
// RunCommand does.
func TestRunInts(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ctx := context.Background()
	key := uniqueKey(t)
	argv := func() []any { return []any{nil, nil, 1, key} }
	s := luascript.New("return {1, -2, 1796083495565439}", luascript.Options{})
	for range 2 { // EVAL after NOSCRIPT, then EVALSHA
		got, err := s.RunInts(ctx, c, argv())
		if err != nil || fmt.Sprint(got) != "[1 -2 1796083495565439]" {
			t.Fatalf("RunInts: %v, %v", got, err)
		}
	}
	if got, err := luascript.New("return {}", luascript.Options{}).RunInts(ctx, c, argv()); err != nil || len(got) != 0 {
		t.Fatalf("empty array: %v, %v", got, err)
	}
	for _, lua := range []string{"return nil", "return false"} {
		if got, err := luascript.New(lua, luascript.Options{}).RunInts(ctx, c, argv()); !errors.Is(err, floodgate.ErrBadReply) {
			t.Errorf("%s: %v, %v; want ErrBadReply", lua, got, err)
		}
	}
	for _, lua := range []string{"return {1, 'x'}", "return redis.status_reply('OK')", "return 'text'", "return {1, {2}}"} {
		if got, err := luascript.New(lua, luascript.Options{}).RunInts(ctx, c, argv()); err == nil {
			t.Errorf("%s: accepted as %v", lua, got)
		}
	}
	_, err := luascript.New("return redis.error_reply('ERR nope')", luascript.Options{}).RunInts(ctx, c, argv())
	if !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Errorf("error reply: %v, want ErrStoreUnavailable", err)
	}
	if _, err := s.RunInts(ctx, c, []any{nil, nil, 0}); !errors.Is(err, floodgate.ErrInvalidKey) {
		t.Errorf("no key: %v, want ErrInvalidKey", err)
	}
}

func TestRunString(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ctx := context.Background()
	key := uniqueKey(t)
	argv := func() []any { return []any{nil, nil, 1, key} }
	s := luascript.New("return struct.pack('<Bd', 7, 2.5)", luascript.Options{})
	for range 2 { // EVAL after NOSCRIPT, then EVALSHA
		got, err := s.RunString(ctx, c, argv())
		if err != nil || got != "\x07\x00\x00\x00\x00\x00\x00\x04\x40" {
			t.Fatalf("RunString: %q, %v", got, err)
		}
	}
	for _, lua := range []string{"return nil", "return false"} {
		if got, err := luascript.New(lua, luascript.Options{}).RunString(ctx, c, argv()); !errors.Is(err, floodgate.ErrBadReply) {
			t.Errorf("%s: %q, %v; want ErrBadReply", lua, got, err)
		}
	}
	if got, err := luascript.New("return {1, 2}", luascript.Options{}).RunString(ctx, c, argv()); err == nil {
		t.Errorf("an array: accepted as %q", got)
	}
	_, err := luascript.New("return redis.error_reply('ERR nope')", luascript.Options{}).RunString(ctx, c, argv())
	if !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Errorf("error reply: %v, want ErrStoreUnavailable", err)
	}
	if _, err := s.RunString(ctx, c, []any{nil, nil, 0}); !errors.Is(err, floodgate.ErrInvalidKey) {
		t.Errorf("no key: %v, want ErrInvalidKey", err)
	}
}

// TestTLSHandshakeRefusedIsUnavailable: a TLS handshake the client breaks
// off (here the server's certificate, signed by an authority it does not
// trust) wrote nothing, so it is
// ErrStoreUnavailable; an outside walk saw it called "outcome
// indeterminate".
func TestTLSHandshakeRefusedIsUnavailable(t *testing.T) {
	files := redistest.GenerateTLS(t)
	srv := redistest.StartTLS(t, files)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		addr string
		cfg  *tls.Config
	}{
		{"unknown authority", srv.TLSAddr, &tls.Config{MinVersion: tls.VersionTLS12}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: tc.addr, TLSConfig: tc.cfg, MaxRetries: -1, ContextTimeoutEnabled: true, DialTimeout: 2 * time.Second})
			defer c.Close()
			_, err := counter.Run(ctx, c, []string{uniqueKey(t)})
			if !errors.Is(err, floodgate.ErrStoreUnavailable) || errors.Is(err, floodgate.ErrIndeterminate) {
				t.Fatalf("got %v, want ErrStoreUnavailable (nothing was written before the handshake)", err)
			}
		})
	}
}
