package doctor_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/concurrency"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/quota"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// healthyRedis are the redis-server arguments of a production-like
// standalone server: AOF on, a memory limit, no eviction.
var healthyRedis = []string{"--appendonly", "yes", "--appendfsync", "everysec", "--maxmemory", "256mb", "--maxmemory-policy", "noeviction"}

// testConfig is a configuration with a quota, a sliding log and a
// global layer; prefix-independent.
const testConfig = `version: "7"
tiers: [free, pro]
default_tier: free
policies:
  - name: api
    tier_dimension: user
    layers:
      - name: edge
        algorithm: fixed_window
        limit: 10_000
        window: 1m
        dimension: global
        shards: 4
      - name: per-user
        algorithm: sliding_window
        limit: 100
        window: 1m
        dimension: user
        tiers:
          pro: { limit: 1_000 }
  - name: login
    on_redis_failure: closed
    layers:
      - name: per-account
        algorithm: sliding_log
        limit: 5
        window: 15m
        dimension: account
`

// testConfigQuota adds a billing quota to testConfig.
const testConfigQuota = testConfig + `quotas:
  - name: tokens
    limit: 1_000_000
    period: month
    dimension: user
concurrency:
  - name: reports
    limit: 5
    lease_ttl: 30s
    dimension: user
`

// publish stores cfg under prefix in Redis, as "floodgate config push"
// does.
func publish(t *testing.T, client redis.UniversalClient, prefix, doc string) *config.Config {
	t.Helper()
	keys, err := config.KeysFor(prefix)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Publish(context.Background(), client, keys, []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// traffic makes decisions under every policy of cfg for a few identities,
// through the real Redis store, so that real keys exist.
func traffic(t *testing.T, client redis.UniversalClient, prefix string, cfg *config.Config) {
	t.Helper()
	store, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.New(store, floodgate.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, p := range cfg.Policies() {
		for i := 0; i < 3; i++ {
			vals := map[string]string{"user": fmt.Sprintf("u%d", i), "account": fmt.Sprintf("acct%d", i)}
			specs, err := cfg.Specs(p, "", vals, false)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := lim.AllowLayers(ctx, 1, specs...); err != nil {
				t.Fatalf("policy %s: %v", p.Name, err)
			}
		}
	}
	qs, err := quota.NewRedisStore(client)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range cfg.Quotas() {
		opts := q.Options()
		opts.Prefix = prefix
		qq, err := quota.New(qs, q.Policy(""), opts)
		if err != nil {
			t.Fatal(err)
		}
		// Usage, a hold, and a settled outcome: every key a quota writes.
		if _, err := qq.Check(ctx, "u1", 10); err != nil {
			t.Fatal(err)
		}
		if _, err := qq.Reserve(ctx, "u1", "req-1", 100); err != nil {
			t.Fatal(err)
		}
		if _, err := qq.Reserve(ctx, "u2", "req-2", 100); err != nil {
			t.Fatal(err)
		}
		if _, err := qq.Settle(ctx, "u1", "req-1", 80); err != nil {
			t.Fatal(err)
		}
	}
	ls, err := concurrency.NewRedisStore(client)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.ConcurrencyLimits() {
		l, err := concurrency.New(ls, c.Policy(""), concurrency.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Acquire(ctx, "u1"); err != nil {
			t.Fatal(err)
		}
	}
}

// runDoctor runs doctor with test-friendly bounds: latency thresholds far
// above what a loaded test machine shows, so only the checks under test
// can fail.
func runDoctor(t *testing.T, opts doctor.Options) *doctor.Report {
	t.Helper()
	if opts.LatencyWarn == 0 {
		opts.LatencyWarn, opts.LatencyFail = 5*time.Second, 10*time.Second
	}
	if opts.LatencySamples == 0 {
		opts.LatencySamples = 10
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := doctor.Run(ctx, opts)
	if err != nil {
		t.Fatalf("doctor.Run: %v", err)
	}
	return rep
}

// text renders the report as plain text, for failure messages.
func text(rep *doctor.Report) string {
	var b strings.Builder
	_ = rep.WriteText(&b, false)
	return b.String()
}

// want asserts the status of one check and that its summary or evidence
// mentions every one of mentions.
func want(t *testing.T, rep *doctor.Report, group, name string, st doctor.Status, mentions ...string) doctor.Check {
	t.Helper()
	c, ok := rep.Find(group, name)
	if !ok {
		t.Fatalf("no check %s/%s in the report:\n%s", group, name, text(rep))
	}
	if c.Status != st {
		t.Fatalf("%s/%s is %v, want %v:\n%s", group, name, c.Status, st, text(rep))
	}
	all := c.Summary + "\n" + strings.Join(c.Evidence, "\n")
	for _, m := range mentions {
		if !strings.Contains(all, m) {
			t.Fatalf("%s/%s does not mention %q:\n%s", group, name, m, text(rep))
		}
	}
	return c
}

// clean asserts that no check warns or fails.
func clean(t *testing.T, rep *doctor.Report) {
	t.Helper()
	if rep.Count(doctor.Warn) > 0 || rep.Count(doctor.Fail) > 0 {
		t.Fatalf("a healthy set-up should pass clean, got %d warn, %d fail:\n%s", rep.Count(doctor.Warn), rep.Count(doctor.Fail), text(rep))
	}
}

// unreachable runs doctor against a Redis it cannot reach: Run returns a
// report, not an error, whose check Redis/reachable fails. It returns
// that check's summary, evidence and fix as one text, for the tests of
// what it says.
func unreachable(t *testing.T, opts doctor.Options) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := doctor.Run(ctx, opts)
	if err != nil {
		t.Fatalf("doctor.Run with Redis unreachable: %v, want a report", err)
	}
	c := want(t, rep, doctor.GroupRedis, "reachable", doctor.Fail)
	if c.Fix == "" || rep.Worst() != doctor.Fail {
		t.Fatalf("Redis/reachable: fix %q, worst %v:\n%s", c.Fix, rep.Worst(), text(rep))
	}
	return c.Summary + "\n" + strings.Join(c.Evidence, "\n") + "\nfix: " + c.Fix
}
