package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/vectors"
	"github.com/redis/go-redis/v9"
)

// commandCalls returns the number of calls of a command from INFO
// commandstats.
func commandCalls(t *testing.T, c *redis.Client, cmd string) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls=")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return 0
}

// TestNoScript flushes the script cache between decisions: the next
// decision falls back to EVAL and still counts exactly once, and the one
// after that uses EVALSHA again.
func TestNoScript(t *testing.T) {
	e, _ := newEnv(t)
	c := e.nodes[0]
	ctx := context.Background()
	p := fixed10(t)
	key := e.key(p, "u")
	now := vectors.T0.UnixMicro()
	decide := func(wantRemaining int64) {
		t.Helper()
		r, err := e.one(ctx, now, p, key, 1)
		if err != nil || !r.Allowed || r.Remaining != wantRemaining {
			t.Fatalf("got %+v, %v; want %d remaining", r, err, wantRemaining)
		}
	}
	decide(9) // first use: NOSCRIPT, then EVAL
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	decide(8) // NOSCRIPT again, EVAL counts once
	decide(7) // EVALSHA
	if got := commandCalls(t, c, "eval"); got != 2 {
		t.Errorf("EVAL ran %d times, want 2 (once after each NOSCRIPT)", got)
	}
	if got := commandCalls(t, c, "evalsha"); got != 3 {
		t.Errorf("EVALSHA called %d times, want 3", got)
	}
}
