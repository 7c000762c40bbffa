package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// TestServeRedisStateFormat: serve writes the rate limits' states in
// binary by default and in text with --redis-state-format text, and
// refuses any other value at start.
func TestServeRedisStateFormat(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	ctx := context.Background()
	for _, tc := range []struct {
		flag   []string
		binary bool
	}{
		{nil, true},
		{[]string{"--redis-state-format", "binary"}, true},
		{[]string{"--redis-state-format", "text"}, false},
	} {
		t.Run(fmt.Sprint(tc.flag), func(t *testing.T) {
			prefix := fmt.Sprintf("sf%d", time.Now().UnixNano())
			svc := startService(t, append([]string{"--redis", "redis://" + rs.Addr, "--fallback", "off", "--prefix", prefix}, tc.flag...)...)
			waitCentral(t, svc.url, server.CheckRequest{Policy: "api", Identity: map[string]string{"user": "u1"}})
			keys, err := client.Keys(ctx, prefix+"*").Result()
			if err != nil {
				t.Fatal(err)
			}
			states := 0
			for _, k := range keys {
				if client.Type(ctx, k).Val() != "string" || strings.HasSuffix(k, ":instances") {
					continue
				}
				v := client.Get(ctx, k).Val()
				if v == "" {
					continue
				}
				text := v[0] >= '0' && v[0] <= '9'
				if text == tc.binary {
					t.Errorf("key %s holds %q, want a %s state", k, v, map[bool]string{true: "binary", false: "text"}[tc.binary])
				}
				states++
			}
			if states == 0 {
				t.Fatalf("no state among the keys %v", keys)
			}
		})
	}
	if code, out := runCLI(t, "serve", "--redis-state-format", "json"); code == 0 || !strings.Contains(out, "--redis-state-format") {
		t.Fatalf("--redis-state-format json: exit %d: %s", code, out)
	}
}
