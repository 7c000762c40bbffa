package doctor_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// riskyConfig is valid but has a large sliding log, a global layer on one
// key and a shadow layer.
const riskyConfig = `version: "3"
policies:
  - name: search
    layers:
      - name: edge
        algorithm: fixed_window
        limit: 50_000
        window: 1m
        dimension: global
      - name: exact
        algorithm: sliding_log
        limit: 20_000
        window: 1h
        dimension: user
      - name: trial
        algorithm: sliding_window
        limit: 10
        window: 1m
        dimension: user
        shadow: true
`

func TestConfigRisksWarn(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	file := filepath.Join(t.TempDir(), "floodgate.yaml")
	if err := os.WriteFile(file, []byte(riskyConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "cr", ConfigFile: file})
	want(t, rep, doctor.GroupConfig, "validates", doctor.Pass, file, `version "3", 1 policy, 0 quotas, 0 concurrency limits, tier default`)
	want(t, rep, doctor.GroupConfig, "sliding-logs", doctor.Warn, "search.exact: sliding_log limit 20000")
	want(t, rep, doctor.GroupConfig, "hot-keys-and-slots", doctor.Warn, "search.edge")
	want(t, rep, doctor.GroupConfig, "shadow", doctor.Warn, "search.trial")
}

// TestLoginFailureMode checks that a login-style policy (named login, or
// keyed by account) is reported by its on_redis_failure: closed passes,
// local and unset warn, open fails.
func TestLoginFailureMode(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	for _, tc := range []struct {
		mode string
		want doctor.Status
		says string
	}{
		{"closed", doctor.Pass, "(signin) fail closed"},
		{"local", doctor.Warn, "per-instance counting"},
		{"", doctor.Warn, "leave their failure mode to the instances' --fallback"},
		{"open", doctor.Fail, "admit every request while Redis is down"},
	} {
		t.Run("mode="+tc.mode, func(t *testing.T) {
			line := ""
			if tc.mode != "" {
				line = "    on_redis_failure: " + tc.mode + "\n"
			}
			doc := "version: \"1\"\npolicies:\n  - name: signin\n" + line +
				"    layers:\n      - {name: a, algorithm: sliding_log, limit: 5, window: 15m, dimension: account}\n"
			file := filepath.Join(t.TempDir(), "floodgate.yaml")
			if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "fm", ConfigFile: file})
			want(t, rep, doctor.GroupConfig, "failure-mode", tc.want, tc.says)
		})
	}
}

func TestInvalidConfigInRedisFails(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	// Stored by hand, past the validation of floodgate config push.
	if err := srv.Client(t).Set(context.Background(), "ic:config", "version: \"2\"\npolicies: [{name: x}]\n", 0).Err(); err != nil {
		t.Fatal(err)
	}
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "ic"})
	want(t, rep, doctor.GroupConfig, "validates", doctor.Fail, "redis:ic:config")

	// No configuration at all: said, not failed.
	rep = runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "none"})
	want(t, rep, doctor.GroupConfig, "validates", doctor.Warn, "no configuration in Redis under none:config")
}

func TestMemoryAlmostFullFails(t *testing.T) {
	// maxmemory below what an empty server already uses.
	srv := redistest.Start(t, "--maxmemory", "1mb", "--maxmemory-policy", "noeviction", "--appendonly", "yes")
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "mf"})
	want(t, rep, doctor.GroupRedis, "memory", doctor.Fail, "of maxmemory 1.0 MiB")
}

func TestBrokenSentinelSetUp(t *testing.T) {
	s := redistest.StartSentinel(t)
	// One sentinel of three down: failover still possible, but warned.
	s.Sentinels[0].Kill()
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{SentinelAddrs: s.SentinelAddrs, SentinelMaster: s.MasterName}, Prefix: "bs"})
	want(t, rep, doctor.GroupRedis, "sentinel", doctor.Warn, s.SentinelAddrs[0]+": SENTINEL MASTER")
	// Two of three down: no majority, no failover.
	s.Sentinels[1].Kill()
	rep = runDoctor(t, doctor.Options{Redis: config.Redis{SentinelAddrs: s.SentinelAddrs, SentinelMaster: s.MasterName}, Prefix: "bs"})
	want(t, rep, doctor.GroupRedis, "sentinel", doctor.Fail, "only 1 of 3 sentinels answer")
	// Doctor pointed at the replica instead of the primary.
	rep = runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + s.Replica.Addr}, Prefix: "bs"})
	want(t, rep, doctor.GroupRedis, "replication", doctor.Fail, "role slave")
}

// TestConfigGoneFromRedisUnderInstancesFails: instances that read their
// configuration from Redis and a key that is gone (a Redis restarted
// without persistence) fail the check, naming the instances: one started
// now would find no configuration. Before, it was the warning of a
// deployment that keeps its configuration in files.
func TestConfigGoneFromRedisUnderInstancesFails(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	in := startInstance(t, client, "gone", instanceOptions{doc: testConfig, source: "redis:gone:config"})
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "gone", Instances: []string{in.url}, RateWindow: -1})
	c := want(t, rep, doctor.GroupConfig, "validates", doctor.Fail, "but 1 instance read theirs from it")
	if len(c.Evidence) != 1 || !strings.Contains(c.Evidence[0], in.url+` runs version "7" from redis:gone:config`) {
		t.Errorf("evidence %q, want the instance and its version", c.Evidence)
	}
	// Instances on a file: the warning it was.
	file := startInstance(t, client, "gone", instanceOptions{doc: testConfig})
	rep = runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "gone", Instances: []string{file.url}, RateWindow: -1})
	want(t, rep, doctor.GroupConfig, "validates", doctor.Warn, "no configuration in Redis under gone:config and no --config given")
}
