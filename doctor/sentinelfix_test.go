package doctor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestSentinelProbeFixes: the fix of a Sentinel deployment doctor cannot
// reach says what to do for the diagnosis made. An outside walk got one
// generic fix ("act on the diagnosis above (the sentinel addresses,
// --redis-master, the sentinels' password), check that the primary they
// name is up ...") with every sentinel stopped, and with the primary
// they name down.
func TestSentinelProbeFixes(t *testing.T) {
	s := redistest.StartSentinel(t)
	opts := doctor.Options{Redis: config.Redis{SentinelAddrs: s.SentinelAddrs, SentinelMaster: s.MasterName}, Prefix: "pf"}
	// The replica up and the sentinels able to promote it, but slow to
	// judge the primary down: a failover may be under way.
	for _, a := range s.SentinelAddrs {
		sentinelDo(t, a, "", "", "SENTINEL", "SET", s.MasterName, "down-after-milliseconds", "600000")
	}
	s.Primary.Stop()
	got := unreachable(t, opts)
	for _, want := range []string{"but that primary does not", "fix: a failover may be under way", "run doctor again in a few seconds"} {
		if !strings.Contains(got, want) {
			t.Errorf("the primary down: Redis/reachable %q does not say %q", got, want)
		}
	}
	if strings.Contains(got, "no failover can happen") {
		t.Errorf("the primary down, a replica up: Redis/reachable says %q", got)
	}
	stopSentinels(s)
	got = unreachable(t, opts)
	for _, want := range []string{"no sentinel answers", "fix: start the sentinels (or fix their addresses", "a failover is not followed"} {
		if !strings.Contains(got, want) {
			t.Errorf("the sentinels down: Redis/reachable %q does not say %q", got, want)
		}
	}
	if strings.Contains(got, "act on the diagnosis above") {
		t.Errorf("the sentinels down: the generic fix: %q", got)
	}
}

// TestSentinelsJudgedWhilePrimaryDown: with the primary down, doctor
// still judges the sentinels (they answer; only the primary does not),
// and says plainly when they cannot replace it. An outside walk set
// quorum 3 on three sentinels, stopped one and the primary: doctor
// skipped Redis/sentinel and said "a failover may be under way", while
// the two left could never judge the primary objectively down. It now
// fails Redis/sentinel on the quorum, and Redis/reachable says no
// failover can happen, with the sentinel check's fix; likewise with no
// replica up for the sentinels.
func TestSentinelsJudgedWhilePrimaryDown(t *testing.T) {
	t.Run("quorum", func(t *testing.T) {
		s := redistest.StartSentinel(t)
		a, m := s.SentinelAddrs, s.MasterName
		opts := doctor.Options{Redis: config.Redis{SentinelAddrs: a, SentinelMaster: m}, Prefix: "pq", RateWindow: -1}
		for _, addr := range a {
			sentinelDo(t, addr, "", "", "SENTINEL", "SET", m, "quorum", "3")
		}
		s.Sentinels[2].Stop()
		s.Primary.Stop()
		rep := runDoctor(t, opts)
		c := want(t, rep, doctor.GroupRedis, "reachable", doctor.Fail, "but that primary does not", "the sentinels cannot replace it, no failover can happen (see Redis/sentinel)")
		sentinelCheckSays(t, c, rep, []string{"no failover can happen", "act on Redis/sentinel's fix"}, []string{"may be under way", "in a few seconds"})
		c = want(t, rep, doctor.GroupRedis, "sentinel", doctor.Fail, "only 2 of 3 sentinels answer and monitor "+m+" (1 unreachable), fewer than the quorum 3 they are set to", "a failed primary would not be replaced")
		sentinelCheckSays(t, c, rep, []string{"SENTINEL SET " + m + " quorum 2"}, nil)
		if sk, _ := rep.Find(doctor.GroupRedis, "skipped"); strings.Contains(sk.Summary, "sentinel") {
			t.Errorf("Redis/skipped names the sentinel check, which ran:\n%s", text(rep))
		}
	})
	t.Run("no replica", func(t *testing.T) {
		s := redistest.StartSentinel(t)
		a, m := s.SentinelAddrs, s.MasterName
		opts := doctor.Options{Redis: config.Redis{SentinelAddrs: a, SentinelMaster: m}, Prefix: "pr", RateWindow: -1}
		s.Replica.Stop()
		waitSentinelsFlagReplicas(t, a, m)
		s.Primary.Stop()
		rep := runDoctor(t, opts)
		c := want(t, rep, doctor.GroupRedis, "reachable", doctor.Fail, "no failover can happen")
		sentinelCheckSays(t, c, rep, []string{"no failover can happen"}, []string{"may be under way"})
		want(t, rep, doctor.GroupRedis, "sentinel", doctor.Warn, "no replica of "+m+" is up for the sentinels")
	})
}

// waitSentinelsFlagReplicas waits until every sentinel at addrs lists
// each replica of master as down (SENTINEL REPLICAS flags s_down), for
// up to 30s.
func waitSentinelsFlagReplicas(t *testing.T, addrs []string, master string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, a := range addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a, Protocol: 2, DisableIdentity: true})
		for {
			rs, err := sc.Replicas(ctx, master).Result()
			down := err == nil && len(rs) > 0
			for _, r := range rs {
				down = down && strings.Contains(r["flags"], "s_down")
			}
			if down {
				break
			}
			select {
			case <-ctx.Done():
				_ = sc.Close()
				t.Fatalf("sentinel %s did not flag the replicas of %s down: %v %v", a, master, rs, err)
			case <-time.After(50 * time.Millisecond):
			}
		}
		_ = sc.Close()
	}
}

// stopSentinels stops every sentinel of s.
func stopSentinels(s *redistest.Sentinel) {
	for _, n := range s.Sentinels {
		n.Stop()
	}
}
