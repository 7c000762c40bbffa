package doctor_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/loginguard"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/redis/go-redis/v9"
)

func TestHealthyStandalonePassesClean(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	cfg := publish(t, client, "hs", testConfigQuota)
	traffic(t, client, "hs", cfg)
	// Login guard keys under {hslogin}: the guard's own formats.
	lb, err := loginguard.NewRedis(client, "hslogin")
	if err != nil {
		t.Fatal(err)
	}
	g, err := loginguard.New(lb, loginguard.Options{Secret: []byte("0123456789abcdef0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := g.Failure(context.Background(), "alice", netip.MustParseAddr("192.0.2.7")); err != nil {
			t.Fatal(err)
		}
	}

	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "hs", LoginPrefix: "hslogin"})
	clean(t, rep)
	want(t, rep, doctor.GroupRedis, "persistence", doctor.Pass, "appendonly yes", "tokens")
	want(t, rep, doctor.GroupKeys, "ttl", doctor.Pass)
	pc := want(t, rep, doctor.GroupKeys, "policies", doctor.Pass, "api.per-user (sw): 3 keys", "login.per-account (sl): 3 keys",
		"tokens (q): ", "reports (cc): 1 key,", "login guard: 3 keys")
	// The sorted sets are told apart: a lease set is not a sliding log.
	want(t, rep, doctor.GroupKeys, "sliding-logs", doctor.Pass, "hs:reports:cc:{ru1}: 1 member, a concurrency limit's lease set",
		"hs:login.per-account:sl:")
	// The read line names every command it counts: MEMORY USAGE and the
	// GETs of the window counters (identities near their limit).
	var mem, gets int
	if _, err := fmt.Sscanf(pc.Read[strings.Index(pc.Read, "MEMORY USAGE on "):], "MEMORY USAGE on %d sampled keys and GET of %d window counters", &mem, &gets); err != nil {
		t.Fatalf("policies read line %q: %v", pc.Read, err)
	}
	if int64(mem+gets) != pc.RedisCommands || gets == 0 {
		t.Fatalf("policies read line %q: %d + %d commands named, %d counted", pc.Read, mem, gets, pc.RedisCommands)
	}
	if rep.RedisCommands == 0 {
		t.Fatal("the report counts no Redis commands")
	}
}

func TestKeyWithoutTTLFails(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	cfg := publish(t, client, "nt", testConfig)
	traffic(t, client, "nt", cfg)
	// A counter written by a GET-check-INCR client: no TTL.
	if err := client.Incr(context.Background(), "nt:api.per-user:sw:{rmallory}").Err(); err != nil {
		t.Fatal(err)
	}
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "nt"})
	c := want(t, rep, doctor.GroupKeys, "ttl", doctor.Fail, "nt:api.per-user:sw:{rmallory}", "1 key without a TTL",
		"1 key under the prefix has no TTL: it never expires, so its identity keeps old counts")
	if c.Fix == "" {
		t.Fatal("a failed check must say how to fix it")
	}
	if rep.Worst() != doctor.Fail {
		t.Fatalf("worst is %v, want fail", rep.Worst())
	}
	// Two more: the summary and evidence count them in the plural.
	for _, k := range []string{"nt:api.per-user:sw:{rtrudy}", "nt:login.per-account:sl:{reve}"} {
		if err := client.Set(context.Background(), k, "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rep = runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "nt"})
	want(t, rep, doctor.GroupKeys, "ttl", doctor.Fail, "3 keys without a TTL: nt:api.per-user:sw:{rmallory}, nt:api.per-user:sw:{rtrudy}, nt:login.per-account:sl:{reve}",
		"3 keys under the prefix have no TTL: they never expire, so their identities keep old counts")
	// The configuration document and tier hash have no TTL by design.
	if n, _ := client.Exists(context.Background(), "nt:config").Result(); n != 1 {
		t.Fatal("nt:config should exist")
	}
}

func TestLongTTLAndUnknownKeysWarn(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	cfg := publish(t, client, "lt", testConfig)
	traffic(t, client, "lt", cfg)
	ctx := context.Background()
	// A one-minute sliding window counter that lives a day, a key of a
	// policy the configuration no longer has, and another application's key.
	for k, ttl := range map[string]time.Duration{
		"lt:api.per-user:sw:{rlong}": 24 * time.Hour,
		"lt:old.layer:fw:{rx}":       time.Minute,
		"lt:session:abc":             time.Minute,
	} {
		if err := client.Set(ctx, k, "1 1", ttl).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "lt"})
	want(t, rep, doctor.GroupKeys, "ttl", doctor.Warn, "lt:api.per-user:sw:{rlong}")
	want(t, rep, doctor.GroupKeys, "policies", doctor.Warn, "lt:session:abc", "old.layer (fw) ×1")
}

// TestEvictingPolicyFails: each evicting policy fails, saying what it
// drops. volatile-* said "every Floodgate key has a TTL", though the
// configuration document and the tier hash have none; allkeys-* did not
// say that it evicts them (a walk's --config-from-redis instance then
// answered 503 to every check), and neither named concurrency leases (2
// held of a limit of 2 evicted, 2 more granted: 4 in flight).
func TestEvictingPolicyFails(t *testing.T) {
	for _, tc := range []struct {
		policy   string
		mentions []string
	}{
		{"allkeys-lru", []string{"concurrency leases are granted again", "the configuration document and the tier hash go too", "--config-from-redis"}},
		{"volatile-lru", []string{"concurrency leases are granted again", "only the configuration document and the tier hash have none"}},
		{"allkeys-random", []string{"concurrency leases", "the configuration document and the tier hash go too"}},
		{"volatile-ttl", []string{"leases are granted again past the limit"}},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			srv := redistest.Start(t, "--maxmemory", "256mb", "--maxmemory-policy", tc.policy, "--appendonly", "yes")
			rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "ev"})
			c := want(t, rep, doctor.GroupRedis, "maxmemory-policy", doctor.Fail, append([]string{tc.policy}, tc.mentions...)...)
			if c.Fix == "" {
				t.Fatal("no fix")
			}
			if strings.Contains(c.Summary, "every Floodgate key has a TTL") {
				t.Errorf("summary %q: the configuration document and the tier hash have no TTL", c.Summary)
			}
		})
	}
	t.Run("no maxmemory", func(t *testing.T) {
		srv := redistest.Start(t, "--maxmemory-policy", "allkeys-lfu")
		rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "ev"})
		want(t, rep, doctor.GroupRedis, "maxmemory-policy", doctor.Warn, "nothing is evicted until a limit is set")
		want(t, rep, doctor.GroupRedis, "memory", doctor.Warn, "no maxmemory")
	})
}

func TestNoPersistenceWithQuotasFails(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "256mb", "--maxmemory-policy", "noeviction") // --appendonly no
	client := srv.Client(t)
	publish(t, client, "qa", testConfigQuota)
	publish(t, client, "nq", untieredConfig)
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "qa"})
	c := want(t, rep, doctor.GroupRedis, "persistence", doctor.Fail, "appendonly no", "quotas configured: tokens")
	// The fix said "keep replicas so a failover does not lose the last
	// second either": a primary without persistence that restarts before
	// a failover comes back empty and empties its replicas.
	if !strings.Contains(c.Fix, "replicas do not replace it") || !strings.Contains(c.Fix, "comes back empty") || strings.Contains(c.Fix, "keep replicas") {
		t.Errorf("persistence fix %q", c.Fix)
	}

	// The same server without quotas or tiers configured: short-lived
	// counters only.
	rep = runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "nq"})
	want(t, rep, doctor.GroupRedis, "persistence", doctor.Pass, "no quotas configured")

	// No configuration to read: whether quotas are counted is unknown
	// (the built-in example counts them), not "no quotas configured".
	rep = runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "none"})
	want(t, rep, doctor.GroupRedis, "persistence", doctor.Warn, "the configuration is unknown")
}

// TestAppendfsyncNoWithQuotasWarns: AOF with appendfsync no leaves the
// flush to the kernel, and a crash of the host loses up to ~30 s of
// acknowledged quota usage. An outside walk saw "[PASS] persistence: AOF
// is on wherever quotas are counted" for it: appendfsync was never read,
// though the check's fix asks for everysec. always and everysec pass;
// without quotas, appendfsync no does too.
func TestAppendfsyncNoWithQuotasWarns(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	publish(t, client, "fq", testConfigQuota)
	publish(t, client, "fn", untieredConfig)
	for _, step := range []struct {
		fsync, prefix string
		want          doctor.Status
		mentions      []string
	}{
		{"no", "fq", doctor.Warn, []string{"appendfsync no", "appendfsync \"no\"", "~30 s of acknowledged quota usage"}},
		{"everysec", "fq", doctor.Pass, []string{"AOF is on wherever quotas are counted", "appendfsync \"everysec\""}},
		{"always", "fq", doctor.Pass, []string{"AOF is on wherever quotas are counted", "appendfsync \"always\""}},
		{"no", "fn", doctor.Pass, []string{"no quotas configured"}},
	} {
		if err := client.ConfigSet(t.Context(), "appendfsync", step.fsync).Err(); err != nil {
			t.Fatal(err)
		}
		rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: step.prefix})
		c := want(t, rep, doctor.GroupRedis, "persistence", step.want, step.mentions...)
		if step.want == doctor.Warn && !strings.Contains(c.Fix, "appendfsync everysec") {
			t.Errorf("appendfsync %s: fix %q does not ask for appendfsync everysec", step.fsync, c.Fix)
		}
	}
}

// untieredConfig has neither quotas nor tiered limits: nothing in Redis
// outlives a window.
const untieredConfig = `version: "1"
policies:
  - name: api
    layers:
      - {name: per-user, algorithm: sliding_window, limit: 100, window: 1m, dimension: user}
`

// TestNoPersistenceWithTierAssignments: tier assignments live in Redis
// for good, so a primary without AOF fails the persistence check when
// the hash holds some (a restart drops them and their identities fall to
// the default tier silently), and warns when limits are tiered but
// nothing is assigned yet; with AOF on, it passes.
func TestNoPersistenceWithTierAssignments(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "256mb", "--maxmemory-policy", "noeviction") // --appendonly no
	client := srv.Client(t)
	ctx := context.Background()
	publish(t, client, "ta", testConfig)
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "ta"})
	want(t, rep, doctor.GroupRedis, "persistence", doctor.Warn, "limits are tiered", "ta:tiers holds 0 tier assignments")

	if err := client.HSet(ctx, "ta:tiers", "user=u1", "pro", "user=u2", "pro").Err(); err != nil {
		t.Fatal(err)
	}
	rep = runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "ta"})
	c := want(t, rep, doctor.GroupRedis, "persistence", doctor.Fail, "2 tier assignments are stored in ta:tiers", "fall to the default tier")
	if !strings.Contains(c.Read, "HLEN ta:tiers") {
		t.Errorf("read line %q does not name the HLEN", c.Read)
	}

	// Assignments stored without a configuration to read: still lost.
	if err := client.HSet(ctx, "nc:tiers", "user=u1", "pro").Err(); err != nil {
		t.Fatal(err)
	}
	rep = runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "nc"})
	want(t, rep, doctor.GroupRedis, "persistence", doctor.Fail, "1 tier assignment is stored in nc:tiers")

	// With AOF on, the same assignments pass.
	aof := redistest.Start(t, healthyRedis...)
	ac := aof.Client(t)
	publish(t, ac, "ta", testConfig)
	if err := ac.HSet(ctx, "ta:tiers", "user=u1", "pro").Err(); err != nil {
		t.Fatal(err)
	}
	rep = runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + aof.Addr}, Prefix: "ta"})
	want(t, rep, doctor.GroupRedis, "persistence", doctor.Pass, "AOF is on where the tier assignments are kept", "ta:tiers holds 1 tier assignment")
}

func TestClusterMissingSlotsFails(t *testing.T) {
	cl := redistest.StartCluster(t)
	cc := cl.Client(t)
	cfg := publish(t, cc, "cl", testConfig)
	traffic(t, cc, "cl", cfg)
	opts := doctor.Options{Redis: config.Redis{ClusterAddrs: cl.Addrs}, Prefix: "cl", Scan: doctor.ScanOptions{MaxTime: 30 * time.Second}}

	rep := runDoctor(t, opts)
	want(t, rep, doctor.GroupRedis, "cluster", doctor.Pass, "all 16384 slots served")
	want(t, rep, doctor.GroupKeys, "ttl", doctor.Pass)
	// The probe times each primary on a key of its own.
	want(t, rep, doctor.GroupRedis, "latency", doctor.Pass, cl.Addrs[0]+": probe", cl.Addrs[1]+": probe", cl.Addrs[2]+": probe")

	// Take slots 10923-11000 away from the third primary.
	node := cl.Nodes[2].Client(t)
	args := []any{"CLUSTER", "DELSLOTS"}
	for s := 10923; s <= 11000; s++ {
		args = append(args, strconv.Itoa(s))
	}
	if err := node.Do(context.Background(), args...).Err(); err != nil {
		t.Fatal(err)
	}
	rep = runDoctor(t, opts)
	c := want(t, rep, doctor.GroupRedis, "cluster", doctor.Fail, "10923-11000")
	if c.Fix == "" {
		t.Fatal("no fix")
	}
}

// TestClusterOpenSlotWarns leaves a slot half-moved, as a resharding
// stopped between CLUSTER SETSLOT MIGRATING/IMPORTING and SETSLOT NODE
// leaves it: the cluster check used to pass it ("all 16384 slots
// served"), though a decision whose keys are split between the two nodes
// then fails until the move is finished or undone.
func TestClusterOpenSlotWarns(t *testing.T) {
	cl := redistest.StartCluster(t)
	cc := cl.Client(t)
	cfg := publish(t, cc, "os", testConfig)
	traffic(t, cc, "os", cfg)
	opts := doctor.Options{Redis: config.Redis{ClusterAddrs: cl.Addrs}, Prefix: "os", Scan: doctor.ScanOptions{MaxTime: 30 * time.Second}}

	ctx := context.Background()
	from, to := cl.Nodes[0].Client(t), cl.Nodes[1].Client(t)
	fromID, err := from.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	toID, err := to.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// Written before the move starts: a migrating node answers ASK for a
	// key it does not hold.
	moved := slotKey(t, from, "os:stray:", 100)
	if err := from.Set(ctx, moved, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := to.Do(ctx, "CLUSTER", "SETSLOT", "100", "IMPORTING", fromID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := from.Do(ctx, "CLUSTER", "SETSLOT", "100", "MIGRATING", toID).Err(); err != nil {
		t.Fatal(err)
	}
	// A key of slot 100 already moved: the importing node holds it but
	// serves it only after ASKING. Its PTTL was reported as a scan error
	// ("MOVED 100 ..."), and the key checks missed it (a walk during a
	// resharding). It has no TTL, so the ttl check must name it.
	host, port, _ := strings.Cut(cl.Addrs[1], ":")
	if err := from.Migrate(ctx, host, port, moved, 0, 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	rep := runDoctor(t, opts)
	c := want(t, rep, doctor.GroupRedis, "cluster", doctor.Warn, cl.Addrs[0]+": 100 migrating", cl.Addrs[1]+": 100 importing",
		"quotas and leases have none and answer 503 store-unavailable")
	if !strings.Contains(c.Fix, "redis-cli --cluster fix") {
		t.Errorf("fix %q does not say how to finish or undo the move", c.Fix)
	}
	want(t, rep, doctor.GroupKeys, "scan", doctor.Pass)
	want(t, rep, doctor.GroupKeys, "ttl", doctor.Fail, moved)
	if err := to.Do(ctx, "ASKING").Err(); err != nil {
		t.Fatal(err)
	}
	if err := cc.Del(ctx, moved).Err(); err != nil {
		// Through the cluster client: it follows the ASK redirection.
		t.Fatal(err)
	}

	for _, n := range []*redis.Client{from, to} {
		if err := n.Do(ctx, "CLUSTER", "SETSLOT", "100", "STABLE").Err(); err != nil {
			t.Fatal(err)
		}
	}
	rep = runDoctor(t, opts)
	want(t, rep, doctor.GroupRedis, "cluster", doctor.Pass, "all 16384 slots served")
}

func TestHealthySentinelPasses(t *testing.T) {
	s := redistest.StartSentinel(t)
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{SentinelAddrs: s.SentinelAddrs, SentinelMaster: s.MasterName}, Prefix: "se"})
	want(t, rep, doctor.GroupRedis, "sentinel", doctor.Pass, "3 of 3 sentinels")
	want(t, rep, doctor.GroupRedis, "replication", doctor.Pass, "primary with 1 replica;")
	want(t, rep, doctor.GroupRedis, "sentinel", doctor.Pass, ", 1 replica up, 2 other sentinels, quorum", "to 1 replica they consider up")
}

// TestReplicationCountsReplicas: a primary with two replicas is reported
// "primary with 2 replicas" (it read "2 replica(s)"); the Sentinel test
// above checks the singular.
func TestReplicationCountsReplicas(t *testing.T) {
	primary := redistest.Start(t, healthyRedis...)
	for i := 0; i < 2; i++ {
		redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	}
	client := primary.Client(t)
	// Wait (up to a minute) until both replicas are linked and online.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		info, err := client.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "connected_slaves:2") && strings.Count(info, "state=online") == 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the replicas never came online: %v\n%s", err, info)
		case <-time.After(50 * time.Millisecond):
		}
	}
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + primary.Addr}, Prefix: "rr"})
	want(t, rep, doctor.GroupRedis, "replication", doctor.Pass, primary.Addr+": primary with 2 replicas;", "every primary has online replicas")
	want(t, rep, doctor.GroupRedis, "server", doctor.Pass, "1 primary, at Redis 6.0 or later")
}

func TestRunChangesNothing(t *testing.T) {
	// Run writes nothing: the keys and their TTLs are the same after a run.
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	cfg := publish(t, client, "ro", testConfig)
	traffic(t, client, "ro", cfg)
	ctx := context.Background()
	dirty := func() string {
		s, err := client.Info(ctx, "persistence").Result()
		if err != nil {
			t.Fatal(err)
		}
		return field(s, "rdb_changes_since_last_save")
	}
	d0 := dirty()
	runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "ro"})
	if d1 := dirty(); d1 != d0 {
		t.Fatalf("doctor changed the dataset: rdb_changes_since_last_save %s -> %s", d0, d1)
	}
}

func field(info, name string) string {
	for _, line := range strings.Split(info, "\r\n") {
		if len(line) > len(name) && line[:len(name)] == name && line[len(name)] == ':' {
			return line[len(name)+1:]
		}
	}
	return ""
}

// TestHealthySentinelOverTLS checks the Sentinel setup over TLS, reaching
// the sentinels as the limiter does (their TLS ports, the same
// certificates), in both spellings: sentinel addresses with TLS settings
// and a rediss-sentinel URL. Before, the check dialled the sentinels in
// plain TCP and failed on a deployment that works.
func TestHealthySentinelOverTLS(t *testing.T) {
	f := redistest.GenerateTLS(t)
	f.AuthClients = true
	s := redistest.StartSentinelTLS(t, f)
	tlsOpts := &config.RedisTLS{CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey}
	for _, r := range []config.Redis{
		{SentinelAddrs: s.SentinelTLSAddrs, SentinelMaster: s.MasterName, TLS: tlsOpts},
		{URL: "rediss-sentinel://" + strings.Join(s.SentinelTLSAddrs, ",") + "?master=" + s.MasterName, TLS: tlsOpts},
	} {
		rep := runDoctor(t, doctor.Options{Redis: r, Prefix: "st"})
		want(t, rep, doctor.GroupRedis, "sentinel", doctor.Pass, "3 of 3 sentinels", s.SentinelTLSAddrs[0])
	}
}

// TestSentinelWrongMasterName: sentinels that answer but monitor no
// primary by the name given are not "unreachable" (go-redis's words): the
// error says the name is unknown to them and to check --redis-master.
func TestSentinelWrongMasterName(t *testing.T) {
	s := redistest.StartSentinel(t)
	got := unreachable(t, doctor.Options{Redis: config.Redis{SentinelAddrs: s.SentinelAddrs, SentinelMaster: "no-such-primary"}, Prefix: "wm"})
	for _, want := range []string{`no primary named "no-such-primary"`, "--redis-master", s.SentinelAddrs[0]} {
		if !strings.Contains(got, want) {
			t.Errorf("Redis/reachable %q does not say %q", got, want)
		}
	}
	if summary, _, _ := strings.Cut(got, "\n"); strings.Contains(summary, "unreachable") {
		t.Errorf("Redis/reachable %q calls sentinels that answered unreachable", summary)
	}
}

// TestSentinelMajorityDoesNotKnowTheMaster: with two of three sentinels
// told SENTINEL REMOVE and the primary the third names down, the
// diagnosis says that a majority answer that they monitor no such
// primary, not that no majority answers (a code review: it said "only 1
// of 3 sentinels answer (...): no majority of the sentinels answers",
// and sent the reader to bring the sentinels back).
func TestSentinelMajorityDoesNotKnowTheMaster(t *testing.T) {
	s := redistest.StartSentinel(t)
	for _, a := range s.SentinelAddrs[:2] {
		sc := redis.NewClient(&redis.Options{Addr: a})
		err := sc.Do(context.Background(), "SENTINEL", "REMOVE", s.MasterName).Err()
		sc.Close()
		if err != nil {
			t.Fatalf("SENTINEL REMOVE on %s: %v", a, err)
		}
	}
	s.Primary.Stop()
	got := unreachable(t, doctor.Options{Redis: config.Redis{SentinelAddrs: s.SentinelAddrs, SentinelMaster: s.MasterName}, Prefix: "mk"})
	for _, want := range []string{"a majority of the sentinels (" + s.SentinelAddrs[0] + ", " + s.SentinelAddrs[1] + ") answer, but monitor no primary named", "SENTINEL MONITOR"} {
		if !strings.Contains(got, want) {
			t.Errorf("Redis/reachable %q does not say %q", got, want)
		}
	}
	if strings.Contains(got, "no majority of the sentinels answers") {
		t.Errorf("Redis/reachable %q says no majority answers: all three did", got)
	}
}

// TestSentinelsUnreachable: when no sentinel answers, the error says so
// and why for each (connection refused), as docs/operations.md promises
// ("the message says why"); it used to be go-redis's bare "context
// deadline exceeded".
func TestSentinelsUnreachable(t *testing.T) {
	var addrs []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, ln.Addr().String())
		ln.Close()
	}
	got := unreachable(t, doctor.Options{Redis: config.Redis{SentinelAddrs: addrs, SentinelMaster: "main"}, Prefix: "su"})
	for _, want := range []string{"no sentinel answers", addrs[0], addrs[1], "connection refused"} {
		if !strings.Contains(got, want) {
			t.Errorf("Redis/reachable %q does not say %q", got, want)
		}
	}
}

// TestSentinelAddressOfRedis: a sentinel address that is a Redis server's
// (its port instead of the sentinel's, a common slip) answers, with an
// error: the diagnosis says the server answered and what, not that no
// sentinel answers (it said "no sentinel answers (ADDR: ERR unknown
// command 'sentinel' ...): check ... that the sentinels are up and
// reachable", sending the reader to the network).
func TestSentinelAddressOfRedis(t *testing.T) {
	rs := redistest.Start(t)
	got := unreachable(t, doctor.Options{Redis: config.Redis{SentinelAddrs: []string{rs.Addr}, SentinelMaster: "main"}, Prefix: "sr"})
	for _, want := range []string{"no sentinel gives the address of primary \"main\"", rs.Addr + ": ERR unknown command", "not a Redis server's"} {
		if !strings.Contains(got, want) {
			t.Errorf("Redis/reachable %q does not say %q", got, want)
		}
	}
	if strings.Contains(got, "no sentinel answers") {
		t.Errorf("Redis/reachable %q says no sentinel answers: one did, with an error", got)
	}
}

// TestLatencyProbeFailureIsNotLatency: with slots deleted the cluster is
// down and the probe's calls fail with CLUSTERDOWN. The latency check
// used to say "script round trip p99 446µs is above 50ms, the default
// decision budget, or the probe failed" and to send the reader to
// SLOWLOG; it now says the probe failed, how many calls of how many, the
// first error, and a fix about the cluster.
func TestLatencyProbeFailureIsNotLatency(t *testing.T) {
	cl := redistest.StartCluster(t)
	cc := cl.Client(t)
	publish(t, cc, "lf", testConfig)
	opts := doctor.Options{Redis: config.Redis{ClusterAddrs: cl.Addrs}, Prefix: "lf", Scan: doctor.ScanOptions{MaxTime: 30 * time.Second}}
	takeClusterDown(t, cl)
	rep := runDoctor(t, opts)
	c := want(t, rep, doctor.GroupRedis, "latency", doctor.Fail, "the latency probe failed: ", " calls failed, on ", "CLUSTERDOWN")
	t.Logf("latency: %s\n%s\nfix: %s", c.Summary, strings.Join(c.Evidence, "\n"), c.Fix)
	if strings.Contains(c.Summary, "is above") {
		t.Errorf("latency summary blames latency for a failed probe: %q", c.Summary)
	}
	if !strings.Contains(c.Fix, "the cluster is down") || strings.Contains(c.Fix, "SLOWLOG") {
		t.Errorf("latency fix %q is not about the cluster being down", c.Fix)
	}
}

// TestServerReportsReplica: pointed at a replica, the server check said
// "1 primary" while the replication check said doctor reached a replica.
func TestServerReportsReplica(t *testing.T) {
	primary := redistest.Start(t, healthyRedis...)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + replica.Addr}, Prefix: "sr"})
	c := want(t, rep, doctor.GroupRedis, "server", doctor.Pass, "1 replica, not a primary (see replication)", replica.Addr+" redis ", "role replica")
	if strings.Contains(c.Summary, "primary,") || strings.HasPrefix(c.Summary, "1 primary") {
		t.Errorf("server summary %q calls the replica a primary", c.Summary)
	}
	want(t, rep, doctor.GroupRedis, "replication", doctor.Fail, "doctor reached a replica")
}

// TestSentinelDeadReplicaAfterFailover: after a failover, the old primary
// is listed by the sentinels as a replica of the new one; killed, it is
// flagged s_down. The sentinel check passed "1 replica" on num-slaves;
// it now counts the replicas the sentinels consider up, and warns that
// there is none to fail over to.
func TestSentinelDeadReplicaAfterFailover(t *testing.T) {
	s := redistest.StartSentinel(t)
	s.Failover(t)
	old := s.Replica // the old primary
	old.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, a := range s.SentinelAddrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a})
		for {
			rs, err := sc.Replicas(ctx, s.MasterName).Result()
			down := false
			for _, r := range rs {
				down = down || (r["ip"]+":"+r["port"] == old.Addr && strings.Contains(r["flags"], "s_down"))
			}
			if down {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("sentinel %s never flagged %s down: %v %v", a, old.Addr, err, rs)
			}
			time.Sleep(100 * time.Millisecond)
		}
		_ = sc.Close()
	}
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{SentinelAddrs: s.SentinelAddrs, SentinelMaster: s.MasterName}, Prefix: "sd"})
	c := want(t, rep, doctor.GroupRedis, "sentinel", doctor.Warn, "no replica of "+s.MasterName+" is up for the sentinels", "0 replicas up (of 1 known; down: "+old.Addr+" (", "s_down")
	if c.Fix == "" {
		t.Fatal("no fix")
	}
}

// slotKey returns a key starting with prefix that hashes to slot, asking
// node for the slots of candidate hash tags.
func slotKey(t *testing.T, node *redis.Client, prefix string, slot int64) string {
	t.Helper()
	for i := range 200_000 {
		k := fmt.Sprintf("%s{t%d}", prefix, i)
		if int64(redisstore.Slot(k)) == slot {
			if got, err := node.ClusterKeySlot(context.Background(), k).Result(); err != nil || got != slot {
				t.Fatalf("CLUSTER KEYSLOT %s = %d, %v; want %d", k, got, err, slot)
			}
			return k
		}
	}
	t.Fatalf("no hash tag found for slot %d", slot)
	return ""
}

// takeClusterDown deletes slots 10923-16383 (the third primary's) on
// every node and waits until each reports cluster_state fail, as nodes
// with cluster-require-full-coverage yes (Redis's default) do: every
// keyed command then answers CLUSTERDOWN. Deleted on every node, so that
// every node's view (doctor loads the slot map from any of them) has
// those slots unserved: deleted on their owner alone, a map loaded from
// another node still had them served, and the probe of the other two
// primaries passed.
func takeClusterDown(t *testing.T, cl *redistest.Cluster) {
	t.Helper()
	ctx := context.Background()
	args := []any{"CLUSTER", "DELSLOTS"}
	for s := 10923; s <= 16383; s++ {
		args = append(args, strconv.Itoa(s))
	}
	for i := range cl.Nodes {
		if err := cl.Nodes[i].Client(t).Do(ctx, args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range cl.Nodes {
		c := cl.Nodes[i].Client(t)
		deadline := time.Now().Add(30 * time.Second)
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:fail") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never saw the cluster down: %v\n%s", cl.Addrs[i], err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
