package doctor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestClusterFullCoverageWarns: docs/operations.md asks for
// cluster-require-full-coverage no on the nodes, but doctor never read
// it, and on a Cluster with Redis's default (yes) and primaries without
// a replica its cluster check passed with "a failed primary takes its
// slots down", when it takes every slot down (an outside Cluster walk).
// The full-coverage check now warns and names the nodes; set to no on
// every node it passes, and the cluster check's sentence follows the
// setting.
func TestClusterFullCoverageWarns(t *testing.T) {
	cl := redistest.StartCluster(t)
	cc := cl.Client(t)
	cfg := publish(t, cc, "fc", testConfig)
	traffic(t, cc, "fc", cfg)
	opts := doctor.Options{Redis: config.Redis{ClusterAddrs: cl.Addrs}, Prefix: "fc", Scan: doctor.ScanOptions{MaxTime: 30 * time.Second}}

	rep := runDoctor(t, opts)
	c := want(t, rep, doctor.GroupRedis, "full-coverage", doctor.Warn, "cluster-require-full-coverage yes on 3 of 3 primaries",
		cl.Addrs[0], cl.Addrs[1], cl.Addrs[2], "CLUSTERDOWN")
	for _, w := range []string{"CONFIG SET cluster-require-full-coverage no", "redis.conf"} {
		if !strings.Contains(c.Fix, w) {
			t.Errorf("full-coverage fix %q does not say %q", c.Fix, w)
		}
	}
	// StartCluster's primaries have no replica.
	c = want(t, rep, doctor.GroupRedis, "cluster", doctor.Pass, "all 16384 slots served", "some slot ranges have no replica",
		"with cluster-require-full-coverage yes (see full-coverage) it takes every slot down")

	ctx := context.Background()
	for _, n := range cl.Nodes {
		if err := n.Client(t).ConfigSet(ctx, "cluster-require-full-coverage", "no").Err(); err != nil {
			t.Fatal(err)
		}
	}
	rep = runDoctor(t, opts)
	c = want(t, rep, doctor.GroupRedis, "full-coverage", doctor.Pass, "cluster-require-full-coverage no on every primary",
		cl.Addrs[0]+": cluster-require-full-coverage no", cl.Addrs[2]+": cluster-require-full-coverage no")
	if c.Fix != "" {
		t.Errorf("a passing full-coverage check has a fix: %q", c.Fix)
	}
	c = want(t, rep, doctor.GroupRedis, "cluster", doctor.Pass, "some slot ranges have no replica", "cluster-require-full-coverage no: the other slots keep answering")
	if strings.Contains(c.Summary, "every slot") {
		t.Errorf("cluster: %q", c.Summary)
	}
}

// TestClusterDownFixNamesFullCoverage: a walk paused a primary that had a
// replica, and the others answered CLUSTERDOWN because of
// cluster-require-full-coverage yes; the latency probe's fix said "slots
// served by no node, or a primary failed without a replica to take
// over", neither of which was the case. It now names the setting and the
// nodes where doctor read yes, and a failover in progress; run as an ACL
// user that may not send CONFIG GET, the full-coverage check warns with
// the reads to grant, as other refused reads do, and the fix gives the
// setting as a possibility.
func TestClusterDownFixNamesFullCoverage(t *testing.T) {
	cl := redistest.StartCluster(t)
	cc := cl.Client(t)
	publish(t, cc, "cd", testConfig)
	opts := doctor.Options{Redis: config.Redis{ClusterAddrs: cl.Addrs}, Prefix: "cd", Scan: doctor.ScanOptions{MaxTime: 30 * time.Second}}
	takeClusterDown(t, cl)

	// The third primary, left without a slot, is no longer one doctor
	// reads.
	rep := runDoctor(t, opts)
	c := want(t, rep, doctor.GroupRedis, "latency", doctor.Fail, "CLUSTERDOWN")
	for _, w := range []string{"a failover in progress", "cluster-require-full-coverage is yes on ", cl.Addrs[0], cl.Addrs[1],
		"even one with a replica", "CONFIG SET cluster-require-full-coverage no"} {
		if !strings.Contains(c.Fix, w) {
			t.Errorf("latency fix %q does not say %q", c.Fix, w)
		}
	}

	// The documented ACL line without +config|get.
	acl := []any{"ACL", "SETUSER", "noconf", "on", ">pw", "~*"}
	for _, r := range strings.Fields(strings.Replace(docACL, "+config|get ", "", 1)) {
		acl = append(acl, r)
	}
	for _, n := range cl.Nodes {
		if err := n.Client(t).Do(context.Background(), acl...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	opts.Redis.Username, opts.Redis.Password = "noconf", "pw"
	rep = runDoctor(t, opts)
	c = want(t, rep, doctor.GroupRedis, "full-coverage", doctor.Warn, "could not be read on 2 of 2 primaries", "NOPERM")
	if !strings.Contains(c.Fix, "grant doctor's ACL user these reads") {
		t.Errorf("full-coverage fix %q", c.Fix)
	}
	c = want(t, rep, doctor.GroupRedis, "latency", doctor.Fail, "CLUSTERDOWN")
	for _, w := range []string{"a failover in progress", "with cluster-require-full-coverage yes (Redis's default; doctor could not read it everywhere)"} {
		if !strings.Contains(c.Fix, w) {
			t.Errorf("latency fix %q does not say %q", c.Fix, w)
		}
	}
}

// docACL is the ACL rule list docs/operations.md gives doctor's user.
const docACL = "+@read +ping +info +config|get +cluster|info +cluster|slots +cluster|nodes +cluster|shards +memory|usage +latency|latest +time +evalsha +eval +script|load +asking +command"

// TestClusterNodeAsSingleRedisFails: doctor given one node of a Cluster
// with --redis (as a single Redis) passed its server check, showing
// "(cluster)" after the version, while serve pointed the same way had
// most decisions answered MOVED (an outside login-guard walk). The server
// check now fails and says to give the nodes with --redis-cluster.
func TestClusterNodeAsSingleRedisFails(t *testing.T) {
	cl := redistest.StartCluster(t)
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + cl.Addrs[0]}, Prefix: "cn"})
	c := want(t, rep, doctor.GroupRedis, "server", doctor.Fail, "Redis Cluster node", "given as a single Redis", "MOVED")
	if !strings.Contains(c.Fix, "--redis-cluster") {
		t.Errorf("server fix %q does not say --redis-cluster", c.Fix)
	}
	rep = runDoctor(t, doctor.Options{Redis: config.Redis{ClusterAddrs: cl.Addrs}, Prefix: "cn"})
	c = want(t, rep, doctor.GroupRedis, "server", doctor.Pass)
	if strings.Contains(c.Summary, "single Redis") {
		t.Errorf("server check of the Cluster given as one: %q", c.Summary)
	}
}
