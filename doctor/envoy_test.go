package doctor_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/envoyrls"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
)

const envoyDescriptors = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// TestEnvoyDescriptorKeys: the keys serve writes for its --envoy-config
// descriptors were reported as "keys of no known policy", doctor having no
// way to know them. Given the same descriptor configuration
// (Options.EnvoyConfig, doctor --envoy-config) it recognises them; without
// it, the warning says they are named as Envoy descriptors' keys are.
func TestEnvoyDescriptorKeys(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	cfg := publish(t, client, "ev", testConfig)
	traffic(t, client, "ev", cfg)

	file := filepath.Join(t.TempDir(), "ratelimit.yaml")
	if err := os.WriteFile(file, []byte(envoyDescriptors), 0o644); err != nil {
		t.Fatal(err)
	}
	er, err := config.NewEnvoyReloader([]string{file}, config.ReloaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.New(store, floodgate.Options{Prefix: "ev"})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := envoyrls.NewService(lim, er.Load, envoyrls.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"192.0.2.1", "192.0.2.2"} {
		req := &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: addr}}},
		}}
		if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	// A limit override Envoy sent: 3 per 5 minutes, a policy of its own.
	override := &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.3"}},
		Limit:   &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(5)},
	}}}
	if _, err := svc.ShouldRateLimit(context.Background(), override); err != nil {
		t.Fatal(err)
	}
	policy := envoyrls.PolicyName("edge", envoyrls.Entry{Key: "remote_address"})

	opts := doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "ev"}
	rep := runDoctor(t, opts)
	want(t, rep, doctor.GroupKeys, "policies", doctor.Warn, policy+" (fw) ×2", "edge.override.5m0s-", "3 of them are named as Envoy descriptors' keys are (serve --envoy-config)")

	// Given the descriptors, the override's key is known too (it was
	// reported as a key of a policy the configuration does not define),
	// and its TTL is bounded by the override's 5 minutes.
	opts.EnvoyConfig = []string{file}
	rep = runDoctor(t, opts)
	want(t, rep, doctor.GroupKeys, "policies", doctor.Pass, policy+" (fw): 2 keys,", "edge.override.5m0s-")
	want(t, rep, doctor.GroupKeys, "ttl", doctor.Pass)
	keys, _, err := client.Scan(context.Background(), 0, "ev:edge.override.5m0s-*", 100).Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("the override's keys: %v, %v", keys, err)
	}
	if err := client.Expire(context.Background(), keys[0], time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	rep = runDoctor(t, opts)
	// The TTL read is 1h0m0s, or a second or two less on a loaded machine.
	c := want(t, rep, doctor.GroupKeys, "ttl", doctor.Warn, "1 key lives longer than its policy needs", keys[0]+": TTL ", ", policy allows at most 5m")
	if all := c.Summary + "\n" + strings.Join(c.Evidence, "\n"); !strings.Contains(all, ": TTL 1h0m0s,") && !strings.Contains(all, ": TTL 59m5") {
		t.Fatalf("ttl evidence does not show the hour's TTL:\n%s", all)
	}

	// An unreadable descriptor configuration stops doctor with the error.
	opts.EnvoyConfig = []string{filepath.Join(t.TempDir(), "missing.yaml")}
	if _, err := doctor.Run(context.Background(), opts); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("doctor with a missing --envoy-config: %v, want an error naming the file", err)
	}
}
