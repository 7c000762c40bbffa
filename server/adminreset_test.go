package server_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/replicawait"
	"github.com/floodgate-rl/floodgate/server"
)

// serveClient is a client for rs set as serve's are: one dial, a plain
// command sent again at most once, without a pause.
func serveClient(t *testing.T, addr string, mutate func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: addr, ContextTimeoutEnabled: true, DialerRetries: config.DialAttempts,
		MaxRetries: config.CommandRetries, MinRetryBackoff: -1, MaxRetryBackoff: -1}
	if mutate != nil {
		mutate(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestResetWithRedisDownSaysNothingDeleted: with Redis dead (a refused
// dial), POST /admin/v1/reset is answered 503 store-unavailable saying
// nothing was deleted, as a tier assignment says nothing was stored and
// an unlock nothing was lifted; it said "some of the keys may have been
// deleted". The same through --redis-wait-replicas' writer, and the log
// has "admin reset failed" with the store's error.
func TestResetWithRedisDownSaysNothingDeleted(t *testing.T) {
	for _, waiting := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "wait-replicas"}[waiting], func(t *testing.T) {
			rs := redistest.Start(t)
			client := serveClient(t, rs.Addr, nil)
			rr := server.RedisResetter{Client: client}
			if waiting {
				w, err := replicawait.New(client, replicawait.Options{Replicas: 1, Timeout: 50 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				rr.Writer = w
			}
			var logs syncbuf.Buffer
			ms := memStore(t)
			e := start(t, layered, ms, func(o *server.Options) {
				o.Resetters = []server.Resetter{rr, server.MemoryResetter{Store: ms}}
				o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
			})
			rs.Kill()
			r := e.do("POST", "/admin/v1/reset", testToken, `{"policy":"shadowed","identity":{"user":"u1"}}`)
			p := problemOf(t, r)
			if r.status != http.StatusServiceUnavailable || p.Type != server.ProblemTypePrefix+"store-unavailable" ||
				!strings.HasPrefix(p.Detail, "resetting (nothing was deleted): ") || strings.Contains(p.Detail, "may have been") {
				t.Fatalf("reset with Redis down: %d %s %q; want 503 store-unavailable saying nothing was deleted", r.status, p.Type, p.Detail)
			}
			port := rs.Addr[strings.LastIndexByte(rs.Addr, ':'):]
			if !strings.Contains(logs.String(), `"msg":"admin reset failed"`) || !strings.Contains(logs.String(), port) {
				t.Errorf("no admin reset failed line with the store's error in:\n%s", logs.String())
			}
		})
	}
}

// TestResetFailingPartWaySaysWhatWasDeleted: a reset whose second key
// Redis refuses (an ACL user allowed the first layer's keys only: NOPERM)
// after deleting the first says so: 1 of the 2 keys was deleted, not the
// other, and Redis holds the second still.
func TestResetFailingPartWaySaysWhatWasDeleted(t *testing.T) {
	st, rs := redisStore(t)
	admin := rs.Client(t)
	var logs syncbuf.Buffer
	var limited *redis.Client
	e := start(t, layered, st, func(o *server.Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
		// The limited user's client, made once the keys are known.
		o.Resetters = []server.Resetter{resetterFunc(func() server.Resetter { return server.RedisResetter{Client: limited} })}
	})
	for range 2 {
		if got := e.check("shadowed", id("user", "u1"), 1); !got.Allowed {
			t.Fatalf("check: %+v", got)
		}
	}
	keys, err := admin.Keys(ctxT(t), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	var enforced, trial string
	for _, k := range keys {
		switch {
		case strings.Contains(k, "shadowed.enforced:"):
			enforced = k
		case strings.Contains(k, "shadowed.trial:"):
			trial = k
		}
	}
	if enforced == "" || trial == "" {
		t.Fatalf("keys %q: want one of shadowed.enforced and one of shadowed.trial", keys)
	}
	if err := admin.Do(ctxT(t), "ACL", "SETUSER", "limited", "on", ">pw", "resetkeys", "~"+enforced, "-@all", "+evalsha", "+eval", "+del", "+ping").Err(); err != nil {
		t.Fatal(err)
	}
	limited = serveClient(t, rs.Addr, func(o *redis.Options) { o.Username, o.Password = "limited", "pw" })
	r := e.do("POST", "/admin/v1/reset", testToken, `{"policy":"shadowed","identity":{"user":"u1"}}`)
	p := problemOf(t, r)
	if r.status != http.StatusServiceUnavailable || p.Type != server.ProblemTypePrefix+"store-unavailable" ||
		!strings.HasPrefix(p.Detail, "resetting (1 of the 2 keys was deleted, not the others; retrying is harmless): ") {
		t.Fatalf("reset failing at its second key: %d %s %q; want 503 store-unavailable saying 1 of the 2 keys was deleted", r.status, p.Type, p.Detail)
	}
	if n, err := admin.Exists(ctxT(t), enforced, trial).Result(); err != nil || n != 1 {
		t.Fatalf("after the reset, %d of the two keys exist (%v); want the second only", n, err)
	}
	if n, _ := admin.Exists(ctxT(t), trial).Result(); n != 1 {
		t.Fatalf("the second key %q was deleted", trial)
	}
	var found bool
	for line := range strings.Lines(logs.String()) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "admin reset failed" {
			found = strings.Contains(rec["error"].(string), "NOPERM")
		}
	}
	if !found {
		t.Errorf("no admin reset failed line with NOPERM in:\n%s", logs.String())
	}
}

// resetterFunc is a Resetter made when it is first used.
type resetterFunc func() server.Resetter

func (f resetterFunc) ResetKeys(ctx context.Context, keys ...string) ([]bool, error) {
	return f().ResetKeys(ctx, keys...)
}
