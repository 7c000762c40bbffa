package server_test

import (
	"net"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/redisstore"
)

// TestPublicProblemsLeakNothing: a failing store's error (its address, the
// dial error) goes to the log, not to the caller; an unknown policy, quota
// or limiter is named back without listing the configured ones.
func TestPublicProblemsLeakNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	st, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, layered, st, nil)
	r := e.post("/v1/check", `{"policy":"fifty","identity":{"user":"u"}}`)
	p := problemOf(t, r)
	if r.status != 503 || strings.Contains(p.Detail, addr) || strings.Contains(p.Detail, "dial") || strings.Contains(p.Detail, "refused") {
		t.Fatalf("store failure: %d %q: the store's error reached the caller", r.status, p.Detail)
	}
	for _, c := range []struct{ path, body string }{
		{"/v1/check", `{"policy":"nope","identity":{"user":"u"}}`},
		{"/v1/quota/check", `{"quota":"nope","identity":{"user":"u"}}`},
		{"/v1/concurrency/acquire", `{"limiter":"nope","identity":{"user":"u"}}`},
	} {
		r := e.post(c.path, c.body)
		p := problemOf(t, r)
		if r.status != 400 || !strings.Contains(p.Detail, `"nope"`) || strings.Contains(p.Detail, "fifty") || strings.Contains(p.Detail, "configured") {
			t.Fatalf("%s unknown name: %d %q", c.path, r.status, p.Detail)
		}
	}
}
