package doctor_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestInstancesRefusedByRedis: a walk's Redis came back with a password
// the instances lacked. Doctor, given it, read Redis well and found no
// key and no heartbeat: the scan said "the prefix may be wrong" and
// redis-and-prefix "they decide on another Redis or under another
// --prefix", though each instance's /readyz said NOAUTH. Both now name
// Redis refusing the instances, with the refusal, as the likely cause.
func TestInstancesRefusedByRedis(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	a := startInstance(t, client, "rf", instanceOptions{doc: testConfig})
	const pw = "S3cretPassA"
	ctx := t.Context()
	if err := client.ConfigSet(ctx, "requirepass", pw).Err(); err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: pw})
	t.Cleanup(func() { _ = admin.Close() })
	// The instance's connections, authenticated before, are dropped: its
	// new ones are refused, and so are its beats. Its set is gone, as
	// on the walk's new Redis.
	if err := admin.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Del(ctx, "rf:instances").Err(); err != nil {
		t.Fatal(err)
	}
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://:" + pw + "@" + srv.Addr}, Prefix: "rf", Instances: []string{a.url}, RateWindow: -1})
	want(t, rep, doctor.GroupInstances, "ready", doctor.Fail, "NOAUTH")
	c := want(t, rep, doctor.GroupInstances, "redis-and-prefix", doctor.Fail, "Redis refuses the instances' commands", "NOAUTH", a.url+": /readyz degraded")
	if !strings.Contains(c.Fix, "--redis-password-file") || strings.HasPrefix(c.Fix, "give doctor") {
		t.Errorf("redis-and-prefix fix %q: want the instances' password first, not doctor's flags", c.Fix)
	}
	c = want(t, rep, doctor.GroupKeys, "scan", doctor.Warn, "Redis refuses the instances' commands", "NOAUTH")
	if !strings.Contains(c.Fix, "--redis-password-file") {
		t.Errorf("scan fix %q: want the instances' password", c.Fix)
	}
}

// fakeReadyz serves a /readyz answer as serve's, with status code and
// body, and no /metrics (404).
func fakeReadyz(t *testing.T, code int, body map[string]any) string {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write(b)
	}))
	t.Cleanup(hs.Close)
	return hs.URL
}

// TestInstancesRefusedByACL: an instance whose ACL user may not run
// EVALSHA (a walk's `user default ... -@scripting`) reports NOPERM and an
// open breaker in /readyz while doctor reads Redis well:
// redis-and-prefix blamed doctor's --redis and --prefix; it now names
// the NOPERM and the ACL fix.
func TestInstancesRefusedByACL(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	u := fakeReadyz(t, http.StatusServiceUnavailable, map[string]any{
		"status": "degraded", "config_version": "7", "config_source": "fg.yaml", "store": "redis", "heartbeat_id": "host/1",
		"error": "redis " + srv.Addr + ": NOPERM User default has no permissions to run the 'evalsha' command; circuit breaker primary open",
	})
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "ra", Instances: []string{u}, RateWindow: -1})
	c := want(t, rep, doctor.GroupInstances, "redis-and-prefix", doctor.Fail, "Redis refuses the instances' commands", "NOPERM")
	if !strings.Contains(c.Fix, "ACL") {
		t.Errorf("redis-and-prefix fix %q: want the ACL named", c.Fix)
	}
	if strings.Contains(c.Summary, ": they decide on another Redis") {
		t.Errorf("redis-and-prefix %q blames doctor's flags", c.Summary)
	}
	want(t, rep, doctor.GroupKeys, "scan", doctor.Warn, "NOPERM")
}

// TestFileConfiguredInstancesWithRedisDown: with Redis down and no
// --config, Config/validates failed with "nothing is known of the
// configuration the instances run", though their /readyz said they run a
// file (config_source instance.yaml), not the stored document. It now
// says so, a warning.
func TestFileConfiguredInstancesWithRedisDown(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	in := startInstance(t, srv.Client(t), "fd", instanceOptions{doc: testConfig})
	srv.Stop()
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "fd", Instances: []string{in.url}, RateWindow: -1})
	c := want(t, rep, doctor.GroupConfig, "validates", doctor.Warn, "the instances run a configuration file", in.url+` runs version "7" from the file instance.yaml`)
	if strings.Contains(c.Summary, "nothing is known") || !strings.Contains(c.Fix, "--config") {
		t.Errorf("validates %q, fix %q", c.Summary, c.Fix)
	}
}

// holdMaxclients sets s's maxclients to 1 on a connection it keeps, so
// that Redis refuses every new connection (a Cluster node's bus links
// count as clients too), until the test ends.
func holdMaxclients(t *testing.T, s *redistest.Server) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 1})
	conn := c.Conn()
	ctx := context.Background()
	prev, err := conn.ConfigGet(ctx, "maxclients").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.ConfigSet(ctx, "maxclients", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.ConfigSet(ctx, "maxclients", prev["maxclients"]).Err()
		_ = conn.Close()
		_ = c.Close()
	})
}

// TestMaxclientsNamedWithItsFix: a Redis at maxclients failed the probe
// with the maxclients diagnosis under "cannot reach Redis", and the fix
// of a Redis that stopped answering. The headline and the fix now say
// that Redis refuses new connections.
func TestMaxclientsNamedWithItsFix(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	holdMaxclients(t, srv)
	got := unreachable(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "mc"})
	for _, w := range []string{"Redis refuses new connections (", "maxclients", "raise it (CONFIG SET maxclients", "CLIENT LIST"} {
		if !strings.Contains(got, w) {
			t.Errorf("Redis/reachable does not say %q:\n%s", w, got)
		}
	}
	for _, wrong := range []string{"cannot reach", "stopped answering", "did not answer"} {
		if strings.Contains(got, wrong) {
			t.Errorf("Redis/reachable says %q:\n%s", wrong, got)
		}
	}
}

// TestClusterNodeAtMaxclients: one node of three at maxclients made the
// whole cluster "cannot reach Redis", every check skipped and the node
// unnamed. The checks now run on the nodes doctor reads; the server
// check names the node, its refusal and the maxclients fix.
func TestClusterNodeAtMaxclients(t *testing.T) {
	cl := redistest.StartCluster(t)
	holdMaxclients(t, cl.Nodes[0])
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{ClusterAddrs: cl.Addrs}, Prefix: "cm", RateWindow: -1})
	if c, ok := rep.Find(doctor.GroupRedis, "reachable"); ok && c.Status == doctor.Fail {
		t.Fatalf("Redis/reachable fails with two nodes of three answering:\n%s", text(rep))
	}
	c := want(t, rep, doctor.GroupRedis, "server", doctor.Fail, cl.Addrs[0]+": INFO failed", "max number of clients")
	if !strings.Contains(c.Fix, "maxclients") || strings.Contains(c.Fix, "stopped answering") {
		t.Errorf("Redis/server fix %q, want the maxclients fix", c.Fix)
	}
	c = want(t, rep, doctor.GroupRedis, "cluster", doctor.Fail, cl.Addrs[0], "refuses new connections (maxclients)")
	if !strings.Contains(c.Fix, "raise it") {
		t.Errorf("Redis/cluster fix %q, want the maxclients fix", c.Fix)
	}
	if c, _ := rep.Find(doctor.GroupRedis, "latency"); !strings.Contains(c.Fix, "maxclients") {
		t.Errorf("Redis/latency fix %q, want the maxclients fix", c.Fix)
	}
	for _, a := range cl.Addrs[1:] {
		want(t, rep, doctor.GroupRedis, "server", doctor.Fail, a+" redis ")
	}
}

// TestSentinelsAtMaxclients: sentinels at their maxclients limit (each
// writes Redis's refusal and closes the connection, as a sentinel at the
// limit does) were "no sentinel answers (ADDR: write: broken pipe ...)"
// with a fix to check that they are up. Doctor's sentinel clients now
// read the refusal, and the diagnosis and fix name maxclients.
func TestSentinelsAtMaxclients(t *testing.T) {
	var addrs []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte("-ERR max number of clients reached\r\n"))
				// Redis closes it once the reply is written; the
				// client's write may come first, or meet the close.
				_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
				_, _ = c.Read(make([]byte, 512))
				c.Close()
			}
		}()
		addrs = append(addrs, ln.Addr().String())
	}
	got := unreachable(t, doctor.Options{Redis: config.Redis{SentinelAddrs: addrs, SentinelMaster: "main"}, Prefix: "sm"})
	for _, w := range []string{"maxclients", addrs[0], addrs[1], "max number of clients"} {
		if !strings.Contains(got, w) {
			t.Errorf("Redis/reachable does not say %q:\n%s", w, got)
		}
	}
	if strings.Contains(got, "no sentinel answers") || strings.Contains(got, "that the sentinels are up") {
		t.Errorf("Redis/reachable sends the reader to check the sentinels are up:\n%s", got)
	}
}
