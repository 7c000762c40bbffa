package doctor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestWrongTypeKeysNamed: keys of another type than their names say
// (a string where a sliding log's sorted set belongs, a sorted set where
// a sliding window's string does) failed the scan's ZCARD and the
// policies' GET with WRONGTYPE, reported without the key; and the
// sliding-logs check passed ("no sliding-log or lease sets among the keys
// seen") although the only log's ZCARD had failed. The failed reads now
// name their keys, and sliding-logs does not pass.
func TestWrongTypeKeysNamed(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	ctx := context.Background()
	cfg := publish(t, client, "wt", testConfig)
	traffic(t, client, "wt", cfg)
	var sl, sw string
	iter := client.Scan(ctx, 0, "wt:*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		switch {
		case strings.Contains(k, ":sl:"):
			sl = k
		case strings.Contains(k, ":sw:"):
			sw = k
		}
	}
	if err := iter.Err(); err != nil || sl == "" || sw == "" {
		t.Fatalf("scan: %v; sliding log %q, sliding window %q", err, sl, sw)
	}
	// Every other sliding log goes: the wrong-typed one is the only one.
	iter = client.Scan(ctx, 0, "wt:*:sl:*", 1000).Iterator()
	for iter.Next(ctx) {
		client.Del(ctx, iter.Val())
	}
	if err := client.Set(ctx, sl, "not a log", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	client.Del(ctx, sw)
	if err := client.ZAdd(ctx, sw, redis.Z{Score: 1, Member: "m"}).Err(); err != nil {
		t.Fatal(err)
	}
	client.Expire(ctx, sw, time.Minute)

	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "wt"})
	want(t, rep, doctor.GroupKeys, "scan", doctor.Warn, "ZCARD: WRONGTYPE", ", on "+sl)
	want(t, rep, doctor.GroupKeys, "policies", doctor.Warn, "GET: WRONGTYPE", sw)
	c := want(t, rep, doctor.GroupKeys, "sliding-logs", doctor.Warn, "ZCARD failed on 1 key: "+sl, "is unknown")
	if !strings.Contains(c.Fix, "WRONGTYPE") {
		t.Errorf("sliding-logs fix %q", c.Fix)
	}
}
