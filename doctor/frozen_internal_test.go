package doctor

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestTiersOnAFrozenRedis: with no run deadline, a Redis that does not
// answer HLEN <prefix>:tiers (stopped with SIGSTOP) made the tiers check
// pass, the error dropped. It now fails, saying Redis did not answer.
func TestTiersOnAFrozenRedis(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	cfg, err := config.Parse([]byte("version: \"1\"\ntiers: [free]\ndefault_tier: free\npolicies:\n  - name: api\n    layers:\n      - name: per-user\n        algorithm: fixed_window\n        limit: 10\n        window: 1m\n        dimension: user\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := &run{ctx: context.Background(), opts: Options{Prefix: "tf"}, client: c, counter: &counter{}, cfg: cfg, cfgSource: "t.yaml", report: &Report{}}
	r.counter.attach(c)
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = posix.Kill(srv.Pid, posix.SIGCONT) })
	if err := posix.Kill(srv.Pid, posix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	r.check(GroupConfig, "tiers", func(ch *Check) { r.checkTiers(r.ctx, ch) })
	ch := r.report.Checks[0]
	if ch.Status != Fail || !strings.Contains(ch.Summary, "Redis did not answer") || !strings.Contains(strings.Join(ch.Evidence, "\n"), "HLEN: ") {
		t.Fatalf("tiers on a frozen Redis: %+v", ch)
	}
	if !strings.Contains(ch.Fix, "stopped answering") {
		t.Fatalf("fix %q", ch.Fix)
	}
}
