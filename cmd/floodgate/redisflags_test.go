package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestRedisFlagsNeedRedis: the settings of the connection to Redis (and
// what is kept there) are refused without --redis, --redis-sentinel or
// --redis-cluster. serve used to start in memory with them unused: with
// --redis-master given and --redis-sentinel forgotten, an instance meant
// to share its counters counted alone. The context only bounds a serve
// that wrongly starts.
func TestRedisFlagsNeedRedis(t *testing.T) {
	for _, args := range [][]string{
		{"--redis-master", "mymaster"},
		{"--redis-password-file", "pw"},
		{"--redis-tls"},
		{"--redis-pool", "5"},
		{"--redis-coalesce=false"},
		{"--redis-wait-replicas", "1"},
		{"--instances", "3"},
		{"--login-prefix", "lg"},
		// An outside walk: these were taken silently in memory mode,
		// where nothing fails over and no clock is disciplined; a user
		// of --fallback closed believed the service failed closed.
		{"--fallback", "closed"},
		{"--fallback", "local"},
		{"--fallback-budget", "10ms"},
		{"--clock-sync=false"},
		{"--clock-skew-warn", "5s"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var out, errOut bytes.Buffer
		code := run(ctx, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...), &out, &errOut)
		cancel()
		want := args[0]
		if i := strings.IndexByte(want, '='); i > 0 {
			want = want[:i]
		}
		want += " needs --redis, --redis-sentinel or --redis-cluster"
		if code != 1 || !strings.Contains(errOut.String(), want) {
			t.Errorf("serve %v: exit %d, stderr %q; want 1 and %q", args, code, errOut.String(), want)
		}
	}
}
