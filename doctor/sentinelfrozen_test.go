package doctor_test

import (
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
