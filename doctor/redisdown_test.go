package doctor_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// writeConfig writes doc to a file of the test's and returns its path.
func writeConfig(t *testing.T, doc string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "floodgate.yaml")
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRedisDownStillReports: doctor run during an outage, Redis down,
// printed only "doctor: cannot reach Redis (redis://...): dial tcp ...:
// connection refused" and no report, though the instances (degraded?),
// the configuration file and the alerts are what an operator wants to
// see then. It now reports: Redis/reachable fails with the reason and the
// fix, the checks that read Redis say they were skipped (having sent
// nothing more than the one PING), and the instance, configuration and
// monitoring checks judge what they read.
func TestRedisDownStillReports(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	in := startInstance(t, srv.Client(t), "rd", instanceOptions{doc: testConfig, discipline: true})
	prom := startFakePrometheus(t, host(t, in.url))
	prom.set(fakeAlert{"RateLimitFallbackActive", "firing", map[string]string{"instance": host(t, in.url), "policy": "api"}})
	srv.Stop() // the outage: the instance's Redis, and doctor's

	opts := doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "rd", ConfigFile: writeConfig(t, testConfig),
		Instances: []string{in.url}, PrometheusURL: prom.URL, RateWindow: -1}
	rep := runDoctor(t, opts)
	c := want(t, rep, doctor.GroupRedis, "reachable", doctor.Fail, "cannot reach Redis (redis://"+srv.Addr+")", "connection refused",
		"the checks that read Redis were skipped")
	if !strings.Contains(c.Fix, "check that every Redis node is up") {
		t.Errorf("Redis/reachable fix %q, want the unreachable fix", c.Fix)
	}
	want(t, rep, doctor.GroupRedis, "skipped", doctor.Info, "Redis is unreachable", "server, maxmemory-policy, memory, persistence, replication, latency")
	want(t, rep, doctor.GroupKeys, "skipped", doctor.Info, "Redis is unreachable", "no key scanned")
	want(t, rep, doctor.GroupClocks, "host-offset", doctor.Info, "Redis is unreachable")
	// The instances cannot sync with Redis down: their values are those
	// of their last sync, not fresh ones, and do not pass as such.
	want(t, rep, doctor.GroupClocks, "instances", doctor.Info, "at its last sync", "none can sync now", "Redis's TIME not read")
	want(t, rep, doctor.GroupInstances, "ready", doctor.Fail, "1 of 1 instance not ready", in.url+": degraded (HTTP 503)")
	want(t, rep, doctor.GroupInstances, "config-version", doctor.Pass, `version "7"`)
	want(t, rep, doctor.GroupInstances, "redis-and-prefix", doctor.Info, "Redis is unreachable", "rd:instances not read")
	want(t, rep, doctor.GroupConfig, "validates", doctor.Pass, opts.ConfigFile+" is valid")
	want(t, rep, doctor.GroupConfig, "tiers", doctor.Pass, "rd:tiers not read (Redis is unreachable)")
	want(t, rep, doctor.GroupConfig, "failure-mode", doctor.Pass, "(login) fail closed")
	want(t, rep, doctor.GroupMonitoring, "scraped", doctor.Pass)
	want(t, rep, doctor.GroupMonitoring, "alerts", doctor.Fail, "firing: RateLimitFallbackActive")
	for _, name := range []string{"server", "maxmemory-policy", "latency"} {
		if _, ok := rep.Find(doctor.GroupRedis, name); ok {
			t.Errorf("Redis/%s ran against a Redis that did not answer:\n%s", name, text(rep))
		}
	}
	// One PING, then nothing: no check waited on the dead Redis.
	noCheckReadRedis(t, rep)
	if rep.RedisCommands != 1 {
		t.Errorf("the run sent %d Redis commands, want 1 (the PING):\n%s", rep.RedisCommands, text(rep))
	}
	if _, ok := rep.Find(doctor.GroupRun, "deadline"); ok {
		t.Errorf("the run ran out of time:\n%s", text(rep))
	}

	// Without --config, the configuration was to come from Redis: nothing
	// is known of it, which fails.
	rep = runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "rd", RateWindow: -1})
	c = want(t, rep, doctor.GroupConfig, "validates", doctor.Fail, "redis:rd:config could not be read, Redis is unreachable",
		"nothing is known of the configuration")
	if !strings.Contains(c.Fix, "--config FILE") {
		t.Errorf("Config/validates fix %q does not offer --config", c.Fix)
	}
	want(t, rep, doctor.GroupInstances, "instances", doctor.Info, "no instance URLs given")
	noCheckReadRedis(t, rep)
	if rep.RedisCommands != 1 {
		t.Errorf("the run sent %d Redis commands, want 1 (the PING):\n%s", rep.RedisCommands, text(rep))
	}
}

// noCheckReadRedis fails t when a check of rep sent a Redis command:
// with Redis unreachable, only the probe before the checks does.
func noCheckReadRedis(t *testing.T, rep *doctor.Report) {
	t.Helper()
	for _, c := range rep.Checks {
		if c.RedisCommands != 0 {
			t.Errorf("%s/%s sent %d Redis commands to a Redis that did not answer:\n%s", c.Group, c.Name, c.RedisCommands, text(rep))
		}
	}
}

// TestRedisSilentBoundsTheRun: a Redis that accepts connections and never
// answers (a stopped process, a full backlog behind a proxy) costs the run
// the reachability probe's timeout once: no other command is sent, so no
// check waits for its own timeout. The reason is a timeout, and the fix
// the unreachable one.
func TestRedisSilentBoundsTheRun(t *testing.T) {
	addr := redistest.Mute(t)
	// The run's own bound is far above one probe and far below one
	// timeout per check.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := doctor.Run(ctx, doctor.Options{Redis: config.Redis{URL: "redis://" + addr}, Prefix: "rs",
		ConfigFile: writeConfig(t, testConfig), RateWindow: -1})
	if err != nil {
		t.Fatalf("doctor.Run with a silent Redis: %v, want a report", err)
	}
	c := want(t, rep, doctor.GroupRedis, "reachable", doctor.Fail, "cannot reach Redis (redis://"+addr+")")
	if !strings.Contains(c.Summary, "timeout") && !strings.Contains(c.Summary, "deadline exceeded") {
		t.Errorf("Redis/reachable %q does not say it timed out", c.Summary)
	}
	if !strings.Contains(c.Fix, "check that every Redis node is up") {
		t.Errorf("Redis/reachable fix %q, want the unreachable fix", c.Fix)
	}
	want(t, rep, doctor.GroupKeys, "skipped", doctor.Info)
	want(t, rep, doctor.GroupConfig, "validates", doctor.Pass)
	// The probe's PING, then nothing. The count is doctor's own commands:
	// a re-walk read "2 Redis commands in all" beside "no other Redis
	// read was made" (go-redis's HELLO on the connection it opened was
	// counted), and "PING, bounded by 5s" of a PING that timed out after
	// the command timeout, 1s.
	noCheckReadRedis(t, rep)
	if rep.RedisCommands != 1 {
		t.Errorf("the run sent %d Redis commands, want 1 (the PING):\n%s", rep.RedisCommands, text(rep))
	}
	if !strings.Contains(c.Read, "each answer by 1s") || strings.Contains(c.Read, "PING, bounded by 5s") {
		t.Errorf("Redis/reachable read %q does not name the command timeout that bounded the PING", c.Read)
	}
	if rep.Duration > 4*time.Second {
		t.Errorf("the run took %v: the PING was to time out after 1s", rep.Duration)
	}
	if _, ok := rep.Find(doctor.GroupRun, "deadline"); ok {
		t.Errorf("the run ran out of time:\n%s", text(rep))
	}
}
