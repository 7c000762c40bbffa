package doctor_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// nameFixSays is what the fix of a name that does not resolve says.
const nameFixSays = "the name does not resolve from this host: check DNS / the address; on a Cluster, the nodes announce it"

// noStoppedAnswering fails t when fix is the one of a Redis that stopped
// answering, which a walk got for names that do not resolve.
func noStoppedAnswering(t *testing.T, fix string) {
	t.Helper()
	if strings.Contains(fix, "Redis stopped answering") {
		t.Errorf("the fix speaks of a Redis that stopped answering:\n%s", fix)
	}
}

// TestDoctorNameDoesNotResolve: a Redis URL whose host does not resolve
// (.invalid never does) got the fix of a Redis that stopped answering;
// it now gets one about the name.
func TestDoctorNameDoesNotResolve(t *testing.T) {
	got := unreachable(t, doctor.Options{Redis: config.Redis{URL: "redis://redis.invalid:6390"}, Prefix: "nr"})
	if !strings.Contains(got, "no such host") || !strings.Contains(got, nameFixSays) {
		t.Fatalf("Redis/reachable does not give the name's error and fix:\n%s", got)
	}
	noStoppedAnswering(t, got)
}

// TestDoctorClusterHostnamesDoNotResolve: a Cluster whose seed answers
// but whose nodes announce hostnames that do not resolve here
// (cluster-announce-hostname nodeN.invalid, cluster-preferred-endpoint-type
// hostname) gets the fix about the name.
func TestDoctorClusterHostnamesDoNotResolve(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := context.Background()
	for i, n := range cl.Nodes {
		c := n.Client(t)
		if err := c.ConfigSet(ctx, "cluster-announce-hostname", fmt.Sprintf("node%d.invalid", i)).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.ConfigSet(ctx, "cluster-preferred-endpoint-type", "hostname").Err(); err != nil {
			t.Fatal(err)
		}
	}
	waitAnnounced(t, cl, ".invalid")
	got := unreachable(t, doctor.Options{Redis: config.Redis{ClusterAddrs: cl.Addrs}, Prefix: "nh"})
	if !strings.Contains(got, ".invalid") || !strings.Contains(got, nameFixSays) {
		t.Fatalf("Redis/reachable does not give the name's error and fix:\n%s", got)
	}
	noStoppedAnswering(t, got)
}

// TestDoctorClusterUnknownEndpoint: a Cluster whose nodes announce no
// endpoint (cluster-preferred-endpoint-type unknown-endpoint) failed
// with "redis: nil" and a fix about PING and LOADING; it now says what
// to set.
func TestDoctorClusterUnknownEndpoint(t *testing.T) {
	cl := redistest.StartCluster(t)
	for _, n := range cl.Nodes {
		if err := n.Client(t).ConfigSet(context.Background(), "cluster-preferred-endpoint-type", "unknown-endpoint").Err(); err != nil {
			t.Fatal(err)
		}
	}
	opts := doctor.Options{Redis: config.Redis{ClusterAddrs: cl.Addrs}, Prefix: "ne"}
	got := unreachable(t, opts)
	for _, w := range []string{"the cluster announces no endpoint (cluster-preferred-endpoint-type unknown-endpoint)", "fix: the cluster's nodes announce no endpoint", "set it to ip or hostname"} {
		if !strings.Contains(got, w) {
			t.Fatalf("Redis/reachable does not say %q:\n%s", w, got)
		}
	}
	if strings.Contains(got, "LOADING") || strings.Contains(got, "redis: nil") {
		t.Fatalf("Redis/reachable speaks of LOADING or redis: nil:\n%s", got)
	}
	// Its read line said Redis did not answer, which it did (a walk).
	rep, err := doctor.Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if c := want(t, rep, doctor.GroupRedis, "reachable", doctor.Fail); strings.Contains(c.Read, "did not answer") || !strings.Contains(c.Read, "CLUSTER SLOTS (the slot map names no node's address") {
		t.Fatalf("Redis/reachable's read line %q does not say CLUSTER SLOTS named no address", c.Read)
	}
}

// waitAnnounced waits until every node's CLUSTER SLOTS names every node
// by an endpoint ending in suffix (hostnames spread by gossip).
func waitAnnounced(t *testing.T, cl *redistest.Cluster, suffix string) {
	t.Helper()
	ctx := context.Background()
	var clients []*redis.Client
	for _, n := range cl.Nodes {
		clients = append(clients, n.Client(t))
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok := true
		for _, c := range clients {
			//lint:ignore SA1019 the endpoints are what is awaited.
			slots, err := c.ClusterSlots(ctx).Result()
			if err != nil || len(slots) == 0 {
				ok = false
				continue
			}
			for _, s := range slots {
				for _, node := range s.Nodes {
					if !strings.Contains(node.Addr, suffix+":") {
						ok = false
					}
				}
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the nodes do not announce %s endpoints after 30s", suffix)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
