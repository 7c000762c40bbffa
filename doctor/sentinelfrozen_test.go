package doctor_test

import (
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestOneSentinelFrozen: with one sentinel of three frozen (SIGSTOP:
// connections open, nothing answered) and the primary up, doctor reaches
// the primary two of the sentinels name, as serve does, runs its audit,
// and its sentinel check warns naming the frozen one. An outside walk
// saw Redis/reachable fail after 8 s ("the sentinels answer (... names
// the primary), but that primary does not: check it is up") and every
// other check skipped, while the primary answered PING: go-redis's
// client asked every sentinel at the probe's dial and waited for the
// frozen one.
func TestOneSentinelFrozen(t *testing.T) {
	for _, which := range []struct {
		name string
		i    int
	}{{"first", 0}, {"last", 2}} {
		t.Run(which.name, func(t *testing.T) {
			s := redistest.StartSentinel(t)
			frozen := s.Sentinels[which.i]
			freeze(t, frozen)()
			rep := runDoctor(t, doctor.Options{Redis: config.Redis{SentinelAddrs: s.SentinelAddrs, SentinelMaster: s.MasterName}, Prefix: "sf"})
			if c, ok := rep.Find(doctor.GroupRedis, "reachable"); ok {
				t.Fatalf("Redis/reachable is %v with the primary up: %s\n%s", c.Status, c.Summary, text(rep))
			}
			want(t, rep, doctor.GroupRedis, "server", doctor.Pass)
			want(t, rep, doctor.GroupRedis, "sentinel", doctor.Warn, "a sentinel is unreachable", frozen.Addr+": SENTINEL MASTER "+s.MasterName+" failed: no answer within 5s")
		})
	}
}

// TestTwoSentinelsFrozen: with two sentinels of three frozen and the
// primary up, no majority names a primary. doctor, which only reads,
// dials the one the sentinel that answers names, runs its audit, and its
// sentinel check fails naming the frozen ones. An outside walk saw
// Redis/reachable fail after 11.5 s ("the sentinels answer (... names
// the primary), but that primary does not: check it is up"), every other
// check skipped, while the primary answered PING and serve on the same
// sentinels decided in 2 ms.
func TestTwoSentinelsFrozen(t *testing.T) {
	s := redistest.StartSentinel(t)
	freeze(t, s.Sentinels[0])()
	freeze(t, s.Sentinels[2])()
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{SentinelAddrs: s.SentinelAddrs, SentinelMaster: s.MasterName}, Prefix: "sf2"})
	if c, ok := rep.Find(doctor.GroupRedis, "reachable"); ok {
		t.Fatalf("Redis/reachable is %v with the primary up: %s\n%s", c.Status, c.Summary, text(rep))
	}
	want(t, rep, doctor.GroupRedis, "server", doctor.Pass)
	want(t, rep, doctor.GroupRedis, "sentinel", doctor.Fail, "only 1 of 3 sentinels answer",
		s.Sentinels[0].Addr+": SENTINEL MASTER "+s.MasterName+" failed: no answer within 5s",
		s.Sentinels[2].Addr+": SENTINEL MASTER "+s.MasterName+" failed: no answer within 5s")
}

// TestTwoSentinelsAndPrimaryFrozen: with the primary frozen as well, the
// probe fails; the diagnosis says no majority of the sentinels answers,
// and that the primary the one answering names did not answer doctor.
func TestTwoSentinelsAndPrimaryFrozen(t *testing.T) {
	s := redistest.StartSentinel(t)
	freeze(t, s.Sentinels[0])()
	freeze(t, s.Sentinels[2])()
	freeze(t, s.Primary)()
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{SentinelAddrs: s.SentinelAddrs, SentinelMaster: s.MasterName}, Prefix: "sf3"})
	c := want(t, rep, doctor.GroupRedis, "reachable", doctor.Fail, "only 1 of 3 sentinels answer", "no majority of the sentinels answers",
		"doctor dialed the primary they name, but that primary does not", s.Sentinels[0].Addr+": ")
	if !strings.Contains(c.Fix, "bring back a majority of the sentinels") {
		t.Errorf("fix %q does not say to bring back the sentinels", c.Fix)
	}
}
