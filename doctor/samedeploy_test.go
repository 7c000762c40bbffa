package doctor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestInstancesOnAnotherPrefixOrRedis: doctor given another --prefix
// than the instances' (fgx for fg), or another Redis than theirs, passed
// everything on 0 keys. It now says the prefix may be wrong (scan) and
// fails the instances' redis-and-prefix check: no heartbeat of theirs in
// <prefix>:instances on the Redis audited.
func TestInstancesOnAnotherPrefixOrRedis(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	cfg := publish(t, client, "ap", testConfig)
	traffic(t, client, "ap", cfg)
	a := startInstance(t, client, "ap", instanceOptions{doc: testConfig, discipline: true})
	other := redistest.Start(t, healthyRedis...)
	for _, tc := range []struct {
		name, redis, prefix string
	}{
		{"another prefix", srv.Addr, "apx"},
		{"another Redis", other.Addr, "ap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + tc.redis}, Prefix: tc.prefix,
				Instances: []string{a.url}, RateWindow: -1})
			want(t, rep, doctor.GroupKeys, "scan", doctor.Warn, "the prefix may be wrong")
			c := want(t, rep, doctor.GroupInstances, "redis-and-prefix", doctor.Fail, "no instance heartbeats in "+tc.prefix+":instances")
			if !strings.Contains(c.Fix, "--prefix") || !strings.Contains(c.Fix, "--redis") {
				t.Errorf("fix %q", c.Fix)
			}
		})
	}
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "ap", Instances: []string{a.url}, RateWindow: -1})
	c := want(t, rep, doctor.GroupInstances, "redis-and-prefix", doctor.Pass, "1 live instance")
	if strings.Contains(c.Summary, "did not audit") {
		t.Errorf("summary %q: every live instance was given", c.Summary)
	}
	// A second live instance doctor was not given is named (a re-walk's
	// third instance ran another document unseen).
	startInstance(t, client, "ap", instanceOptions{doc: testConfig, discipline: true})
	rep = runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "ap", Instances: []string{a.url}, RateWindow: -1})
	want(t, rep, doctor.GroupInstances, "redis-and-prefix", doctor.Pass, "2 live instances", "1 more than the 1 instance given that answered, which doctor did not audit")
}

// TestInstancesOnOneVersionWithDifferentContents: two instances run
// version "7" with different documents. config-version passed ("every
// instance runs configuration version"); it now fails, naming both
// hashes and their instances.
func TestInstancesOnOneVersionWithDifferentContents(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	publish(t, client, "dc", testConfig)
	a := startInstance(t, client, "dc", instanceOptions{doc: testConfig, discipline: true})
	b := startInstance(t, client, "dc", instanceOptions{doc: strings.Replace(testConfig, "limit: 100\n", "limit: 200\n", 1), discipline: true})
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "dc",
		Instances: []string{a.url, b.url}, RateWindow: -1})
	c := want(t, rep, doctor.GroupInstances, "config-version", doctor.Fail, `version "7" has 2 different documents`, "on "+a.url, "on "+b.url)
	if c.Fix == "" {
		t.Error("no fix")
	}
}

// TestStoppedHeartbeatIsNoLiveInstance: an instance killed without
// leaving keeps its heartbeat until the others' beats drop it, 6 s after
// its last beat. doctor counted it live and told the operator to give "1
// more" instance with --instance, one they had given; a heartbeat whose
// last beat is over 3 s old is now reported as stopped, with its id and
// age, and not counted.
func TestStoppedHeartbeatIsNoLiveInstance(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	publish(t, client, "sb", testConfig)
	a := startInstance(t, client, "sb", instanceOptions{doc: testConfig, discipline: true})
	now, err := client.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := client.ZAdd(t.Context(), "sb:instances", redis.Z{Score: float64(now.Add(-4 * time.Second).UnixMilli()), Member: "killed-pod"}).Err(); err != nil {
		t.Fatal(err)
	}
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "sb", Instances: []string{a.url}, RateWindow: -1})
	c := want(t, rep, doctor.GroupInstances, "redis-and-prefix", doctor.Pass, "1 live instance", "1 heartbeat stopped beating", "killed-pod (last beat 4.")
	if strings.Contains(c.Summary, "did not audit") {
		t.Errorf("summary %q counts the stopped heartbeat as an instance not given", c.Summary)
	}
}
