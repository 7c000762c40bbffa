package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestEnvoyCompatSentinelUnknownMaster: sentinels that do not know the
// master name make Redis unusable, not a missing key. go-redis reports
// them as "all sentinels ... unreachable: redis: nil", which wraps
// redis.Nil: the health probe read it as an absent counter and answered
// 200 while every decision failed with "bad store reply: luascript: a nil
// reply" (an outside walk). Now /healthcheck answers 500, at start with a
// wrong name and, with REDIS_HEALTH_CHECK_ACTIVE_CONNECTION, once the
// sentinels forget the master, and a decision's error names the master.
func TestEnvoyCompatSentinelUnknownMaster(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFileAtomic(t, filepath.Join(root, "config", "d.yaml"),
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
	s := redistest.StartSentinel(t)
	sentinels := strings.Join(s.SentinelAddrs, ",")
	start := func(master string, active bool) *compatProc {
		env := []string{"REDIS_TYPE=sentinel", "REDIS_URL=" + master + "," + sentinels, "REDIS_SOCKET_TYPE=tcp", "RUNTIME_ROOT=" + root}
		if active {
			env = append(env, "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true")
		}
		return startCompat(t, env...)
	}
	health := func(p *compatProc) int { code, _ := httpGet(t, "http://"+p.http+"/healthcheck"); return code }
	decide := func(p *compatProc) error {
		t.Helper()
		conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "d",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "a", Value: "1"}}}}})
		return err
	}
	wantMasterErr := func(p *compatProc, master string) {
		t.Helper()
		err := decide(p)
		if err == nil || !strings.Contains(err.Error(), `the sentinels do not know master "`+master+`"`) || strings.Contains(err.Error(), "bad store reply") {
			t.Errorf("ShouldRateLimit: %v, want an error saying the sentinels do not know master %q", err, master)
		}
	}

	t.Run("wrong name at start", func(t *testing.T) {
		for _, active := range []bool{false, true} {
			p := start("wrongname", active)
			// The probe runs at once and then every second: give it
			// three.
			for range 3 {
				if code := health(p); code != 500 {
					t.Fatalf("active=%v: /healthcheck %d with a master name the sentinels do not know, want 500", active, code)
				}
				time.Sleep(time.Second)
			}
			wantMasterErr(p, "wrongname")
			// /json answers 400 for any error, as theirs.
			if code, out := httpPost(t, "http://"+p.http+"/json", `{"domain":"d","descriptors":[{"entries":[{"key":"a","value":"1"}]}]}`); code != 400 {
				t.Errorf("active=%v: /json: %d %s, want 400", active, code, out)
			}
		}
	})

	t.Run("master removed while running", func(t *testing.T) {
		p := start(s.MasterName, true)
		waitFor(t, "healthcheck OK", func() bool { return health(p) == 200 })
		if err := decide(p); err != nil {
			t.Fatalf("ShouldRateLimit before the removal: %v", err)
		}
		for _, a := range s.SentinelAddrs {
			sc := redis.NewSentinelClient(&redis.Options{Addr: a})
			err := sc.Remove(context.Background(), s.MasterName).Err()
			_ = sc.Close()
			if err != nil {
				t.Fatalf("SENTINEL REMOVE on %s: %v", a, err)
			}
		}
		s.Primary.Kill()
		waitFor(t, "healthcheck 500 once the sentinels forgot the master", func() bool { return health(p) == 500 })
		wantMasterErr(p, s.MasterName)
	})
}
