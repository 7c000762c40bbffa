package doctor_test

import (
	"strings"
	"sync"
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
	b := startInstance(t, client, "ap", instanceOptions{doc: testConfig, discipline: true})
	rep = runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "ap", Instances: []string{a.url}, RateWindow: -1})
	want(t, rep, doctor.GroupInstances, "redis-and-prefix", doctor.Pass, "2 live instances",
		"1 heartbeat of instances doctor was not given, and did not audit (give each with --instance): "+b.hbID)
}

// TestOddInstanceOutsideTheFleetNamed: of four instances, one ran with
// --prefix odx instead of od. doctor said "3 heartbeats in od:instances
// for 4 instances given" with a fix blaming doctor's own --redis and
// --prefix. It now fails naming the odd instance, by the heartbeat id its
// /readyz reports and the count it exports, and says its --prefix or
// Redis differs; a live heartbeat of no instance given is named by its
// id, as the docs said.
func TestOddInstanceOutsideTheFleetNamed(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	publish(t, client, "od", testConfig)
	var urls []string
	for range 3 {
		urls = append(urls, startInstance(t, client, "od", instanceOptions{doc: testConfig, discipline: true}).url)
	}
	odd := startInstance(t, client, "odx", instanceOptions{doc: testConfig, discipline: true})
	opts := doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "od", Instances: append(urls, odd.url), RateWindow: -1}
	rep := runDoctor(t, opts)
	c := want(t, rep, doctor.GroupInstances, "redis-and-prefix", doctor.Fail,
		"1 of the 4 instances given is outside od:instances (3 live heartbeats): its --prefix or Redis likely differs",
		odd.url+": its heartbeat "+odd.hbID+" is not among the 3 live in od:instances; it counts 1 live instance")
	if strings.Contains(c.Fix, "doctor audited") || !strings.Contains(c.Fix, "--prefix") {
		t.Errorf("fix %q: want the odd instance's --prefix, not doctor's", c.Fix)
	}
	for _, u := range urls {
		if strings.Contains(strings.Join(c.Evidence, "\n"), u+":") {
			t.Errorf("evidence names %s, which is in the set:\n%s", u, strings.Join(c.Evidence, "\n"))
		}
	}

	// An instance in the set that doctor was not given is named.
	extra := startInstance(t, client, "od", instanceOptions{doc: testConfig, discipline: true})
	rep = runDoctor(t, opts)
	want(t, rep, doctor.GroupInstances, "redis-and-prefix", doctor.Fail, "1 of the 4 instances given is outside od:instances (4 live heartbeats)",
		"1 heartbeat of instances doctor was not given, and did not audit (give each with --instance): "+extra.hbID)
}

// TestOddInstanceOfAnOlderVersionNamedByItsCount: an instance whose
// /readyz names no heartbeat id (a version before heartbeat_id) is judged
// by the count it exports: one under another prefix counts 1 against the
// set's 2, and is named, as a warning.
func TestOddInstanceOfAnOlderVersionNamedByItsCount(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	publish(t, client, "oo", testConfig)
	a := startInstance(t, client, "oo", instanceOptions{doc: testConfig, discipline: true})
	b := startInstance(t, client, "oo", instanceOptions{doc: testConfig, discipline: true})
	old := startInstance(t, client, "oox", instanceOptions{doc: testConfig, discipline: true, noHeartbeatID: true})
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "oo",
		Instances: []string{a.url, b.url, old.url}, RateWindow: -1})
	c := want(t, rep, doctor.GroupInstances, "redis-and-prefix", doctor.Warn, "1 of the 3 instances given is outside oo:instances",
		old.url+": it counts 1 live instance, oo:instances holds 2 (its /readyz names no heartbeat_id")
	if strings.Contains(c.Summary, "not given") {
		t.Errorf("summary %q names heartbeats not given, though one instance's id is unknown", c.Summary)
	}
}

// TestFallbackDivisorOfEachInstance: doctor run during an outage showed no
// fleet view. The instances' fallback divisors
// (floodgate_fallback_instances) are now reported, and one dividing by 1
// in a fleet of three (started during the outage) fails then; with Redis
// up it warns, and three at 3 pass.
func TestFallbackDivisorOfEachInstance(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	publish(t, client, "fd", testConfig)
	three := func() int { return 3 }
	a := startInstance(t, client, "fd", instanceOptions{doc: testConfig, discipline: true, divisor: three})
	b := startInstance(t, client, "fd", instanceOptions{doc: testConfig, discipline: true, divisor: three})
	divC := 1
	var mu sync.Mutex
	c := startInstance(t, client, "fd", instanceOptions{doc: testConfig, discipline: true, divisor: func() int { mu.Lock(); defer mu.Unlock(); return divC }})
	opts := doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "fd", Instances: []string{a.url, b.url, c.url}, RateWindow: -1}

	rep := runDoctor(t, opts)
	want(t, rep, doctor.GroupInstances, "fallback-divisor", doctor.Warn,
		"1 of 3 instances' fallbacks divide each limit by fewer than the fleet's 3 ("+c.url+" by 1): it admits more than its share while deciding without Redis",
		"admits the whole limit", a.url+": the fallback divides each limit by 3 (it counts ")

	mu.Lock()
	divC = 3
	mu.Unlock()
	rep = runDoctor(t, opts)
	want(t, rep, doctor.GroupInstances, "fallback-divisor", doctor.Pass, "every fallback divides each limit by the fleet's 3 instances or more")

	mu.Lock()
	divC = 1
	mu.Unlock()
	srv.Stop()
	rep = runDoctor(t, opts)
	want(t, rep, doctor.GroupInstances, "fallback-divisor", doctor.Fail, "("+c.url+" by 1): it admits more than its share now that Redis is unreachable",
		c.url+": the fallback divides each limit by 1")
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

// TestNoHeartbeatsOnRedisRefusingWrites: a walk's Redis, filled past
// maxmemory under noeviction, refused every heartbeat and the set
// expired; redis-and-prefix failed with "they decide on another Redis or
// under another --prefix" and a fix blaming doctor's flags. It now names
// the refused writes as the likely cause, with the primary's memory.
func TestNoHeartbeatsOnRedisRefusingWrites(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	cfg := publish(t, client, "om", testConfig)
	traffic(t, client, "om", cfg)
	a := startInstance(t, client, "om", instanceOptions{doc: testConfig, discipline: true})
	ctx := t.Context()
	// maxmemory below what the server already uses.
	if err := client.ConfigSet(ctx, "maxmemory", "100000").Err(); err != nil {
		t.Fatal(err)
	}
	// Every heartbeat is refused from here on: the set is gone, as it is
	// 2 TTLs after the last beat accepted.
	if err := client.Del(ctx, "om:instances").Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.Set(ctx, "om-probe", "1", 0).Err(); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("a write on the full Redis: %v, want OOM", err)
	}
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "om", Instances: []string{a.url}, RateWindow: -1})
	c := want(t, rep, doctor.GroupInstances, "redis-and-prefix", doctor.Fail,
		"no instance heartbeats in om:instances", "Redis refuses writes (noeviction at maxmemory", srv.Addr+": used ")
	if strings.Contains(c.Fix, "doctor audited") || !strings.Contains(c.Fix, "maxmemory") {
		t.Errorf("fix %q: want Redis's memory named first, not doctor's flags", c.Fix)
	}
}

// TestStaleBeatOfAnsweringInstanceOnRedisRefusingWrites: on a Redis that
// refuses writes, the heartbeat of an instance that answered doctor stops
// beating (its beats are refused) and stays in the set (the pruning is a
// write, refused too). An outside walk saw it reported as "stopped
// beating (an instance that ended without leaving, such as one killed:
// it is dropped 6 s after its last beat)", the id of the instance doctor
// had just reached; the refused writes now explain it.
func TestStaleBeatOfAnsweringInstanceOnRedisRefusingWrites(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	cfg := publish(t, client, "os", testConfig)
	traffic(t, client, "os", cfg)
	a := startInstance(t, client, "os", instanceOptions{doc: testConfig, discipline: true})
	ctx := t.Context()
	now, err := client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// At once, so that no beat comes in between: the instance's last
	// beat accepted 10 s ago, the set kept (its TTL is 2 heartbeat TTLs
	// after the last beat), and maxmemory below what the server uses.
	if _, err := client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAddXX(ctx, "os:instances", redis.Z{Score: float64(now.Add(-10 * time.Second).UnixMilli()), Member: a.hbID})
		p.PExpire(ctx, "os:instances", time.Minute)
		p.ConfigSet(ctx, "maxmemory", "100000")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := client.Set(ctx, "os-probe", "1", 0).Err(); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("a write on the full Redis: %v, want OOM", err)
	}
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "os", Instances: []string{a.url}, RateWindow: -1})
	c := want(t, rep, doctor.GroupInstances, "redis-and-prefix", doctor.Fail,
		"Redis refuses writes (noeviction at maxmemory", a.hbID, "of an instance that answered doctor")
	// The set holds the stopped heartbeat: a walk read "holds 0 live
	// instance heartbeats" beside "no instance heartbeats in" and the
	// stopped one named.
	if strings.Contains(c.Summary, "no instance heartbeats in") || !strings.Contains(c.Summary, "no live instance heartbeat in os:instances (only 1 stopped one)") {
		t.Errorf("the summary does not say the set holds a stopped heartbeat and no live one: %s", c.Summary)
	}
	want(t, rep, doctor.GroupInstances, "redis-and-prefix", doctor.Fail, "os:instances holds 0 live instance heartbeats and 1 stopped one")
	for _, wrong := range []string{"such as one killed", "dropped 6 s after"} {
		if strings.Contains(c.Summary, wrong) {
			t.Errorf("the summary says %q of a live instance's heartbeat: %s", wrong, c.Summary)
		}
	}
}
